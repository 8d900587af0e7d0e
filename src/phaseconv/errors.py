"""Errors a user can act on: the command prints their message on one line and exits with status 2."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile


class PhaseconvError(Exception):
    """Bad input or an unusable model, named in words the user understands."""


# Library failures whose cause is known, by a phrase of their message: what to say instead.
DATA_DEPENDENT = (
    "a module keeps its conv settings (stride, padding) in tensors, so every length after it is "
    "data-dependent; export it after phaseconv.prepare(model)"
)
KNOWN_CAUSES = {
    "GuardOnDataDependentSymNode": DATA_DEPENDENT,
    "data-dependent": DATA_DEPENDENT,
    "Invalid partition, found dependency cycles": (
        "ExecuTorch cannot split this program around an operator XNNPACK does not run (a dependency "
        "cycle between partitions); `phaseconv explain` shows what is left alone"
    ),
}


def known_cause(error: Exception, prepared: bool = False) -> str:
    """The error in one line, with its known cause and fix where there is one."""
    message = f"{type(error).__name__}: {error}"
    first_line = next((line.strip() for line in message.splitlines() if line.strip()), message)
    for phrase, cause in KNOWN_CAUSES.items():
        if phrase in message:
            if cause is DATA_DEPENDENT and prepared:
                cause = (
                    "a length depends on tensor values even after phaseconv.prepare: the module computes "
                    "conv settings or padding from tensors it keeps; make them Python ints"
                )
            elif cause is DATA_DEPENDENT:
                cause += " (the command does that unless --no-prepare is given)"
            return f"{cause} [{first_line}]"
    return first_line


@contextlib.contextmanager
def parked_stderr(enabled: bool = True):
    """The process's stderr (file descriptor 2: C++ libraries too) and Python's `sys.stderr` (which
    need not be descriptor 2: a notebook's, a test's) go to a temporary file meanwhile.

    For library chatter the user did not cause (torch.export's diagnosis before it raises, the
    ExecuTorch runtime's CPU probing on load); what a failure raises is still what the user is told.
    """
    if not enabled:
        yield
        return
    stream = sys.stderr
    stream.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile("w+") as parked:
        os.dup2(parked.fileno(), 2)
        try:
            with contextlib.redirect_stderr(parked):
                yield
        finally:
            stream.flush()  # what holders of the stream (log handlers) wrote meanwhile, while 2 is parked
            os.dup2(saved, 2)
            os.close(saved)
