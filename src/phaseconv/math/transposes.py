"""Data movement as one transpose: what a chain of reshapes and permutes does to a flat buffer.

A chain of views and permutes (and layout changes between NCHW and NHWC) moves the elements of
its input's buffer to new offsets: `order[i]` is the input offset of output element `i`. When

    out = in.reshape(dims).permute(perm).reshape(-1)

holds for some `dims` and `perm`, the whole chain is one transpose of the buffer (none at all
when `perm` keeps every axis in place), however many steps it was written in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FlatTranspose:
    """in.reshape(dims).permute(perm).reshape(-1); adjacent axes that stay adjacent are merged."""

    dims: tuple[int, ...]
    perm: tuple[int, ...]

    @property
    def moves(self) -> bool:
        """False when the chain is a reshape: the buffer's order is unchanged."""
        return self.perm != tuple(range(len(self.perm)))

    @property
    def copies_rows(self) -> bool:
        """Whether the innermost axis stays innermost: rows of it are copied whole, not gathered
        one value at a time."""
        return self.perm[-1] == len(self.perm) - 1


def physical_offsets(shape, channels_last: bool) -> torch.Tensor:
    """A tensor of logical `shape` whose entries are their offsets in the buffer: row-major, or
    NHWC for a 4-D tensor stored channels-last."""
    count = math.prod(shape)
    if not channels_last:
        return torch.arange(count).reshape(shape)
    n, c, h, w = shape
    return torch.arange(count).reshape(n, h, w, c).permute(0, 3, 1, 2)


def as_flat_transpose(order: torch.Tensor) -> FlatTranspose | None:
    """The transpose that moves buffer offsets `order` (order[i]: source of output i), or None.

    Output axes are found innermost first: each has the source stride of its first step and the
    largest extent over which the block found so far repeats at that stride. The order is a
    transpose exactly when every block repeats and the strides, sorted, are the mixed radix of
    the extents (1, e_a, e_a * e_b, ...).
    """
    order = order.reshape(-1)
    count = order.numel()
    if count == 0 or int(order[0]) != 0:
        return None
    axes: list[tuple[int, int]] = []  # (extent, source stride), output innermost first
    block = 1
    while block < count:
        if count % block:
            return None
        rows = order.reshape(-1, block)  # row j: outputs [j*block, (j+1)*block)
        stride = int(rows[1, 0] - rows[0, 0])
        repeats = ((rows - rows[0]) == torch.arange(rows.shape[0]).unsqueeze(1) * stride).all(dim=1)
        extent = int(repeats.int().argmin()) if not bool(repeats.all()) else rows.shape[0]
        if extent == 1 or count % (block * extent):
            return None
        axes.append((extent, stride))
        block *= extent
    by_stride = sorted(range(len(axes)), key=lambda axis: axes[axis][1])
    radix = 1
    for axis in by_stride:
        if axes[axis][1] != radix:
            return None
        radix *= axes[axis][0]
    source = by_stride[::-1]  # source axes, outermost first
    dims = tuple(axes[axis][0] for axis in source) or (1,)
    perm = tuple(source.index(axis) for axis in reversed(range(len(axes)))) or (0,)
    return FlatTranspose(dims, perm)
