"""torch.istft -> one transposed convolution and a division by a constant envelope (math/stft.py).

ExecuTorch runs `istft` (an inverse FFT, unfold, index_put) outside XNNPACK: an iSTFT head (Vocos,
iSTFTNet) splits the delegate and runs portable. As a transposed convolution of stride hop it is the
layer `conv_transpose` makes a polyphase convolution, in the next stage. The division by the envelope
is the one torch.istft makes; the inverse DFT's sums are direct instead of an FFT's (float rounding).

The spectrum's real and imaginary parts are followed through the complex arithmetic that builds it
from real tensors: `torch.complex(re, im)`, sums, products by a real tensor and by a complex scalar
(Vocos writes `mag * (cos(p) + 1j * sin(p))`). A product of two real numbers, or of a real number and
0 or 1, is what the complex product computes for each part, so the parts are the same floats.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Number

import torch
from torch.fx import Node

from phaseconv.graph.program import NotConstant, ProgramEditor
from phaseconv.math.stft import inverse_dft_weight, padded_window, window_envelope
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten
# One part (real or imaginary) of a complex value: a real node, (aten.mul or aten.add, part, part or
# a float factor), or None for a part that is zero.
Part = Node | tuple | None

SIGNATURE = ("input", "n_fft", "hop_length", "win_length", "window", "center", "normalized", "onesided", "length")


def constant_window(args: dict, editor: ProgramEditor) -> torch.Tensor:
    """The `window` argument of an (i)stft as a constant centered in n_fft samples (ones when there is
    none); NotConstant when the program computes it from its inputs."""
    window = None if args["window"] is None else editor.constant_value(args["window"])
    return padded_window(window, args["n_fft"], args["win_length"] or args["n_fft"])


def _sum(a: Part, b: Part) -> Part:
    return b if a is None else a if b is None else (aten.add.Tensor, a, b)


def _scaled(part: Part, factor) -> Part:
    """part * factor (a real node or a float), without the products by 0 and 1."""
    if part is None or (isinstance(factor, Number) and factor == 0):
        return None
    return part if isinstance(factor, Number) and factor == 1 else (aten.mul.Tensor, part, factor)


def complex_parts(value: Node) -> tuple[Part, Part]:
    """(real part, imaginary part) of a complex value built in the program from real tensors; ValueError
    naming the first operation that is not torch.complex, a sum, or a product with a real tensor or by a
    scalar."""
    if not value.meta["val"].dtype.is_complex:
        return value, None
    if value.op != "call_function":
        raise ValueError(f"{value.name} is a complex {value.op}, not built from real parts in the program")
    if value.target == aten.complex.default:
        return value.args[0], value.args[1]
    if value.target == aten.add.Tensor and not value.kwargs and all(isinstance(x, Node) for x in value.args):
        (a, b), (c, d) = (complex_parts(x) for x in value.args)
        return _sum(a, c), _sum(b, d)
    if value.target == aten.mul.Tensor:
        left, right = value.args
        if isinstance(left, Number) or isinstance(right, Number):
            scalar, tensor = (right, left) if isinstance(right, Number) else (left, right)
            scalar = complex(scalar)
            real, imaginary = complex_parts(tensor)
            if imaginary is None:
                return _scaled(real, scalar.real), _scaled(real, scalar.imag)
            if scalar.imag == 0:
                return _scaled(real, scalar.real), _scaled(imaginary, scalar.real)
            raise ValueError(f"{value.name} multiplies a complex tensor by a complex scalar")
        for factor, other in ((left, right), (right, left)):
            if not factor.meta["val"].dtype.is_complex:
                real, imaginary = complex_parts(other)
                return _scaled(real, factor), _scaled(imaginary, factor)
        raise ValueError(f"{value.name} multiplies two complex tensors")
    raise ValueError(f"{value.name} is {value.target}, not torch.complex, a sum or a product with a real factor")


def part_shape(part: Part) -> torch.Size:
    """The shape of the tensor `part` computes (not None), its operands broadcast."""
    if isinstance(part, Node):
        return part.meta["val"].shape
    _, left, right = part
    return torch.broadcast_shapes(part_shape(left), () if isinstance(right, Number) else part_shape(right))


def emit_part(part: Part, editor: ProgramEditor, anchor: Node) -> Node:
    """The nodes that compute `part` (not None), before `anchor`."""
    if isinstance(part, Node):
        return part
    op, left, right = part
    right = right if isinstance(right, Number) else emit_part(right, editor, anchor)
    return editor.emit(anchor, op, emit_part(left, editor, anchor), right)


@dataclass(frozen=True)
class IstftPlan:
    node: Node
    real: Part
    imaginary: Part
    weight: torch.Tensor  # [2K, 1, N]
    envelope: torch.Tensor  # [L], the part kept
    hop: int
    start: int
    length: int  # output samples


class IstftRule(Rule):
    """aten.istft of a spectrum with parts re, im -> cat([re, im]), conv_transpose1d, crop, division by the envelope."""

    name = "istft"
    stage = 0  # before conv_transpose, which rewrites the transposed convolution it emits

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target == aten.istft.default

    def check(self, node: Node, editor: ProgramEditor) -> IstftPlan | Skip:
        args = {"hop_length": None, "win_length": None, "window": None, "center": True, "normalized": False}
        args |= {"onesided": None, "length": None, "return_complex": False} | dict(zip(SIGNATURE, node.args))
        args |= node.kwargs
        spectrum, n_fft = args["input"], args["n_fft"]
        if args["return_complex"]:
            return Skip("a complex output: only real signals are rewritten")
        try:
            real, imaginary = complex_parts(spectrum)
        except ValueError as why:
            return Skip(f"the spectrum's real and imaginary parts cannot be followed: {why}")
        if real is None or imaginary is None:
            return Skip("the spectrum has a part that is zero everywhere")
        shape = spectrum.meta["val"].shape
        if part_shape(real) != shape or part_shape(imaginary) != shape:
            return Skip("a part of the spectrum is broadcast to its shape by the complex arithmetic")
        if len(shape) != 3 or not all(isinstance(size, int) for size in shape):
            return Skip(f"a spectrum of shape {list(shape)}: a batched [B, bins, frames] one of static size")
        if spectrum.meta["val"].dtype != torch.complex64:
            return Skip(f"{spectrum.meta['val'].dtype} spectrum: XNNPACK's convolution runs float32 here")
        bins, frames = shape[1], shape[2]
        if args["onesided"] is False or bins != n_fft // 2 + 1:
            return Skip(f"{bins} bins for n_fft {n_fft}: only one-sided spectra (n_fft // 2 + 1 bins) are rewritten")
        hop = args["hop_length"] or n_fft // 4
        try:
            window = constant_window(args, editor)
        except NotConstant as why:
            return Skip(f"the window is not a constant: {why}")
        envelope = window_envelope(window, hop, frames)
        start = n_fft // 2 if args["center"] else 0
        end = envelope.numel() - (n_fft // 2 if args["center"] else 0)
        if args["length"] is not None:
            end = min(start + args["length"], envelope.numel())
            if args["length"] > end - start:
                return Skip(f"length {args['length']} is past the signal's end: torch.istft pads it with zeros")
        if float(envelope[start:end].abs().min()) < 1e-11:
            return Skip("the window envelope is zero somewhere (torch.istft refuses such a window)")
        weight = inverse_dft_weight(n_fft, window, args["normalized"]).to(torch.float32)
        return IstftPlan(node, real, imaginary, weight, envelope[start:end].to(torch.float32), hop, start, end - start)

    def describe(self, plan: IstftPlan) -> str:
        return f"transposed convolution of stride {plan.hop} and a division by the window envelope"

    def apply(self, plan: IstftPlan, editor: ProgramEditor) -> None:
        node = plan.node
        batch = node.args[0].meta["val"].shape[0]
        parts = [emit_part(part, editor, node) for part in (plan.real, plan.imaginary)]
        spectrum = editor.emit(node, aten.cat.default, parts, 1)
        weight = editor.new_constant(plan.weight, f"{node.name}_inverse_dft")
        frames = editor.emit(node, aten.conv_transpose1d.default, spectrum, weight, None, [plan.hop])
        signal = editor.emit(node, aten.view.default, frames, [batch, frames.meta["val"].shape[-1]])
        signal = editor.emit(node, aten.slice.Tensor, signal, 1, plan.start, plan.start + plan.length)
        envelope = editor.new_constant(plan.envelope[None], f"{node.name}_envelope")
        editor.replace([node], editor.emit(node, aten.div.Tensor, signal, envelope))
