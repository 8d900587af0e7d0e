"""What the benchmark scripts share: one worker process per thread count (XNNPACK's thread pool is
sized once per process, before any program is loaded) and the results file."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import typer
from rich.console import Console


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


def save_results(path: Path, rows: list[dict], partial_key: str | None = None, **meta) -> None:
    """{"meta": meta + the machine, "rows": rows} as JSON at `path`. A partial run (`partial_key`: the
    field that names a row, e.g. its model) keeps the saved rows it did not measure again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if partial_key is not None and path.exists():
        fresh = {row[partial_key] for row in rows}
        rows = [r for r in json.loads(path.read_text())["rows"] if r[partial_key] not in fresh] + rows
    meta |= {"machine": platform.machine(), "processor": platform.processor()}
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
