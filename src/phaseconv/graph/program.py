"""Graph surgery on a torch.export.ExportedProgram: constants, new nodes, clean-up.

This is the only module that touches placeholders, the graph signature, `state_dict` and
`constants`; rules describe what to build and call it.
"""

from __future__ import annotations

import contextlib
import copy
import operator
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch._guards import detect_fake_mode
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx import Node

# Metadata that says where a node came from; copied onto the nodes that replace it.
PROVENANCE_KEYS = ("nn_module_stack", "stack_trace", "source_fn_stack", "from_node", "custom")
CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
aten = torch.ops.aten
# Ops whose result depends only on the shape and dtype of their first argument, not its values.
SHAPE_ONLY = frozenset(
    {
        aten.new_ones.default,
        aten.new_zeros.default,
        aten.new_full.default,
        aten.new_empty.default,
        aten.ones_like.default,
        aten.zeros_like.default,
        aten.full_like.default,
        aten.empty_like.default,
        aten.sym_size.int,
    }
)


# Ops whose fake-tensor implementation turns a dynamic size into an int (which makes export's shape
# environment fix that size to its example value for the whole program), and an equivalent that keeps
# sizes symbolic, for their metadata.
def _padded(x: torch.Tensor, pad: list[int], value: float = 0.0) -> torch.Tensor:
    """constant_pad_nd for non-negative pads, as a cat of constant blocks."""
    for i, (before, after) in enumerate(zip(pad[::2], pad[1::2])):
        dim = x.dim() - 1 - i
        blocks = [x.new_full([*x.shape[:dim], n, *x.shape[dim + 1 :]], value) for n in (before, after)]
        x = torch.cat([blocks[0], x, blocks[1]], dim)
    return x


META_FORMS = {
    aten.permute_copy.default: lambda x, dims: x.permute(dims).contiguous(),
    aten.constant_pad_nd.default: _padded,
}


