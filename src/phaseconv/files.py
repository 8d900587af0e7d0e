"""Writing output files: the folder checked before the work, the file written whole or not at all."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from phaseconv.errors import PhaseconvError


def require_folder(path: Path) -> None:
    """The folder a file will be written to exists (checked before any expensive work)."""
    if not path.parent.is_dir():
        raise PhaseconvError(f"cannot write {path}: the folder {path.parent} does not exist")


def write_atomically(path: Path, content: bytes) -> None:
    """`content` to a temporary file beside `path`, renamed to it: a failure leaves no partial file."""
    require_folder(path)
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise PhaseconvError(f"cannot write {path}: {error.strerror}") from None
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(content)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes 0600; give what open() would
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise PhaseconvError(f"cannot write {path}: {error.strerror}") from None


def place_atomically(path: Path, source: Path) -> None:
    """A copy of the file `source` at `path` (a hard link where both lie on one file system: no bytes
    move), through a temporary name beside `path`: a failure leaves no partial file."""
    require_folder(path)
    temporary = path.parent / f".{path.name}.{os.getpid()}.tmp"
    try:
        try:
            os.link(source, temporary)
        except OSError:  # another file system, or one without hard links
            shutil.copyfile(source, temporary)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise PhaseconvError(f"cannot write {path}: {error.strerror}") from None
