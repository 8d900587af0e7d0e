"""The `phaseconv` command: explain, lower, onnx, litert, inspect, bench, stream, tts, models, demo."""

from __future__ import annotations

import contextlib
import copy
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from phaseconv.errors import PhaseconvError, known_cause, parked_stderr
from phaseconv.report import decisions_table
from phaseconv.targets import TARGETS, host_target, resolve_target

MODEL_HELP = (
    "a torch.export.save file (.pt2); or module.path:factory naming a Python function that returns "
    "(nn.Module, example_inputs[, dynamic_shapes]), which imports and runs that code; or demo:NAME for a "
    "built-in model (demo:mimi-decoder); or pocket-tts:CONFIG, pocket-tts's Mimi decoder as a streaming step for a "
    "config shipped with pocket-tts (pocket-tts:english_2026-09); lower also takes pocket-tts-tts:CONFIG, the whole "
    "text-to-speech model"
)
TTS_PREFIX = "pocket-tts-tts:"

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)
console = Console()
state = {"debug": False}


PREPARE_HELP = "export a module as built, without phaseconv.prepare (weight_norm baked, conv settings static)"
TARGET_HELP = (
    f"the CPU the program is for ({', '.join(TARGETS)}): x86-fma3 also runs convolutions as GEMMs (winograd, "
    "im2col), for x86-64 CPUs without AVX-512; x86-avx512 wide 3x3 ones (winograd) and linears weight first, "
    "for those with it; x86-avx512-amd the same without weight-first linears, for AMD ones; host: this one"
)


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="show tracebacks and library warnings")) -> None:
    """phaseconv: rewrite transposed convolutions into fast, exact polyphase form for ExecuTorch."""
    state["debug"] = debug
    if not debug:  # torch's and ExecuTorch's deprecation notes are not the user's business
        import logging
        import warnings

        warnings.simplefilter("ignore")
        for name in ("torch", "torchao", "executorch", "pocket_tts"):  # pocket-tts: "no weights_path"
            logging.getLogger(name).setLevel(logging.ERROR)


def _load(model: str, prepare: bool, weights: Path | None = None, random_weights: bool = False, lowering=False):
    """The model's exported program (and its inputs); pocket-tts's weights said on stderr (for a
    lowering, weights out of reach are an error: the program would be noise)."""
    from phaseconv.models.loading import load_model

    say = None if lowering else _note
    source = load_model(model, weights, prepare, random_weights, say=say)
    return source


def _note(text: str) -> None:
    Console(stderr=True).print(text, highlight=False, soft_wrap=True)


def _say_prepared(model: str, source) -> None:
    """One line on stderr when a module was prepared (said once the command has succeeded, so that
    a failure stays one line)."""
    if source.prepared:
        Console(stderr=True).print(
            f"prepared {model} with phaseconv.prepare (weight_norm baked, conv settings static); "
            "--no-prepare exports it as built",
            highlight=False,
            soft_wrap=True,
        )


@contextlib.contextmanager
def _known_failures(model: str, prepared: bool):
    """Rewriting or lowering failures with a known cause are told with it and its fix."""
    try:
        yield
    except PhaseconvError:
        raise
    except Exception as error:
        if state["debug"]:
            raise
        raise PhaseconvError(f"{model}: {known_cause(error, prepared)}") from None


def _compact() -> bool:
    """Tables wrap into unreadable cells when piped or narrow: print one line per row instead."""
    return not console.is_terminal or console.width < 110


def show_decisions(decisions, verbose: bool = True) -> None:
    """Every decision, node by node (verbose), or a summary per rule."""
    from phaseconv.report import decision_lines, summary_lines, summary_table

    if _compact():
        for line in (decision_lines if verbose else summary_lines)(decisions):
            console.print(line, highlight=False, soft_wrap=True)
    else:
        console.print((decisions_table if verbose else summary_table)(decisions))


# Copies of shared weights that a load without XNNPACK's weight cache packs: said from 1 MiB on.
REPACKED_WORTH_SAYING = 2**20


def _numbered_methods(summaries: dict) -> list[tuple[list[str], object]]:
    """The methods in order, those named alike but for a number (generate_0, generate_1, ...: one per
    block of a KV cache) as one entry when they have as many partitions and layout transposes:
    (names, the last one's summary)."""
    groups: dict[str, list[str]] = {}
    for name in summaries:
        base, _, number = name.rpartition("_")
        groups.setdefault(base if base and number.isdigit() else name, []).append(name)
    entries = []
    for names in groups.values():
        shapes = {(summaries[n].partitions, summaries[n].layout_transposes) for n in names}
        entries += [(names, summaries[names[-1]])] if len(shapes) == 1 else [([n], summaries[n]) for n in names]
    return entries


