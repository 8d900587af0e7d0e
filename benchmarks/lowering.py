"""How long `phaseconv lower pocket-tts-tts:CONFIG` takes, and the memory it holds, as a user runs it.

    python benchmarks/lowering.py [--configs english_2m_2026-10,english] [--workers 2] [--json results/lowering.json]

Per config: a Hugging Face cache laid out with the config's files (random weights under their real
names, a stand-in tokenizer and voice: phaseconv.tts.stand_ins), then the command with no other
flag (or --workers), offline, in a process of its own. Reported: the wall time; its profile from the
command's --json (the export of every method, each method's rewrite and lowering in its worker
process, the assembly into one program); the peak memory of the command's own process and of all
its processes together (its fork server and workers), as proportional set size (a page two
processes share counts half in each, so the sum is what the command holds), sampled from /proc four
times a second. Each config's row is saved as it ends: a stopped run keeps what it measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import typer
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import lowering as lowering_table  # noqa: E402
from benchmarks.workers import save_results  # noqa: E402
from phaseconv.lowering.profile import pss_mib  # noqa: E402

console = Console(width=200)
DEFAULT_CONFIGS = "english_2m_2026-10,english_18m_2026-10,english,english_2026-04_24l"


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        found.append(stack.pop())
        stack.extend(children.get(found[-1], []))
    return found


def measured(command: list[str], environment: dict) -> tuple[subprocess.CompletedProcess, float, dict]:
    """The command's result, its wall seconds, and its peak proportional set size: its own process,
    all its processes summed."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    peaks = {"process_mib": 0.0, "processes_mib": 0.0, "processes": 0}

    def sample() -> None:
        while process.poll() is None:
            sizes = [pss_mib(pid) for pid in descendants(process.pid)]
            peaks["process_mib"] = max(peaks["process_mib"], sizes[0])
            peaks["processes_mib"] = max(peaks["processes_mib"], sum(sizes))
            peaks["processes"] = max(peaks["processes"], sum(size > 0 for size in sizes))
            time.sleep(0.25)

    sampler = threading.Thread(target=sample)
    sampler.start()
    stdout, stderr = process.communicate()
    seconds = time.perf_counter() - start
    sampler.join()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), seconds, peaks


def lower_row(config: str, workers: int | None) -> dict:
    from phaseconv.tts.stand_ins import environment, stand_in_cache

    phaseconv = str(Path(sys.executable).with_name("phaseconv"))
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        with console.status(f"{config}: a cache of stand-in files"):
            stand_in_cache(Path(cache), config)
        command = [phaseconv, "lower", f"pocket-tts-tts:{config}", "-o", f"{out}/tts.pte", "--json"]
        command += ["--workers", str(workers)] if workers else []
        with console.status(f"{config}: phaseconv lower"):
            result, seconds, peaks = measured(command, {**os.environ, **environment(Path(cache))})
        if result.returncode != 0:
            raise SystemExit(f"lowering {config} failed:\n{result.stderr[-3000:]}")
        report = json.loads(result.stdout)
        size = Path(f"{out}/tts.pte").stat().st_size
    profile, stages = report["lowering_s"], report["stages"]
    methods = {name: value for name, value in profile.items() if name not in ("export", "assemble")}
    workers_peak = max((s["peak_mib"] for s in stages if s["process"] == "worker"), default=None)
    return {
        "config": config,
        "workers": workers,
        "seconds": seconds,
        "export_s": profile["export"],
        "methods_s": methods,
        "assemble_s": profile["assemble"],
        "capacity": report["settings"]["capacity"],
        "file_mib": size / 2**20,
        "memory": report["memory"],  # the command's own estimate, and the weights it is made from
        "worker_peak_rss_mib": workers_peak,
        "main_peak_rss_mib": max(s["peak_mib"] for s in stages if s["process"] == "main"),
        **peaks,
    }


def main(
    configs: str = typer.Option(DEFAULT_CONFIGS, help="pocket-tts configs, comma-separated"),
    workers: int | None = typer.Option(None, help="phaseconv lower --workers (default: its own, one per core)"),
    json_path: Path = typer.Option(Path("results/lowering.json"), "--json", help="where to write the results"),
) -> None:
    for config in configs.split(","):
        row = lower_row(config, workers)
        console.print(f"{config}: {row['seconds']:.0f} s, {row['processes_mib']:.0f} MiB", highlight=False)
        save_results(json_path, [row], partial_key=lambda r: (r["config"], r.get("workers")), target="any", threads=1)
    print(lowering_table(json.loads(json_path.read_text())))
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
