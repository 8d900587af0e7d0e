"""The driver: plan every rewrite on a copy of the program, then apply them all."""

from __future__ import annotations

from pathlib import Path

from torch.export import ExportedProgram

from phaseconv.files import write_atomically
from phaseconv.graph.program import ProgramEditor, copy_graph, declared_ranges_kept, functional
from phaseconv.report import Decision
from phaseconv.rules import Skip, resolve_rules


def require_program(ep) -> None:
    if not isinstance(ep, ExportedProgram):
        raise TypeError(
            f"expected a torch.export.ExportedProgram, got {type(ep).__module__}.{type(ep).__qualname__}; "
            "export the model first: ep = torch.export.export(model, example_inputs)"
        )


def _plan(editor: ProgramEditor, rules) -> tuple[list[Decision], list]:
    decisions, plans = [], []
    found = {rule.name: set(nodes) for rule in rules if (nodes := rule.candidates(editor)) is not None}
    for node in list(editor.graph.nodes):
        for rule in rules:
            if not (node in found[rule.name] if rule.name in found else rule.matches(node)):
                continue
            plan = rule.check(node, editor)
            if isinstance(plan, Skip):
                decisions.append(Decision(node.name, rule.name, False, plan.reason))
                continue
            decisions.append(Decision(node.name, rule.name, True, detail=rule.describe(plan)))
            plans.append((rule, plan))
            break
    return decisions, plans


def rewrite_with_report(ep: ExportedProgram, rules=None) -> tuple[ExportedProgram, list[Decision]]:
    """The rewritten copy of `ep` and the decision for every candidate node.

    Rules run in stages (rules.sets.STAGES), each planned whole on what the stages before it left.
    """
    require_program(ep)
    rules = resolve_rules(rules)
    program = functional(copy_graph(ep))
    decisions = []
    with declared_ranges_kept(program):
        for number in sorted({r.stage for r in rules}):
            stage = [r for r in rules if r.stage == number]
            editor = ProgramEditor(program)
            stage_decisions, plans = _plan(editor, stage)
            for rule, plan in plans:
                rule.apply(plan, editor)
            program = editor.finish()
            decisions += stage_decisions
    return program, decisions


def rewrite_and_convert(ep: ExportedProgram, rules, convert, path=None) -> tuple[bytes, list[Decision]]:
    """A peer runtime's model: `convert(rewrite(ep, rules))` (bytes), written to `path` atomically
    if given, and the rewrite decisions."""
    rewritten, decisions = rewrite_with_report(ep, rules)
    model = convert(rewritten)
    if path is not None:
        write_atomically(Path(path), model)
    return model, decisions


def rewrite(ep: ExportedProgram, rules=None) -> ExportedProgram:
    """A new program with every applicable rule applied; `ep` itself is not changed."""
    return rewrite_with_report(ep, rules)[0]


def explain(ep: ExportedProgram, rules=None) -> list[Decision]:
    """One Decision per candidate node: which rule, applied or not, and why not."""
    return rewrite_with_report(ep, rules)[1]