def show_summaries(summaries: dict) -> None:
    if not _compact():
        console.print(summary_table(summaries))
    else:
        for names, summary in _numbered_methods(summaries):
            top, outside = _counts(summary.inside.most_common(4)), _counts(sorted(summary.outside.items()))
            label = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} (each; counts of {names[-1]})"
            console.print(
                f"{label}: {summary.partitions} partition(s), {summary.layout_transposes} layout transposes; "
                f"inside: {top}; outside: {outside}",
                highlight=False,
                soft_wrap=True,
            )
    for name, summary in summaries.items():
        if summary.repacked_bytes >= REPACKED_WORTH_SAYING:
            console.print(
                f"{name}: {summary.repacked_weights} XNNPACK operators read a weight another one reads "
                f"({summary.repacked_bytes / 2**20:.1f} MiB): load it with XNNPACK's weight cache on "
                "(backend option weight_cache_enabled; phaseconv's runtime does), or each packs a copy of its own "
                "(for a loader without the cache: lower --no-weight-cache)",
                highlight=False,
                soft_wrap=True,
            )
        if summary.run_time_weights:
            console.print(
                f"{name}: {summary.run_time_weights} XNNPACK operators take their weight at run time "
                "(--no-weight-cache): packed at each call, one copy in memory",
                highlight=False,
                soft_wrap=True,
            )


def _print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _counts(items) -> str:
    """(operator, count) pairs as "name xN, ...", or "none"."""
    return ", ".join(f"{k} x{v}" for k, v in items) or "none"


def summary_table(summaries: dict, title: str = "delegation") -> Table:
    """Delegation summaries side by side: partitions, layout transposes, nodes inside, ops outside."""
    table = Table(title=title)
    table.add_column("program")
    for column in ("partitions", "layout transposes", "XNNPACK nodes", "operators outside"):
        table.add_column(column)
    for name, summary in summaries.items():
        table.add_row(
            name,
            str(summary.partitions),
            str(summary.layout_transposes),
            _counts(sorted(summary.inside.items())),
            _counts(sorted(summary.outside.items())),
        )
    return table


@app.command()
def explain(
    model: str = typer.Argument(..., help=MODEL_HELP),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
    no_prepare: bool = typer.Option(False, "--no-prepare", help=PREPARE_HELP),
) -> None:
    """What phaseconv would rewrite in MODEL, and why anything is left alone."""
    from phaseconv.rewrite import explain as explain_program

    source = _load(model, not no_prepare)
    with _known_failures(model, source.prepared):
        decisions = explain_program(source.program)
    _say_prepared(model, source)
    if as_json:
        _print_json([d.to_dict() for d in decisions])
    else:
        show_decisions(decisions)


