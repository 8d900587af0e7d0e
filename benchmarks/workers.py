"""What the benchmark scripts share: one worker process per thread count (XNNPACK's thread pool is
sized once per process, before any program is loaded) and the results file."""

from __future__ import annotations

import datetime
import json
import operator
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent


def worker_rows(script: str, arguments: list[str], status: str, console: Console) -> list[dict]:
    """Run `python script --worker ARGUMENTS --json F` in a fresh process and return the rows it wrote;
    on failure, print the end of its stderr and exit."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "rows.json"
        command = [sys.executable, script, "--worker", *arguments, "--json", str(out)]
        with console.status(status):
            process = subprocess.run(command, capture_output=True, text=True)
        if process.returncode != 0:
            console.print(process.stderr[-3000:])
            raise typer.Exit(1)
        return json.loads(out.read_text())


def resident_kib(pid: int | str = "self") -> int | None:
    """A process's resident memory (VmRSS), KiB; None once it has exited (a zombie has no VmRSS line)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except FileNotFoundError:
        return None
    return next((int(line.split()[1]) for line in lines if line.startswith("VmRSS:")), None)


def resident_mib() -> float:
    """This process's resident memory (VmRSS), MiB."""
    return resident_kib() / 1024


def library_code_mib(program: Path) -> float:
    """Resident pages of files this process maps other than `program`: the code of shared libraries and
    modules (libtorch's where the Python runner runs eager ops), shared with every process that maps
    them and dropped under pressure; the rest of VmRSS is the program's: its file and private memory."""
    kilobytes, name, own = 0, "", str(program.resolve())
    with open("/proc/self/smaps") as smaps:  # line by line: the reading adds no memory of its own
        for line in smaps:
            fields = line.split()
            if not fields[0].endswith(":"):  # a mapping's header: address perms offset device inode [path]
                name = fields[5] if len(fields) > 5 else ""
            elif fields[0] == "Rss:" and name.startswith("/") and name != own:
                kilobytes += int(fields[1])
    return kilobytes / 1024


def machine() -> dict:
    """What the figures were measured on: architecture, CPU model, the widest vector unit torch uses."""
    import torch

    from phaseconv.targets import cpuinfo

    names = [line.split(":", 1)[1].strip() for line in cpuinfo().splitlines() if line.startswith("model name")]
    return {
        "machine": platform.machine(),
        "cpu": names[0] if names else platform.processor(),
        "vector_unit": torch.backends.cpu.get_cpu_capability(),
    }


def run_record() -> dict:
    """When and where a run measured: its CPU family (a Zen 4 and a Zen 5 both name themselves "AMD
    EPYC"), the cores it had, the date and the commit of the code that measured."""
    from phaseconv.targets import cpuinfo

    fields = dict(line.split(":", 1) for line in cpuinfo().splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    family = f"{fields.get('vendor_id', '?')} family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--", "src", "benchmarks", "runner"], capture_output=True, text=True, cwd=ROOT
    )
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    memory = next(line.split()[1] for line in meminfo if line.startswith("MemTotal:"))
    return {
        "cpu_family": family,
        "cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(int(memory) / 2**20, 1),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        # "+changes": the code that measured differs from the commit's
        "commit": (commit.stdout.strip() + ("+changes" if changed.stdout.strip() else "")) or None,
    }


def saved_rows(path: Path, key: str = "rows") -> list[dict]:
    """The rows saved at `path`, to be merged with a partial run's; refused (exit) when they were
    measured on another machine: one file holds one machine's figures."""
    saved = json.loads(path.read_text())
    where = {k: saved["meta"].get(k) for k in ("machine", "cpu", "vector_unit")}
    if where != machine():
        Console(stderr=True).print(
            f"{path} was measured on {where}, this is {machine()}: run every case (no --only), "
            "or write elsewhere with --json"
        )
        raise typer.Exit(1)
    return saved[key]


def save_results(
    path: Path, rows: list[dict], partial_key: str | Callable | None = None, *, target: str, threads, **meta
) -> None:
    """{"meta": meta + the machine, "rows": rows} as JSON at `path`. `target`: the CPU phaseconv lowered
    for (phaseconv.targets); `threads`: XNNPACK's (a number, or the counts measured). A partial run
    (`partial_key`: the field that names a row, e.g. its model, or a function of the row) keeps the
    saved rows it did not measure again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if partial_key is not None and path.exists():
        key = partial_key if callable(partial_key) else operator.itemgetter(partial_key)
        fresh = {key(row) for row in rows}
        rows = [r for r in saved_rows(path) if key(r) not in fresh] + rows
    meta |= {"target": target, "threads": threads}
    path.write_text(json.dumps({"meta": meta | machine() | run_record(), "rows": rows}, indent=2))
