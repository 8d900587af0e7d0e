"""What the test workers make once per test run and share: programs that take minutes to lower."""

import os
import shutil
from pathlib import Path

from filelock import FileLock

# the config the command-line and server tests speak with (its program lowered once: lowered_from_hub)
SPOKEN = "english_2m_2026-10"


def made_once(tmp_path_factory, name: str, make) -> Path:
    """The folder `name`, filled by `make(folder)` once per test run: the test workers share it, the
    first to ask makes it under a lock and the others wait for it (pytest-xdist's recipe)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder, done = root / name, root / f"{name}.done"
    with FileLock(root / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            done.touch()
    return folder