@app.command()
def lower(
    model: str = typer.Argument(..., help=MODEL_HELP),
    output: Path = typer.Option(..., "-o", "--output", help="the .pte file to write"),
    no_rewrite: bool = typer.Option(False, "--no-rewrite", help="lower the program as it is"),
    external_constants: bool = typer.Option(
        False, "--external-constants", help="put every weight in a .ptd file beside the .pte"
    ),
    backend: str = typer.Option("xnnpack", help="the ExecuTorch backend to delegate to"),
    weights: Path | None = typer.Option(
        None,
        "--weights",
        help=f"pocket-tts:CONFIG and {TTS_PREFIX}CONFIG: the model's weights (.safetensors, what a config's "
        "weights_path names) instead of the config's own from the Hugging Face hub or cache",
    ),
    random_weights: bool = typer.Option(
        False, "--random-weights", help=f"pocket-tts:CONFIG and {TTS_PREFIX}CONFIG: random weights (seeded), for tests"
    ),
    no_prepare: bool = typer.Option(False, "--no-prepare", help=PREPARE_HELP),
    quantize: str | None = typer.Option(
        None,
        "--quantize",
        help="int8: int8 weights and activations, scales calibrated on --calibration; "
        "int8-dynamic: int8 weights, activation scales computed at run time; "
        f"{TTS_PREFIX}CONFIG: 8da4w or 8da8w, its language model's linear layers",
    ),
    quantize_decoder: str | None = typer.Option(
        None,
        "--quantize-decoder",
        help=f"{TTS_PREFIX}CONFIG only: int8, the decoder in static int8 (its output block fp32), "
        "calibrated on latents of the program's own language model",
    ),
    calibration: Path | None = typer.Option(
        None, "--calibration", help="a folder of .npy files (one input each) or .npz files (one input set each)"
    ),
    keep_float: list[str] = typer.Option(
        [],
        "--keep-float",
        help="with --quantize: a submodule, named as named_modules() names it, whose operators stay fp32 "
        "(repeatable); for the layers int8 costs most SNR",
    ),
    target: str = typer.Option("any", help=TARGET_HELP),
    no_weight_cache: bool = typer.Option(
        False,
        "--no-weight-cache",
        help="for a loader without XNNPACK's weight cache (the pip build's default): a weight several linears read "
        "(an unrolled LSTM's) reaches them at run time, packed at each call, not once per operator at load "
        "(less memory, slower)",
    ),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
    tokenizer: Path | None = typer.Option(
        None, "--tokenizer", help=f"{TTS_PREFIX}CONFIG only: this tokenizer (.model or .json) instead of the config's"
    ),
    voices: str | None = typer.Option(
        None,
        "--voices",
        help=f"{TTS_PREFIX}CONFIG only: the built-in voices to carry, comma-separated (default: every one the hub "
        "or its cache has for the config)",
    ),
    capacity: int | None = typer.Option(
        None,
        "--capacity",
        help=f"{TTS_PREFIX}CONFIG only: positions of the language model's cache (default: the longest voice and "
        "a chunk of text with all its frames)",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="every rewrite decision, node by node"),
) -> None:
    """Rewrite MODEL and lower it to an ExecuTorch XNNPACK program file."""
    from phaseconv.files import require_folder
    from phaseconv.lowering import lower as lower_program
    from phaseconv.lowering import require_backend

    require_backend(backend)  # all before loading the model, which can take long
    resolve_target(target)
    require_folder(output)
    if model.startswith(TTS_PREFIX):
        from phaseconv.models.pocket_tts.language_model import LINEAR_QUANTIZATION
        from phaseconv.tts.program import DECODER_QUANTIZATION

        if quantize is not None and quantize not in LINEAR_QUANTIZATION:
            schemes = " or ".join(LINEAR_QUANTIZATION)
            raise PhaseconvError(
                f"--quantize takes {schemes} for {TTS_PREFIX}CONFIG (its LM's linears), got {quantize!r}"
            )
        if quantize_decoder is not None and quantize_decoder not in DECODER_QUANTIZATION:
            schemes = " or ".join(DECODER_QUANTIZATION)
            raise PhaseconvError(f"--quantize-decoder takes {schemes}, got {quantize_decoder!r}")
        if calibration is not None or keep_float:
            raise PhaseconvError(
                f"--calibration and --keep-float are not for {TTS_PREFIX}CONFIG: its LM's quantization needs "
                "neither, its decoder's is calibrated on the LM's own latents"
            )
        if no_weight_cache:
            raise PhaseconvError(f"--no-weight-cache is not for {TTS_PREFIX}CONFIG: `phaseconv tts` uses the cache")
        quantization = (quantize, quantize_decoder)
        sources = (weights, random_weights, tokenizer, voices.split(",") if voices else None)
        options = (capacity, quantization, no_rewrite, external_constants, target, as_json, verbose)
        return _lower_tts(model, output, sources, *options)
    if tokenizer is not None or capacity is not None or quantize_decoder is not None or voices is not None:
        raise PhaseconvError(
            f"--tokenizer, --voices, --capacity and --quantize-decoder are for {TTS_PREFIX}CONFIG programs, not {model}"
        )
    if quantize is not None and quantize not in QUANTIZE_MODES:
        raise PhaseconvError(f"--quantize takes {' or '.join(QUANTIZE_MODES)}, got {quantize!r}")
    sets = _calibration_sets(calibration, quantize)
    if keep_float and quantize is None:
        raise PhaseconvError("--keep-float goes with --quantize")
    source = _load(model, not no_prepare, weights, random_weights, lowering=True)
    with _known_failures(model, source.prepared):
        program = source.program
        if quantize is not None:
            program = _quantized(source, quantize, sets, keep_float)
        lowered = lower_program(
            program,
            rewrite=not no_rewrite,
            backend=backend,
            external_constants=external_constants,
            target=target,
            weight_cache=not no_weight_cache,
        )
        summaries = {"phaseconv" if not no_rewrite else "stock": lowered.summary}
        if not no_rewrite:  # the stock lowering beside it: cheap for the models this is for
            summaries = {"stock": lower_program(program, rewrite=False).summary, **summaries}
    files = lowered.save(output)
    snr = _int8_snr(source, lowered, files) if quantize is not None else None
    _say_prepared(model, source)
    if as_json:
        _print_json(
            {
                "files": [str(f) for f in files],
                "target": resolve_target(target),
                "decisions": [d.to_dict() for d in lowered.decisions],
                "delegation": {name: s.to_dict() for name, s in summaries.items()},
                **({"snr_db": snr} if snr is not None else {}),
            }
        )
        return
    if lowered.decisions:
        show_decisions(lowered.decisions, verbose)
    if target == "any" and not no_rewrite and quantize is None and host_target() != "any":
        hint = f"lowered for any CPU; for this one, --target host ({host_target()}) runs convolutions as GEMMs"
        console.print(hint, highlight=False)
    show_summaries(summaries)
    if no_weight_cache and not lowered.summary.run_time_weights:
        console.print("no two linear operators read one weight: --no-weight-cache changed nothing", highlight=False)
    if snr is not None:
        console.print(f"{quantize} output against fp32 eager on the example inputs: SNR {snr:.1f} dB", highlight=False)
    console.print("wrote " + ", ".join(f"{f} ({f.stat().st_size:,} bytes)" for f in files))


