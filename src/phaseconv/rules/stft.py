"""torch.stft read as its magnitude or its real and imaginary parts -> one strided convolution (math/stft.py).

ExecuTorch runs `torch.stft` (a mel front end, an STFT discriminator) outside XNNPACK: the reflect
pad as a gather, unfold, a portable real FFT and a complex `abs` (3 partitions for `stft(x).abs()`).
Each frame's DFT is a convolution of stride hop whose 2K output channels are the windowed cosine and
negated sine bases, computed over the signal's hop
phases stacked on channels (math/polyphase.py strided_as_phases_weight: a dense convolution of hop
input channels and ceil(N / hop) taps, where one input channel would be a slow depthwise one); `abs`
of the spectrum is then sqrt(re^2 + im^2) and `view_as_real` a stack of the two halves. The DFT's
sums are direct instead of an FFT's (float rounding; N^2 multiply-adds per frame against an FFT's
N log N, so a long window is left to the FFT). torch.stft's `center` padding comes before it in the
program as a pad (reflect: mode_pad keeps it in the delegate).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.interleave import space_to_depth
from phaseconv.graph.program import NotConstant, ProgramEditor
from phaseconv.math.polyphase import strided_as_phases_weight
from phaseconv.math.stft import forward_dft_weight
from phaseconv.rules.base import Rule, Skip
from phaseconv.rules.istft import constant_window

aten = torch.ops.aten
SIGNATURE = ("input", "n_fft", "hop_length", "win_length", "window", "normalized", "onesided", "return_complex")
READERS = (aten.abs.default, aten.view_as_real.default)
# Past this window the direct DFT (N^2 multiply-adds per frame) loses to the portable FFT (N log N) with
# its split of the delegate (`python benchmarks/run.py --only stft`, results/xeon/stft.json).
MAX_N_FFT = 256


@dataclass(frozen=True)
class StftPlan:
    node: Node
    weight: torch.Tensor  # [2K, 1, N]
    hop: int
    bins: int


class StftRule(Rule):
    """aten.stft -> conv1d with the DFT basis; abs -> sqrt(re^2 + im^2), view_as_real -> stack(re, im)."""

    name = "stft"

    def __init__(self, max_n_fft: int = MAX_N_FFT):
        self.max_n_fft = max_n_fft

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target == aten.stft.default

    def check(self, node: Node, editor: ProgramEditor) -> StftPlan | Skip:
        args = {"hop_length": None, "win_length": None, "window": None, "normalized": False, "onesided": None}
        args |= {"return_complex": None} | dict(zip(SIGNATURE, node.args)) | node.kwargs
        x, n_fft = args["input"].meta["val"], args["n_fft"]
        if n_fft > self.max_n_fft:
            return Skip(
                f"n_fft {n_fft}: past {self.max_n_fft}, the direct DFT's N^2 multiply-adds per frame lose to "
                "the portable FFT (benchmarks/run.py --only stft)"
            )
        if x.dim() not in (1, 2) or not all(isinstance(n, int) for n in x.shape):
            return Skip(f"an input of shape {list(x.shape)}: a signal [L] or batch [B, L] of static size")
        if x.dtype != torch.float32:
            return Skip(f"{x.dtype} input: XNNPACK's convolution runs float32 here")
        if args["return_complex"]:
            others = [user for user in node.users if user.target not in READERS]
            if others:
                return Skip(
                    f"the complex spectrum is read by {others[0].name} ({others[0].target}): only its magnitude "
                    "(abs) and view_as_real are rewritten"
                )
        try:
            window = constant_window(args, editor)
        except NotConstant as why:
            return Skip(f"the window is not a constant: {why}")
        bins = n_fft if args["onesided"] is False else n_fft // 2 + 1
        weight = forward_dft_weight(n_fft, window, bins, args["normalized"]).to(torch.float32)
        return StftPlan(node, weight, args["hop_length"] or n_fft // 4, bins)

    def describe(self, plan: StftPlan) -> str:
        return f"convolution of stride {plan.hop} with the windowed DFT basis ({plan.bins} bins, real and imaginary)"

    def apply(self, plan: StftPlan, editor: ProgramEditor) -> None:
        node = plan.node
        signal = node.args[0]
        editor.release(node)  # dropped with its window once no reader is left
        length = signal.meta["val"].shape[-1]
        batch = signal.meta["val"].shape[0] if signal.meta["val"].dim() == 2 else None
        frames = node.meta["val"].shape[-1 if node.meta["val"].is_complex() else -2]  # [..., K, T] or [..., K, T, 2]
        taps = -(-plan.weight.shape[-1] // plan.hop)
        needed = plan.hop * (frames + taps - 1)  # whole phases: the samples the frames read, zeros after
        x = editor.emit(node, aten.view.default, signal, [batch or 1, 1, length])
        if needed > length:
            x = editor.emit(node, aten.constant_pad_nd.default, x, [0, needed - length], 0.0)
        elif needed < length:
            x = editor.emit(node, aten.slice.Tensor, x, 2, 0, needed)
        phases = space_to_depth(editor, node, x, [plan.hop])
        weight = editor.new_constant(strided_as_phases_weight(plan.weight, [plan.hop]), f"{node.name}_dft")
        spectrum = editor.emit(node, aten.conv1d.default, phases, weight)
        real = editor.emit(node, aten.slice.Tensor, spectrum, 1, 0, plan.bins)
        imaginary = editor.emit(node, aten.slice.Tensor, spectrum, 1, plan.bins, 2 * plan.bins)
        if batch is None:  # a signal [L]: a spectrum [K, T]
            real, imaginary = (editor.emit(node, aten.view.default, p, [plan.bins, frames]) for p in (real, imaginary))
        pair = editor.emit(node, aten.stack.default, [real, imaginary], -1)
        readers = list(node.users) if node.meta["val"].is_complex() else []
        for reader in readers:
            if reader.target == aten.view_as_real.default:
                editor.replace([reader], pair)
                continue
            squares = [editor.emit(reader, aten.mul.Tensor, p, p) for p in (real, imaginary)]
            power = editor.emit(reader, aten.add.Tensor, *squares)
            editor.replace([reader], editor.emit(reader, aten.sqrt.default, power))
        if not readers:  # return_complex=False: the spectrum is already [..., 2]
            editor.replace([node], pair)
