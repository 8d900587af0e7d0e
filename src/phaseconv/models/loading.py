"""MODEL arguments of the command: a .pt2 file, `module.path:factory`, or `demo:NAME`.

A factory returns (module, example_inputs) or (module, example_inputs, dynamic_shapes); the latter,
like a .pt2 saved with dynamic shapes, gives one program for a range of lengths.
"""

from __future__ import annotations

import importlib
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError, known_cause, parked_stderr

FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass
class ModelSource:
    name: str
    program: ExportedProgram
    inputs: tuple[torch.Tensor, ...]
    prepared: bool = False  # the module was exported after phaseconv.prepare
    module: torch.nn.Module | None = None  # what was exported, where the source was a module
    keep_float_in_int8: list[str] = field(default_factory=list)  # the submodules --quantize int8 keeps fp32


def load_model(
    spec: str, weights: Path | None = None, prepare: bool = True, random_weights: bool = False, say=None
) -> ModelSource:
    """Load or build the exported program that `spec` names, with inputs to run it on.

    A module (from a factory or a built-in name) is exported after `phaseconv.prepare` unless
    `prepare` is False; a .pt2 file is taken as it is. `pocket-tts:CONFIG` takes the weights of
    `weights` (a .safetensors file), random ones (`random_weights`), or else the config's from the hub
    or its cache (`say`, where given, is told which; without it, weights out of reach are an error).
    """
    if spec.startswith("pocket-tts-tts:"):
        raise PhaseconvError(
            f"{spec} is a program of several methods: `phaseconv lower {spec} -o tts.pte` builds it, "
            "`phaseconv tts tts.pte` speaks with it"
        )
    if (weights is not None or random_weights) and not spec.startswith("pocket-tts:"):
        raise PhaseconvError(f"--weights and --random-weights are for pocket-tts:CONFIG models, not {spec}")
    if spec.startswith("pocket-tts:"):
        from phaseconv.models.pocket_tts import DEFAULT_CONFIG, hub, mimi_step

        config, _, query = spec.removeprefix("pocket-tts:").partition("?")
        config, frames = config or DEFAULT_CONFIG, _frames(spec, query)
        settings = hub.load_config(config)
        if weights is None and not random_weights:
            try:
                found = hub.weights(settings, config)
                weights = found.path
                if say is not None:
                    say(f"{spec}: weights {found.source}")
            except PhaseconvError:
                if say is None:
                    raise
                say(f"{spec}: random weights (the config's are out of reach; `lower` takes --weights FILE)")
        source = _from_factory(spec, lambda: mimi_step(config, weights, frames), prepare)
        source.keep_float_in_int8 = [source.module.output_block()]  # where int8 costs the step most SNR
        return source
    from phaseconv.models import DEMO_MODELS, FAMILIES

    if spec.startswith("demo:"):
        name = spec.removeprefix("demo:")
        if name not in DEMO_MODELS:
            raise PhaseconvError(f"unknown demo model {name!r}; built in: {', '.join(sorted(DEMO_MODELS))}")
        return _from_factory(spec, DEMO_MODELS[name], prepare)
    if spec.split(":")[0] in FAMILIES:
        return _from_factory(spec, _family_factory(spec), prepare)
    path = Path(spec)
    if path.exists():
        return _from_file(path)
    if FACTORY.match(spec):
        module_name, function_name = spec.split(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as error:
            raise PhaseconvError(f"cannot import {module_name}: {type(error).__name__}: {error}") from None
        factory = getattr(module, function_name, None)
        if not callable(factory):
            raise PhaseconvError(f"{module_name} has no function {function_name}")
        return _from_factory(spec, factory, prepare)
    raise PhaseconvError(
        f"no such file: {spec} (nor a module.path:factory, demo:NAME, hf:NAME, diffusers:NAME, vocos:NAME or "
        "pocket-tts:CONFIG; `phaseconv models` lists the built-in names)"
    )


def _frames(spec: str, query: str) -> int:
    """pocket-tts:CONFIG?frames=N: the step over N frames a call (default 1)."""
    key, _, value = query.partition("=")
    if not query:
        return 1
    if key != "frames" or not value.isdigit() or int(value) < 1:
        raise PhaseconvError(f"{spec}: pocket-tts:CONFIG takes ?frames=N, the frames a call (N at least 1)")
    return int(value)


def _family_factory(spec: str):
    """`FAMILY:NAME?arg=value&...` -> a factory with those arguments, checked against the model's."""
    from phaseconv.models import FAMILIES

    family, _, rest = spec.partition(":")
    name, _, query = rest.partition("?")
    models = FAMILIES[family][0]
    if name not in models:
        raise PhaseconvError(f"unknown model {family}:{name}; built in: {', '.join(f'{family}:{n}' for n in models)}")
    model = models[name]
    arguments = {}
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        kind = (model.arguments or {}).get(key)
        if kind is None:
            known = ", ".join(model.arguments or {}) or "none"
            raise PhaseconvError(f"{family}:{name} takes no argument {key!r} (it takes: {known})")
        try:
            arguments[key] = kind(value)
        except ValueError:
            raise PhaseconvError(
                f"{family}:{name}: {key}={value!r} is not {'an integer' if kind is int else 'a number'}"
            ) from None
    return lambda: model.factory(**arguments)


def _from_file(path: Path) -> ModelSource:
    if path.is_dir():
        raise PhaseconvError(f"{path} is a folder, not an exported program file")
    if not zipfile.is_zipfile(path):
        raise PhaseconvError(f"{path} is not an exported program (a torch.export.save .pt2 file)")
    try:
        program = torch.export.load(path)
    except Exception as error:
        raise PhaseconvError(f"{path} is not a readable exported program: {type(error).__name__}: {error}") from None
    return ModelSource(path.name, program, example_inputs(program))


def _from_factory(spec: str, factory, prepare: bool = True) -> ModelSource:
    try:
        built = factory()
    except PhaseconvError:
        raise
    except Exception as error:
        raise PhaseconvError(f"the factory {spec} raised {type(error).__name__}: {error}") from None
    if not (isinstance(built, tuple) and len(built) in (2, 3) and isinstance(built[0], torch.nn.Module)):
        raise PhaseconvError(
            f"the factory {spec} must return (nn.Module, example_inputs) or (nn.Module, example_inputs, "
            f"dynamic_shapes), got {type(built).__name__}"
        )
    module, inputs, dynamic_shapes = built if len(built) == 3 else (*built, None)
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if prepare:
        from phaseconv.prepare import prepare as prepare_module

        module = prepare_module(module)
    try:
        # torch.export writes its diagnosis (graphs, guards) to stderr before raising; what it
        # raises is what the user is told.
        with torch.no_grad(), parked_stderr():
            program = torch.export.export(module.eval(), inputs, dynamic_shapes=dynamic_shapes)
    except Exception as error:
        raise PhaseconvError(f"torch.export failed on {spec}: {known_cause(error, prepared=prepare)}") from None
    return ModelSource(spec, program, inputs, prepared=prepare, module=module)


def example_inputs(program: ExportedProgram) -> tuple[torch.Tensor, ...]:
    """The inputs saved with the program, or random ones of the user inputs' shapes and dtypes."""
    saved = getattr(program, "example_inputs", None)
    if saved is not None and not saved[1] and all(isinstance(t, torch.Tensor) for t in saved[0]):
        return tuple(saved[0])
    from phaseconv.graph.program import user_input_nodes

    generator = torch.Generator().manual_seed(0)
    inputs = []
    for node in user_input_nodes(program):
        value = node.meta["val"]
        shape = [int(s) if isinstance(s, int) else 2 for s in value.shape]
        inputs.append(torch.randn(shape, generator=generator).to(value.dtype))
    return tuple(inputs)


def dynamic_range(program: ExportedProgram) -> tuple[int, int] | None:
    """(shortest, longest) of the program's one dynamic size, None if its inputs are static."""
    symbols = {
        symbol
        for node in program.graph.nodes
        if node.op == "placeholder" and isinstance(node.meta.get("val"), torch.Tensor)
        for size in node.meta["val"].shape
        if not isinstance(size, int)
        for symbol in size.node.expr.free_symbols
    }
    if not symbols:
        return None
    if len(symbols) > 1:
        raise PhaseconvError(f"the program has {len(symbols)} dynamic sizes; --lengths sets one")
    bounds = program.range_constraints[symbols.pop()]
    return int(bounds.lower), int(bounds.upper)


def inputs_at_length(program: ExportedProgram, inputs: tuple[torch.Tensor, ...], length: int):
    """Inputs like `inputs` with the program's dynamic size set to `length` (checked against its range)."""
    span = dynamic_range(program)
    if span is None:
        raise PhaseconvError("--lengths needs a program exported with a dynamic size; this one has static shapes")
    if not span[0] <= length <= span[1]:
        raise PhaseconvError(f"length {length} is outside the program's range {span[0]}..{span[1]}")
    generator = torch.Generator().manual_seed(length)
    placeholders = [
        n for n in program.graph.nodes if n.op == "placeholder" and n.name in program.graph_signature.user_inputs
    ]
    result = []
    for node, example in zip(placeholders, inputs):
        shape = [
            size
            if isinstance(size, int)
            else int(size.node.expr.subs({symbol: length for symbol in size.node.expr.free_symbols}))
            for size in node.meta["val"].shape
        ]
        if example.is_floating_point():
            result.append(torch.randn(shape, generator=generator).to(example.dtype))
        else:
            result.append(torch.randint(0, int(example.max()) + 1, shape, generator=generator).to(example.dtype))
    return tuple(result)
