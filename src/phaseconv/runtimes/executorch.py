"""Loading and running programs with ExecuTorch's runtime.

Runtime facts this module encodes (executorch 1.5.1):
- the thread pool size must be set before any XNNPACK program is loaded (later it crashes);
- a program loaded from bytes does not copy them: they must outlive the program;
- XNNPACK packs a private copy of a weight for every operator that reads it unless its weight
  cache is on (off in the pip build; `weight_cache` below turns it on for each load), or the weight
  reaches the operators at run time (lowering.xnnpack.to_xnnpack(..., weight_cache=False)): then it
  is packed at each call, into the runtime's one workspace.
"""

from __future__ import annotations

from pathlib import Path

import torch
from executorch.extension.pybindings import portable_lib
from executorch.runtime import Runtime

from phaseconv.errors import PhaseconvError
from phaseconv.runtimes.backend_options import WEIGHT_CACHE, set_xnnpack_option

_threads_locked = False


def set_threads(count: int) -> None:
    """Size XNNPACK's thread pool. Only allowed before the first program is loaded."""
    if _threads_locked:
        raise RuntimeError("the thread count must be set before any ExecuTorch program is loaded")
    portable_lib._unsafe_reset_threadpool(count)


def load_program(buffer: bytes | Path, weight_cache: bool = True, **options):
    """The runtime's Program for `buffer` (bytes, which must outlive it, or a file's path), XNNPACK's
    weight cache on or off."""
    global _threads_locked
    set_xnnpack_option(WEIGHT_CACHE, weight_cache)
    _threads_locked = True
    return Runtime.get().load_program(buffer, **options)


class LoadedProgram:
    """A program loaded by the ExecuTorch runtime, its methods initialized; keeps its bytes alive
    as long as it lives. `data_path`: the .ptd file of a program saved with external constants.

    A program given as a file's path is mapped, not read: the runtime lets go of each part of the
    file it is done with, such as the weights XNNPACK has packed, where bytes stay resident beside
    the packed copy (benchmarks/tts.py measures the runner's memory, which loads from the path).

    Every method is initialized here, not on its first call (XNNPACK packs its weights then), so the
    first call does not pack weights: time to first audio. A method that shares a buffer with
    another starts it from its initial value when initialized, so all are initialized before any
    runs.
    With `weight_cache` (XNNPACK's `weight_cache_enabled`), operators that read the same constant
    share one packed copy: an unrolled LSTM's steps read one recurrent weight, which stays in cache,
    instead of one private copy per step streamed from memory; methods that read one weight share it.
    `methods`: the names of the methods to initialize, or which to (a function of the name), default all."""

    def __init__(
        self, buffer: bytes | Path, data_path: str | Path | None = None, weight_cache: bool = True, methods=None
    ):
        self._buffer = buffer if isinstance(buffer, Path) else bytes(buffer)
        self._program = load_program(self._buffer, weight_cache, data_path=data_path)
        self.all_methods = sorted(self._program.method_names)
        wanted = methods if methods is None or callable(methods) else methods.__contains__
        chosen = [name for name in self.all_methods if wanted is None or wanted(name)]
        self._methods = {name: self._program.load_method(name) for name in chosen}
        # Planned sizes: a dynamic size is planned for the longest of its declared range.
        self._largest = {
            name: [tuple(method.metadata.input_tensor_meta(i).sizes()) for i in range(method.metadata.num_inputs())]
            for name, method in self._methods.items()
        }

    @property
    def method_names(self) -> list[str]:
        return list(self._methods)

    def run(self, inputs: tuple[torch.Tensor, ...], method: str = "forward") -> list:
        for number, (tensor, largest) in enumerate(zip(inputs, self._largest[method]), start=1):
            if tensor.dim() != len(largest) or any(n > m for n, m in zip(tensor.shape, largest)):
                where = "" if method == "forward" else f" of {method}"
                raise PhaseconvError(
                    f"input {number}{where} has shape {list(tensor.shape)}; the program takes at most "
                    f"{list(largest)} (a dynamic size up to the longest of its declared range)"
                )
        return list(self._methods[method].execute(tuple(inputs)))

    def method_meta(self, method: str = "forward"):
        """Input and output tensor shapes and dtypes of a method, as the program declares them."""
        return self._methods[method].metadata
