"""Winograd's minimal filtering F(2, r): two outputs of an r-tap correlation in r + 1 products.

For outputs y_i = sum_k g_k d_{i+k} (i = 0, 1) of an input tile d of n = r + 1 samples:

    y = A^T [ (G g) * (B^T d) ]          (* elementwise over the n points)

built by Toom-Cook from the linear convolution s = g conv h, evaluated at the points 0, 1, -1, 2,
-2, ... and infinity (the leading coefficients) and interpolated back; a correlation is its
transpose. The input transform B^T and the output transform A^T have integer entries (exact in
float), the Lagrange denominators go into G, which is applied to the weights once. Over channels
each point is a matrix product: n GEMMs of half the length replace the r-tap convolution's r, so
F(2, 3) does 4/6 of the multiply-adds, F(2, 2) 3/4.

A longer kernel is cut into chunks of 3 taps (the last of 1 or 2) at offsets 0, 3, 6, ..., each
done by its own F(2, r_c) with the points 0, 1, -1 and infinity (larger points would grow the
rounding). The chunks' products that add into the two outputs with the same column of A^T
(F(2, 3)'s four columns hold every chunk's) are one product: a GEMM over their transformed inputs
stacked on channels. k = 7: 10 products of C channels per tile of two outputs instead of 14,
k = 11: 15 instead of 22.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import torch

# XNNPACK's depthwise kernels read 3, 4, 9 or 25 taps in one pass: a 1-D transform reads the padded
# input whole with up to 4 taps from its tile's start (zeros included: no slice of the input, which
# an NCHW input would pay a transpose for, each); a 2-D point (9 or 16 taps, mostly zeros) reads
# only its nonzero taps (2 per axis, or 1) from a slice of the padded input (3 slices for 3x3),
# several times faster than a dense 4x4 of mostly zeros.
DENSE_TAPS = 4
OUTPUTS = 2  # m: outputs per tile
CHUNK = 3  # taps per chunk of a longer kernel: the most F(2, r) takes with the points 0, 1, -1, infinity


def _points(count: int) -> list[Fraction]:
    """0, 1, -1, 2, -2, ...: small integers keep the transforms exact and the rounding mild."""
    points = [Fraction(0)]
    step = 1
    while len(points) < count:
        points += [Fraction(step), Fraction(-step)]
        step += 1
    return points[:count]


def _poly_mul(a: list[Fraction], b: list[Fraction]) -> list[Fraction]:
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


def _roots(points: list[Fraction]) -> list[Fraction]:
    """Coefficients (lowest first) of prod (x - p) over `points`."""
    poly = [Fraction(1)]
    for p in points:
        poly = _poly_mul(poly, [-p, Fraction(1)])
    return poly


def tile_outputs(taps: int) -> int:
    """Outputs per tile along an axis: 2, or 1 on an axis of one tap (nothing to transform)."""
    return OUTPUTS if taps > 1 else 1


@cache
def transforms(taps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B^T [n, n], G [n, r], A^T [2, n]) of F(2, taps) in float64, n = taps + 1; for one tap the
    identity (each [1, 1]).

    Linear convolution by evaluation at n - 1 finite points and infinity: G evaluates the filter
    (row j: p_j^k / D_j with D_j = prod_{l != j} (p_j - p_l); infinity: its last tap), H the
    2-sample h, and s = C v with C's column j the coefficients of prod_{l != j} (x - p_l) and the
    infinity column those of prod_l (x - p_l). The correlation is y = H^T [(G g) * (C^T d)].
    """
    if taps == 1:
        one = torch.ones(1, 1, dtype=torch.float64)
        return one, one, one
    n = taps + OUTPUTS - 1
    finite = _points(n - 1)
    g = [[p**k / _denominator(finite, j) for k in range(taps)] for j, p in enumerate(finite)]
    g.append([Fraction(int(k == taps - 1)) for k in range(taps)])
    h = [[p**i for i in range(OUTPUTS)] for p in finite] + [[Fraction(int(i == OUTPUTS - 1)) for i in range(OUTPUTS)]]
    columns = [_roots(finite[:j] + finite[j + 1 :]) + [Fraction(0)] for j in range(len(finite))]
    columns.append(_roots(finite))
    c_transposed = columns  # C^T row j = C column j
    as_tensor = lambda rows: torch.tensor([[float(v) for v in row] for row in rows], dtype=torch.float64)  # noqa: E731
    a_transposed = [[h[j][i] for j in range(n)] for i in range(OUTPUTS)]
    return as_tensor(c_transposed), as_tensor(g), as_tensor(a_transposed)


