"""`phaseconv serve`: a text-to-speech program behind pocket-tts's HTTP interface (tts/server.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from phaseconv.cli.app import app, note, quiet
from phaseconv.cli.options import Threads
from phaseconv.cli.speech import Pipeline, Tokenizer, Voice
from phaseconv.errors import PhaseconvError, parked_stderr


@app.command()
def serve(
    program: Annotated[
        Path, typer.Argument(help="a text-to-speech program from `phaseconv lower pocket-tts-tts:CONFIG`")
    ],
    host: Annotated[str, typer.Option(help="the address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="the port (0: a free one, said on start)")] = 8000,
    voice: Voice = None,
    tokenizer: Tokenizer = None,
    threads: Threads = 1,
    pipeline: Pipeline = False,
    queue: Annotated[int, typer.Option(min=1, help="requests that may wait while one is spoken; then 503")] = 4,
    max_text: Annotated[int, typer.Option(min=1, help="the longest text a request may send, in characters")] = 5000,
) -> None:
    """Serve PROGRAM as `pocket-tts serve` does (POST /tts streams WAV as it is generated), with a page
    at / that plays it as it comes.

    phaseconv serve tts.pte --voice alba     # then open http://127.0.0.1:8000
    """
    from phaseconv.runtimes.executorch import set_threads
    from phaseconv.tts.decoding import DecoderProcess
    from phaseconv.tts.loaded import SpeechProgram
    from phaseconv.tts.server import SpeechService, serve

    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise PhaseconvError("phaseconv serve runs on FastAPI and uvicorn: `pip install 'phaseconv[serve]'`") from None
    if tokenizer is not None and not tokenizer.is_file():
        raise PhaseconvError(f"no such tokenizer file: {tokenizer}")
    with parked_stderr(quiet()):  # the runtime's CPU probing on load
        set_threads(threads)
        speech = SpeechProgram(program, tokenizer=tokenizer)
        decoder = DecoderProcess(speech.path, threads) if pipeline else None
    service = SpeechService(speech, voice, queue, max_text, decoder)
    voices = ", ".join(speech.voices) or "none"

    decoding = ", decoder in a second process" if pipeline else ""

    def ready(url: str) -> None:
        note(f"serving {program} at {url} (voices: {voices}; {threads} thread(s){decoding})")

    try:
        serve(service, host, port, ready)
    finally:
        if decoder is not None:
            decoder.close()
