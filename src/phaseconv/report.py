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


def rule_counts(decisions: list[Decision]) -> dict[str, tuple[int, int, str]]:
    """Per rule, in the order rules first decide: (applied, declined, the most common reason it declined)."""
    from collections import Counter

    counts: dict[str, tuple[int, int, Counter]] = {}
    for d in decisions:
        applied, declined, reasons = counts.get(d.rule, (0, 0, Counter()))
        if not d.applied:
            reasons[d.reason] += 1
        counts[d.rule] = (applied + d.applied, declined + (not d.applied), reasons)
    return {
        rule: (applied, declined, reasons.most_common(1)[0][0] if reasons else "")
        for rule, (applied, declined, reasons) in counts.items()
    }


def summary_lines(decisions: list[Decision]) -> list[str]:
    """The decisions in two lines: what each rule rewrote, what each left alone and its most common reason."""
    if not decisions:
        return ["no candidate node"]
    counts = rule_counts(decisions)
    applied = [(rule, n) for rule, (n, _, _) in counts.items() if n]
    declined = [(rule, n, reason) for rule, (_, n, reason) in counts.items() if n]
    lines = []
    if applied:
        total = sum(n for _, n in applied)
        lines.append(f"rewrote {total} node(s): " + ", ".join(f"{rule} x{n}" for rule, n in applied))
    if declined:
        total = sum(n for _, n, _ in declined)
        parts = ", ".join(f"{rule} x{n} ({reason})" for rule, n, reason in declined)
        lines.append(f"left {total} alone: {parts}; `phaseconv explain` (or --verbose) says why, node by node")
    return lines


def rules_table(decisions: list[Decision], title: str = "phaseconv rewrite") -> Table:
    """The decisions per rule: how many it rewrote, how many it left alone and why, most often."""
    table = Table(title=title)
    for column in ("rule", "rewritten", "left alone", "most common reason"):
        table.add_column(column)
    for rule, (applied, declined, reason) in rule_counts(decisions).items():
        table.add_row(rule, str(applied), str(declined), reason)
    if not decisions:
        table.add_row("-", "0", "0", "no candidate node")
    return table
