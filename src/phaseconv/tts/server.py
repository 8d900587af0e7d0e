"""`phaseconv serve`: a text-to-speech program behind pocket-tts's HTTP interface, and a page that
plays the speech as it comes.

pocket-tts's routes (`pocket-tts serve`): GET / (the page), GET /health, and POST /tts with the form
fields `text` and either `voice_url` (a built-in voice's name, or an http(s):// or hf:// file fetched
as pocket-tts fetches it) or `voice_wav` (an uploaded recording or .safetensors voice state),
answered with 16-bit mono WAV streamed as it is generated. Beside them: OpenAI's POST
/v1/audio/speech (JSON: input, voice, response_format wav or pcm), GET /voices (the program's voices
and settings) and GET /stats (requests answered, refused, stopped and failed; the last one's figures).

A request the program cannot speak (its voice or its text) is refused before any byte of audio; a
failure after the audio began ends the response unfinished, never as a whole WAV.

The program's KV cache and decoder state are one: a worker thread speaks one request at a time, in
the order they came, with at most `queue` more waiting; past that a request gets 503 and a
Retry-After. A client that goes away stops its request at the next frame, and one that waits in the
queue leaves it.
"""

from __future__ import annotations

import asyncio
import math
import queue
import statistics
import struct
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from phaseconv.errors import PhaseconvError
from phaseconv.stream import to_pcm16
from phaseconv.tts.loaded import SpeechProgram
from phaseconv.tts.tts_model import TTSModel, UnknownVoice, VoiceState
from phaseconv.tts.voices import AudioVoice

PAGE = Path(__file__).with_name("page.html")
FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")
STREAMED_FRAMES = 1_000_000_000  # a streamed WAV's header cannot know its length: pocket-tts's placeholder


class Refused(Exception):
    """A request answered with a 4xx or 503 and a JSON reason."""

    def __init__(self, status: int, reason: str, headers: dict | None = None):
        super().__init__(reason)
        self.status, self.reason, self.headers = status, reason, headers or {}


class Stopped(Exception):
    """The client went away: the utterance ends at this frame."""


class Failed(Exception):
    """The program failed after the response began: the response ends unfinished, so that the client
    can tell it from a whole WAV."""


def wav_header(sample_rate: int) -> bytes:
    """The 44-byte header of a mono 16-bit WAV whose length is not known yet."""
    data = STREAMED_FRAMES * 2
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", data)
    )


@dataclass
class Utterance:
    """One request on its way: what to say, in which voice, and where its audio goes (an asyncio
    queue of the request's event loop, fed from the worker thread)."""

    text: str
    voice: object
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    stopped: threading.Event = field(default_factory=threading.Event)
    received: float = field(default_factory=time.perf_counter)

    def send(self, kind: str, value=None) -> None:
        self.loop.call_soon_threadsafe(self.out.put_nowait, (kind, value))


@dataclass
class Stats:
    answered: int = 0
    refused: int = 0  # 503: the queue was full
    stopped: int = 0  # the client went away before the end
    failed: int = 0  # the program failed: 500 before the audio, an unfinished response after
    last: dict | None = None  # the last utterance's SpeechReport, with the wait in the queue
    seconds: list[float] = field(default_factory=list)  # the last utterances' durations, for Retry-After


