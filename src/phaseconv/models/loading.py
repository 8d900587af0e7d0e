"""MODEL arguments of the command: a .pt2 file, `module.path:factory`, or `demo:NAME`."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError

FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass
class ModelSource:
    name: str
    program: ExportedProgram
    inputs: tuple[torch.Tensor, ...]


def load_model(spec: str, weights: Path | None = None) -> ModelSource:
    """Load or build the exported program that `spec` names, with inputs to run it on.

    `weights` (a .safetensors file) is for `pocket-tts:CONFIG`, whose weights cannot be downloaded here.
    """
    if weights is not None and not spec.startswith("pocket-tts:"):
        raise PhaseconvError(f"--weights is for pocket-tts:CONFIG models, not {spec}")
    if spec.startswith("pocket-tts:"):
        from phaseconv.models.pocket_tts import DEFAULT_CONFIG, mimi_step

        config = spec.removeprefix("pocket-tts:") or DEFAULT_CONFIG
        return _from_factory(spec, lambda: mimi_step(config, weights))
    if spec.startswith("demo:"):
        from phaseconv.models import DEMO_MODELS

        name = spec.removeprefix("demo:")
        if name not in DEMO_MODELS:
            raise PhaseconvError(f"unknown demo model {name!r}; built in: {', '.join(sorted(DEMO_MODELS))}")
        return _from_factory(spec, DEMO_MODELS[name])
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
        return _from_factory(spec, factory)
    raise PhaseconvError(f"no such file: {spec} (nor a module.path:factory or demo:NAME)")


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


def _from_factory(spec: str, factory) -> ModelSource:
    try:
        built = factory()
    except PhaseconvError:
        raise
    except Exception as error:
        raise PhaseconvError(f"the factory {spec} raised {type(error).__name__}: {error}") from None
    if not (isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], torch.nn.Module)):
        raise PhaseconvError(f"the factory {spec} must return (nn.Module, example_inputs), got {type(built).__name__}")
    module, inputs = built
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    try:
        with torch.no_grad(), _quiet_torch_logs():
            program = torch.export.export(module.eval(), inputs)
    except Exception as error:
        raise PhaseconvError(f"torch.export failed on {spec}: {type(error).__name__}: {error}") from None
    return ModelSource(spec, program, inputs)


@contextlib.contextmanager
def _quiet_torch_logs():
    """torch.export writes its diagnosis (graphs, guards) to stderr before raising; what it raises is
    what the user is told, so stderr is parked in a temporary file meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as parked:
        os.dup2(parked.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def example_inputs(program: ExportedProgram) -> tuple[torch.Tensor, ...]:
    """The inputs saved with the program, or random ones of the user inputs' shapes and dtypes."""
    saved = getattr(program, "example_inputs", None)
    if saved is not None and not saved[1] and all(isinstance(t, torch.Tensor) for t in saved[0]):
        return tuple(saved[0])
    generator = torch.Generator().manual_seed(0)
    inputs = []
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in program.graph_signature.user_inputs:
            value = node.meta["val"]
            shape = [int(s) if isinstance(s, int) else 2 for s in value.shape]
            inputs.append(torch.randn(shape, generator=generator).to(value.dtype))
    return tuple(inputs)
