"""Shape chains moved on the buffer inside the XNNPACK delegate: the same bits, fewer transposes."""

import pytest
import torch
from torch import nn

import phaseconv
from phaseconv.lowering.xnnpack import to_xnnpack
from phaseconv.rules import LOWERING_RULES
from phaseconv.runtimes.executorch import LoadedProgram
from phaseconv.runtimes.pte import summarize_pte
from tests.helpers import assert_close, export, run


class Upsampler1d(nn.Module):
    """conv -> transposed conv (its interleave) -> SEANet's residual unit (ELU, pad, conv, ELU, conv)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Conv1d(16, 16, 3, padding=1)
        self.up = nn.ConvTranspose1d(16, 8, 8, stride=4, padding=2)
        self.unit = nn.Sequential(nn.Conv1d(8, 4, 3), nn.ELU(), nn.Conv1d(4, 8, 1))

    def forward(self, x):
        y = self.up(nn.functional.elu(self.head(x)))
        return y + self.unit(nn.functional.pad(nn.functional.elu(y), [2, 0]))


class Upsampler2d(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Conv2d(8, 8, 3, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1)
        self.tail = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.tail(nn.functional.relu(self.up(nn.functional.relu(self.head(x)))))


class Attention(nn.Module):
    """Heads split and merged with transposes, as transformers' attention layers do."""

    def __init__(self, width=32, heads=4):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.out = (nn.Linear(width, width) for _ in range(4))

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = (p(x).view(batch, length, self.heads, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, length, width))


CASES = {
    "1-D interleave": (Upsampler1d, (1, 16, 40)),
    "2-D interleave": (Upsampler2d, (1, 8, 12, 10)),
    "attention heads": (Attention, (1, 20, 32)),
}


@pytest.mark.parametrize("name", CASES)
def test_same_bits_with_fewer_transposes(name):
    build, shape = CASES[name]
    torch.manual_seed(0)
    module, x = build(), torch.randn(shape)
    ep = export(module, x)
    programs = {}
    for chains in (False, True):
        buffer = to_xnnpack(phaseconv.rewrite(ep, LOWERING_RULES), xnnpack_elu=True, shape_chains=chains).buffer
        programs[chains] = (summarize_pte(buffer), LoadedProgram(buffer).run((x,))[0])
    (before, stock_out), (after, out) = programs[False], programs[True]
    assert after.partitions == 1 and not after.outside
    assert after.layout_transposes < before.layout_transposes, (before.inside, after.inside)
    assert torch.equal(out, stock_out)  # data movement only: bit for bit
    assert_close(out, run(ep, x))


def test_phaseconv_lower_moves_the_1d_interleave_without_a_transpose():
    """In NHWC the phase-major convolution output is already the interleaved signal: the only
    transposes left are the program input's and output's."""
    x = torch.randn(1, 16, 40)
    module = Upsampler1d()
    lowered = phaseconv.lower(export(module, x))
    assert lowered.summary.layout_transposes == 2, lowered.summary.inside
    assert_close(LoadedProgram(lowered.buffer).run((x,))[0], run(export(module, x), x))


def _transpose_permutations(buffer: bytes) -> list[list[int]]:
    from executorch.exir._serialize._program import deserialize_pte_binary

    from phaseconv.runtimes.pte import _xnnpack_graph

    program = deserialize_pte_binary(buffer).program
    graph = _xnnpack_graph(program.backend_delegate_data[0].data)
    return [n["xnode_union"]["perm"] for n in graph["xnodes"] if n["xnode_union_type"] == "XNNStaticTranspose"]


def test_a_2d_interleave_the_program_returns_is_moved_in_rows_then_made_nchw():
    """Straight to NCHW the interleave would gather single values (64 channels, 128x128: 4.6 ms
    against 1.5 for rows then the one NHWC -> NCHW transpose, measured here)."""
    x = torch.randn(1, 32, 12, 10)
    module = nn.Conv2d(32, 32, 3, padding=1)  # Winograd's tiles of 2x2 outputs, interleaved
    lowered = phaseconv.lower(export(module, x), target="x86-fma3")
    layouts = ([0, 2, 3, 1], [0, 3, 1, 2])  # the program's input to NHWC, its output to NCHW
    moves = [p for p in _transpose_permutations(lowered.buffer) if p not in layouts]
    assert moves and all(p[-1] == len(p) - 1 for p in moves), _transpose_permutations(lowered.buffer)
    assert_close(LoadedProgram(lowered.buffer).run((x,))[0], run(export(module, x), x))


def test_an_int8_interleave_is_moved_on_the_buffer_with_its_quantization():
    """Each link of an int8 chain is read through a quantize -> dequantize pair with the chain's
    parameters; moved on the buffer with the same pairs, the program keeps its int8 bits."""
    from phaseconv.quantize import quantize

    torch.manual_seed(0)
    x = torch.randn(1, 16, 40)
    quantized = quantize(Upsampler1d().eval(), [(torch.randn(1, 16, 40),) for _ in range(4)] + [(x,)])
    rewritten = phaseconv.rewrite(quantized, LOWERING_RULES)
    programs = {}
    for chains in (False, True):
        buffer = to_xnnpack(rewritten, xnnpack_elu=True, shape_chains=chains).buffer
        programs[chains] = (summarize_pte(buffer), LoadedProgram(buffer).run((x,))[0])
    (before, stock_out), (after, out) = programs[False], programs[True]
    assert after.partitions == 1 and not after.outside
    assert after.layout_transposes < before.layout_transposes, (before.inside, after.inside)
    assert torch.equal(out, stock_out)
