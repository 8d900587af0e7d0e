"""XNNPACK's preprocess passes as phaseconv's lowering runs them.

- The layout pass is extended and shape chains are collapsed before it (layout.py).
- A pass that changed nothing does not retrace the graph. Most of XNNPACK's passes rewrite the
  graph where they find their pattern, then retrace all of it in fake mode to renew its metadata
  (ExportPass.call), found or not: about half a second each for a language model's layer stack,
  and a dozen of them find nothing there. The retrace of a graph a pass left as it was gives that
  graph again. Passes that work during the retrace itself (ExportPass.call_operator:
  DimOrderOpsRevertPass, ConstPropPass) run as they are.
"""

from __future__ import annotations

import contextlib
from unittest import mock

from executorch.backends.xnnpack import xnnpack_preprocess
from executorch.backends.xnnpack._passes import XNNPACKPassManager
from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportPass, PassResult
from torch.fx import GraphModule

from phaseconv.graph.program import inferred_shape
from phaseconv.lowering.layout import ChannelsLastChainsPass, CollapseShapeChainsPass


def _shape(graph_module: GraphModule) -> list[tuple]:
    """What a pass can change of a graph: its nodes, their operators and arguments."""
    return [(node, node.op, node.target, node.args, node.kwargs) for node in graph_module.graph.nodes]


class _RetraceWhenChanged(ExportPass):
    """Placed before ExportPass in a pass's method order: the pass's own call() then retraces the graph
    (super().call) only when it changed it."""

    def call(self, graph_module: GraphModule) -> PassResult:
        if _shape(graph_module) == self._before:
            return PassResult(graph_module, False)
        return super().call(graph_module)


def _retracing_when_changed(pass_class: type) -> type:
    """`pass_class` whose closing retrace is skipped when it changed nothing (it must do its work in call())."""

    def call(self, graph_module):
        self._before = _shape(graph_module)
        return pass_class.call(self, graph_module)

    return type(pass_class.__name__, (pass_class, _RetraceWhenChanged), {"call": call})


class PhaseconvPassManager(XNNPACKPassManager):
    def __init__(self, exported_program, passes=None):
        super().__init__(exported_program, passes)
        if not passes:
            index = self.passes.index(ChannelsLastTaggedReshapePass)
            self.passes[index : index + 1] = [CollapseShapeChainsPass, ChannelsLastChainsPass]
            self.passes = [
                _retracing_when_changed(p) if "call" in vars(p) and issubclass(p, ExportPass) else p
                for p in self.passes
            ]


@contextlib.contextmanager
def phaseconv_passes():
    """While lowering: XNNPACK's preprocess with these passes (ExecuTorch 1.5.1 takes no others)."""
    with mock.patch.object(xnnpack_preprocess, "XNNPACKPassManager", PhaseconvPassManager):
        yield


def inferred_view_sizes(graph_module: GraphModule) -> PassResult:
    """Each edge view whose shape holds one size read from the graph (a reshape decomposed by
    to_edge: [1, 3 * s, 64]) with that size inferred (-1): XNNPACK's partitioner takes no view of a
    symbolic size, and one of -1. Run before partitioning (to_edge_transform_and_lower's passes)."""
    changed = False
    for node in graph_module.graph.find_nodes(op="call_function", target=exir_ops.edge.aten.view_copy.default):
        shape = node.args[1]
        if sum(not isinstance(size, int) for size in shape) == 1 and -1 not in shape:
            node.args = (node.args[0], inferred_shape(shape))
            changed = True
    if changed:
        graph_module.graph.eliminate_dead_code()
        graph_module.recompile()
    return PassResult(graph_module, changed)
