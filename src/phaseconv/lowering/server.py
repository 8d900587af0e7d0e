"""What the lowering's fork server imports before it forks a worker (and nothing else imports): the
lowering's modules, quietly (torchao logs a warning per CUDA kernel a CPU machine cannot load), then
every object they made set aside from the garbage collector (gc.freeze), whose passes in a worker
would otherwise write into, and so copy, the pages it shares with the server."""

import gc
import logging

for name in ("torchao", "torch.utils._pytree"):
    logging.getLogger(name).setLevel(logging.ERROR)

import phaseconv.lowering.methods  # noqa: E402, F401

gc.freeze()
