"""The README's example, run: each command as a user types it, in a fresh folder, and what it printed.

    python benchmarks/example.py [--json results/example.json]

The README shows this file's transcript (`python -m benchmarks.report` renders it), so the example's
output, figures included, is what the commands printed on the machine named, not a copy by hand.
pocket-tts must be installed (`pip install pocket-tts`). The hub is out of reach here: the commands
read a Hugging Face cache laid out with stand-ins under the config's real file names (random
weights, a stand-in tokenizer and voice: `phaseconv.tts.stand_ins.stand_in_cache`), offline.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.workers import save_results  # noqa: E402

CONFIG = "english_2m_2026-10"
COMMANDS = [
    f"phaseconv lower pocket-tts-tts:{CONFIG} -o tts.pte",
    'phaseconv tts tts.pte "Hello from a phone, one frame at a time." --voice alba -o hello.wav',
]


def run(command: str, folder: Path, environment: dict) -> str:
    """What `command` printed (stdout then stderr; both go to the terminal), run in `folder` and piped."""
    phaseconv = str(Path(sys.executable).with_name("phaseconv"))
    argv = [phaseconv, *shlex.split(command)[1:]]
    process = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env={**os.environ, **environment})
    if process.returncode != 0:
        raise SystemExit(f"{command} failed:\n{process.stderr[-3000:]}")
    return (process.stdout + process.stderr).rstrip("\n")


def main(json_path: Path = typer.Option(Path("results/example.json"), "--json")) -> None:
    from phaseconv.tts.stand_ins import environment, stand_in_cache

    rows = []
    with tempfile.TemporaryDirectory() as name, tempfile.TemporaryDirectory() as cache:
        folder = Path(name)
        stand_in_cache(Path(cache), CONFIG)
        for command in COMMANDS:
            print(f"$ {command}", flush=True)
            output = run(command, folder, environment(Path(cache)))
            print(output, flush=True)
            rows.append({"command": command, "output": output})
    save_results(json_path, rows, target="any", threads=1)


if __name__ == "__main__":
    typer.run(main)