@dataclass(frozen=True)
class AxisForm:
    """F(2, r) along one axis as products: point p's product is sum_m (g_m . W)(b_m . x_tile) over
    its members m = (b_m, a row over the tile's r + 1 input samples; g_m, a row over the r taps),
    and output q of the tile is sum_p a_t[q, p] * product_p."""

    members: tuple[tuple[tuple[torch.Tensor, torch.Tensor], ...], ...]
    a_t: torch.Tensor

    @property
    def window(self) -> int:
        """Input samples per tile: r + 1 (1 on an axis of one tap)."""
        return self.members[0][0][0].shape[0]


def _chunk_transforms(taps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """F(2, taps) of a chunk: for one tap in a tile of two outputs, each output its own product."""
    if taps == 1:
        eye = torch.eye(OUTPUTS, dtype=torch.float64)
        return eye, torch.ones(OUTPUTS, 1, dtype=torch.float64), eye
    return transforms(taps)


@cache
def axis_form(taps: int) -> AxisForm:
    """F(2, taps) with one member per point up to CHUNK taps; past that, chunks of CHUNK taps (the
    last shorter) at offsets 0, CHUNK, 2 * CHUNK, ..., each chunk's rows placed at its offset and
    each of its points a member of the F(2, CHUNK) point with the same column of A^T."""
    if taps <= CHUNK:
        b_t, g, a_t = transforms(taps)
        return AxisForm(tuple(((b, r),) for b, r in zip(b_t, g)), a_t)
    _, _, a_t = transforms(CHUNK)
    columns = [tuple(column.tolist()) for column in a_t.T]
    members: list[list] = [[] for _ in columns]
    for offset in range(0, taps, CHUNK):
        size = min(CHUNK, taps - offset)
        b_c, g_c, a_c = _chunk_transforms(size)
        for b_row, g_row, column in zip(b_c, g_c, a_c.T):
            b = torch.zeros(taps + OUTPUTS - 1, dtype=torch.float64)
            b[offset : offset + size + OUTPUTS - 1] = b_row
            g = torch.zeros(taps, dtype=torch.float64)
            g[offset : offset + size] = g_row
            members[columns.index(tuple(column.tolist()))].append((b, g))
    return AxisForm(tuple(tuple(m) for m in members), a_t)


def row_support(row: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """A row of B^T as (its nonzero entries, the first one's index, their spacing): the taps, offset
    and dilation of the same sum over fewer samples. Every row of F(2, 2) and F(2, 3) has one or two
    nonzeros ({0, 2}, {1, 2}, {1, 3} for three taps); more must be evenly spaced."""
    (nonzero,) = torch.nonzero(row, as_tuple=True)
    spacing = int(nonzero[1] - nonzero[0]) if len(nonzero) > 1 else 1
    assert all(int(b - a) == spacing for a, b in zip(nonzero[:-1], nonzero[1:])), row
    return row[nonzero], int(nonzero[0]), spacing


def _denominator(points: list[Fraction], j: int) -> Fraction:
    value = Fraction(1)
    for index, p in enumerate(points):
        if index != j:
            value *= points[j] - p
    return value


def correlate(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The r-tap correlation of x [N, C, L] (already padded) with W [O, C, r] by `axis_form(r)`, as
    the graph rule computes it: each member's B row by a strided depthwise convolution, a GEMM per
    point over its members' transformed inputs stacked on channels, A^T by sums, the two outputs
    of each tile interleaved. L - r + 1 outputs."""
    import torch.nn.functional as F

    taps, channels = weight.shape[2], x.shape[1]
    form = axis_form(taps)
    outputs = x.shape[2] - taps + 1
    tiles = (outputs + 1) // 2
    x = F.pad(x, (0, 2 * tiles + taps - 1 - x.shape[2]))
    products = []
    for members in form.members:
        d = [F.conv1d(x, b.to(x.dtype).repeat(channels, 1, 1), stride=2, groups=channels) for b, _ in members]
        u = [torch.einsum("k,ock->oc", g, weight.double()).to(x.dtype) for _, g in members]
        products.append(F.conv1d(torch.cat(d, 1), torch.cat(u, 1).unsqueeze(-1)))
    a_t = form.a_t
    pairs = [sum(a_t[i, p] * products[p] for p in range(a_t.shape[1]) if a_t[i, p] != 0) for i in range(OUTPUTS)]
    y = torch.stack(pairs, dim=-1).reshape(x.shape[0], weight.shape[0], 2 * tiles)[..., :outputs]
    return y if bias is None else y + bias[:, None]


def points(forms: list[AxisForm]) -> list[tuple[int, ...]]:
    """Every point: one of each axis's points."""
    return list(itertools.product(*[range(len(f.members)) for f in forms]))


def members(forms: list[AxisForm], e: tuple[int, ...]) -> list[tuple[tuple[torch.Tensor, torch.Tensor], ...]]:
    """Point e's members: per axis one (B row, G row) of that axis's point e_axis, every combination."""
    return list(itertools.product(*[f.members[i] for f, i in zip(forms, e)]))


def member_reads(forms: list[AxisForm], steps: list[int]) -> dict[tuple[int, ...], list[tuple[tuple, tuple]]]:
    """Per point, each member's (transform key, shift): the key is per axis (the taps it reads,
    their spacing, the first one's offset within a tile) and the shift is in whole tiles, from
    the tile of its row's first nonzero. A 1-D kernel's transform reads DENSE_TAPS samples from
    that tile's start, zeros included; a 2-D one only the nonzeros."""
    sparse = sum(f.window > 1 for f in forms) > 1
    reads = {}
    for e in points(forms):
        reads[e] = []
        for member in members(forms, e):
            key, shift = [], []
            for (b, _), step in zip(member, steps):
                if sparse:
                    taps, offset, spacing = row_support(b)
                    assert offset < step, b  # 2-D kernels have at most 3 taps per axis (checked)
                    key.append((tuple(taps.tolist()), spacing, offset))
                    shift.append(0)
                    continue
                start = step * (int(torch.nonzero(b)[0]) // step)
                assert not b[start + DENSE_TAPS :].any(), b  # a chunk's row spans at most 3 samples
                key.append((tuple(b[start : start + DENSE_TAPS].tolist()), 1, 0))
                shift.append(start // step)
            reads[e].append((tuple(key), tuple(shift)))
    return reads


def outer(vectors: list[torch.Tensor]) -> torch.Tensor:
    """The outer product of 1-D tensors: the separable depthwise kernel of one point."""
    result = vectors[0]
    for vector in vectors[1:]:
        result = result.unsqueeze(-1) * vector
    return result


def point_weight(members: list[tuple[tuple[torch.Tensor, torch.Tensor], ...]]):
    """W[o, c, k...] -> the members' U_m[o, c, 1...] = sum_k g_1[k_1] ... g_D[k_D] W[o, c, k] (g_a:
    member m's G row on axis a) stacked on input channels, in the order its inputs are; float64."""

    def compute(weight: torch.Tensor) -> torch.Tensor:
        parts = []
        for member in members:
            combined = weight.double()
            for axis, (_, g) in enumerate(member):
                combined = torch.tensordot(combined, g, dims=([2 + axis], [0])).unsqueeze(-1).movedim(-1, 2 + axis)
            parts.append(combined)
        return torch.cat(parts, 1).to(weight.dtype)

    return compute