def copy_program(ep: ExportedProgram) -> ExportedProgram:
    """A deep copy: graph, signature, state_dict and constants, so edits never reach the original."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return copy.deepcopy(ep)


def copy_graph(ep: ExportedProgram) -> ExportedProgram:
    """A copy whose graph, signature and dictionaries are new and whose parameters and tensor
    constants are the original's tensors: a rewrite or a lowering changes which constants a program
    holds, never a weight's values, and a weight copied per method is memory a program of many
    methods cannot spare. Buffers, which running the program may write, are copied."""
    kinds = {spec.target: spec.kind for spec in ep.graph_signature.input_specs if spec.target is not None}
    weights = [*ep.state_dict.items(), *ep.constants.items()]
    shared = {id(value): value for name, value in weights if kinds.get(name) != InputKind.BUFFER}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return copy.deepcopy(ep, memo=shared)


class NotConstant(Exception):
    """A tensor the rewrite needs as a constant is computed from something else; the message says what."""


class ProgramEditor:
    """Edits one ExportedProgram in place: derives constants, emits aten calls, removes dead nodes."""

    def __init__(self, program: ExportedProgram):
        self.program = program
        self.graph = program.graph
        self._specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
        self._derived: dict[tuple[str, str], Node] = {}
        self._created: dict[str, Node] = {}
        self._touched: set[Node] = set()
        self._sizes: dict[tuple, Node] = {}
        self._memos: dict[str, dict] = {}
        self._fake_mode = detect_fake_mode([n.meta["val"] for n in self.graph.nodes if "val" in n.meta])

    def memo(self, name: str) -> dict:
        """A dictionary kept for this editor (one stage of one rewrite): what rules' plans share, made once."""
        return self._memos.setdefault(name, {})

    # ---- constants -------------------------------------------------------------------------
    def kind(self, node: Node) -> InputKind | None:
        spec = self._specs.get(node.name) if node.op == "placeholder" else None
        return spec.kind if spec is not None else None

    def is_constant_input(self, node: Node) -> bool:
        """A parameter, buffer or constant placeholder that the program never mutates."""
        return self.kind(node) in CONSTANT_KINDS and not self._mutated(node)

    def _mutated(self, node: Node) -> bool:
        """Written by the program: a functional buffer update, or an in-place op on it."""
        if self._specs[node.name].target in self.program.graph_signature.buffers_to_mutate.values():
            return True
        return written_in_place(node)

    def constant_value(self, node: Node) -> torch.Tensor:
        """The value of `node` if it depends only on parameters, buffers and constants.

        A weight computed in the graph (weight_norm's g * v / ||v||) is evaluated here once, which
        is the constant folding the backend would otherwise never do.
        """
        with torch.no_grad():
            return self._evaluate(node, {}, {})

    def value_at(self, node: Node, sizes: dict) -> torch.Tensor:
        """The value of `node` if it depends only on constants and shapes, with the dynamic sizes'
        symbols bound to the ints in `sizes` (a causal mask or rotary table at one length)."""
        with torch.no_grad():
            return self._evaluate(node, {}, sizes)

    def dynamic_symbol(self):
        """The one symbol the user inputs' sizes are expressions of (NotConstant if none or several)."""
        symbols = set()
        for node in self.graph.nodes:
            if node.op == "placeholder" and isinstance(node.meta.get("val"), torch.Tensor):
                for size in node.meta["val"].shape:
                    if not isinstance(size, int):
                        symbols |= size.node.expr.free_symbols
        if len(symbols) != 1:
            raise NotConstant(f"the program has {len(symbols) or 'no'} dynamic sizes; one is handled")
        return symbols.pop()

    def declared_bounds(self, symbol) -> tuple[int, int]:
        """The declared (lowest, highest) value of a size symbol."""
        bounds = self._fake_mode.shape_env.var_to_range[symbol]
        try:
            return int(bounds.lower), int(bounds.upper)
        except (TypeError, OverflowError):
            raise NotConstant(f"{symbol} has no declared upper bound (give the Dim a max)") from None

    def size_source(self, symbol) -> tuple[Node, int]:
        """(input placeholder, dimension) whose size is `symbol` itself (NotConstant if none is)."""
        for node in self.graph.nodes:
            if node.op != "placeholder" or not isinstance(node.meta.get("val"), torch.Tensor):
                continue
            for dim, size in enumerate(node.meta["val"].shape):
                if not isinstance(size, int) and size.node.expr == symbol:
                    return node, dim
        raise NotConstant("no input has the dynamic size itself as a size (only multiples of it)")

    def symbolic_size(self, symbol, a: int, b: int) -> Node:
        """A node computing a * symbol + b at run time from a user input's size, after the inputs
        (so that every node can read it); one per (symbol, a, b)."""
        if (symbol, a, b) not in self._sizes:
            anchor = next(node for node in self.graph.nodes if node.op != "placeholder")
            result = self.emit(anchor, aten.sym_size.int, *self.size_source(symbol))
            if a != 1:
                result = self.emit(anchor, operator.mul, result, a)
            if b:
                result = self.emit(anchor, operator.add, result, b)
            self._sizes[symbol, a, b] = result
        return self._sizes[symbol, a, b]

    def _evaluate(self, node: Node, memo: dict[Node, Any], sizes: dict) -> Any:
        if node in memo:
            return memo[node]
        if node.op == "placeholder":
            value = self._placeholder_value(node)
        elif node.op == "call_function":
            if is_in_place(node) or written_in_place(node):
                raise NotConstant(f"{node.name} is written in place")
            if "dequantize" in str(node.target):
                raise NotConstant(f"it is dequantized by {node.name} (quantized weights are not rewritten)")
            args = node.args
            if node.target in SHAPE_ONLY:
                args = (shape_stand_in(args[0], sizes), *args[1:])
            args, kwargs = torch.fx.node.map_arg((args, node.kwargs), lambda n: self._evaluate(n, memo, sizes))
            value = node.target(*args, **kwargs)
        elif node.op == "get_attr":
            value = getattr(self.program.graph_module, node.target)
        else:
            raise NotConstant(f"it comes from a {node.op} node {node.name}")
        memo[node] = value
        return value

    def _placeholder_value(self, node: Node) -> torch.Tensor:
        spec = self._specs[node.name]
        if spec.kind not in CONSTANT_KINDS:
            raise NotConstant(f"it depends on the program input {node.name}")
        if self._mutated(node):
            raise NotConstant(f"it depends on the mutated buffer {node.name}")
        if spec.target in self.program.state_dict:
            return self.program.state_dict[spec.target]
        return self.program.constants[spec.target]

    def constant_source(self, node: Node) -> Node | None:
        """The placeholder whose kind and metadata a constant derived from `node` inherits (None for
        a value computed from no placeholder: `arange`, `full`)."""
        if node.op == "placeholder":
            return node
        leaves = [n for n in _ancestors(node) if n.op == "placeholder"]
        parameters = [n for n in leaves if self.kind(n) == InputKind.PARAMETER]
        return (parameters or leaves or [None])[0]

    def derived_constant(self, node: Node, key: str, compute: Callable[[torch.Tensor], torch.Tensor]) -> Node:
        """A new placeholder holding compute(value of node), of the same kind as node's source.

        Cached per (node, key): a weight shared by several ops with the same settings yields one.
        """
        cache_key = (node.name, key)
        if cache_key in self._derived:
            return self._derived[cache_key]
        source = self.constant_source(node)
        data = compute(self.constant_value(node)).detach().clone().contiguous()
        if source is None:
            self._derived[cache_key] = self.new_constant(data, f"{node.name}_{key}")
            return self._derived[cache_key]
        kind = self.kind(source)
        target = self._specs[source.name].target
        persistent = None
        if kind == InputKind.BUFFER:
            persistent = target not in self.program.graph_signature.non_persistent_buffers
        new = self._add_placeholder(f"{source.name}_{key}", kind, data, persistent)
        for meta_key, value in source.meta.items():
            if meta_key != "val":
                new.meta.setdefault(meta_key, value)
        self._derived[cache_key] = new
        self._touched.update(_ancestors(node) | {node})
        return new

    def new_constant(self, data: torch.Tensor, key: str) -> Node:
        """A lifted constant holding `data`, created once per key.

        Keys name the node that reads the constant: ExecuTorch cannot lower a lifted constant that
        two delegate partitions read (its unlifting of the partition then fails), so none is shared.
        """
        name = f"phaseconv_{key}_{str(data.dtype).removeprefix('torch.')}"
        if name not in self._created:
            self._created[name] = self._add_placeholder(name, InputKind.CONSTANT_TENSOR, data)
        return self._created[name]

    def scalar_constant(self, value: float, like: Node) -> Node:
        """A lifted constant holding `value` with the dtype and rank of `like` (all sizes 1).

        A Python number in an fp16 graph is lifted by ExecuTorch as an fp32 scalar and cast by a
        portable copy outside the delegate; a 0-d operand also drags an NHWC activation back to
        NCHW. A constant of the activation's dtype and rank has neither problem. One per `like`.
        """
        val = like.meta["val"]
        key = f"{like.name}_{value!r}".replace(".", "_").replace("-", "m")
        return self.new_constant(torch.full([1] * val.dim(), value, dtype=val.dtype), key)

    def _add_placeholder(self, name: str, kind: InputKind, data: torch.Tensor, persistent: bool | None = None) -> Node:
        """A constant placeholder before the user inputs, registered in the signature and state."""
        from executorch.backends.transforms.utils import create_constant_placeholder  # slow to import: when used

        with self.graph.inserting_before(self._first_user_input()):
            node = create_constant_placeholder(self.program, self.graph, name, kind, data, persistent)
        self._specs = {spec.arg.name: spec for spec in self.program.graph_signature.input_specs}
        return node

    def _first_user_input(self) -> Node:
        for node in self.graph.nodes:
            if node.op != "placeholder" or self.kind(node) not in CONSTANT_KINDS:
                return node
        raise AssertionError("a graph always ends with an output node")

    # ---- nodes --------------------------------------------------------------------------------
    def emit(self, anchor: Node, op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Node:
        """Insert op(*args, **kwargs) before `anchor`, with meta['val'] from fake-tensor propagation."""
        with self.graph.inserting_before(anchor):
            node = self.graph.call_function(op, args, kwargs)
        fake_args, fake_kwargs = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
        with self._fake_mode:
            node.meta["val"] = META_FORMS.get(op, op)(*fake_args, **fake_kwargs)
        for key in PROVENANCE_KEYS:
            if key in anchor.meta:
                node.meta[key] = anchor.meta[key]
        return node

    def replace(self, old: list[Node], new: Node) -> None:
        """Route the users of old[-1] to new, then erase the chain old[-1], ..., old[0]."""
        old[-1].replace_all_uses_with(new)
        for spec in self.program.graph_signature.output_specs:
            if getattr(spec.arg, "name", None) == old[-1].name:
                spec.arg = type(spec.arg)(name=new.name)
        for node in reversed(old):
            self._touched.update(n for n in node.all_input_nodes)
            self.graph.erase_node(node)

    def redirect(self, old: Node, new: Node, users: list[Node]) -> None:
        """`users` (the output among them) read `new` where they read `old`."""
        for user in users:
            user.replace_input_with(old, new)
            if user.op == "output":
                for spec in self.program.graph_signature.output_specs:
                    if getattr(spec.arg, "name", None) == old.name:
                        spec.arg = type(spec.arg)(name=new.name)

    def release(self, node: Node) -> None:
        """`node` is no longer read: `finish` drops it and the constants only it read."""
        self._touched.update(_ancestors(node) | {node})

    def finish(self) -> ExportedProgram:
        """Drop computations and constants that nothing reads any more, and recompile.

        Export's dtype assertions keep what they check alive; one on a value nothing else reads
        goes too.
        """
        from executorch.backends.transforms.utils import delete_constant_placeholder

        for node in list(self.graph.nodes):
            if node.target == aten._assert_tensor_metadata.default and len(node.args[0].users) == 1:
                self._touched.add(node.args[0])
                self.graph.erase_node(node)
        self.graph.eliminate_dead_code()
        for node in list(self.graph.nodes):
            if (
                node in self._touched
                and node.op == "placeholder"
                and not node.users
                and self.kind(node) in CONSTANT_KINDS
            ):
                delete_constant_placeholder(self.program, node)
        self.program.graph_module.recompile()
        return self.program


@contextlib.contextmanager
def declared_ranges_kept(ep: ExportedProgram):
    """Undo what fake-tensor tracing narrows of the ranges of the program's dynamic sizes.

    PyTorch's fake convolution picks a CPU kernel by asking `C_in * T <= 20480`; answered with the
    example's length, that becomes a guard that cuts T's range at 20480 / C_in (2x the example in
    issue 11's cases). It happens whenever a convolution is traced again: in XNNPACK's 1-D
    convolution pass while lowering, and when a rule emits one. ExecuTorch's memory planning takes
    its upper bounds from those ranges, so the program would fail on any longer input ("resize a
    bounded tensor"). The guard is only a kernel heuristic: the declared ranges hold.
    """
    shape_env = _shape_env(ep)
    declared = dict(shape_env.var_to_range) if shape_env is not None else {}
    try:
        yield
    finally:
        if shape_env is not None:
            shape_env.var_to_range.update(declared)


def _shape_env(ep: ExportedProgram):
    fake_mode = detect_fake_mode([node.meta["val"] for node in ep.graph.nodes if "val" in node.meta])
    return fake_mode.shape_env if fake_mode is not None else None


def size_range(size: torch.SymInt) -> tuple[int, int] | None:
    """(lowest value, at least 1; example value) of a dynamic size, from the program's shape
    environment; None for a size with no finite lower bound or no example (data-dependent)."""
    from torch.utils._sympy.value_ranges import bound_sympy

    symbolic = size.node
    if symbolic.hint is None:
        return None
    try:
        lowest = int(bound_sympy(symbolic.expr, symbolic.shape_env.var_to_range).lower)
    except (TypeError, ValueError, AttributeError, OverflowError):  # -oo: no lower bound
        return None
    return max(1, lowest), int(symbolic.hint)


def inferred_shape(shape) -> list[int]:
    """A view's shape: a symbolic size (the dynamic length, at most one) as -1, which XNNPACK infers."""
    return [size if isinstance(size, int) else -1 for size in shape]


def is_in_place(node: Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable


def _is_view(node: Node) -> bool:
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    returns = node.target._schema.returns
    return bool(returns) and returns[0].alias_info is not None


def written_in_place(node: Node) -> bool:
    """Does an in-place op write `node`, directly or through a view of it?"""
    stack, seen = [node], set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for user in current.users:
            if _writes(user, current):
                return True
            if _is_view(user):
                stack.append(user)
    return False


def _writes(node: Node, operand: Node) -> bool:
    """Does `node` write `operand` in place? `y -= bias` writes y, not bias: only an argument
    that the op's schema marks as written counts."""
    if not is_in_place(node):
        return False
    arguments = node.target._schema.arguments
    values = {**dict(zip((a.name for a in arguments), node.args)), **node.kwargs}
    return any(values.get(a.name) is operand and a.alias_info is not None and a.alias_info.is_write for a in arguments)


class DynamicShape(NotConstant):
    """The value depends on a dynamic size that was not bound."""


def shape_stand_in(node: Node, sizes: dict | None = None) -> torch.Tensor:
    """Zeros with the shape and dtype of `node`, dynamic sizes taken from `sizes` (symbol -> int):
    all a shape-only op reads of its input."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise NotConstant(f"{node.name} is not a tensor")
    try:
        shape = [int(s) if isinstance(s, int) else int(s.node.expr.xreplace(sizes or {})) for s in val.shape]
    except TypeError:  # a symbol left unbound
        raise DynamicShape(f"the shape of {node.name} is not static") from None
    return torch.zeros(shape, dtype=val.dtype)


def _ancestors(node: Node) -> set[Node]:
    seen: set[Node] = set()
    stack = list(node.all_input_nodes)
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(current.all_input_nodes)
    return seen


def user_input_nodes(program: ExportedProgram) -> list[Node]:
    """The placeholders of the program's user inputs, in order; found by position, as a rewrite may
    leave a placeholder's name and its input spec's apart."""
    placeholders = [node for node in program.graph.nodes if node.op == "placeholder"]
    specs = program.graph_signature.input_specs
    return [node for node, spec in zip(placeholders, specs) if spec.kind == InputKind.USER_INPUT]


def functional(program: ExportedProgram) -> ExportedProgram:
    """`program` with in-place ops made functional (state writes become mutated-buffer outputs,
    `y[..., :n] += p` a slice_scatter), as every backend's lowering does first; no op is decomposed.
    The rules then see the values, not aliases that later writes change."""
    if not any(is_in_place(node) for node in program.graph.nodes):
        return program
    return program.run_decompositions({})


def weighted_operands(node: Node) -> tuple[Node, Node, Node | None]:
    """A convolution's or linear layer's (input, weight, bias or None)."""
    return node.args[0], node.args[1], node.args[2] if len(node.args) > 2 else None
