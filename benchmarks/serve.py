"""How soon `phaseconv serve` sends a request's first audio, against the runner's own first audio.

    python benchmarks/serve.py [--config english_18m_2026-10] [--requests 20] [--program tts.pte]
                               [--json results/serve.json] [--screenshot docs/images/serve.png]

A Hugging Face cache laid out with the config's files (random weights under their real names, a
stand-in tokenizer and voice: phaseconv.tts.stand_ins), the program lowered by `phaseconv lower
pocket-tts-tts:CONFIG` (or the one given), then `phaseconv serve --threads 1` on a loopback port
and `requests` POST /tts one after another in the built-in voice. Per request: the time from sending
it to the first PCM bytes at the client (after the WAV header), and the server's report of the same
request (GET /stats): the wait in its queue, putting the voice in the cache (when it changed) and
the runner's own first audio (from the text to the first frame). The HTTP overhead is the first of
these minus the other three. Also: the server's real-time factor, and its resident memory after
the first request and after the last. With --screenshot, the page in headless Chromium after it
spoke, saved as a PNG.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import typer
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.report import serve as serve_table  # noqa: E402
from benchmarks.serving import Server, chrome, form  # noqa: E402
from benchmarks.workers import save_results  # noqa: E402

console = Console(width=200)
TEXT = "Hello there. This is the server speaking, one frame at a time, while you listen."


def lowered(config: str, cache: Path, folder: Path, target: str) -> Path:
    import subprocess

    from phaseconv.tts.stand_ins import environment

    path = folder / "tts.pte"
    command = [str(Path(sys.executable).with_name("phaseconv")), "lower", f"pocket-tts-tts:{config}", "-o", str(path)]
    command += ["--target", target]
    with console.status(f"{config}: phaseconv lower"):
        result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **environment(cache)})
    if result.returncode != 0:
        raise SystemExit(f"lowering {config} failed:\n{result.stderr[-3000:]}")
    return path


def timed_request(server) -> tuple[float, dict]:
    """One POST /tts: milliseconds to the first PCM bytes at the client, and the server's report."""
    body, content_type = form(text=TEXT, voice_url="alba")
    client = server.connection()
    start = time.perf_counter()
    client.request("POST", "/tts", body=body, headers={"Content-Type": content_type})
    response = client.getresponse()
    assert response.status == 200, response.read()
    response.read(44 + 2)  # the header, then the first sample
    first = (time.perf_counter() - start) * 1e3
    response.read()
    client.close()
    return first, server.get("/stats")["last"]


def screenshot(server, path: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chrome(webdriver)
    try:
        driver.get(f"http://{server.host}:{server.port}/")
        WebDriverWait(driver, 60).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#voice option"))
        driver.find_element(By.ID, "speak").click()
        WebDriverWait(driver, 120).until(lambda d: d.find_element(By.ID, "status").text != "speaking…")
        path.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(path))
    finally:
        driver.quit()


def main(
    config: str = typer.Option("english_18m_2026-10", help="a pocket-tts config"),
    requests: int = typer.Option(20, min=2, help="requests, one after another"),
    program: Path | None = typer.Option(None, help="a program lowered for CONFIG, instead of lowering one"),
    json_path: Path = typer.Option(Path("results/serve.json"), "--json", help="where to write the results"),
    screenshot_path: Path | None = typer.Option(None, "--screenshot", help="save the page, after it spoke, here"),
    target: str = typer.Option("host", help="the CPU target to lower for (phaseconv lower --target)"),
) -> None:
    from phaseconv.targets import resolve_target
    from phaseconv.tts.stand_ins import stand_in_cache

    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder) / "hf"
        stand_in_cache(cache, config)
        path = program or lowered(config, cache, Path(folder), target)
        file_mib = path.stat().st_size / 2**20
        server = Server(path, "--threads", 1)
        try:
            with console.status(f"{config}: {requests} requests"):
                timed_request(server)
                after_first = server.rss_kib()
                firsts = [timed_request(server) for _ in range(requests)]
                after_last = server.rss_kib()
            if screenshot_path is not None:
                screenshot(server, screenshot_path)
        finally:
            server.stop()
    client = [first for first, _ in firsts]
    reports = [report for _, report in firsts]
    overhead = [c - r["queue_ms"] - r["voice_ms"] - r["first_audio_ms"] for c, r in zip(client, reports)]
    row = {
        "config": config,
        "threads": 1,
        "requests": requests,
        "client_first_audio_ms": statistics.median(client),
        "client_first_audio_p95_ms": sorted(client)[int(0.95 * (len(client) - 1))],
        "runner_first_audio_ms": statistics.median(r["first_audio_ms"] for r in reports),
        "voice_ms": statistics.median(r["voice_ms"] for r in reports),
        "overhead_ms": statistics.median(overhead),
        "real_time_factor": statistics.median(r["real_time_factor"] for r in reports),
        "rss_after_first_mib": after_first / 1024,
        "rss_after_last_mib": after_last / 1024,
        "file_mib": file_mib,
    }
    save_results(json_path, [row], partial_key="config", text=TEXT, target=resolve_target(target), threads=1)
    print(serve_table(json.loads(json_path.read_text())))
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