class SpeechService:
    """The program as a TTSModel, and the worker thread that speaks the queued utterances. A voice is
    read when its request comes (a name, an upload, a URL) and made a voice state in the worker; the
    default voice's state is made once, here."""

    def __init__(self, program: SpeechProgram, voice: str | None, queue_size: int, max_text: int, decoder=None):
        self.program, self.settings = program, program.settings
        self.model = TTSModel(program)
        self.default_name = voice or self.settings.default_voice
        self.default_voice = self._state(self._read(self.default_name)) if self.default_name else None
        self.max_text, self.decoder = max_text, decoder
        self.queue: queue.Queue[Utterance] = queue.Queue(maxsize=queue_size)
        self.stats = Stats()
        self.worker = threading.Thread(target=self._speak_queued, name="phaseconv-speaker", daemon=True)
        self.worker.start()

    def _read(self, voice: str) -> str | VoiceState | AudioVoice:
        """A voice read without the program (TTSModel.find_voice), said as this server names voices."""
        try:
            return self.model.find_voice(voice)
        except UnknownVoice as unknown:
            raise PhaseconvError(
                f"no voice {unknown.name!r}: the program's voices are {unknown.carried} (GET /voices)"
            ) from None

    def _state(self, voice) -> VoiceState | None:
        """The voice state of what _read gave, in the worker (an audio voice is encoded by the program)."""
        return None if voice is None else self.model.state_for(voice)

    def voice_of(self, voice_url: str | None, upload: bytes | None, filename: str | None):
        """The voice a request names, as pocket-tts's /tts takes it; none: the server's default."""
        if voice_url is not None and upload is not None:
            raise Refused(400, "give voice_url or voice_wav, not both")
        try:
            if upload is not None:
                name = Path(filename or "voice.wav").name
                with tempfile.TemporaryDirectory() as folder:  # read whole before the folder goes
                    path = Path(folder) / f"voice{Path(name).suffix or '.wav'}"
                    path.write_bytes(upload)
                    try:
                        return self._read(str(path))
                    except PhaseconvError as error:  # said of the upload, not of a temporary file
                        raise Refused(400, str(error).replace(str(path), name)) from None
            if voice_url is None:
                return self.default_voice
            return self._read(voice_url)
        except PhaseconvError as error:
            raise Refused(400, str(error)) from None

    def check_text(self, text) -> str:
        if not isinstance(text, str):
            raise Refused(400, "the form has no text field")
        if not text.strip():
            raise Refused(400, "text is empty")
        if len(text) > self.max_text:
            raise Refused(413, f"text of {len(text)} characters: this server takes up to {self.max_text}")
        return text

    def submit(self, text: str, voice, loop: asyncio.AbstractEventLoop) -> Utterance:
        utterance = Utterance(text, voice, loop)
        try:
            self.queue.put_nowait(utterance)
        except queue.Full:
            self.stats.refused += 1
            raise Refused(503, "busy: every place in the queue is taken", {"Retry-After": self.retry_after()}) from None
        return utterance

    def retry_after(self) -> str:
        """Whole seconds until a place in the queue is likely free: the median utterance so far."""
        typical = statistics.median(self.stats.seconds) if self.stats.seconds else 1.0
        return str(max(1, math.ceil(typical)))

    def _speak_queued(self) -> None:
        while True:
            utterance = self.queue.get()
            if utterance.stopped.is_set():
                continue
            try:
                self._speak(utterance)
            except Exception as error:  # the program's own failure: said, and the worker lives on
                traceback.print_exc()
                self.stats.failed += 1
                self._drain()
                utterance.send("failed", f"{type(error).__name__}: {error}")

    def _drain(self) -> None:
        """Frames still on their way in the decoder's process belong to nobody."""
        if self.decoder is not None:
            self.decoder.start(lambda *frame: None)
            self.decoder.finish()

    def _speak(self, utterance: Utterance) -> None:
        waited = (time.perf_counter() - utterance.received) * 1e3
        self.model.speaker.generator.manual_seed(0)  # a request's audio is its own, not its place in a sequence
        try:  # the voice and the text, before any byte of audio: a request the program cannot speak is a 400
            run = self.model.speak(self._state(utterance.voice) or self.model.empty_state(), utterance.text)
        except PhaseconvError as error:
            return utterance.send("refused", (400, str(error)))
        utterance.send("started")

        def on_frame(pcm) -> None:
            if utterance.stopped.is_set():
                raise Stopped
            utterance.send("audio", to_pcm16(pcm))

        try:
            report = run(on_frame, self.decoder)
            self.stats.answered += 1
        except Stopped:
            self.stats.stopped += 1
            self._drain()
            return utterance.send("end")
        utterance.send("end")
        self.stats.seconds = [*self.stats.seconds[-19:], report.total_ms / 1e3]
        self.stats.last = report.to_dict() | {"queue_ms": waited}


class SpeechResponse(StreamingResponse):
    """The audio as it is generated, a WAV (or raw 16-bit PCM); however the response ends (the last
    frame, or the client gone), the utterance stops."""

    def __init__(self, utterance: Utterance, sample_rate: int, wav: bool = True):
        super().__init__(self._body(utterance, sample_rate, wav), media_type="audio/wav" if wav else "audio/pcm")
        if wav:
            self.headers["Content-Disposition"] = "attachment; filename=generated_speech.wav"
        self.utterance = utterance

    @staticmethod
    async def _body(utterance: Utterance, sample_rate: int, wav: bool):
        if wav:
            yield wav_header(sample_rate)
        while True:
            kind, value = await utterance.out.get()
            if kind == "failed":
                raise Failed(value)
            if kind != "audio":
                return
            yield value

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.utterance.stopped.set()


