"""Transposed convolution -> one stride-1 polyphase convolution + interleave of the phases + crop.

See phaseconv.math.polyphase for the identity. The rule covers dense, grouped and depthwise 1-D,
2-D and 3-D transposed convolutions in both export forms (`aten.conv_transpose{1,2,3}d` and
`aten.convolution(..., transposed=True)`), folds a slice that trims the output into the window, and
moves a clamp-type activation that only reads the output in front of the interleave.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.conv_transpose import (
    CONV_TRANSPOSE_OPS,
    ConvTranspose,
    end_trims,
    fusable_activation,
    parse_conv_transpose,
    trimming_slices,
)
from phaseconv.graph.interleave import interleave
from phaseconv.graph.padding import read_samples
from phaseconv.graph.program import NotConstant, ProgramEditor, size_range
from phaseconv.graph.quantized import (
    DEQUANTIZE,
    DEQUANTIZE_PER_CHANNEL,
    DYNAMIC_INT8_REASON,
    Params,
    QuantizedWeight,
    dequantized_params,
    is_dynamically_quantized,
    quantized_output_params,
    quantized_weight,
    requantizer,
)
from phaseconv.math.polyphase import (
    AlignedPhases,
    PhaseRead,
    PhaseWindow,
    aligned_phases,
    mac_overhead,
    phase_bias,
    phase_channel_values,
    phase_reads,
    phase_slice,
    phase_weight,
    phase_window,
    phase_window_any_length,
)
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten
# The polyphase convolution's multiply-adds over the deconvolution's (zero taps where the kernel is
# not a multiple of the stride; phase blocks that read only padding), past which XNNPACK's own
# deconvolution wins (benchmarks/variants.py).
MAX_MAC_OVERHEAD = 1.45
# XNNPACK runs a depthwise deconvolution one group at a time, so per-phase depthwise convolutions win
# even at several times its multiply-adds (Mimi's frame upsampler on one frame, untrimmed).
MAX_DEPTHWISE_MAC_OVERHEAD = 3.0
# An int8 interleave of 2-D (3-D) phases is a byte-granular transpose on XNNPACK, while its int8
# deconvolution is already a sub-convolution: the rewrite pays only when each output takes many
# multiply-adds, C_in/g * taps (benchmarks/quantized.py).
MIN_INT8_SPATIAL_DEPTH = 1024


@dataclass(frozen=True)
class LayerQuantization:
    """What is int8 around a transposed convolution of a PT2E-quantized graph.

    `weight`: its dequantized int8 weight. `input`: the parameters of the dequantize it reads (the
    input's slice keeps them; a pad is quantized by XNNPACK's own pass). `output`: those of the
    quantize that reads its (cropped, activated) output, given to the phase convolution's output,
    the interleave and the crop.
    """

    weight: QuantizedWeight | None = None
    input: Params | None = None
    output: Params | None = None


@dataclass(frozen=True)
class PolyphasePlan:
    node: Node
    conv: ConvTranspose
    folded_slices: list[Node]
    windows: list[PhaseWindow]
    out_channels: int
    activation: Node | None = None  # a clamp-type activation moved before the interleave, next to the conv
    quantization: LayerQuantization = LayerQuantization()
    aligned: AlignedPhases | None = None  # a 1-D layer of dynamic length: phases aligned, no crop

    @property
    def depthwise(self) -> bool:
        """One input channel per group."""
        return self.conv.groups > 1 and self.conv.weight.meta["val"].shape[0] == self.conv.groups


class ConvTransposeRule(Rule):
    """Transposed convolution -> polyphase convolution(s) + interleave + crop."""

    name = "conv_transpose"

    def __init__(
        self,
        max_mac_overhead: float = MAX_MAC_OVERHEAD,
        max_depthwise_mac_overhead: float | None = None,
        commute_activations: bool = False,
        split_depthwise: bool = True,
        crop_by_phase: bool = True,
        spatial_dims: tuple[int, ...] = (1, 2, 3),
    ):
        """`split_depthwise`: compute a depthwise layer as one depthwise conv per phase and a cat,
        rather than one conv with channel multiplier s^D, which leaves XNNPACK's depthwise kernels
        (benchmarks/variants.py measures both). `crop_by_phase`: when such a layer's output is cropped,
        give each phase conv the input samples it reads (a zero pad XNNPACK folds into the conv, but
        which a PT2E quantizer leaves in fp32) instead of cropping after the interleave.
        `commute_activations`: move a clamp-type activation in front of the interleave, where XNNPACK
        fuses it into the conv; off by default, since benchmarks/variants.py measures no gain from it.
        `spatial_dims`: the layer ranks to rewrite (ONNX Runtime gains from 1-D layers only)."""
        self.spatial_dims = spatial_dims
        self.max_mac_overhead = max_mac_overhead
        self.commute_activations = commute_activations
        self.split_depthwise = split_depthwise
        self.crop_by_phase = crop_by_phase
        self.max_depthwise_mac_overhead = (
            max(max_mac_overhead, MAX_DEPTHWISE_MAC_OVERHEAD)
            if max_depthwise_mac_overhead is None
            else max_depthwise_mac_overhead
        )

    def matches(self, node: Node) -> bool:
        return parse_conv_transpose(node) is not None

    def check(self, node: Node, editor: ProgramEditor) -> PolyphasePlan | Skip:
        conv = parse_conv_transpose(node)
        if conv.spatial not in self.spatial_dims:
            return Skip(f"{conv.spatial}-D layers are not rewritten for this target (it runs them faster as they are)")
        if all(s == 1 for s in conv.stride):
            return Skip("stride 1 in every dimension: already a plain convolution, nothing to gain")
        if is_dynamically_quantized(editor.graph):
            return Skip(DYNAMIC_INT8_REASON)
        x = conv.input.meta["val"]
        if x.dim() != conv.spatial + 2:
            return Skip(f"unbatched input of rank {x.dim()}: expected [N, C, spatial...]")
        lengths = list(x.shape[2:])
        dynamic = [i for i, n in enumerate(lengths) if not isinstance(n, int)]
        if len(dynamic) + (not isinstance(x.shape[0], int)) > 1:
            return Skip(
                f"input {list(x.shape)}: more than one dynamic size, and XNNPACK's reshape (the interleave) "
                "infers only one"
            )
        weight = quantized_weight(conv.weight)
        if weight is not None and weight.axis not in (None, 1):
            return Skip(
                f"the int8 weight is quantized per channel on axis {weight.axis}: a transposed weight "
                "[C_in, C_out/g, k...] has its output channels on axis 1"
            )
        constants = [(conv.bias, "bias")]
        if weight is None:
            constants.append((conv.weight, "weight"))
        else:
            constants += [
                (weight.values, "int8 weight"),
                (weight.scale, "weight scale"),
                (weight.zero_point, "zero point"),
            ]
        for tensor, role in constants:
            if not isinstance(tensor, Node):
                continue
            try:
                editor.constant_value(tensor)
            except NotConstant as why:
                return Skip(f"the {role} is not a constant: {why}")
        kernel = list(conv.weight.meta["val"].shape[2:])
        settings = list(zip(conv.stride, conv.padding, conv.dilation, kernel, conv.output_padding))
        aligned = None
        if dynamic:
            planned = self._dynamic_windows(node, conv, lengths, kernel)
            if isinstance(planned, Skip):
                return planned
            folded, windows, aligned = planned
        else:
            folded, bounds = trimming_slices(node, conv, lengths, kernel)
            settings = zip(conv.stride, conv.padding, conv.dilation, kernel, conv.output_padding)
            windows = [phase_window(n, *s, start, stop) for n, s, (start, stop) in zip(lengths, settings, bounds)]
        overhead = mac_overhead(windows, kernel)
        out_channels = conv.weight.meta["val"].shape[1] * conv.groups
        end = folded[-1] if folded else node
        activation = fusable_activation(end) if not dynamic else None
        # In an int8 graph the activation goes in front of the interleave with the quantize after it.
        if activation is not None and not (self.commute_activations or quantized_output_params(activation)):
            activation = None
        input_params = dequantized_params(conv.input)
        quantization = LayerQuantization()
        if weight is not None and input_params is not None:  # an int8 layer; a float one stays float
            quantization = LayerQuantization(weight, input_params, quantized_output_params(activation or end))
        elif weight is not None:
            quantization = LayerQuantization(weight)
        plan = PolyphasePlan(node, conv, folded, windows, out_channels, activation, quantization, aligned)
        depth = conv.weight.meta["val"].shape[0] // conv.groups * math.prod(w.taps for w in windows)
        int8 = quantization.weight is not None and quantization.output is not None
        if int8 and conv.spatial > 1 and depth < MIN_INT8_SPATIAL_DEPTH:
            return Skip(
                f"int8 {conv.spatial}-D layer with {depth} multiply-adds per output (C_in/g x taps): XNNPACK's "
                f"int8 deconvolution beats the polyphase convolution and its byte-wise interleave below "
                f"{MIN_INT8_SPATIAL_DEPTH}"
            )
        limit = self.max_depthwise_mac_overhead if plan.depthwise else self.max_mac_overhead
        if overhead > limit:
            return Skip(
                f"the polyphase convolution would do {overhead:.2f}x the multiply-adds of the deconvolution "
                f"(kernel {kernel}, stride {conv.stride}, dilation {conv.dilation}, input {lengths}: zero taps "
                f"and padding-only blocks), over the {limit}x where it stops paying on XNNPACK"
            )
        return plan

    def _dynamic_windows(self, node: Node, conv: ConvTranspose, lengths: list, kernel: list[int]):
        """(folded trims, windows, AlignedPhases of a 1-D layer) for an input with one dynamic length,
        or Skip: no slice of a dynamic size may remain, since XNNPACK slices static shapes only."""
        if conv.spatial > 2:
            return Skip(f"dynamic length in a 3-D layer: its interleave takes one permute per dimension ({lengths})")
        if quantized_weight(conv.weight) is not None:
            return Skip(f"int8 weight and dynamic length {lengths}: not rewritten yet")
        folded, windows, aligned = [], [], None
        for n, settings in zip(lengths, zip(conv.stride, conv.padding, conv.dilation, kernel, conv.output_padding)):
            if isinstance(n, int):
                windows.append(phase_window(n, *settings))
                continue
            known = size_range(n)
            if known is None:
                return Skip(f"dynamic length {n} with no known range (computed from the data?)")
            window = phase_window_any_length(*known, *settings)
            if window is None:
                return Skip(f"length {n} from {known[0]}: too short for kernel {kernel} at the shortest")
            windows.append(window)
            if conv.spatial == 1:
                folded, trims = end_trims(node)
                aligned = aligned_phases(known[0], *settings, *trims)
        if conv.spatial == 1 and aligned is None:
            return Skip(
                f"dynamic length {lengths[0]}: the output is not whole phase blocks from its start, so a "
                "crop would remain, and XNNPACK slices only static shapes"
            )
        depthwise = conv.groups > 1 and conv.weight.meta["val"].shape[0] == conv.groups
        if aligned is not None and aligned.shift and conv.groups > 1 and not (self.split_depthwise and depthwise):
            return Skip(f"dynamic length {lengths[0]} with {conv.groups} groups and a crop: not rewritten yet")
        if conv.spatial > 1 and any(w.needs_crop or w.needs_input_slice for w in windows):
            return Skip(f"dynamic size in {lengths}: the window needs a slice, and XNNPACK slices only static shapes")
        return folded, windows, aligned

    def describe(self, plan: PolyphasePlan) -> str:
        taps = "x".join(str(w.taps) for w in plan.windows)
        stride = "x".join(str(w.stride) for w in plan.windows)
        phases = math.prod(w.stride for w in plan.windows)
        if plan.depthwise and self.split_depthwise:
            text = f"stride {stride}: {phases} depthwise convs ({plan.out_channels} ch, {taps} taps) + cat"
        else:
            text = f"stride {stride}: conv {phases * plan.out_channels} ch, {taps} taps"
            if plan.conv.groups > 1:
                text += f", {plan.conv.groups} groups"
        if plan.folded_slices:
            text += f", folded {len(plan.folded_slices)} slice(s)"
        if plan.activation is not None:
            text += f", {plan.activation.target.__name__.split('.')[0]} before the interleave"
        quantization = plan.quantization
        if quantization.weight is not None:
            text += ", int8 weight re-arranged"
        if quantization.output is not None:
            text += ", int8 interleave"
        return text

    def apply(self, plan: PolyphasePlan, editor: ProgramEditor) -> None:
        conv, node = plan.conv, plan.node
        stride_key = "x".join(map(str, conv.stride))
        dilation_key = "x".join(map(str, conv.dilation))
        key = f"phases_s{stride_key}_d{dilation_key}_g{conv.groups}"
        replaced = [node, *plan.folded_slices] + ([plan.activation] if plan.activation is not None else [])
        anchor = replaced[-1]
        if plan.aligned is not None:
            editor.replace(replaced, self._aligned(plan, editor, anchor, key))
            return
        reads = _own_reads(plan) if plan.depthwise and self.split_depthwise and self.crop_by_phase else None
        if reads is not None:
            editor.replace(replaced, self._phase_by_phase(plan, editor, anchor, reads, key))
            return
        input_grid = requantizer(editor, anchor, plan.quantization.input)
        output_grid = requantizer(editor, anchor, plan.quantization.output)
        # Read the input now, not at check time: an earlier rewrite may have replaced it.
        x = node.args[0]
        for dim, window in enumerate(plan.windows, start=2):
            if window.needs_input_slice:
                x = input_grid(editor.emit(anchor, aten.slice.Tensor, x, dim, window.input_start, window.input_stop))
        symmetric = [min(w.pad_before, w.pad_after) for w in plan.windows]
        extra = [
            pad
            for w, both in zip(reversed(plan.windows), reversed(symmetric))
            for pad in (w.pad_before - both, w.pad_after - both)
        ]
        if any(extra):  # int8: left between dequantize and conv, where XNNPACK's InsertPadQDQPass quantizes it
            x = editor.emit(anchor, aten.constant_pad_nd.default, x, extra, 0.0)

        def phase_conv(weight: Node, bias: Node | None) -> Node:
            phases = _convolution(editor, anchor, node, x, weight, bias, symmetric, conv.groups)
            if plan.activation is not None:  # elementwise: commutes with the interleave and the crop
                act = plan.activation
                phases = editor.emit(anchor, act.target, phases, *act.args[1:], **act.kwargs)
            return output_grid(phases)

        def phase_weights(name: str, rearrange, phases: int) -> Node:
            """The phase weight, computed from the float weight or re-arranged from the int8 one."""
            quantized = plan.quantization.weight
            if quantized is None:
                return editor.derived_constant(conv.weight, name, rearrange)
            values = editor.derived_constant(quantized.values, name, rearrange)
            if quantized.axis is None:
                return editor.emit(anchor, DEQUANTIZE, values, *_quantization_args(quantized))
            scale, zero_point = (
                editor.derived_constant(v, f"{name}_channels", lambda t: phase_channel_values(t, conv.groups, phases))
                for v in (quantized.scale, quantized.zero_point)
            )
            quantization = (scale, zero_point, 0, *_quantization_args(quantized)[2:])
            return editor.emit(anchor, DEQUANTIZE_PER_CHANNEL, values, *quantization)

        def phases_of(w: torch.Tensor) -> torch.Tensor:
            return phase_weight(w, conv.stride, conv.dilation, conv.groups)

        if plan.depthwise and self.split_depthwise:
            # Every phase conv adds the original bias, each from its own copy: a quantizer annotates
            # a conv only if no other conv's annotation took its bias.
            convs = [
                phase_conv(
                    phase_weights(
                        f"{key}_j{j}", lambda w, j=j: phase_slice(phases_of(w), conv.stride, conv.groups, j), 1
                    ),
                    None if conv.bias is None else editor.derived_constant(conv.bias, f"j{j}", lambda b: b),
                )
                for j in range(math.prod(conv.stride))
            ]
            phases = output_grid(editor.emit(anchor, aten.cat.default, convs, 1))
            result = interleave(editor, anchor, phases, conv.stride, 1, output_grid)
        else:
            weight = phase_weights(key, phases_of, math.prod(conv.stride))
            bias = None
            if conv.bias is not None:
                bias = editor.derived_constant(
                    conv.bias, f"phases_s{stride_key}_g{conv.groups}", lambda b: phase_bias(b, conv.stride, conv.groups)
                )
            result = interleave(editor, anchor, phase_conv(weight, bias), conv.stride, conv.groups, output_grid)
        for dim, window in enumerate(plan.windows, start=2):
            if window.needs_crop:
                crop = (dim, window.crop_start, window.crop_stop)
                result = editor.emit(anchor, aten.slice.Tensor, output_grid(result), *crop)
        editor.replace(replaced, result)

    def _phase_by_phase(
        self, plan: PolyphasePlan, editor: ProgramEditor, anchor: Node, reads: list[list[PhaseRead]], key: str
    ) -> Node:
        """A depthwise layer whose window has a crop: each output phase is a depthwise convolution of
        its own over the input samples it reads (`phase_reads`), so the phases come out cropped.
        Their zero padding, partly explicit, is folded into the convolution by XNNPACK."""
        conv, node = plan.conv, plan.node
        sources = {}  # samples read per dimension -> (input, convolution padding)
        convs = []
        for j, per_dim in enumerate(itertools.product(*reads)):
            samples = tuple((r.start, r.stop) for r in per_dim)
            if samples not in sources:
                sources[samples] = read_samples(editor, anchor, node.args[0], samples)
            source, padding = sources[samples]
            phase = _row_major([r.phase for r in per_dim], conv.stride)
            weight = editor.derived_constant(
                conv.weight,
                f"{key}_j{phase}",
                lambda w, f=phase: phase_slice(
                    phase_weight(w, conv.stride, conv.dilation, conv.groups), conv.stride, conv.groups, f
                ),
            )
            # Every phase conv adds the original bias, each from its own copy (see apply).
            bias = None if conv.bias is None else editor.derived_constant(conv.bias, f"j{j}", lambda b: b)
            phases = _convolution(editor, anchor, node, source, weight, bias, padding, conv.groups)
            if plan.activation is not None:
                act = plan.activation
                phases = editor.emit(anchor, act.target, phases, *act.args[1:], **act.kwargs)
            convs.append(phases)
        return interleave(editor, anchor, editor.emit(anchor, aten.cat.default, convs, 1), conv.stride, 1)

    def _aligned(self, plan: PolyphasePlan, editor: ProgramEditor, anchor: Node, key: str) -> Node:
        """The AlignedPhases form of a 1-D layer of dynamic length (float): one or two phase
        convolutions over the input zero-padded two ways, concatenated, interleaved; no crop."""
        conv, aligned, node = plan.conv, plan.aligned, plan.node
        stride, shift, channels = aligned.stride, aligned.shift, plan.out_channels
        x = node.args[0]

        def padded(before: int, after: int) -> Node:
            return editor.emit(anchor, aten.constant_pad_nd.default, x, [before, after], 0.0) if before or after else x

        inputs = [padded(aligned.pad_before, aligned.pad_after)]
        if shift:
            inputs.append(padded(aligned.pad_before - 1, aligned.pad_after + 1))

        def phases_of(w: torch.Tensor) -> torch.Tensor:
            return phase_weight(w, conv.stride, conv.dilation, conv.groups)

        def copy_of_bias(name: str, rearrange) -> Node | None:
            return None if conv.bias is None else editor.derived_constant(conv.bias, name, rearrange)

        if plan.depthwise and self.split_depthwise:  # phase j reads phase weight (j + c) mod s
            convs = [
                _convolution(
                    editor,
                    anchor,
                    node,
                    inputs[int(j >= stride - shift)],
                    editor.derived_constant(
                        conv.weight,
                        f"{key}_j{j}_aligned",
                        lambda w, b=(j + shift) % stride: phase_slice(phases_of(w), conv.stride, conv.groups, b),
                    ),
                    copy_of_bias(f"j{j}", lambda b: b),
                    [0],
                    conv.groups,
                )
                for j in range(stride)
            ]
            return interleave(editor, anchor, editor.emit(anchor, aten.cat.default, convs, 1), conv.stride, 1)
        halves = [(inputs[0], slice(shift * channels, None), stride - shift)]
        if shift:
            halves.append((inputs[1], slice(0, shift * channels), shift))
        convs = [
            _convolution(
                editor,
                anchor,
                node,
                source,
                editor.derived_constant(conv.weight, f"{key}_{rows.start}_aligned", lambda w, r=rows: phases_of(w)[r]),
                copy_of_bias(f"phases_{count}", lambda b, n=count: phase_bias(b, [n], 1)),
                [0],
                1,
            )
            for source, rows, count in halves
        ]
        phases = convs[0] if len(convs) == 1 else editor.emit(anchor, aten.cat.default, convs, 1)
        return interleave(editor, anchor, phases, conv.stride, 1)


def _own_reads(plan: PolyphasePlan) -> list[list[PhaseRead]] | None:
    """Per dimension, the samples each output phase reads, when a float depthwise window has a crop
    that phase-by-phase convolutions avoid (its output whole blocks); otherwise None."""
    if plan.quantization.weight is not None or not any(w.needs_crop for w in plan.windows):
        return None
    reads = [phase_reads(w) for w in plan.windows]
    return None if any(r is None for r in reads) else reads


def _row_major(index: list[int], sizes: list[int]) -> int:
    flat = 0
    for i, n in zip(index, sizes):
        flat = flat * n + i
    return flat


def _convolution(
    editor: ProgramEditor, anchor: Node, deconv: Node, x: Node, weight: Node, bias: Node | None, padding, groups: int
) -> Node:
    """A stride-1 convolution in the form the transposed one had: `conv{1,2,3}d` in export's own
    form (the one quantizers annotate), `convolution` in core ATen."""
    d = len(padding)
    if deconv.target in CONV_TRANSPOSE_OPS:
        op = (aten.conv1d.default, aten.conv2d.default, aten.conv3d.default)[d - 1]
        return editor.emit(anchor, op, x, weight, bias, [1] * d, list(padding), [1] * d, groups)
    args = (x, weight, bias, [1] * d, list(padding), [1] * d, False, [0] * d, groups)
    return editor.emit(anchor, aten.convolution.default, *args)


def _quantization_args(weight: QuantizedWeight) -> tuple:
    return (weight.scale, weight.zero_point, weight.quant_min, weight.quant_max, weight.dtype)
