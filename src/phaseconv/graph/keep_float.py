"""Operators kept fp32 in an int8 program: those of named submodules, those no input reaches, and a
quantizer that leaves them alone."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence

import torch
from torch.export import ExportedProgram
from torchao.quantization.pt2e.quantizer import Quantizer, SharedQuantizationSpec

from phaseconv.errors import PhaseconvError


def module_paths(node: torch.fx.Node) -> list[str]:
    """The submodules the node comes from, outermost first, as `named_modules` names them."""
    return [path.removeprefix("L['self'].") for path, _ in node.meta.get("nn_module_stack", {}).values()]


def within(path: str, name: str) -> bool:
    """`path` is the submodule `name` or one inside it."""
    return path == name or path.startswith(name + ".")


def from_modules(node: torch.fx.Node, names: Sequence[str]) -> bool:
    """The node comes from one of the named submodules (or from one inside it)."""
    return any(within(path, name) for path in module_paths(node) for name in names)


def require_modules(program: ExportedProgram, names: Sequence[str]) -> None:
    """Each name is a submodule some operator of the program comes from."""
    paths = sorted({path for node in program.graph.nodes for path in module_paths(node)})
    for name in names:
        if not any(within(path, name) for path in paths):
            close = difflib.get_close_matches(name, paths, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise PhaseconvError(f"keep float: no operator of the program comes from a module {name!r}{hint}")


def input_independent(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The operators no input of the graph reaches: values computed from buffers and constants alone
    (a position counter, its rotary angles, an attention mask's running bias). In int8 a position
    would be rounded to its calibrated scale (2.5 steps in pocket-tts's decoder step) and clamped
    at the last position calibration saw."""
    reached = {node for node in graph.nodes if node.op == "placeholder"}
    for node in graph.nodes:  # in topological order
        if any(source in reached for source in node.all_input_nodes):
            reached.add(node)
    return {node for node in graph.nodes if node.op == "call_function" and node not in reached}


def shares_with(node: torch.fx.Node, others: set[torch.fx.Node]) -> bool:
    """The node's annotation shares int8 parameters with one of `others` (or an edge into or out of one)."""
    annotation = node.meta.get("quantization_annotation")
    if annotation is None:
        return False
    specs = [annotation.output_qspec, *annotation.input_qspec_map.values()]
    for spec in specs:
        if isinstance(spec, SharedQuantizationSpec):
            shared = spec.edge_or_node if isinstance(spec.edge_or_node, tuple) else (spec.edge_or_node,)
            if any(n in others for n in shared):
                return True
    return False


class KeepFloat(Quantizer):
    """`quantizer`, except that the operators `kept(graph)` picks stay unannotated (fp32).
    XNNPACKQuantizer's filter function alone does not do it: after the patterns, the quantizer propagates
    int8 to ops that only pass values on (relu, views), and a float convolution fed by a dequantize is
    one XNNPACK refuses ("Weight and Input should both be quantized")."""

    def __init__(self, quantizer: Quantizer, kept: Callable[[torch.fx.Graph], set[torch.fx.Node]]):
        super().__init__()
        self.quantizer, self.kept = quantizer, kept

    def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        return self.quantizer.transform_for_annotation(model)

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        """The quantizer's annotations, less those of the kept nodes and (to a fixed point) of every
        node whose int8 parameters were to be shared with an unannotated one."""
        floats = self.kept(model.graph)
        # the filter keeps patterns that cross into a kept node (conv + relu) from matching at all
        self.quantizer.set_filter_function(lambda node: node not in floats)
        self.quantizer.annotate(model)
        while floats:
            for node in floats:
                node.meta.pop("quantization_annotation", None)
            floats = {node for node in model.graph.nodes if shares_with(node, floats)}
        return model

    def validate(self, model: torch.fx.GraphModule) -> None:
        self.quantizer.validate(model)