def _lower_tts(
    model, output, sources, capacity, quantization, no_rewrite, external_constants, target, as_json, verbose
):
    """`phaseconv lower pocket-tts-tts:CONFIG`: the whole text-to-speech model as one program."""
    from phaseconv.runtimes.pte import summarize_methods
    from phaseconv.tts.program import DEFAULT_TTS_CONFIG, load_model, lower_tts

    config = model.removeprefix(TTS_PREFIX) or DEFAULT_TTS_CONFIG
    weights, random_weights, tokenizer, voices = sources
    loaded = load_model(config, weights, tokenizer, random_weights, voices)
    err = Console(stderr=True)
    with _known_failures(model, False), Progress(console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task(f"lowering {config}'s methods", total=None)

        def progress(method: str, took: float) -> None:
            bar.update(task, description=f"lowering {config}'s methods: {method} took {took:.0f} s")

        lowered, settings = lower_tts(
            loaded,
            capacity,
            *quantization,
            rewrite=not no_rewrite,
            external_constants=external_constants,
            target=target,
            progress=progress,
        )
    files = lowered.save(output)
    methods = summarize_methods(lowered.buffer)
    if as_json:
        _print_json(
            {
                "files": [str(f) for f in files],
                "settings": json.loads(settings.to_json()),
                "lowering_s": lowered.seconds,
                "decisions": [d.to_dict() for d in lowered.decisions],
                "methods": {name: summary.to_dict() for name, summary in methods.items()},
            }
        )
        return
    if lowered.decisions:
        show_decisions(lowered.decisions, verbose)
    show_summaries(methods)
    voices_said = ", ".join(settings.voices) or "none (audio voices and .safetensors states only)"
    console.print(
        f"{config}: weights {settings.weights}; tokenizer {settings.tokenizer or 'none (give one to tts)'}; "
        f"built-in voices {voices_said}"
        + (f" (default {settings.default_voice})" if settings.default_voice else "")
        + f"; audio voices {'yes' if settings.voice_cloning else 'no (weights without voice cloning)'}; "
        f"cache {settings.capacity} positions",
        highlight=False,
        soft_wrap=True,
    )
    console.print("wrote " + ", ".join(f"{f} ({f.stat().st_size:,} bytes)" for f in files))


RULES_HELP = "comma-separated rule names instead of those that pay on {runtime}; none: stock"


@dataclass(frozen=True)
class PeerRuntime:
    """A runtime phaseconv exports to beside ExecuTorch: how to check it is installed, the rules that
    pay on it, its export (ep, path, rules) -> (bytes, decisions), its session (bytes) -> .run, and
    how a stateful model's state is laid out there."""

    name: str
    require: Callable
    rules: tuple
    export: Callable
    session: Callable
    state_layout: str


def _onnx_runtime() -> PeerRuntime:
    from phaseconv.onnx_export import ONNX_RULES, export_onnx
    from phaseconv.runtimes.onnxruntime import OrtSession, require_onnx

    layout = "inputs state.<buffer> (initial values by default), outputs state.<buffer>.next after the model's own"
    return PeerRuntime("ONNX Runtime", require_onnx, ONNX_RULES, export_onnx, OrtSession, layout)


def _litert_runtime(target: str = "any") -> PeerRuntime:
    from phaseconv.litert_export import LITERT_TARGET_RULES, export_litert
    from phaseconv.runtimes.litert import LiteRTSession, require_litert

    layout = (
        "signature serving_default takes the model's inputs then the state and returns its outputs then the next "
        "state; signature initial_state returns the state before the first call"
    )
    return PeerRuntime("LiteRT", require_litert, LITERT_TARGET_RULES[target], export_litert, LiteRTSession, layout)


@app.command()
def onnx(
    model: str = typer.Argument(..., help=MODEL_HELP),
    output: Path = typer.Option(..., "-o", "--output", help="the .onnx file to write"),
    rules: str | None = typer.Option(None, "--rules", help=RULES_HELP.format(runtime="ONNX Runtime")),
    no_prepare: bool = typer.Option(False, "--no-prepare", help=PREPARE_HELP),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="every rewrite decision, node by node"),
) -> None:
    """Rewrite MODEL with the rules that make ONNX Runtime faster, export it to ONNX, check it in ONNX Runtime."""
    _peer_export(_onnx_runtime(), model, output, rules, no_prepare, as_json, verbose)


@app.command()
def litert(
    model: str = typer.Argument(..., help=MODEL_HELP),
    output: Path = typer.Option(..., "-o", "--output", help="the .tflite file to write"),
    rules: str | None = typer.Option(None, "--rules", help=RULES_HELP.format(runtime="LiteRT")),
    no_prepare: bool = typer.Option(False, "--no-prepare", help=PREPARE_HELP),
    quantize: str | None = typer.Option(
        None,
        "--quantize",
        help="int8: the rewritten model in static int8 (litert-torch's quantizer), scales from --calibration",
    ),
    calibration: Path | None = typer.Option(
        None, "--calibration", help="a folder of .npy files (one input each) or .npz files (one input set each)"
    ),
    target: str = typer.Option("any", help=TARGET_HELP + "; the rules that pay on LiteRT there (not with --rules)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of tables"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="every rewrite decision, node by node"),
) -> None:
    """Rewrite MODEL with the rules that make LiteRT faster, convert it to .tflite, check it in LiteRT's interpreter."""
    if quantize not in (None, "int8"):
        raise PhaseconvError(f"--quantize takes int8 for LiteRT, got {quantize!r}")
    if rules is not None and target != "any":
        raise PhaseconvError("--target chooses the rules: give --rules or --target, not both")
    sets = _calibration_sets(calibration, quantize)
    _peer_export(
        _litert_runtime(resolve_target(target)),
        model,
        output,
        rules,
        no_prepare,
        as_json,
        verbose,
        int8=quantize is not None,
        sets=sets,
    )


