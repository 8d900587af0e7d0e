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

import numpy as np
import pytest

from benchmarks.serving import Server, chrome, form
from phaseconv.tts.stand_ins import environment
from tests.cli.test_cli import phaseconv

pytest.importorskip("pocket_tts")
pytest.importorskip("fastapi")

TEXT = "Hello there. This is a test of the server."
# Lowering the whole program takes minutes: these run with -m slow (in CI).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(stand_in_hub):
    return stand_in_hub


@pytest.fixture(scope="module")
def program(lowered_from_hub):
    """The program test_tts.py checks (`phaseconv lower`, no other flag), lowered once for both."""
    return lowered_from_hub[1]


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


class LocalServer:
    """A SpeechService served from a thread of this process, so that a test can reach its program."""

    def __init__(self, program: Path, voice: str | None = None, decoder=None):
        from phaseconv.tts.loaded import SpeechProgram
        from phaseconv.tts.server import SpeechService, serve

        self.service = SpeechService(SpeechProgram(program), voice, 4, 5000, decoder)
        ready, found = threading.Event(), []
        threading.Thread(
            target=serve, args=(self.service, "127.0.0.1", 0, lambda url: (found.append(url), ready.set())), daemon=True
        ).start()
        assert ready.wait(60), "the server did not start"
        parsed = urllib.parse.urlparse(found[0])
        self.host, self.port, self.url = parsed.hostname, parsed.port, found[0]

    connection, get = Server.connection, Server.get


def fail_after(program, frames: int):
    """The program's decoder fails at its `frames`-th call from now (decode_frames: every call the
    runner's decoders make, of one frame or several)."""
    calls, decode = [0], program.decode_frames

    def failing(latents):
        calls[0] += 1
        if calls[0] >= frames:
            raise RuntimeError("the decoder broke")
        return decode(latents)

    program.decode_frames = failing
    return lambda: program.__dict__.pop("decode_frames")


@pytest.fixture(scope="module")
def local(program, cache):
    return LocalServer(program, voice=str(cache[1]["wav"]))


def test_a_text_the_program_cannot_speak_is_a_4xx_before_any_audio(local):
    response = post(local, *form(text="a" * 3000))
    assert response.status == 400 and b"no room" in response.read()


def test_a_failure_after_the_audio_began_ends_the_response_unfinished_and_is_counted(local):
    failed = local.get("/stats")["failed"]
    restore = fail_after(local.service.program, 3)
    try:
        response = post(local, *form(text=TEXT))
        assert response.status == 200
        with pytest.raises(http.client.IncompleteRead):
            response.read()
    finally:
        restore()
    assert local.get("/stats")["failed"] == failed + 1
    assert len(speech(local, text=TEXT)) > 0  # and the next request speaks


def test_an_uploaded_voice_state_speaks(local, cache):
    uploaded = speech(local, text=TEXT, voice_wav=("voice.safetensors", cache[1]["alba"].read_bytes()))
    assert uploaded == speech(local, text=TEXT, voice_url="alba")


def test_the_default_voice_is_made_once(local, monkeypatch):
    made = []
    monkeypatch.setattr(local.service.model.speaker, "set_voice", lambda *args: made.append(args))
    speech(local, text=TEXT)
    speech(local, text=TEXT)
    assert made == []


def test_nothing_of_a_failed_request_reaches_the_next(program):
    """With the decoder in a second process, the frames it still held when the request failed."""
    from phaseconv.tts.decoding import DecoderProcess

    decoder = DecoderProcess(program, 1)
    try:
        served = LocalServer(program, voice="alba", decoder=decoder)
        expected = speech(served, text=TEXT)
        generate, calls = served.service.program.generate, [0]

        def failing(*inputs):
            calls[0] += 1
            if calls[0] == 6:
                raise RuntimeError("the language model broke")
            return generate(*inputs)

        served.service.program.generate = failing
        response = post(served, *form(text=TEXT))
        with pytest.raises(http.client.IncompleteRead):
            response.read()
        served.service.program.__dict__.pop("generate")
        heard, said = (np.frombuffer(pcm, dtype="<i2").astype(int) for pcm in (speech(served, text=TEXT), expected))
        # within float rounding: which frames the decoder takes at once depends on timing
        assert heard.shape == said.shape and np.abs(heard - said).max() <= 1
    finally:
        decoder.close()


def test_openai_clients_speech_call_gets_what_post_tts_gives(local):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{local.url}/v1", api_key="not-needed")
    expected = speech(local, text=TEXT, voice_url="alba")
    wav = client.audio.speech.create(model="pocket-tts", voice="alba", input=TEXT, response_format="wav")
    assert wav.content[44:] == expected
    with client.audio.speech.with_streaming_response.create(
        model="pocket-tts", voice="alba", input=TEXT, response_format="pcm"
    ) as streamed:
        assert b"".join(streamed.iter_bytes()) == expected
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(model="pocket-tts", voice="no-such-voice", input=TEXT)
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(model="pocket-tts", voice="alba", input=TEXT, response_format="mp3")
