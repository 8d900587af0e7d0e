"""The report: one Decision per candidate node, and the one function that renders them."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rich.table import Table


@dataclass(frozen=True)
class Decision:
    """What a rule decided for one node. `reason` is empty when applied; `detail` says what was done."""

    node: str
    rule: str
    applied: bool
    reason: str = ""
    detail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def decisions_table(decisions: list[Decision], title: str = "phaseconv rewrite") -> Table:
    table = Table(title=title)
    for column in ("node", "rule", "applied", "reason / what was done"):
        table.add_column(column)
    for d in decisions:
        table.add_row(d.node, d.rule, "yes" if d.applied else "no", d.detail if d.applied else d.reason)
    if not decisions:
        table.add_row("-", "-", "-", "no candidate node")
    return table


def decision_lines(decisions: list[Decision]) -> list[str]:
    """The decisions one per line, for pipes and narrow terminals: node, rule, yes/no, reason."""
    if not decisions:
        return ["no candidate node"]
    return [
        f"{d.node}  {d.rule}  {'yes' if d.applied else 'no'}  {d.detail if d.applied else d.reason}" for d in decisions
    ]
