"""One call from an ExportedProgram to an ExecuTorch program file, with what happened to it."""

from __future__ import annotations

import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError
from phaseconv.files import place_atomically
from phaseconv.lowering.profile import Stage, StageLog
from phaseconv.report import Decision
from phaseconv.rewrite import require_program
from phaseconv.targets import resolve_target

if TYPE_CHECKING:  # executorch is imported only when a program is lowered or read
    from phaseconv.runtimes.pte import DelegationSummary

BACKENDS = ("xnnpack",)


@dataclass
class LoweredProgram:
    """A serialized ExecuTorch program in a file of its own until it is saved (and the .ptd of its
    constants, when they are external): a program of gigabytes is read only when asked for."""

    file: Path
    data_file: Path | None
    summary: DelegationSummary
    decisions: list[Decision] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # each method's rewrite and lowering, the assembly
    stages: list[Stage] = field(default_factory=list)  # where the time and memory went (lowering.profile)

    def __post_init__(self):
        weakref.finalize(self, _remove, [self.file, self.data_file])

    @property
    def buffer(self) -> bytes:
        """The .pte's bytes."""
        return self.file.read_bytes()

    @property
    def data(self) -> bytes | None:
        """The .ptd's bytes (None: every constant is in the .pte)."""
        return self.data_file.read_bytes() if self.data_file is not None else None

    def save(self, path: str | Path) -> list[Path]:
        """Write `path` (the .pte) and, with external constants, the .ptd beside it. Returns the files.

        Each file appears whole or not at all (a temporary name beside it, renamed)."""
        path = Path(path)
        files = [(path, self.file)]
        if self.data_file is not None:
            files.append((path.with_suffix(".ptd"), self.data_file))
        for target, source in files:
            place_atomically(target, source)
        return [target for target, _ in files]


def _remove(paths: list[Path | None]) -> None:
    for path in paths:
        if path is not None:
            path.unlink(missing_ok=True)


def require_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise PhaseconvError(f"unknown backend {backend!r}; supported: {', '.join(BACKENDS)}")


def lower(
    ep: ExportedProgram | dict[str, ExportedProgram],
    *,
    rewrite: bool = True,
    backend: str = "xnnpack",
    external_constants: bool = False,
    target: str = "any",
    constant_methods: dict | None = None,
    weight_cache: bool = True,
    workers: int = 1,
    progress: Callable[[str, float], None] | None = None,
    scratch: str | Path | None = None,
    stages: StageLog | None = None,
) -> LoweredProgram:
    """Rewrite (unless rewrite=False) and lower to an ExecuTorch program for `backend`, tuned for the
    CPU `target` ("any", "x86-fma3", "x86-avx512", "x86-avx512-amd" or "host": phaseconv.targets).

    weight_cache=False lowers for a loader without XNNPACK's weight cache: a weight that several
    linears read (an unrolled LSTM's recurrent weight) reaches them at run time, packed at each call,
    instead of one packed copy per operator kept from load on.

    A dict {method name: program} gives one program of several methods that share the buffers they
    name alike (a state one method writes and another reads), with `constant_methods` beside them;
    each decision's node is then named method/node. The methods are rewritten and lowered in
    `workers` processes; `progress(method, seconds)` hears of each one done. The delegates' weights
    wait in a folder under `scratch` (default: the system's temporary folder) until the program is
    serialized, each once; `stages` (a StageLog) records where the time and memory went.
    """
    programs = ep if isinstance(ep, dict) else {"forward": ep}
    for program in programs.values():
        require_program(program)
    require_backend(backend)
    from phaseconv.lowering.blobs import BlobFolder
    from phaseconv.lowering.methods import MethodLowering, lower_each
    from phaseconv.lowering.xnnpack import PHASECONV_LOWERING, assemble, write_program
    from phaseconv.runtimes.pte import mapped, summarize_pte

    stages = stages if stages is not None else StageLog()
    # rewritten: lowered with XNNPACK's own ELU and shape chains on the buffer; else the stock lowering
    options = {"weight_cache": weight_cache, "external_constants": external_constants}
    options |= PHASECONV_LOWERING if rewrite else {}
    lowering = MethodLowering(resolve_target(target) if rewrite else None, options, isinstance(ep, dict))
    with tempfile.TemporaryDirectory(prefix=".phaseconv-weights-", dir=scratch) as folder:
        results = lower_each(programs, lowering, BlobFolder(folder), stages, workers, progress)
        seconds = {name: sum(s.seconds for s in stages.stages if s.method == name) for name in results}
        decisions = [decision for name in programs for decision in results[name][1]]
        methods = {name: lowered for name, (lowered, _) in results.items()}
        del results
        stages.start("assemble")
        manager = assemble(methods, constant_methods, isinstance(ep, dict), external_constants)
        stages.start("serialize")
        program, data = write_program(manager, scratch)
        del manager, methods
        with mapped(program) as serialized:
            summary = summarize_pte(serialized)
        stages.stop()
    seconds["assemble"] = sum(s.seconds for s in stages.stages if s.stage in ("assemble", "serialize"))
    return LoweredProgram(program, data, summary, decisions, seconds, stages.stages)


def inspect(path: str | Path) -> DelegationSummary:
    """The delegation summary of an existing .pte file, read from the file itself."""
    from phaseconv.runtimes.pte import summarize_pte_file

    return summarize_pte_file(path)
