"""torch.istft -> one transposed convolution and a division by a constant envelope (math/stft.py).

ExecuTorch runs `istft` (an inverse FFT, unfold, index_put) outside XNNPACK: an iSTFT head (Vocos,
iSTFTNet) splits the delegate and runs portable. As a transposed convolution of stride hop it is the
layer `conv_transpose` makes a polyphase convolution, in the next stage. The division by the envelope
is the one torch.istft makes; the inverse DFT's sums are direct instead of an FFT's (float rounding).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import NotConstant, ProgramEditor
from phaseconv.math.stft import inverse_dft_weight, padded_window, window_envelope
from phaseconv.rules.base import Skip

aten = torch.ops.aten
SIGNATURE = ("input", "n_fft", "hop_length", "win_length", "window", "center", "normalized", "onesided", "length")


def constant_window(args: dict, editor: ProgramEditor) -> torch.Tensor:
    """The `window` argument of an (i)stft as a constant centered in n_fft samples (ones when there is
    none); NotConstant when the program computes it from its inputs."""
    window = None if args["window"] is None else editor.constant_value(args["window"])
    return padded_window(window, args["n_fft"], args["win_length"] or args["n_fft"])


@dataclass(frozen=True)
class IstftPlan:
    node: Node
    real: Node
    imaginary: Node
    weight: torch.Tensor  # [2K, 1, N]
    envelope: torch.Tensor  # [L], the part kept
    hop: int
    start: int
    length: int  # output samples


class IstftRule:
    """aten.istft of `complex(re, im)` -> cat([re, im]), conv_transpose1d, crop, division by the envelope."""

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
        if spectrum.op != "call_function" or spectrum.target != aten.complex.default:
            return Skip("the spectrum is not built by torch.complex(real, imaginary) in the program")
        real, imaginary = spectrum.args
        shape = real.meta["val"].shape
        if len(shape) != 3 or not all(isinstance(size, int) for size in shape):
            return Skip(f"a spectrum of shape {list(shape)}: a batched [B, bins, frames] one of static size")
        if real.meta["val"].dtype != torch.float32:
            return Skip(f"{real.meta['val'].dtype} spectrum: XNNPACK's convolution runs float32 here")
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
        batch = plan.real.meta["val"].shape[0]
        spectrum = editor.emit(node, aten.cat.default, [plan.real, plan.imaginary], 1)
        weight = editor.new_constant(plan.weight, f"{node.name}_inverse_dft")
        frames = editor.emit(node, aten.conv_transpose1d.default, spectrum, weight, None, [plan.hop])
        signal = editor.emit(node, aten.view.default, frames, [batch, frames.meta["val"].shape[-1]])
        signal = editor.emit(node, aten.slice.Tensor, signal, 1, plan.start, plan.start + plan.length)
        envelope = editor.new_constant(plan.envelope[None], f"{node.name}_envelope")
        editor.replace([node], editor.emit(node, aten.div.Tensor, signal, envelope))
