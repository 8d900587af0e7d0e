"""What a rule is: match a node, check it (a plan, or a Skip with the reason), apply the plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch.fx import Node

from phaseconv.graph.program import ProgramEditor


@dataclass(frozen=True)
class Skip:
    """A rule declines a node; `reason` says why, in words a user can act on."""

    reason: str


class Rule:
    """A graph pattern and its rewrite.

    The driver (rewrite.py) runs the stages in order (sets.STAGES): every rule of a stage is planned
    on the program the stages before it left, then all its plans are applied, so a rule's `check`
    sees the graph as the earlier stages left it and no plan of its own stage applied. Within a stage,
    a node goes to the rules in their set's order and the first that plans it takes it; every rule
    that matches it and declines leaves a decision. `check` must not edit the graph; `apply` edits it
    only through the editor (ProgramEditor), which plans and checks nothing."""

    name: str
    stage: int = 1  # see sets.STAGES

    def candidates(self, editor: ProgramEditor) -> list[Node] | None:
        """The candidate nodes, where they depend on more than the node (the program's signature, a
        region of nodes); None: every node `matches` takes."""
        return None

    def matches(self, node: Node) -> bool:
        """Is this node a candidate for the rule at all (every candidate gets a decision)."""
        raise NotImplementedError

    def check(self, node: Node, editor: ProgramEditor) -> Any | Skip:
        """A plan that `apply` can carry out, or Skip(reason). Must not edit the graph."""
        raise NotImplementedError

    def describe(self, plan: Any) -> str:
        """One line on what applying the plan does."""
        raise NotImplementedError

    def apply(self, plan: Any, editor: ProgramEditor) -> None:
        """Rewrite the graph as planned."""
        raise NotImplementedError
