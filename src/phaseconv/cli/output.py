"""How the commands print what the library returns: decisions, delegation summaries, files written."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from phaseconv.cli.app import console

# Copies of shared weights that a load without XNNPACK's weight cache packs: said from 1 MiB on.
REPACKED_WORTH_SAYING = 2**20


def compact() -> bool:
    """Tables wrap into unreadable cells when piped or narrow: print one line per row instead."""
    return not console.is_terminal or console.width < 110


def line(text: str) -> None:
    console.print(text, highlight=False, soft_wrap=True)


def show_decisions(decisions, verbose: bool = True) -> None:
    """Every decision, node by node (verbose), or a summary per rule."""
    from phaseconv.report import decision_lines, decisions_table, rules_table, summary_lines

    if compact():
        for text in (decision_lines if verbose else summary_lines)(decisions):
            line(text)
    else:
        console.print((decisions_table if verbose else rules_table)(decisions))


def numbered_methods(summaries: dict) -> list[tuple[list[str], object]]:
    """The methods in order, those named alike but for a number (generate_0, generate_1, ...: one per
    block of a KV cache) as one entry when they have as many partitions and layout transposes:
    (names, the last one's summary)."""
    groups: dict[str, list[str]] = {}
    for name in summaries:
        base, _, number = name.rpartition("_")
        groups.setdefault(base if base and number.isdigit() else name, []).append(name)
    entries = []
    for names in groups.values():
        names.sort(key=lambda name: int(name.rpartition("_")[2]) if name.rpartition("_")[2].isdigit() else -1)
        shapes = {(summaries[n].partitions, summaries[n].layout_transposes) for n in names}
        entries += [(names, summaries[names[-1]])] if len(shapes) == 1 else [([n], summaries[n]) for n in names]
    return entries


def counts(items) -> str:
    """(operator, count) pairs as "name xN, ...", or "none"."""
    return ", ".join(f"{k} x{v}" for k, v in items) or "none"


def delegation_table(summaries: dict, title: str = "delegation") -> Table:
    """Delegation summaries side by side: partitions, layout transposes, nodes inside, ops outside."""
    table = Table(title=title)
    table.add_column("program")
    for column in ("partitions", "layout transposes", "XNNPACK nodes", "operators outside"):
        table.add_column(column)
    for name, summary in summaries.items():
        table.add_row(
            name,
            str(summary.partitions),
            str(summary.layout_transposes),
            counts(sorted(summary.inside.items())),
            counts(sorted(summary.outside.items())),
        )
    return table


def show_summaries(summaries: dict) -> None:
    if not compact():
        console.print(delegation_table(summaries))
    else:
        for names, summary in numbered_methods(summaries):
            top, outside = counts(summary.inside.most_common(4)), counts(sorted(summary.outside.items()))
            label = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} (each; counts of {names[-1]})"
            line(
                f"{label}: {summary.partitions} partition(s), {summary.layout_transposes} layout transposes; "
                f"inside: {top}; outside: {outside}"
            )
    for name, summary in summaries.items():
        if summary.repacked_bytes >= REPACKED_WORTH_SAYING:
            line(
                f"{name}: {summary.repacked_weights} XNNPACK operators read a weight another one reads "
                f"({summary.repacked_bytes / 2**20:.1f} MiB): load it with XNNPACK's weight cache on "
                "(backend option weight_cache_enabled; phaseconv's runtime does), or each packs a copy of its own "
                "(for a loader without the cache: lower --no-weight-cache)"
            )
        if summary.run_time_weights:
            line(
                f"{name}: {summary.run_time_weights} XNNPACK operators take their weight at run time "
                "(--no-weight-cache): packed at each call, one copy in memory"
            )


def show_written(files: list[Path]) -> None:
    line("wrote " + ", ".join(f"{f} ({f.stat().st_size:,} bytes)" for f in files))


def show_stages(stages) -> None:
    """Where a lowering's time and memory went: each stage, the process that ran it, its peak."""
    header = ("process", "method", "stage", "seconds", "peak MiB", "MiB at its end (PSS)")
    rows = [
        (s.process, s.method or "", s.stage, f"{s.seconds:.1f}", f"{s.peak_mib:.0f}", f"{s.end_pss_mib:.0f}")
        for s in stages
    ]
    if compact():
        for row in rows:
            line(
                " ".join(f"{name}={value}" for name, value in zip(("process", "method", "stage"), row[:3]) if value)
                + f": {row[3]} s, peak {row[4]} MiB, {row[5]} MiB at its end"
            )
        return
    table = Table(title="where the time and memory went (peak: resident memory of that process)")
    for column in header:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console.print(table)
