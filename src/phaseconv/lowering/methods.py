"""A program's methods rewritten and lowered one at a time, here or side by side in worker processes.

Each method is lowered on its own (lowering.xnnpack.assemble joins them, to the same bytes as one
lowering of them all) and its delegates' weights are spilled to a blob folder as soon as it is
lowered (blobs.py), so that the methods of a program hold their shared weights once. Workers are
forked from a fork server (a clean process started for the purpose, with the lowering's modules
imported), never from this process, whose threads and locks (JAX's, OpenMP's) a fork would copy in
mid-use; each lowers one method and exits, so what a method's lowering held is handed back to the
system before the next. A worker gets its method's graph and maps its weights (transport.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import multiprocessing
import os
import resource
import warnings
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace

import torch
from torch.export import ExportedProgram

from phaseconv.errors import PhaseconvError
from phaseconv.lowering.blobs import BlobFolder, spill
from phaseconv.lowering.profile import Stage, StageLog
from phaseconv.lowering.transport import land, pack, ship, unpack, unshared_bytes
from phaseconv.lowering.xnnpack import lower_method
from phaseconv.report import Decision
from phaseconv.rewrite import rewrite_with_report
from phaseconv.rules import TARGET_RULES


def default_workers() -> int:
    return len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class MethodLowering:
    """How each method is lowered: rewritten with the rules for `target` (None: lowered as it is),
    then lower_method(**options); decisions named method/node when `named`."""

    target: str | None
    options: dict = field(default_factory=dict)
    named: bool = False

    def run(
        self, name: str, program: ExportedProgram, stages: StageLog, blobs: BlobFolder
    ) -> tuple[ExportedProgram, list[Decision]]:
        """The method rewritten and lowered, its delegates' weights in `blobs`, and the decisions."""
        decisions = []
        if self.target is not None:
            stages.start("rewrite", name)
            program, decisions = rewrite_with_report(program, TARGET_RULES[self.target])
            if self.named:
                decisions = [replace(d, node=f"{name}/{d.node}") for d in decisions]
        lowered = lower_method(name, program, stages=stages, blobs=blobs, **self.options)
        stages.start("spill", name)
        spill(lowered, blobs)  # named data another backend, or a pass, added whole
        stages.stop()
        return lowered, decisions


class BuffersOnce:
    """The lowered methods' buffers of one name and value as one tensor: each method comes back with a
    copy of its own of the state the methods share (a KV cache), which the program holds once."""

    def __init__(self):
        self.seen: dict[tuple, torch.Tensor] = {}

    def __call__(self, program: ExportedProgram) -> ExportedProgram:
        for name in program.graph_signature.buffers:
            value = program.state_dict.get(name)
            if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                data = value.detach().contiguous().view(-1).view(torch.uint8).numpy()
                key = (name, value.dtype, tuple(value.shape), hashlib.sha256(data).digest())
                program.state_dict[name] = self.seen.setdefault(key, value)
        return program


def lower_each(
    programs: dict[str, ExportedProgram],
    lowering: MethodLowering,
    blobs: BlobFolder,
    stages: StageLog,
    workers: int = 1,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, tuple[ExportedProgram, list[Decision]]]:
    """Every method lowered and spilled to `blobs`, in `workers` processes (the largest started first);
    `progress(name, seconds)` as each ends."""
    names = sorted(programs, key=lambda name: -len(programs[name].graph.nodes))
    once = BuffersOnce()
    if workers <= 1 or len(names) <= 1:
        results = {}
        for name in names:
            lowered, decisions = lowering.run(name, programs[name], stages, blobs)
            results[name] = (once(lowered), decisions)
            if progress is not None:
                progress(name, sum(s.seconds for s in stages.stages if s.method == name))
        return results
    return _in_workers(programs, names, lowering, blobs, stages, workers, progress, once)


def _in_workers(programs, names, lowering, blobs, stages, workers, progress, once):
    _require_shared_memory(unshared_bytes(programs.values()))
    _allow_open_files()
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["phaseconv.lowering.server"])
    results, waiting, running = {}, list(names), {}
    try:
        with ProcessPoolExecutor(min(workers, len(names)), mp_context=context, max_tasks_per_child=1) as pool:
            while waiting or running:
                while waiting and len(running) < workers:  # shipped as a worker frees: one graph in flight each
                    name = waiting.pop(0)
                    stages.start("ship", name)
                    shipped = ship(programs[name])
                    stages.stop()
                    job = (name, shipped, lowering, str(blobs.folder), _policy())
                    running[pool.submit(_lower_shipped, *job)] = name
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    name = running.pop(future)
                    packed, decisions, worker_stages = future.result()
                    stages.start("unpack", name)
                    results[name] = (once(unpack(packed)), decisions)
                    stages.stop()
                    stages.add(worker_stages)
                    if progress is not None:
                        progress(name, sum(s.seconds for s in worker_stages))
    except BrokenProcessPool:
        raise PhaseconvError(
            "a lowering worker ended before its method was lowered: the system ends a process when memory runs "
            "out (lower with --workers 1), and a script that starts workers needs `if __name__ == '__main__':`"
        ) from None
    return results


def _require_shared_memory(needed: int) -> None:
    """The weights the workers map are in shared memory (/dev/shm), which a container may keep small."""
    try:
        stats = os.statvfs("/dev/shm")
    except OSError:
        return
    free = stats.f_bavail * stats.f_frsize
    if needed > free:
        raise PhaseconvError(
            f"the workers share the weights through /dev/shm, which has {free / 2**20:.0f} MiB free for "
            f"{needed / 2**20:.0f} MiB: lower with --workers 1, or give it more (docker run --shm-size)"
        )


def _allow_open_files() -> None:
    """Each weight in shared memory holds a file descriptor open: as many as the system allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _quiet_as(policy: tuple) -> None:
    """This process's warnings and log levels as the main process has them (a fork copied them; a
    fork server's worker starts with its own)."""
    filters, levels = policy
    warnings.filters[:] = filters
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def _policy() -> tuple:
    loggers = logging.root.manager.loggerDict.items()
    levels = {name: logger.level for name, logger in loggers if isinstance(logger, logging.Logger) and logger.level}
    return list(warnings.filters), levels


def _lower_shipped(
    name: str, shipped, lowering: MethodLowering, folder: str, policy: tuple
) -> tuple[bytes, list, list[Stage]]:
    torch.set_num_threads(1)  # one method per core
    _quiet_as(policy)
    stages = StageLog("worker")
    stages.start("land", name)
    program = land(shipped)
    lowered, decisions = lowering.run(name, program, stages, BlobFolder(folder))
    stages.start("pack", name)
    packed = pack(lowered)
    stages.stop()
    return packed, decisions, stages.stages