def _peer_export(
    peer: PeerRuntime,
    model: str,
    output: Path,
    rules: str | None,
    no_prepare: bool,
    as_json: bool,
    verbose: bool,
    int8: bool = False,
    sets=None,
) -> None:
    """Rewrite MODEL with `rules` (the peer's own if None), export it to `output` (`int8`: quantized,
    calibrated on `sets` or the example inputs), run it in the peer against eager PyTorch (a stateful
    model over 3 calls, its state fed back). The arguments are checked first, then that the peer is
    installed, before the model is loaded, which can take long."""
    import torch

    from phaseconv.files import require_folder
    from phaseconv.quantize import snr_db
    from phaseconv.rules import resolve_rules

    require_folder(output)
    chosen = peer.rules if rules is None else [r.strip() for r in rules.split(",") if r.strip() not in ("", "none")]
    try:
        resolve_rules(chosen)
    except ValueError as error:
        raise PhaseconvError(str(error)) from None
    peer.require()
    source = _load(model, not no_prepare)
    export = partial(peer.export, calibration=sets or [source.inputs]) if int8 else peer.export
    with _known_failures(model, source.prepared):
        model_bytes, decisions = export(source.program, output, chosen)
    if int8 and sets is None:
        _warn_no_calibration()
    session, reference = peer.session(model_bytes), copy.deepcopy(source.program.module())  # it shares the buffers
    state_names = session.state_names
    calls = 3 if state_names else 1  # a stateful model: the state each call returns fed to the next
    error, state = 0.0, ()
    for _ in range(calls):
        with torch.no_grad():
            expected = reference(*source.inputs)  # the eager module keeps its own state
        expected = expected[0] if isinstance(expected, (tuple, list)) else expected
        outputs = session.run(source.inputs, state)
        state = tuple(outputs[len(outputs) - len(state_names) :])
        error = max(error, float((outputs[0] - expected).abs().max()))
    snr = {"snr_db": snr_db(expected, outputs[0])} if int8 else {}  # int8 takes no state
    _say_prepared(model, source)
    if as_json:
        summary = {"file": str(output), "decisions": [d.to_dict() for d in decisions], "max_abs_error": error}
        _print_json(summary | snr | {"state": state_names, "calls_checked": calls})
        return
    if decisions:
        show_decisions(decisions, verbose)
    checked = f" over {calls} calls, the state fed back" if state_names else ""
    measured = f"SNR {snr['snr_db']:.1f} dB, " if int8 else ""
    console.print(
        f"{peer.name} against eager PyTorch on the example inputs{checked}: {measured}max |diff| {error:.2e}",
        highlight=False,
    )
    if state_names:
        console.print(f"state: {len(state_names)} tensors; {peer.state_layout}", highlight=False, soft_wrap=True)
    console.print(f"wrote {output} ({output.stat().st_size:,} bytes)")


QUANTIZE_MODES = {"int8": "static", "int8-dynamic": "dynamic"}


def _integers(text: str, option: str) -> list[int]:
    """'1,2' -> [1, 2], each at least 1."""
    try:
        values = [int(t) for t in text.split(",")]
    except ValueError:
        raise PhaseconvError(f"{option} takes comma-separated integers, got {text!r}") from None
    if any(v < 1 for v in values):
        raise PhaseconvError(f"{option} takes integers of at least 1, got {text!r}")
    return values


def _quantized(source, flag: str, sets, keep_float: list[str]):
    """The source's program quantized as `--quantize flag` asks, calibrated on `sets` (input tuples),
    the `keep_float` submodules left fp32."""
    from phaseconv.quantize import quantize

    quantized = quantize(source.program, sets or [source.inputs], mode=QUANTIZE_MODES[flag], keep_float=keep_float)
    if sets is None and flag == "int8":  # after quantize, which names bad input first
        _warn_no_calibration()
    return quantized


def _calibration_sets(calibration: Path | None, quantize: str | None):
    """--calibration's input sets, None without it; checked before the model is loaded (cheap)."""
    from phaseconv.quantize import calibration_sets

    if calibration is None:
        return None
    if quantize != "int8":
        raise PhaseconvError("--calibration goes with --quantize int8")
    return calibration_sets(calibration)


def _warn_no_calibration() -> None:
    Console(stderr=True).print(
        "warning: no --calibration: the int8 activation scales come from the example inputs alone",
        highlight=False,
        soft_wrap=True,
    )


def _int8_snr(source, lowered, files: list[Path]) -> float:
    """SNR of the lowered int8 program's output against the fp32 program in eager, example inputs."""
    import torch

    from phaseconv.quantize import snr_db
    from phaseconv.runtimes.executorch import LoadedProgram

    with torch.no_grad():
        reference = source.program.module()(*source.inputs)
    # without the weight cache: another int8 program of the same weights loaded in this process (a
    # notebook, a test) would lend this one its packed weights, scales included (docs/int8.md)
    data = files[1] if len(files) > 1 else None
    output = LoadedProgram(lowered.buffer, data, weight_cache=False).run(source.inputs)
    reference = reference[0] if isinstance(reference, (tuple, list)) else reference
    return snr_db(reference, output[0])


