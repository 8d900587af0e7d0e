"""Where int8 loses the streaming step's SNR: each part of the decoder left fp32 in turn.

    python benchmarks/int8_sensitivity.py [--config english_2026-09] [--frames 50]
                                          [--json results/int8_sensitivity.json]

The step is quantized as `benchmarks/streaming.py` quantizes it (`phaseconv.quantize`, static int8,
40 calibration frames of other random latents, fed in order), once with every part in int8 and once
per part with `keep_float=[part]`, the parts being the decoder's top-level modules. Per variant: the
SNR of its audio over `--frames` frames against the fp32 step's, run in eager on the quantized
program (`convert_pt2e`'s arithmetic, which the lowered program follows: the runtime figure is in
`benchmarks/streaming.py`), and the share of the step's convolution multiply-adds left fp32.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.streaming import CALIBRATION_FRAMES, calibration_frames  # noqa: E402
from benchmarks.workers import save_results  # noqa: E402

console = Console(width=160)


def parts(step) -> list[str]:
    """The decoder's top-level modules, in the order the step runs them."""
    names = ["mimi.quantizer", "mimi.upsample", "mimi.decoder_transformer"]
    return names + [f"mimi.decoder.model.{i}" for i in range(len(step.mimi.decoder.model))]


def conv_macs(program, names: list[str]) -> int:
    """Multiply-adds per call of the program's convolutions that come from the named modules."""
    import math

    import torch

    from phaseconv.graph.keep_float import from_modules

    convs = (torch.ops.aten.conv1d.default, torch.ops.aten.conv_transpose1d.default)
    total = 0
    for node in program.graph.nodes:
        if node.target in convs and from_modules(node, names):
            weight = node.args[1].meta["val"]
            spatial = node.meta["val"].shape[-1] if node.target == convs[0] else node.args[0].meta["val"].shape[-1]
            total += math.prod(weight.shape) * spatial
    return total


def main(
    config: str = typer.Option("english_2026-09", help="a config shipped with pocket-tts"),
    frames: int = typer.Option(50, min=2, help="frames of audio the SNR is measured over"),
    json_path: Path = typer.Option(Path("results/int8_sensitivity.json"), "--json", help="where to write the results"),
) -> None:
    import torch

    import phaseconv
    from phaseconv.models.pocket_tts import MimiStep, build_mimi
    from phaseconv.quantize import snr_db

    step = MimiStep(build_mimi(config))
    latents = torch.randn(1, frames, step.latent_dim, generator=torch.Generator().manual_seed(0))
    calibration = calibration_frames(step.latent_dim)
    with torch.no_grad():
        ep = torch.export.export(step, (latents[:, :1],))

    def audio(program) -> torch.Tensor:
        module = copy.deepcopy(program.module())  # a fresh state
        with torch.no_grad():
            return torch.cat([module(latents[:, i : i + 1]) for i in range(frames)], dim=-1)

    reference = audio(ep)
    every = conv_macs(ep, ["mimi"])
    rows = []
    for kept in [[], *([part] for part in parts(step))]:
        with console.status(f"int8, {kept[0] if kept else 'every part'} fp32: quantizing, {frames} frames"):
            quantized = phaseconv.quantize(ep, calibration, keep_float=kept)
            rows.append(
                {
                    "config": config,
                    "fp32": kept[0] if kept else None,
                    "module": type(step.get_submodule(kept[0])).__name__ if kept else None,
                    "snr_db": snr_db(reference, audio(quantized)),
                    "fp32_macs_share": conv_macs(ep, kept) / every,
                }
            )
        console.print(f"{rows[-1]['fp32'] or 'every part int8'}: {rows[-1]['snr_db']:.2f} dB")
    console.print(table(rows))
    save_results(json_path, rows, frames=frames, calibration_frames=CALIBRATION_FRAMES, target="none: eager", threads=1)
    console.print(f"wrote {json_path}")


def table(rows: list[dict]) -> Table:
    result = Table(title="int8 step, one part fp32 at a time: SNR against the fp32 step")
    for column in ("fp32 part", "module", "SNR", "gain", "conv MACs fp32"):
        result.add_column(column)
    base = rows[0]["snr_db"]
    for row in rows:
        gain = f"{row['snr_db'] - base:+.2f} dB"
        share = f"{100 * row['fp32_macs_share']:.1f}%"
        result.add_row(row["fp32"] or "none", row["module"] or "-", f"{row['snr_db']:.2f} dB", gain, share)
    return result


if __name__ == "__main__":
    typer.run(main)
