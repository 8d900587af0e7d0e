"""The application: its options, its consoles, and how a failure reaches the user (one line, status 2)."""

from __future__ import annotations

import contextlib
import json
import sys

import typer
from rich.console import Console

from phaseconv.errors import PhaseconvError, known_cause

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False)
console = Console()
state = {"debug": False}


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="show tracebacks and library warnings")) -> None:
    """phaseconv: rewrite transposed convolutions into fast, exact polyphase form for ExecuTorch."""
    state["debug"] = debug
    if not debug:  # torch's and ExecuTorch's deprecation notes are not the user's business
        import logging
        import warnings

        warnings.simplefilter("ignore")
        for name in ("torch", "torchao", "executorch", "pocket_tts"):  # pocket-tts: "no weights_path"
            logging.getLogger(name).setLevel(logging.ERROR)


def quiet() -> bool:
    """Library chatter (the runtime's CPU probing, torch.export's diagnosis) is parked unless --debug."""
    return not state["debug"]


def note(text: str) -> None:
    """One line on stderr (stdout carries the result or the audio)."""
    Console(stderr=True).print(text, highlight=False, soft_wrap=True)


def print_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


@contextlib.contextmanager
def known_failures(model: str, prepared: bool):
    """Rewriting or lowering failures with a known cause are told with it and its fix."""
    try:
        yield
    except PhaseconvError:
        raise
    except Exception as error:
        if state["debug"]:
            raise
        raise PhaseconvError(f"{model}: {known_cause(error, prepared)}") from None


def main() -> None:
    try:
        app(standalone_mode=False)
    except PhaseconvError as error:
        if state["debug"]:
            raise
        print(f"phaseconv: error: {one_line(str(error))}", file=sys.stderr)
        sys.exit(2)
    except Exception as error:  # typer's own usage errors, and anything unexpected
        import click

        if isinstance(error, click.exceptions.ClickException):
            error.show()
            sys.exit(2)
        if isinstance(error, click.exceptions.Abort):
            sys.exit(130)
        if state["debug"]:
            raise
        message = one_line(f"{type(error).__name__}: {error}")
        print(f"phaseconv: error: {message} (run with --debug for the traceback)", file=sys.stderr)
        sys.exit(2)


def one_line(message: str) -> str:
    """The first line of a message: library errors (torch.export's) run to dozens of lines."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[0] if lines else "unknown error"