@app.command()
def inspect(
    program: Path = typer.Argument(..., help="an ExecuTorch .pte file"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of a table"),
) -> None:
    """Delegation summary of a .pte file: delegate calls, nodes inside them, operators outside them."""
    from phaseconv.lowering import inspect as inspect_program

    summary = inspect_program(program)
    if as_json:
        _print_json(summary.to_dict())
    else:
        show_summaries({program.name: summary})


@app.command()
def bench(
    model: str = typer.Argument(..., help=MODEL_HELP),
    threads: str = typer.Option("1", help="comma-separated thread counts, e.g. 1,2"),
    runs: int = typer.Option(20, min=1, help="timed runs of each program per thread count"),
    json_path: Path | None = typer.Option(None, "--json", help="write the results as JSON"),
    plot_path: Path | None = typer.Option(None, "--plot", help="write a PNG bar chart"),
    no_prepare: bool = typer.Option(False, "--no-prepare", help=PREPARE_HELP),
    lengths: str | None = typer.Option(
        None, "--lengths", help="a program with a dynamic size: run it at these values of that size, e.g. 7,20,50"
    ),
    target: str = typer.Option("host", help=TARGET_HELP),
) -> None:
    """Time the stock and the rewritten program through the ExecuTorch runtime, interleaved."""
    from phaseconv.bench import bench as run_bench
    from phaseconv.bench import plot
    from phaseconv.files import require_folder, write_atomically
    from phaseconv.models.loading import inputs_at_length

    counts = _integers(threads, "--threads")
    resolve_target(target)
    for path in (json_path, plot_path):
        if path is not None:
            require_folder(path)
    sizes = _integers(lengths, "--lengths") if lengths is not None else ()
    source = _load(model, not no_prepare)  # fail here, with a clear message, not in a worker
    for size in sizes:
        inputs_at_length(source.program, source.inputs, size)
    _say_prepared(model, source)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"timing {model}", total=runs * len(counts) * max(1, len(sizes)))
        results = run_bench(
            model,
            counts,
            runs,
            on_round=lambda: progress.advance(task),
            prepare=not no_prepare,
            lengths=sizes,
            target=target,
        )
    table = Table(title=f"{model}: ExecuTorch XNNPACK, median of {runs} interleaved runs")
    columns = ("threads", "length") if sizes else ("threads",)
    columns += ("stock ms", "phaseconv ms", "speedup", "max |diff| stock", "max |diff| phaseconv")
    for column in columns:
        table.add_column(column, justify="right")
    for r in results:
        stock, fast = r["programs"]["stock"], r["programs"]["phaseconv"]
        table.add_row(
            str(r["threads"]),
            *([str(r["length"])] if sizes else []),
            f"{stock['median_ms']:.3f}",
            f"{fast['median_ms']:.3f}",
            f"{r['speedup']:.2f}x",
            f"{stock['max_abs_error']:.2e}",
            f"{fast['max_abs_error']:.2e}",
        )
    console.print(table)
    console.print("max |diff| is against eager PyTorch on the same inputs")
    if json_path is not None:
        write_atomically(json_path, json.dumps(results, indent=2).encode())
        console.print(f"wrote {json_path}")
    if plot_path is not None:
        import io

        buffer = io.BytesIO()
        plot(results, buffer)
        write_atomically(plot_path, buffer.getvalue())
        console.print(f"wrote {plot_path}")


@app.command()
def stream(
    program: Path = typer.Argument(..., help="a step program (.pte): latent [1, 1, D] -> pcm [1, 1, N] per call"),
    latents: Path | None = typer.Option(None, "--latents", help="a .npy file of [frames, D] float32 latents"),
    frames: int = typer.Option(25, "--frames", min=1, help="without --latents: this many random latent frames"),
    pcm: bool = typer.Option(False, "--pcm", help="write 16-bit mono PCM to stdout as each frame is decoded"),
    output: Path | None = typer.Option(None, "-o", "--output", help="write a WAV file"),
    json_path: Path | None = typer.Option(None, "--json", help="write the summary as JSON"),
    threads: int = typer.Option(1, "--threads", min=1, help="XNNPACK threads"),
) -> None:
    """Decode frame by frame through a step program, as a TTS runner does; the summary goes to stderr.

    phaseconv stream step.pte --latents z.npy --pcm | aplay -f S16_LE -r 24000 -c 1
    """
    from phaseconv.files import require_folder, write_atomically
    from phaseconv.runtimes.executorch import set_threads
    from phaseconv.stream import StepProgram, load_latents, random_latents, stream, to_pcm16, write_wav

    if pcm and output is not None:
        raise PhaseconvError("give either --pcm (PCM on stdout) or -o (a WAV file), not both")
    if not pcm and output is None:
        raise PhaseconvError("say where the audio goes: --pcm (stdout) or -o out.wav")
    for path in (output, json_path):
        if path is not None:
            require_folder(path)
    values = load_latents(latents) if latents is not None else None
    with parked_stderr(not state["debug"]):  # the runtime's CPU probing on load
        set_threads(threads)
        step = StepProgram(program)
    values = step.check_latents(
        values if values is not None else random_latents(frames, step.latent_dim), str(latents or "the random latents")
    )
    chunks: list[bytes] = []

    def deliver(samples) -> None:
        data = to_pcm16(samples)
        if pcm:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            chunks.append(data)

    report = stream(step, values, deliver)
    if output is not None:
        write_wav(output, b"".join(chunks), report.sample_rate)
    if json_path is not None:
        write_atomically(json_path, json.dumps(report.to_dict() | {"threads": threads}, indent=2).encode())
    err = Console(stderr=True)
    err.print(
        f"{report.frames} frames ({report.frames * report.samples_per_frame / report.sample_rate:.2f} s of audio) "
        f"at {threads} thread(s): "
        f"first audio {report.first_audio_ms:.2f} ms after its latent (load {report.load_ms:.0f} ms), "
        f"per frame median {report.median_ms:.2f} ms, p95 {report.p95_ms:.2f} ms, "
        f"real-time factor {report.real_time_factor:.3f}",
        soft_wrap=True,
    )


