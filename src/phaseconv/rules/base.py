"""What a rule is: match a node, check it (a plan, or a Skip with the reason), apply the plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from torch.fx import Node

from phaseconv.graph.program import ProgramEditor


@dataclass(frozen=True)
class Skip:
    """A rule declines a node; `reason` says why, in words a user can act on."""

    reason: str


class Rule(Protocol):
    """A graph pattern and its rewrite. A rule may set `stage` (default 1): rules of a stage are
    planned on the result of the stages before it (0: constant folding, 2: clean-ups)."""

    name: str

    def matches(self, node: Node) -> bool:
        """Is this node a candidate for the rule at all (every candidate gets a decision)."""

    def check(self, node: Node, editor: ProgramEditor) -> Any | Skip:
        """A plan that `apply` can carry out, or Skip(reason). Must not edit the graph."""

    def describe(self, plan: Any) -> str:
        """One line on what applying the plan does."""

    def apply(self, plan: Any, editor: ProgramEditor) -> None:
        """Rewrite the graph as planned."""
