"""The commands that convert a model: explain, lower, inspect, onnx, litert."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from phaseconv.cli.app import app, known_failures, note, print_json
from phaseconv.cli.options import (
    RULES_HELP,
    TTS_PREFIX,
    AsJson,
    Calibration,
    Model,
    NoPrepare,
    RandomWeights,
    Target,
    Verbose,
    Weights,
)
from phaseconv.cli.output import line, show_decisions, show_summaries, show_written
from phaseconv.errors import PhaseconvError
from phaseconv.files import require_folder
from phaseconv.targets import host_target, resolve_target

Output = Annotated[Path, typer.Option("-o", "--output", help="the file to write")]
Quantize = Annotated[
    str | None,
    typer.Option(
        "--quantize",
        help="int8: int8 weights and activations, scales calibrated on --calibration; int8-dynamic: int8 weights, "
        f"activation scales computed at run time; {TTS_PREFIX}CONFIG: 8da4w or 8da8w, its language model's linears",
    ),
]
KeepFloat = Annotated[
    list[str] | None,
    typer.Option(
        "--keep-float",
        help="with --quantize: a submodule, named as named_modules() names it, whose operators stay fp32 "
        "(repeatable; none: every one quantized); default: where int8 costs the model most, if it says "
        "(pocket-tts:CONFIG: the decoder's output block)",
    ),
]
NoWeightCache = Annotated[
    bool,
    typer.Option(
        "--no-weight-cache",
        help="for a loader without XNNPACK's weight cache (the pip build's default): a weight several linears read "
        "(an unrolled LSTM's) reaches them at run time, packed at each call, not once per operator at load "
        "(less memory, slower)",
    ),
]
QuantizeDecoder = Annotated[
    str | None,
    typer.Option(
        "--quantize-decoder",
        help=f"{TTS_PREFIX}CONFIG only: int8, the decoder in static int8 (its output block fp32), "
        "calibrated on latents of the program's own language model",
    ),
]
Tokenizer = Annotated[
    Path | None,
    typer.Option(
        "--tokenizer", help=f"{TTS_PREFIX}CONFIG only: this tokenizer (.model or .json) instead of the config's"
    ),
]
Voices = Annotated[
    str | None,
    typer.Option(
        "--voices",
        help=f"{TTS_PREFIX}CONFIG only: the built-in voices to carry, comma-separated (default: every one the hub "
        "or its cache has for the config)",
    ),
]
Workers = Annotated[
    int | None,
    typer.Option(
        "--workers",
        min=1,
        help=f"{TTS_PREFIX}CONFIG only: processes that lower the methods side by side (default: one per core); "
        "fewer take less memory",
    ),
]
ProfileMemory = Annotated[
    bool,
    typer.Option(
        "--profile-memory",
        help=f"{TTS_PREFIX}CONFIG only: where the time and memory went, stage by stage and method by method "
        "(--json always has it)",
    ),
]
Capacity = Annotated[
    int | None,
    typer.Option(
        "--capacity",
        help=f"{TTS_PREFIX}CONFIG only: positions of the language model's cache (default: the longest voice and "
        "a chunk of text with all its frames)",
    ),
]


def load_source(model: str, prepare: bool, weights=None, random_weights: bool = False, lowering: bool = False):
    """The model's exported program and inputs; pocket-tts's weights said on stderr (for a lowering,
    weights out of reach are an error: the program would be noise); a module's preparation said."""
    from phaseconv.models.loading import load_model

    return load_model(model, weights, prepare, random_weights, say=None if lowering else note)


def say_prepared(model: str, source) -> None:
    """One line on stderr when a module was prepared (said once the command has succeeded, so that a
    failure stays one line)."""
    if source.prepared:
        note(
            f"prepared {model} with phaseconv.prepare (weight_norm baked, conv settings static); "
            "--no-prepare exports it as built"
        )


@app.command()
def explain(model: Model, as_json: AsJson = False, no_prepare: NoPrepare = False) -> None:
    """What phaseconv would rewrite in MODEL, and why anything is left alone."""
    from phaseconv.rewrite import explain as explain_program

    source = load_source(model, not no_prepare)
    with known_failures(model, source.prepared):
        decisions = explain_program(source.program)
    say_prepared(model, source)
    if as_json:
        print_json([d.to_dict() for d in decisions])
    else:
        show_decisions(decisions)