@app.command()
def tts(
    program: Path = typer.Argument(
        ..., help="a text-to-speech program (.pte) from `phaseconv lower pocket-tts-tts:CONFIG`"
    ),
    text: str | None = typer.Argument(None, help="what to say"),
    voice: str | None = typer.Option(
        None,
        "--voice",
        help="a built-in voice of the program (--list-voices), a .safetensors voice state (pocket-tts export-voice), "
        "or an audio file to clone (its first 30 s); default: the program's default voice",
    ),
    tokenizer: Path | None = typer.Option(
        None, "--tokenizer", help="a tokenizer (.model or .json) instead of the one the program carries"
    ),
    temperature: float | None = typer.Option(
        None, "--temperature", help="noise scale; 0: deterministic (default: the config's)"
    ),
    seed: int = typer.Option(0, "--seed", help="the noise's seed: the same seed, the same audio"),
    threads: int = typer.Option(1, "--threads", min=1, help="XNNPACK threads (per process with --pipeline)"),
    pipeline: bool = typer.Option(
        False, "--pipeline", help="decode in a second process while the language model generates the next frame"
    ),
    pcm: bool = typer.Option(False, "--pcm", help="write 16-bit mono PCM to stdout as each frame is decoded"),
    output: Path | None = typer.Option(None, "-o", "--output", help="write a WAV file"),
    json_path: Path | None = typer.Option(None, "--json", help="write the summary as JSON"),
    list_voices: bool = typer.Option(False, "--list-voices", help="name the program's built-in voices and stop"),
    export_voice: Path | None = typer.Option(
        None,
        "--export-voice",
        help="write --voice's state as a .safetensors file (as pocket-tts export-voice) and stop",
    ),
) -> None:
    """Speak TEXT through a text-to-speech program, streamed frame by frame; the summary goes to stderr.

    phaseconv tts tts.pte "Hello there." --voice alba --pcm | aplay -f S16_LE -r 24000 -c 1
    """
    from phaseconv.files import require_folder, write_atomically
    from phaseconv.runtimes.executorch import set_threads
    from phaseconv.stream import to_pcm16, write_wav
    from phaseconv.tts.runner import DecoderProcess, Speaker, SpeechProgram, SpeechReport, resolve_voice
    from phaseconv.tts.voices import write_state

    speaking = not (list_voices or export_voice is not None)
    if speaking and text is None:
        raise PhaseconvError("say what to speak: phaseconv tts PROGRAM TEXT (or --list-voices, --export-voice)")
    if speaking and pcm == (output is not None):
        raise PhaseconvError("say where the audio goes: either --pcm (stdout) or -o out.wav")
    for path in (output, json_path, export_voice):
        if path is not None:
            require_folder(path)
    if speaking and not text.strip():
        raise PhaseconvError("the text is empty")
    if tokenizer is not None and not tokenizer.is_file():
        raise PhaseconvError(f"no such tokenizer file: {tokenizer}")
    with parked_stderr(not state["debug"]):  # the runtime's CPU probing on load
        set_threads(threads)
        speech = SpeechProgram(program, tokenizer=tokenizer)
    settings = speech.settings
    if list_voices:
        for name in speech.voices:
            default = " (default)" if name == settings.default_voice else ""
            console.print(f"{name}: {settings.voices[name]} positions{default}", highlight=False)
        if not speech.voices:
            console.print(
                "no built-in voices: --voice takes a .safetensors voice state or an audio file", highlight=False
            )
        return
    chosen = resolve_voice(voice, speech)
    if export_voice is not None:
        if chosen is None:
            raise PhaseconvError("--export-voice needs --voice: the voice to write")
        speaker = Speaker(speech, temperature, seed)
        speaker.set_voice(chosen)
        write_state(speaker.voice_state(), export_voice)
        _note(f"wrote {export_voice} ({speaker.voice_positions} positions)")
        return
    speaker = Speaker(speech, temperature, seed)
    unknown = speaker.unknown_characters(text)
    if unknown:
        _note(f"the tokenizer reads {' '.join(unknown)} as its unknown piece (pocket-tts speaks it so)")
    report = SpeechReport(0, 0, settings.sample_rate, settings.frame_size, speech.load_ms)
    report.voice_ms, report.voice = speaker.set_voice(chosen)
    chunks: list[bytes] = []

    def deliver(samples) -> None:
        data = to_pcm16(samples)
        if pcm:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            chunks.append(data)

    if pipeline:
        with parked_stderr(not state["debug"]):
            decoder = DecoderProcess(program, threads)
        speaker.speak(text, deliver, report, decoder)
        decoder.close()
    else:
        speaker.speak(text, deliver, report)
    if output is not None:
        write_wav(output, b"".join(chunks), report.sample_rate)
    precision = {"lm": settings.quantize or "fp32", "decoder": settings.quantize_decoder or "fp32"}
    summary = report.to_dict() | {"threads": threads, "pipeline": pipeline, "precision": precision}
    if json_path is not None:
        write_atomically(json_path, json.dumps(summary, indent=2).encode())
    Console(stderr=True).print(
        f"{report.frames} frames ({report.audio_seconds:.2f} s of audio, {report.chunks} chunk(s)) in voice "
        f"{report.voice} at {threads} thread(s), LM {precision['lm']}, decoder {precision['decoder']}"
        f"{', decoder in a second process' if pipeline else ''}: first audio {report.first_audio_ms:.1f} "
        f"ms after the text, per frame median LM {summary['lm_median_ms']:.2f} ms + decoder "
        f"{summary['decode_median_ms']:.2f} ms, real-time factor {report.real_time_factor:.3f}"
        + (f"; {report.split_chunks} chunk(s) split at words to fit the cache" if report.split_chunks else ""),
        soft_wrap=True,
        highlight=False,
    )