def create_app(service: SpeechService) -> FastAPI:
    """The FastAPI application over `service`."""
    app = FastAPI(title="phaseconv serve", description="pocket-tts's text-to-speech API on an ExecuTorch program")
    settings = service.settings

    @app.exception_handler(Refused)
    async def refused(request: Request, error: Refused) -> JSONResponse:
        return JSONResponse({"detail": error.reason}, status_code=error.status, headers=error.headers)

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return PAGE.read_text(encoding="utf-8")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "healthy"}

    @app.get("/voices")
    async def voices() -> dict:
        return {
            "config": settings.config,
            "voices": sorted(settings.voices),
            "default": service.default_name,
            "voice_cloning": settings.voice_cloning,
            "sample_rate": settings.sample_rate,
            "max_text": service.max_text,
        }

    @app.get("/stats")
    async def stats() -> dict:
        s = service.stats
        return {"answered": s.answered, "refused": s.refused, "stopped": s.stopped, "failed": s.failed, "last": s.last}

    @app.post("/tts")
    async def text_to_speech(request: Request):
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        if content_type not in FORM_TYPES:
            raise Refused(415, f"POST /tts takes form fields ({' or '.join(FORM_TYPES)}): text, voice_url, voice_wav")
        try:
            form = await request.form()
        except Exception as error:
            raise Refused(400, f"unreadable form: {error}") from None
        text, voice_url, upload = form.get("text"), form.get("voice_url"), form.get("voice_wav")
        text = service.check_text(text)
        if voice_url is not None and not isinstance(voice_url, str):
            raise Refused(400, "voice_url is a name or a URL, not a file")
        if upload is not None and isinstance(upload, str):
            raise Refused(400, "voice_wav is a file upload")
        data = None if upload is None else await upload.read()
        voice = await run_in_threadpool(service.voice_of, voice_url, data, getattr(upload, "filename", None))
        return await spoken(text, voice, wav=True)

    @app.post("/v1/audio/speech")
    async def openai_speech(request: Request):
        """OpenAI's speech route: JSON with `model` (any), `input`, `voice` (GET /voices' names, a URL;
        none: the default) and `response_format` (wav, or pcm: 16-bit mono at the sample rate)."""
        try:
            body = await request.json()
        except Exception:
            raise Refused(400, "POST /v1/audio/speech takes JSON: model, input, voice, response_format") from None
        if not isinstance(body, dict):
            raise Refused(400, "POST /v1/audio/speech takes a JSON object")
        text = service.check_text(body.get("input"))
        response_format = body.get("response_format", "wav")
        if response_format not in ("wav", "pcm"):
            raise Refused(400, f"response_format {response_format!r}: this server gives wav or pcm")
        voice_name = body.get("voice")
        if voice_name is not None and not isinstance(voice_name, str):
            raise Refused(400, "voice is a name (GET /voices) or a URL")
        voice = await run_in_threadpool(service.voice_of, voice_name, None, None)
        return await spoken(text, voice, wav=response_format == "wav")

    async def spoken(text: str, voice, wav: bool):
        """The utterance queued, and its audio once the program has taken the voice and the text."""
        utterance = service.submit(text, voice, asyncio.get_running_loop())
        try:
            kind, value = await utterance.out.get()
        except asyncio.CancelledError:  # the client left while it waited
            utterance.stopped.set()
            raise
        if kind == "refused":
            raise Refused(*value)
        if kind == "failed":
            return JSONResponse({"detail": f"the program failed: {value}"}, status_code=500)
        return SpeechResponse(utterance, settings.sample_rate, wav)

    return app


def serve(service: SpeechService, host: str, port: int, on_ready) -> None:
    """Serve until interrupted; `on_ready(url)` once the socket listens (port 0: a free one)."""
    import uvicorn

    config = uvicorn.Config(create_app(service), host=host, port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    original = server.startup

    async def startup(sockets=None) -> None:
        await original(sockets)
        if server.started:
            bound = server.servers[0].sockets[0].getsockname()[1]
            on_ready(f"http://{host}:{bound}")

    server.startup = startup
    server.run()