@app.command()
def lower(
    model: Model,
    output: Output,
    no_rewrite: Annotated[bool, typer.Option("--no-rewrite", help="lower the program as it is")] = False,
    external_constants: Annotated[
        bool, typer.Option("--external-constants", help="put every weight in a .ptd file beside the .pte")
    ] = False,
    backend: Annotated[str, typer.Option(help="the ExecuTorch backend to delegate to")] = "xnnpack",
    weights: Weights = None,
    random_weights: RandomWeights = False,
    no_prepare: NoPrepare = False,
    quantize: Quantize = None,
    quantize_decoder: QuantizeDecoder = None,
    calibration: Calibration = None,
    keep_float: KeepFloat = None,
    target: Target = "any",
    no_weight_cache: NoWeightCache = False,
    as_json: AsJson = False,
    tokenizer: Tokenizer = None,
    voices: Voices = None,
    capacity: Capacity = None,
    workers: Workers = None,
    profile_memory: ProfileMemory = False,
    verbose: Verbose = False,
) -> None:
    """Rewrite MODEL and lower it to an ExecuTorch XNNPACK program file."""
    from phaseconv.lowering import require_backend

    require_backend(backend)  # all before loading the model, which can take long
    resolve_target(target)
    require_folder(output)
    if model.startswith(TTS_PREFIX):
        from phaseconv.cli.speech import lower_tts

        _not_for_tts(calibration, keep_float, no_weight_cache)
        sources = (weights, random_weights, tokenizer, voices.split(",") if voices else None)
        options = (capacity, quantize, quantize_decoder, no_rewrite, external_constants, target, workers)
        return lower_tts(model.removeprefix(TTS_PREFIX), output, sources, options, as_json, verbose, profile_memory)
    if any(option is not None for option in (tokenizer, capacity, quantize_decoder, voices, workers)) or profile_memory:
        raise PhaseconvError(
            f"--tokenizer, --voices, --capacity, --quantize-decoder, --workers and --profile-memory are for "
            f"{TTS_PREFIX}CONFIG programs, not {model}"
        )
    quantizing = quantization(quantize, calibration, keep_float)
    source = load_source(model, not no_prepare, weights, random_weights, lowering=True)
    options = {"backend": backend, "external_constants": external_constants, "target": target}
    with known_failures(model, source.prepared):
        lowered, files, summaries, snr = lower_model(
            source, quantizing, no_rewrite, not no_weight_cache, output, options
        )
    say_prepared(model, source)
    if as_json:
        report = {"files": [str(f) for f in files], "target": resolve_target(target)}
        report |= {"decisions": [d.to_dict() for d in lowered.decisions]}
        report |= {"delegation": {name: s.to_dict() for name, s in summaries.items()}}
        return print_json(report | ({"snr_db": snr} if snr is not None else {}))
    show_lowered(lowered, files, summaries, snr, quantize, target, verbose, no_rewrite, no_weight_cache)


def _not_for_tts(calibration, keep_float, no_weight_cache) -> None:
    if calibration is not None or keep_float:
        raise PhaseconvError(
            f"--calibration and --keep-float are not for {TTS_PREFIX}CONFIG: its LM's quantization needs "
            "neither, its decoder's is calibrated on the LM's own latents"
        )
    if no_weight_cache:
        raise PhaseconvError(f"--no-weight-cache is not for {TTS_PREFIX}CONFIG: `phaseconv tts` uses the cache")


def quantization(flag: str | None, calibration: Path | None, keep_float: list[str] | None):
    """--quantize's mode, its calibration sets (None: the example inputs) and the submodules kept fp32
    (None: the model's own choice; "none": none), checked before the model is loaded (which can take
    long); None without --quantize."""
    from phaseconv.quantize import FLAGS, calibration_sets

    if flag is not None and flag not in FLAGS:
        raise PhaseconvError(f"--quantize takes {' or '.join(FLAGS)}, got {flag!r}")
    if calibration is not None and flag != "int8":
        raise PhaseconvError("--calibration goes with --quantize int8")
    if keep_float and flag is None:
        raise PhaseconvError("--keep-float goes with --quantize")
    if flag is None:
        return None
    kept = None if keep_float is None else [name for name in keep_float if name != "none"]
    return FLAGS[flag], calibration_sets(calibration) if calibration is not None else None, kept


def lower_model(source, quantizing, no_rewrite, weight_cache, output, options):
    """The lowered program, the files it was saved to, the delegation of it and of the stock lowering
    beside it, and an int8 program's SNR against fp32 eager."""
    from phaseconv.compare import lowered_snr_db
    from phaseconv.lowering import lower as lower_program
    from phaseconv.quantize import quantize

    program = source.program
    if quantizing is not None:
        mode, sets, keep_float = quantizing
        if keep_float is None and mode == "static" and source.keep_float_in_int8:
            keep_float = source.keep_float_in_int8
            note(f"kept fp32: {', '.join(keep_float)} (where int8 costs this model most; --keep-float none: int8 too)")
        program = quantize(program, sets or [source.inputs], mode=mode, keep_float=keep_float or [])
        if sets is None and mode == "static":  # after quantize, which names bad input first
            note("warning: no --calibration: the int8 activation scales come from the example inputs alone")
    lowered = lower_program(program, rewrite=not no_rewrite, weight_cache=weight_cache, **options)
    summaries = {"phaseconv" if not no_rewrite else "stock": lowered.summary}
    if not no_rewrite:  # the stock lowering beside it: cheap for the models this is for
        summaries = {"stock": lower_program(program, rewrite=False).summary, **summaries}
    files = lowered.save(output)
    data = files[1] if len(files) > 1 else None
    snr = lowered_snr_db(source.program, source.inputs, lowered.buffer, data) if quantizing is not None else None
    return lowered, files, summaries, snr


