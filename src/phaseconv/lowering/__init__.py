"""One call from an ExportedProgram to an ExecuTorch program file, with what happened to it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError
from phaseconv.files import write_atomically
from phaseconv.report import Decision
from phaseconv.rewrite import require_program, rewrite_with_report
from phaseconv.targets import resolve_target

if TYPE_CHECKING:  # executorch is imported only when a program is lowered or read
    from phaseconv.runtimes.pte import DelegationSummary

BACKENDS = ("xnnpack",)


@dataclass
class LoweredProgram:
    """A serialized ExecuTorch program (and its .ptd data when constants are external)."""

    buffer: bytes
    data: bytes | None
    summary: DelegationSummary
    decisions: list[Decision] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # each method's rewrite and lowering, the assembly

    def save(self, path: str | Path) -> list[Path]:
        """Write `path` (the .pte) and, with external constants, the .ptd beside it. Returns the files.

        Each file is written to a temporary file in the same folder and renamed, so a failure
        leaves no partial file behind.
        """
        path = Path(path)
        files = [(path, self.buffer)]
        if self.data is not None:
            files.append((path.with_suffix(".ptd"), self.data))
        for target, content in files:
            write_atomically(target, content)
        return [target for target, _ in files]


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
) -> LoweredProgram:
    """Rewrite (unless rewrite=False) and lower to an ExecuTorch program for `backend`, tuned for the
    CPU `target` ("any", "x86-fma3", "x86-avx512", "x86-avx512-amd" or "host": phaseconv.targets).

    weight_cache=False lowers for a loader without XNNPACK's weight cache: a weight that several
    linears read (an unrolled LSTM's recurrent weight) reaches them at run time, packed at each call,
    instead of one packed copy per operator kept from load on.

    A dict {method name: program} gives one program of several methods that share the buffers they
    name alike (a state one method writes and another reads), with `constant_methods` beside them;
    each decision's node is then named method/node. The methods are rewritten and lowered in
    `workers` processes; `progress(method, seconds)` hears of each one done.
    """
    programs = ep if isinstance(ep, dict) else {"forward": ep}
    for program in programs.values():
        require_program(program)
    require_backend(backend)
    from phaseconv.lowering.methods import each_method
    from phaseconv.lowering.xnnpack import PHASECONV_LOWERING, assemble, external_data, lower_method
    from phaseconv.rules import TARGET_RULES
    from phaseconv.runtimes.pte import summarize_pte

    rules = TARGET_RULES[resolve_target(target)]
    # rewritten: lowered with XNNPACK's own ELU and shape chains on the buffer; else the stock lowering
    options = {"weight_cache": weight_cache, "external_constants": external_constants}
    options |= PHASECONV_LOWERING if rewrite else {}

    def rewritten_and_lowered(name: str):
        program, decisions = programs[name], []
        if rewrite:
            program, decisions = rewrite_with_report(program, rules)
            if isinstance(ep, dict):
                decisions = [replace(d, node=f"{name}/{d.node}") for d in decisions]
        return lower_method(name, program, **options), decisions

    seconds = {}

    def heard(name: str, took: float) -> None:
        seconds[name] = took
        if progress is not None:
            progress(name, took)

    largest_first = sorted(programs, key=lambda name: -len(programs[name].graph.nodes))
    results = each_method(largest_first, rewritten_and_lowered, workers, heard)
    decisions = [decision for name in programs for decision in results[name][1]]
    methods = {name: lowered for name, (lowered, _) in results.items()}
    start = time.perf_counter()
    manager = assemble(methods, constant_methods, isinstance(ep, dict), external_constants)
    data_files = external_data(manager)
    data = b"".join(data_files.values()) if data_files else None
    if len(data_files) > 1:
        raise PhaseconvError(f"expected one external data file, got {sorted(data_files)}")
    buffer = manager.buffer
    seconds["assemble"] = time.perf_counter() - start
    return LoweredProgram(buffer, data, summarize_pte(buffer), decisions, seconds)


def inspect(path: str | Path) -> DelegationSummary:
    """The delegation summary of an existing .pte file, read from the file itself."""
    from phaseconv.runtimes.pte import summarize_pte_file

    return summarize_pte_file(path)
