"""The `phaseconv` command. Each command parses its options, calls one library function and prints
what it returns: convert.py (explain, lower, inspect, onnx, litert), speech.py (tts, stream and the
text-to-speech program's lowering), serve.py (the program over HTTP), tools.py (bench, demo,
models); app.py is the application and how its errors reach the user, options.py the options the
commands share, output.py the printing."""

from phaseconv.cli import convert, serve, speech, tools  # noqa: F401  (each registers its commands on the app)
from phaseconv.cli.app import app, main

__all__ = ["app", "main"]
