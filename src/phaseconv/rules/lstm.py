"""LSTM -> one input projection for all steps, then the recurrence unrolled in ops XNNPACK runs.

ExecuTorch unrolls aten.lstm itself, but with split_with_sizes and squeeze copies per step that
XNNPACK does not take: EnCodec's 2-layer LSTM over 75 frames leaves 300 portable ops and splits
the decoder into 150 partitions. Here, per layer, with gates in PyTorch's order (i, f, g, o):

    G = X W_ih^T + (b_ih + b_hh)                       one fully connected layer for every step
    g_t = G[t] + h_{t-1} W_hh^T                        (no recurrent term while h is the zero state)
    c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g),  h_t = sigmoid(o) * tanh(c_t)
    Y = cat(h_1, ..., h_T)

The same arithmetic as PyTorch's cell up to the order of the sums (float rounding).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch.fx import Node

from phaseconv.graph.program import NotConstant, ProgramEditor
from phaseconv.rules.base import Rule, Skip

aten = torch.ops.aten
MAX_STEPS = 512  # the unrolled graph grows with the sequence: longer ones are left to the runtime


@dataclass(frozen=True)
class LstmPlan:
    node: Node
    output: Node  # getitem 0: the only result used
    unused: tuple[Node, ...]  # getitems of the final states that nothing reads (torch.export keeps them)
    layers: int
    zero_state: tuple[bool, bool]  # are h_0 and c_0 zero constants


class LstmRule(Rule):
    name = "lstm"

    def matches(self, node: Node) -> bool:
        return node.op == "call_function" and node.target == aten.lstm.input

    def check(self, node: Node, editor: ProgramEditor) -> LstmPlan | Skip:
        x, hx, params, has_biases, layers, _dropout, train, bidirectional, batch_first = node.args
        if train or bidirectional or batch_first:
            return Skip("training, bidirectional or batch_first LSTM")
        if len(params) != (4 if has_biases else 2) * layers:
            return Skip("LSTM with projections (proj_size)")
        value = x.meta["val"]
        if value.dim() != 3 or value.dtype != torch.float32 or not all(isinstance(s, int) for s in value.shape):
            return Skip("input other than static float32 [T, N, C]")
        if value.shape[0] > MAX_STEPS:
            return Skip(f"{value.shape[0]} steps: unrolling is capped at {MAX_STEPS}")
        unused = tuple(u for u in node.users if u.target == operator.getitem and not u.users)
        users = [u for u in node.users if u not in unused]
        if len(users) != 1 or users[0].target != operator.getitem or users[0].args[1] != 0:
            return Skip("the final hidden or cell state is used: only the output sequence is rewritten")
        for weight in params:
            try:
                editor.constant_value(weight)
            except NotConstant as why:
                return Skip(f"a weight is not a constant: {why}")
        return LstmPlan(node, users[0], unused, layers, tuple(_is_zero(state, editor) for state in hx))

    def describe(self, plan: LstmPlan) -> str:
        steps = plan.node.args[0].meta["val"].shape[0]
        return f"{plan.layers} layer(s) x {steps} steps unrolled: linear, sigmoid, tanh, mul, add, cat"

    def apply(self, plan: LstmPlan, editor: ProgramEditor) -> None:
        sequence = plan.node.args[0]
        for layer in range(plan.layers):
            sequence = _unroll_layer(plan, editor, sequence, layer)
        editor.replace([plan.node, *plan.unused, plan.output], sequence)


def _unroll_layer(plan: LstmPlan, editor: ProgramEditor, sequence: Node, layer: int) -> Node:
    node = plan.node
    hx, params, has_biases = node.args[1:4]
    steps, batch, _ = sequence.meta["val"].shape
    per_layer = 4 if has_biases else 2
    w_ih, w_hh, *biases = params[layer * per_layer : (layer + 1) * per_layer]
    hidden = w_hh.meta["val"].shape[1]

    def emit(op, *args):
        return editor.emit(plan.output, op, *args)

    bias = None
    if biases:
        total = editor.constant_value(biases[0]) + editor.constant_value(biases[1])
        bias = editor.new_constant(total.detach().clone(), f"{node.name}_layer{layer}_bias")
    gates = emit(aten.linear.default, sequence, w_ih, bias)  # [T, N, 4H]
    h, c = (
        None if zero else emit(aten.view.default, emit(aten.slice.Tensor, state, 0, layer, layer + 1), [batch, hidden])
        for state, zero in zip(hx, plan.zero_state)
    )
    outputs = []
    for t in range(steps):
        g = emit(aten.view.default, emit(aten.slice.Tensor, gates, 0, t, t + 1), [batch, 4 * hidden])
        if h is not None:
            g = emit(aten.add.Tensor, g, emit(aten.linear.default, h, w_hh))
        i, f, cell, o = (emit(aten.slice.Tensor, g, 1, k * hidden, (k + 1) * hidden) for k in range(4))
        update = emit(aten.mul.Tensor, emit(aten.sigmoid.default, i), emit(aten.tanh.default, cell))
        if c is not None:
            update = emit(aten.add.Tensor, emit(aten.mul.Tensor, emit(aten.sigmoid.default, f), c), update)
        c = update
        h = emit(aten.mul.Tensor, emit(aten.sigmoid.default, o), emit(aten.tanh.default, c))
        outputs.append(emit(aten.view.default, h, [1, batch, hidden]))
    return emit(aten.cat.default, outputs, 0) if steps > 1 else outputs[0]


def _is_zero(state: Node, editor: ProgramEditor) -> bool:
    try:
        return not bool(editor.constant_value(state).any())
    except NotConstant:
        return False