@app.command()
def models(as_json: bool = typer.Option(False, "--json", help="print JSON instead of lines")) -> None:
    """The built-in models, by the names MODEL takes."""
    from phaseconv.models import DEMO_MODELS, FAMILIES

    rows = [
        (f"demo:{name}", " ".join((factory.__doc__ or "").split("\n\n")[0].split()))
        for name, factory in DEMO_MODELS.items()
    ]
    for family, (built_ins, package) in FAMILIES.items():
        for name, model in built_ins.items():
            arguments = "&".join(f"{key}=<{kind.__name__}>" for key, kind in (model.arguments or {}).items())
            spec = f"{family}:{name}" + (f"[?{arguments}]" if arguments else "")
            rows.append((spec, f"{model.description} ({package})"))
    try:
        from phaseconv.models.pocket_tts import DEFAULT_CONFIG, config_names
        from phaseconv.tts.program import DEFAULT_TTS_CONFIG

        configs = ", ".join(config_names())
        rows.append(
            (
                f"pocket-tts:CONFIG (default {DEFAULT_CONFIG})",
                f"pocket-tts's Mimi decoder as a streaming step; CONFIG: {configs}",
            )
        )
        rows.append(
            (
                f"{TTS_PREFIX}CONFIG (default {DEFAULT_TTS_CONFIG})",
                "pocket-tts's whole text-to-speech model as one program (lower only; speak it with phaseconv tts)",
            )
        )
    except PhaseconvError as missing:
        rows.append(("pocket-tts:CONFIG", str(missing)))
    if as_json:
        _print_json([{"name": name, "description": text} for name, text in rows])
        return
    for name, text in rows:
        console.print(f"{name}  {text}", highlight=False, soft_wrap=True)


@app.command()
def demo(
    frames: int = typer.Option(12, min=1, help="12.5 Hz latent frames (80 ms of audio each)"),
    runs: int = typer.Option(20, min=1, help="timed runs per program"),
    threads: int = typer.Option(1, min=1, help="XNNPACK threads"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="every rewrite decision, node by node"),
) -> None:
    """Export a Mimi-like audio decoder, rewrite it, and compare stock and rewritten programs on XNNPACK.

    The decoder: depthwise k4 s2 frame upsampler, then SEANet (ELU + ConvTranspose1d(k = 2s) at strides
    8, 6, 5, 4 with residual units); random weights.
    """
    from phaseconv.runtimes.executorch import set_threads

    with parked_stderr(not state["debug"]):  # the runtime's CPU probing
        set_threads(threads)
    import torch

    from phaseconv.compare import lower_stock_and_rewritten, time_variants
    from phaseconv.models.audio import mimi_decoder

    model, inputs = mimi_decoder(frames)
    console.print(f"[bold]Mimi-like decoder[/]: latents {list(inputs[0].shape)} -> {frames * 1920} audio samples")
    with torch.no_grad():
        ep = torch.export.export(model, inputs)
    with parked_stderr(not state["debug"]):
        comparison = lower_stock_and_rewritten(ep, inputs)
    show_decisions(comparison.decisions, verbose)
    show_summaries({name: v.summary for name, v in comparison.variants.items()})
    with console.status(f"timing {runs} interleaved runs of each program at {threads} thread(s)"):
        time_variants(comparison, inputs, runs)
    table = Table(title=f"ExecuTorch XNNPACK, {threads} thread(s), median of {runs} interleaved runs")
    for column in ("program", "max |error| vs eager", "16-bit PCM steps", "ms"):
        table.add_column(column)
    for variant in comparison.variants.values():
        table.add_row(
            variant.name,
            f"{variant.max_abs_error:.2e}",
            f"{variant.max_abs_error * 32768:.3f}",
            f"{variant.median_ms:.2f}",
        )
    console.print(table)
    console.print(f"[bold green]speedup over stock XNNPACK: {comparison.speedup():.2f}x[/]")


def main() -> None:
    try:
        app(standalone_mode=False)
    except PhaseconvError as error:
        if state["debug"]:
            raise
        print(f"phaseconv: error: {_one_line(str(error))}", file=sys.stderr)
        sys.exit(2)
    except Exception as error:  # typer's own usage errors, and anything unexpected
        import click

        if isinstance(error, click.exceptions.ClickException):
            error.show()
            sys.exit(2)
        if isinstance(error, click.exceptions.Abort):
            sys.exit(130)
        if state["debug"]:
            raise
        message = _one_line(f"{type(error).__name__}: {error}")
        print(f"phaseconv: error: {message} (run with --debug for the traceback)", file=sys.stderr)
        sys.exit(2)


def _one_line(message: str) -> str:
    """The first line of a message: library errors (torch.export's) run to dozens of lines."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"
