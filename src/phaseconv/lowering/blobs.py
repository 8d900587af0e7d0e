"""Where a lowered method's weights wait for the program file.

XNNPACK's preprocess serializes every constant its delegate reads into the delegate's named data
(bytes per weight); a program's methods share most of them (a language model's ladder of methods
reads one set of weights), and ExecuTorch's serializer keeps one copy of each in the file. Until
then each method would hold its own. Here each distinct blob is written once to a folder, under its
SHA-256, and every delegate refers to that file (ExecuTorch's FileBackedData, which its serializer
copies into the program file as it writes): the methods of a program hold their weights once, on disk.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from unittest import mock

from executorch.backends.xnnpack import xnnpack_preprocess
from executorch.exir._serialize._cord import FileBackedData
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir.lowered_backend_module import LoweredBackendModule
from torch.export import ExportedProgram


class BlobFolder:
    """Blobs by their SHA-256 in `folder`, each written once, whichever process writes it first."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def put(self, data: bytes) -> FileBackedData:
        digest = hashlib.sha256(data).digest()
        path = self.folder / digest.hex()
        if not path.exists():
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
            partial.write_bytes(data)
            os.replace(partial, path)  # another process writing the same blob writes the same bytes
        return FileBackedData(str(path), sha256=digest)


def delegates(program: ExportedProgram) -> dict[str, LoweredBackendModule]:
    modules = program.graph_module.named_modules()
    return {name: module for name, module in modules if isinstance(module, LoweredBackendModule)}


def spill(program: ExportedProgram, blobs: BlobFolder) -> None:
    """Moves the named data of `program`'s delegates into `blobs`, in place."""
    for module in delegates(program).values():
        output = module.named_data_store_output
        if output is not None:
            output.buffers = [blobs.put(data) if isinstance(data, bytes) else data for data in output.buffers]


@contextlib.contextmanager
def spilled_as_serialized(blobs: BlobFolder):
    """While lowering: XNNPACK's preprocess puts each constant it serializes into `blobs` at once, so
    a delegate never holds its weights' bytes (ExecuTorch 1.5.1 takes no store of one's own)."""

    class SpillingStore(NamedDataStore):
        def add_named_data(self, key, data, alignment=1, external_tag=None, tensor_layout=None):
            data = blobs.put(data) if isinstance(data, bytes) else data
            super().add_named_data(key, data, alignment, external_tag, tensor_layout)

    with mock.patch.object(xnnpack_preprocess, "NamedDataStore", SpillingStore):
        yield
