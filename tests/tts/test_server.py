"""`phaseconv serve` as a client of `pocket-tts serve` calls it, over loopback: the streamed WAV is the
audio `phaseconv tts` speaks; bad requests get 4xx and a JSON reason; a client that leaves mid-stream
frees the program; 20 clients at once are all answered, 200 or 503; and the page in a real browser."""

from __future__ import annotations

import http.client
import json
import re
import shutil
import threading
import time
import urllib.parse
import uuid
import wave
from pathlib import Path

import pytest

from benchmarks.serving import Server, chrome, form
from phaseconv.tts.stand_ins import environment, stand_in_cache
from tests.cli.test_cli import phaseconv

pytest.importorskip("pocket_tts")
pytest.importorskip("fastapi")

CONFIG = "english_2m_2026-10"
TEXT = "Hello there. This is a test of the server."
# Lowering the whole program takes minutes: these run with -m slow (in CI).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return root, stand_in_cache(root, CONFIG)


@pytest.fixture(scope="module")
def program(cache, tmp_path_factory):
    path = tmp_path_factory.mktemp("tts") / "tts.pte"
    result = phaseconv("lower", f"pocket-tts-tts:{CONFIG}", "-o", path, "--capacity", 320, env=environment(cache[0]))
    assert result.returncode == 0, result.stderr
    return path


@pytest.fixture(scope="module")
def server(program):
    running = Server(program)
    yield running
    running.stop()


def post(server: Server, body: bytes, content_type: str) -> http.client.HTTPResponse:
    client = server.connection()
    client.request("POST", "/tts", body=body, headers={"Content-Type": content_type})
    return client.getresponse()


def speech(server: Server, **fields) -> bytes:
    """POST /tts as pocket-tts's clients send it; the WAV's PCM."""
    response = post(server, *form(**fields))
    assert response.status == 200, response.read()
    assert response.getheader("Content-Type") == "audio/wav"
    data = response.read()
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt " and data[36:40] == b"data"
    return data[44:]


def spoken_by_tts(program: Path, cache, tmp_path: Path, *args) -> bytes:
    """`phaseconv tts` on the same program: the PCM it writes."""
    out = tmp_path / f"{uuid.uuid4().hex}.wav"
    result = phaseconv("tts", program, TEXT, *args, "-o", out, env=environment(cache[0]))
    assert result.returncode == 0, result.stderr
    with wave.open(str(out)) as audio:
        return audio.readframes(audio.getnframes())


def test_streams_what_phaseconv_tts_speaks_for_a_built_in_and_an_uploaded_voice(server, program, cache, tmp_path):
    assert server.get("/health") == {"status": "healthy"}
    assert server.get("/voices")["voices"] == ["alba"]
    assert speech(server, text=TEXT, voice_url="alba") == spoken_by_tts(program, cache, tmp_path, "--voice", "alba")
    wav = cache[1]["wav"]
    uploaded = speech(server, text=TEXT, voice_wav=("me.wav", wav.read_bytes()))
    assert uploaded == spoken_by_tts(program, cache, tmp_path, "--voice", wav)
    assert speech(server, text=TEXT) == speech(server, text=TEXT, voice_url="alba")  # the default voice


@pytest.mark.parametrize(
    "body, content_type, status, reason",
    [
        (*form(text="   "), 400, "text is empty"),
        (*form(voice_url="alba"), 400, "no text field"),
        (*form(text="Hi.", voice_url="nobody"), 400, "no voice 'nobody': the program's voices are alba"),
        (*form(text="Hi.", voice_url="alba", voice_wav=("a.wav", b"RIFF")), 400, "voice_url or voice_wav"),
        (*form(text="Hi.", voice_wav=("a.wav", b"not audio")), 400, "a.wav is not audio"),
        (*form(text="x" * 5001), 413, "text of 5001 characters: this server takes up to 5000"),
        (json.dumps({"text": "Hi."}).encode(), "application/json", 415, "takes form fields"),
        (b"garbage", "multipart/form-data; boundary=x", 400, "unreadable form"),
    ],
    ids=["empty", "no-text", "unknown-voice", "two-voices", "bad-audio", "too-long", "json", "broken-form"],
)
def test_bad_requests_get_4xx_and_a_json_reason(server, body, content_type, status, reason):
    response = post(server, body, content_type)
    assert response.status == status
    assert response.getheader("Content-Type") == "application/json"
    assert reason in json.loads(response.read())["detail"]


def test_a_client_that_leaves_mid_stream_frees_the_program(server):
    whole = speech(server, text=TEXT, voice_url="alba")
    stopped = server.get("/stats")["stopped"]
    response = post(server, *form(text=" ".join([TEXT] * 20), voice_url="alba"))
    assert response.status == 200
    response.read(44 + 3840)  # the header and the first frame or two
    response.close()
    deadline = time.monotonic() + 60
    while server.get("/stats")["stopped"] == stopped:
        assert time.monotonic() < deadline, "the server spoke on for a client that had left"
        time.sleep(0.05)
    assert speech(server, text=TEXT, voice_url="alba") == whole  # nothing left of the stopped utterance


def test_twenty_clients_at_once_all_answered_and_memory_flat(program):
    server = Server(program, "--queue", 4)
    try:
        speech(server, text=TEXT)
        after_first = server.rss_kib()
        statuses, retry_after = [], []

        def client() -> None:
            response = post(server, *form(text=TEXT))
            response.read()
            statuses.append(response.status)
            if response.status == 503:
                retry_after.append(response.getheader("Retry-After"))

        clients = [threading.Thread(target=client) for _ in range(20)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(timeout=300)
        assert len(statuses) == 20 and set(statuses) <= {200, 503}, statuses
        assert statuses.count(200) >= 5  # one spoken and four queued, at least
        assert all(value and value.isdigit() for value in retry_after)
        assert server.process.poll() is None
        speech(server, text=TEXT)
        assert server.rss_kib() <= after_first * 1.05
    finally:
        server.stop()


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("no chromium/chromedriver: ./dev test installs them (apt-get install chromium chromium-driver)")
    driver = chrome(webdriver)
    yield driver
    driver.quit()


def test_the_page_speaks_in_a_real_browser(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"http://{server.host}:{server.port}/")
    wait = WebDriverWait(browser, 60)
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#voice option"))
    assert [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#voice option")] == ["alba"]
    text = browser.find_element(By.ID, "text")
    text.clear()
    text.send_keys(TEXT)
    browser.find_element(By.ID, "speak").click()
    wait.until(lambda b: b.find_element(By.ID, "status").text != "speaking…")
    assert browser.find_element(By.ID, "status").text == "done"
    assert int(browser.find_element(By.ID, "bytes").text) > 44 + 2 * 1920
    assert re.fullmatch(r"\d+\.\d ms", browser.find_element(By.ID, "first-audio").text)
    assert float(browser.find_element(By.ID, "rtf").text) > 0


def test_a_form_urlencoded_request_speaks_too(server):
    body = urllib.parse.urlencode({"text": TEXT, "voice_url": "alba"}).encode()
    response = post(server, body, "application/x-www-form-urlencoded")
    assert response.status == 200
    assert len(response.read()) > 44
