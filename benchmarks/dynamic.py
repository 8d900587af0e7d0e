"""Dynamic lengths: one program for every length, against the stock dynamic program and phaseconv's
static program of each length, through the runtime at 1 thread.

    python benchmarks/dynamic.py [--runs 10] [--only NAME] [--json results/dynamic.json]

Per model: export phaseconv.prepare(model) with a Dim on its time axis; lower it stock and after
phaseconv.rewrite (both with the declared range kept, see README); export it again at each length
with static shapes and rewrite that. At each length the three programs run interleaved; reported:
medians, the error of each against eager, delegation of the dynamic programs.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.workers import save_results  # noqa: E402

console = Console(width=200)


def cases():
    """(name, build() -> (module, example inputs), time axis, shortest, longest, lengths timed)."""
    from phaseconv.models import audio, transformers_audio

    return [
        ("HiFi-GAN V1", partial(transformers_audio.hifigan, 40, "v1"), 1, 2, 400, (50, 100, 237)),
        ("SpeechT5 HiFi-GAN", partial(transformers_audio.hifigan, 40), 1, 2, 400, (50, 100, 237)),
        ("DAC decoder", partial(transformers_audio.dac_decoder, 0.3), 2, 2, 64, (7, 20, 64)),
        ("SEANet decoder", partial(audio.seanet_decoder, 10), 2, 1, 100, (7, 25, 100)),
        ("Mimi decoder", partial(transformers_audio.mimi_latents_decoder, 4), 2, 2, 64, (3, 25, 64)),
    ]


def measure(name, build, axis, shortest, longest, lengths, runs) -> list[dict]:
    import torch
    from torch.export import Dim

    import phaseconv
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.timing import interleaved_times, median_ms

    module, (example,) = build()
    module = phaseconv.prepare(module)
    with torch.no_grad():
        dynamic = torch.export.export(module, (example,), dynamic_shapes=({axis: Dim("t", min=shortest, max=longest)},))
    lowered = {
        "stock dynamic": phaseconv.lower(dynamic, rewrite=False),
        "phaseconv dynamic": phaseconv.lower(dynamic, target="host"),
    }
    loaded = {n: LoadedProgram(p.buffer) for n, p in lowered.items()}
    declined = [d.to_dict() for d in lowered["phaseconv dynamic"].decisions if not d.applied]
    rows = []
    for length in lengths:
        shape = list(example.shape)
        shape[axis] = length
        x = torch.randn(shape, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            expected = module(x)
            static = phaseconv.lower(torch.export.export(module, (x,)), target="host")
        programs = {**loaded, "phaseconv static": LoadedProgram(static.buffer)}
        errors = {n: float((p.run((x,))[0] - expected).abs().max() / expected.abs().max()) for n, p in programs.items()}
        times = interleaved_times({n: partial(p.run, (x,)) for n, p in programs.items()}, runs, 2)
        rows.append(
            {
                "model": name,
                "length": length,
                "range": [shortest, longest],
                "ms": {n: median_ms(t) for n, t in times.items()},
                "relative_error": errors,
                "delegation": {n: p.summary.to_dict() for n, p in {**lowered, "phaseconv static": static}.items()},
                "declined": declined,
            }
        )
        print(name, length, {n: round(v, 2) for n, v in rows[-1]["ms"].items()}, flush=True)
    return rows


def table(rows: list[dict]) -> Table:
    result = Table(title="one dynamic program vs stock dynamic and phaseconv static, 1 thread, median ms")
    columns = ("model", "length", "stock dynamic", "phaseconv dynamic", "phaseconv static")
    columns += ("dynamic vs stock", "dynamic / static", "partitions", "outside (stock -> phaseconv)")
    for column in columns:
        result.add_column(column, justify="left" if column == "model" else "right")
    for row in rows:
        ms, delegation = row["ms"], row["delegation"]
        outside = [sum(delegation[n]["outside"].values()) for n in ("stock dynamic", "phaseconv dynamic")]
        result.add_row(
            row["model"],
            str(row["length"]),
            *(f"{ms[n]:.1f}" for n in ("stock dynamic", "phaseconv dynamic", "phaseconv static")),
            f"{ms['stock dynamic'] / ms['phaseconv dynamic']:.2f}x",
            f"{ms['phaseconv dynamic'] / ms['phaseconv static']:.2f}",
            f"{delegation['stock dynamic']['partitions']} -> {delegation['phaseconv dynamic']['partitions']}",
            f"{outside[0]} -> {outside[1]}",
        )
    return result


def main(
    runs: int = typer.Option(10, help="timed rounds per length (median reported)"),
    only: str = typer.Option("", help="run only models whose name contains this"),
    json_path: Path = typer.Option(Path("results/dynamic.json"), "--json", help="where to write the results"),
) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(1)  # before any program is loaded
    rows = []
    for case in cases():
        if only.lower() in case[0].lower():
            rows += measure(*case, runs)
    console.print(table(rows))
    from phaseconv.targets import host_target

    save_results(
        json_path, rows, "model" if only else None, runs=runs, threads=1, target=host_target()
    )  # --only: its rows updated
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