def show_lowered(lowered, files, summaries, snr, quantize, target, verbose, no_rewrite, no_weight_cache) -> None:
    if lowered.decisions:
        show_decisions(lowered.decisions, verbose)
    if target == "any" and not no_rewrite and quantize is None and host_target() != "any":
        line(f"lowered for any CPU; for this one, --target host ({host_target()}) runs convolutions as GEMMs")
    show_summaries(summaries)
    if no_weight_cache and not lowered.summary.run_time_weights:
        line("no two linear operators read one weight: --no-weight-cache changed nothing")
    if snr is not None:
        line(f"{quantize} output against fp32 eager on the example inputs: SNR {snr:.1f} dB")
    show_written(files)


@app.command()
def inspect(program: Annotated[Path, typer.Argument(help="an ExecuTorch .pte file")], as_json: AsJson = False) -> None:
    """Delegation summary of a .pte file: delegate calls, nodes inside them, operators outside them."""
    from phaseconv.lowering import inspect as inspect_program

    summary = inspect_program(program)
    if as_json:
        print_json(summary.to_dict())
    else:
        show_summaries({program.name: summary})


@app.command()
def onnx(
    model: Model,
    output: Output,
    rules: Annotated[str | None, typer.Option("--rules", help=RULES_HELP.format(runtime="ONNX Runtime"))] = None,
    no_prepare: NoPrepare = False,
    as_json: AsJson = False,
    verbose: Verbose = False,
) -> None:
    """Rewrite MODEL with the rules that make ONNX Runtime faster, export it to ONNX, check it in ONNX Runtime."""
    peer_export("onnx", model, output, rules, "any", no_prepare, as_json, verbose)


@app.command()
def litert(
    model: Model,
    output: Output,
    rules: Annotated[str | None, typer.Option("--rules", help=RULES_HELP.format(runtime="LiteRT"))] = None,
    no_prepare: NoPrepare = False,
    quantize: Annotated[
        str | None,
        typer.Option(
            "--quantize",
            help="int8: the rewritten model in static int8 (litert-torch's quantizer), scales from --calibration",
        ),
    ] = None,
    calibration: Calibration = None,
    target: Annotated[str, typer.Option(help="the CPU the model is for: the rules that pay on LiteRT there")] = "any",
    as_json: AsJson = False,
    verbose: Verbose = False,
) -> None:
    """Rewrite MODEL with the rules that make LiteRT faster, convert it to .tflite, check it in LiteRT's interpreter."""
    if quantize not in (None, "int8"):
        raise PhaseconvError(f"--quantize takes int8 for LiteRT, got {quantize!r}")
    if rules is not None and target != "any":
        raise PhaseconvError("--target chooses the rules: give --rules or --target, not both")
    sets = quantization(quantize, calibration, None)
    peer_export("litert", model, output, rules, target, no_prepare, as_json, verbose, int8=sets is not None, sets=sets)


def peer_export(runtime, model, output, rules, target, no_prepare, as_json, verbose, int8=False, sets=None) -> None:
    """Rewrite MODEL with `rules` (the names of the runtime's set for `target`'s, configured as there)
    and export it for the peer runtime, checked against eager PyTorch there. The arguments are checked
    first, then that the peer is installed, before the model is loaded, which can take long."""
    from phaseconv.peers import PEERS, export_and_check
    from phaseconv.rules import resolve_rules

    require_folder(output)
    peer = PEERS[runtime]()
    within = peer.rules(resolve_target(target))
    names = None if rules is None else [r.strip() for r in rules.split(",") if r.strip() not in ("", "none")]
    try:
        chosen = resolve_rules(names, within)
    except ValueError as error:
        raise PhaseconvError(str(error)) from None
    peer.require()
    source = load_source(model, not no_prepare)
    calibration = ((sets[1] if sets else None) or [source.inputs]) if int8 else None
    with known_failures(model, source.prepared):
        decisions, check = export_and_check(peer, source.program, source.inputs, output, chosen, calibration)
    if int8 and not (sets and sets[1]):
        note("warning: no --calibration: the int8 activation scales come from the example inputs alone")
    say_prepared(model, source)
    if as_json:
        summary = {
            "file": str(output),
            "decisions": [d.to_dict() for d in decisions],
            "max_abs_error": check.max_abs_error,
        }
        snr = {"snr_db": check.snr_db} if check.snr_db is not None else {}
        return print_json(summary | snr | {"state": check.state, "calls_checked": check.calls})
    if decisions:
        show_decisions(decisions, verbose)
    fed = f" over {check.calls} calls, the state fed back" if check.state else ""
    measured = f"SNR {check.snr_db:.1f} dB, " if check.snr_db is not None else ""
    line(
        f"{peer.name} against eager PyTorch on the example inputs{fed}: {measured}max |diff| {check.max_abs_error:.2e}"
    )
    if check.state:
        line(f"state: {len(check.state)} tensors; {peer.state_layout}")
    show_written([output])
