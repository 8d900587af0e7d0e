"""One call from an ExportedProgram to an ExecuTorch program file, with what happened to it."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError
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


def require_folder(path: Path) -> None:
    """The folder a file will be written to exists (checked before any expensive work)."""
    if not path.parent.is_dir():
        raise PhaseconvError(f"cannot write {path}: the folder {path.parent} does not exist")


def write_atomically(path: Path, content: bytes) -> None:
    require_folder(path)
    folder = path.parent
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise PhaseconvError(f"cannot write {path}: {error.strerror}") from None
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(content)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes 0600; give what open() would
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise PhaseconvError(f"cannot write {path}: {error.strerror}") from None


def lower(
    ep: ExportedProgram | dict[str, ExportedProgram],
    *,
    rewrite: bool = True,
    backend: str = "xnnpack",
    external_constants: bool = False,
    target: str = "any",
    constant_methods: dict | None = None,
    weight_cache: bool = True,
) -> LoweredProgram:
    """Rewrite (unless rewrite=False) and lower to an ExecuTorch program for `backend`, tuned for the
    CPU `target` ("any", "x86-fma3", "x86-avx512", "x86-avx512-amd" or "host": phaseconv.targets).

    weight_cache=False lowers for a loader without XNNPACK's weight cache: a weight that several
    linears read (an unrolled LSTM's recurrent weight) reaches them at run time, packed at each call,
    instead of one packed copy per operator kept from load on (EnCodec's decoder: 600 MiB).

    A dict {method name: program} gives one program of several methods that share the buffers they
    name alike (a state one method writes and another reads), with `constant_methods` beside them;
    each decision's node is then named method/node.
    """
    programs = ep if isinstance(ep, dict) else {"forward": ep}
    for program in programs.values():
        require_program(program)
    require_backend(backend)
    from phaseconv.rules import TARGET_RULES
    from phaseconv.runtimes.executorch import PHASECONV_LOWERING, external_data, to_xnnpack
    from phaseconv.runtimes.pte import summarize_pte

    rules = TARGET_RULES[resolve_target(target)]
    decisions: list[Decision] = []
    if rewrite:  # then lowered with XNNPACK's own ELU and shape chains on the buffer; else the stock lowering
        rewritten = {}
        for name, program in programs.items():
            rewritten[name], method_decisions = rewrite_with_report(program, rules)
            if isinstance(ep, dict):
                method_decisions = [replace(d, node=f"{name}/{d.node}") for d in method_decisions]
            decisions += method_decisions
        programs = rewritten
    manager = to_xnnpack(
        programs if isinstance(ep, dict) else programs["forward"],
        external_constants=external_constants,
        constant_methods=constant_methods,
        weight_cache=weight_cache,
        **(PHASECONV_LOWERING if rewrite else {}),
    )
    data_files = external_data(manager)
    data = b"".join(data_files.values()) if data_files else None
    if len(data_files) > 1:
        raise PhaseconvError(f"expected one external data file, got {sorted(data_files)}")
    buffer = manager.buffer
    return LoweredProgram(buffer, data, summarize_pte(buffer), decisions)


def inspect(path: str | Path) -> DelegationSummary:
    """The delegation summary of an existing .pte file, read from the file itself."""
    from phaseconv.runtimes.pte import summarize_pte_file

    return summarize_pte_file(path)
