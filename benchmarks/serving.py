"""A `phaseconv serve` process and its clients, for the server's benchmark and tests: the process on a
loopback port, pocket-tts's multipart form, and Debian's headless Chromium."""

from __future__ import annotations

import http.client
import json
import queue
import re
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from benchmarks.workers import resident_kib

ROOT = Path(__file__).resolve().parents[1]
PHASECONV = str(Path(sys.executable).with_name("phaseconv"))


class Server:
    """`phaseconv serve PROGRAM --port 0 ...` in its own process, until stopped."""

    def __init__(self, program: Path, *args):
        command = [PHASECONV, "serve", str(program), "--port", "0", *map(str, args)]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in self.process.stderr], daemon=True).start()
        said = []
        while not (found := re.search(r"at http://([\d.]+):(\d+)", said[-1] if said else "")):
            try:
                said.append(lines.get(timeout=120))
            except queue.Empty:
                raise AssertionError(f"the server did not start: {''.join(said)}") from None
        self.host, self.port = found.group(1), int(found.group(2))

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=120)

    def get(self, path: str) -> dict:
        client = self.connection()
        client.request("GET", path)
        return json.loads(client.getresponse().read())

    def rss_kib(self) -> int | None:
        return resident_kib(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def form(**fields) -> tuple[bytes, str]:
    """Fields as multipart/form-data, a (filename, bytes) value as an upload: (body, content type)."""
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        if isinstance(value, tuple):
            head = f'Content-Disposition: form-data; name="{name}"; filename="{value[0]}"\r\n'
            parts.append(f"--{boundary}\r\n{head}Content-Type: audio/wav\r\n\r\n".encode() + value[1] + b"\r\n")
        else:
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def chrome(webdriver):
    """Debian's headless Chromium through its chromedriver (./dev installs both)."""
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--autoplay-policy=no-user-gesture-required", "--mute-audio"):
        options.add_argument(flag)
    options.add_argument("--window-size=900,760")
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
