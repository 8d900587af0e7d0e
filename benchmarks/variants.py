"""The design choices, measured: each case runs stock and two phaseconv variants interleaved.

    python benchmarks/variants.py [--runs 20] [--json results/variants.json]

- depthwise: one depthwise conv per phase + cat (default) vs one conv with channel multiplier s^D;
- activation: a ReLU after the deconvolution left after the interleave (default) or moved in front;
- constant_operands: the MI-GAN-like generator with and without that rule;
- ELU: XNNPACK's own ELU (what phaseconv.lower enables) vs the elu rule's decomposition, on a
  SEANet-like conv + ELU stack and on the Mimi-like demo decoder;
- lift_1d: real 1-D decoders (prepared) lowered as phaseconv.lower does, with and without that rule.
- crop_by_phase: the 2-D generators, their cropped depthwise up-filters computed phase by phase
  (each phase conv reads its own input window) or cropped after the interleave.
- split_conv: the 1-D decoders with wide convolutions, split by output channel or kept whole; and
  the models' convolutions one at a time, every one split (the rule's part widths, no thresholds)
  or whole: where the rule's thresholds come from.
- im2col: the models' convolutions one at a time as a GEMM over their shifted windows or as
  XNNPACK's IGEMM convolution (where the rule's thresholds come from), and the decoders lowered
  for x86-fma3 (Winograd and im2col) or for any CPU.
- winograd: the models' 1-D convolutions (2-11 taps, dilated too) as F(2, r) or as im2col, and the decoders
  lowered for x86-fma3 with and without it.
- x86-avx512: the 2-D generators lowered for x86-avx512 (Winograd for wide stride-1 3x3 kernels) or for any;
  SD 1.x's VAE decoder with that target's limit for large outputs (256 channels beyond 128x128) or without.
- fold: the 32-channel convolutions folded in time before F(2, r), or left to XNNPACK's IGEMM, and the
  HiFi-GANs lowered for x86-fma3 with and without the fold.
- shape_chains: the decoders and MI-GAN as phaseconv.lower lowers them (view chains moved on the
  channels-last buffer, the ops after an interleave lifted) or through NCHW as before.
- padded_taps: Mimi's decoder on one frame, its convolutions' taps that read only zero padding
  dropped (phaseconv.lower) or kept.
- weight_cache: the decoders lowered for the host, loaded with XNNPACK's weight cache (packed
  weights shared by the operators reading one constant: an unrolled LSTM's steps) or without it
  (the pip build's default: a private packed copy per operator).
- transposed_linear: pocket-tts's decoder step (16 rows per linear), Vocos (94) and the decoders
  lowered for x86-avx512 with the linears of 8-128 rows weight first, or without;
- short_conv: the same, with the large-weight 1-D convolutions of 8-128 steps as windows and a
  weight-first linear, or without.
- interleaved_rope: pocket-tts's decoder steps (english_18m, english_2026-09) lowered for x86-avx512-amd,
  RoPE's interleaved pairs as a pair-swapping linear and products, or as pocket-tts writes them.
- no_weight_cache: EnCodec's decoder loaded without the cache, lowered as `phaseconv lower` does
  (a private packed copy of each recurrent weight per step) or as `lower --no-weight-cache` does
  (the shared weights given at run time, packed at each step).

    python benchmarks/variants.py --only lift_1d   # a subset; its rows are updated in the results
    python benchmarks/variants.py --only split_conv --threads 2

A variant is a rule list (lowered with the stock partitioner) or (rules, to_xnnpack keywords, and
`loaded_with_cache` for LoadedProgram); a case is a module or the exported program stock ExecuTorch lowers.
"""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.workers import save_results  # noqa: E402

console = Console(width=150)
# The models' convolutions, (c_out, c_in, kernel, dilation, size): split_conv's and im2col's cases.
MODEL_CONVOLUTIONS = {
    "DAC 384 k7 d3, 1984 steps": (384, 384, (7, 1), 3, (1984, 1)),
    "DAC 768 k7 d3, 248 steps": (768, 768, (7, 1), 3, (248, 1)),
    "DAC 1024->1536 k7, 31 steps": (1536, 1024, (7, 1), 1, (31, 1)),
    "DAC 384->768 k2, 1985 steps": (768, 384, (2, 1), 1, (1985, 1)),
    "DAC 192 k7 d3, 7936 steps": (192, 192, (7, 1), 3, (7936, 1)),
    "HiFi-GAN V1 256 k7 d3, 800 steps": (256, 256, (7, 1), 3, (800, 1)),
    "HiFi-GAN V1 256 k11 d5, 800 steps": (256, 256, (11, 1), 5, (800, 1)),
    "HiFi-GAN V1 256->1024 k2, 801 steps": (1024, 256, (2, 1), 1, (801, 1)),
    "Mimi 512->1024 k7, 50 steps": (1024, 512, (7, 1), 1, (50, 1)),
    "Mimi 512->256 k3, 400 steps": (256, 512, (3, 1), 1, (400, 1)),
    "U-Net 256 3x3, 16x16": (256, 256, (3, 3), 1, (16, 16)),
    "Mimi 128->64 k3, 12000 steps": (64, 128, (3, 1), 1, (12000, 1)),
    "Mimi 64->32 k3, 48000 steps": (32, 64, (3, 1), 1, (48000, 1)),
    "HiFi-GAN V1 32 k7 d3, 25600 steps": (32, 32, (7, 1), 3, (25600, 1)),
    "MI-GAN 64 3x3, 128x128": (64, 64, (3, 3), 1, (128, 128)),
    "U-Net 64 3x3, 128x128": (64, 64, (3, 3), 1, (128, 128)),
    "HiFi-GAN V1 256 k11, 800 steps": (256, 256, (11, 1), 1, (800, 1)),
    "HiFi-GAN V1 128 k11, 6400 steps": (128, 128, (11, 1), 1, (6400, 1)),
    "HiFi-GAN V1 128 k7, 6400 steps": (128, 128, (7, 1), 1, (6400, 1)),
    "HiFi-GAN V1 64 k11, 12800 steps": (64, 64, (11, 1), 1, (12800, 1)),
    "HiFi-GAN V1 32 k7, 25600 steps": (32, 32, (7, 1), 1, (25600, 1)),
    "HiFi-GAN V1 32 k11, 25600 steps": (32, 32, (11, 1), 1, (25600, 1)),
    "HiFi-GAN V1 32 k3, 25600 steps": (32, 32, (3, 1), 1, (25600, 1)),
    "32 k5, 25600 steps": (32, 32, (5, 1), 1, (25600, 1)),
    "HiFi-GAN V1 32 k11 d5, 25600 steps": (32, 32, (11, 1), 5, (25600, 1)),
}
SPLIT_CANDIDATES = list(MODEL_CONVOLUTIONS)[:11]


def model_convolution(label: str):
    """(conv, after_depthwise, inputs) of MODEL_CONVOLUTIONS[label]: the "same"-padded Conv2d, and
    it reading a depthwise 1x1 convolution's output, as in a network (XNNPACK keeps that
    channels-last; a program input comes in NCHW, and the rules' window copies then cost transposes)."""
    import torch
    from torch import nn

    c_out, c_in, kernel, dilation, size = MODEL_CONVOLUTIONS[label]
    padding = (dilation * (kernel[0] - 1) // 2, (kernel[1] - 1) // 2)
    conv = nn.Conv2d(c_in, c_out, kernel, padding=padding, dilation=(dilation, 1))
    after_depthwise = nn.Sequential(nn.Conv2d(c_in, c_in, 1, groups=c_in), nn.ReLU(), conv)
    return conv, after_depthwise, (torch.randn(1, c_in, *size),)


def main(
    runs: int = typer.Option(20, help="timed rounds per case (median reported)"),
    threads: int = typer.Option(1, help="XNNPACK threads"),
    only: str = typer.Option("", help="only cases whose name contains this"),
    json_path: Path = typer.Option(Path("results/variants.json"), "--json", help="where to write the results"),
) -> None:
    from phaseconv.runtimes.executorch import set_threads

    set_threads(threads)  # before any program is loaded

    import torch
    from torch import nn

    import phaseconv
    from phaseconv.lowering.xnnpack import PHASECONV_LOWERING, to_xnnpack
    from phaseconv.models import DEMO_MODELS
    from phaseconv.rules import AVX512_SHORT_CONV, AVX512_WINOGRAD, DEFAULT_RULES, LOWERING_RULES, TARGET_RULES
    from phaseconv.rules.conv_transpose import ConvTransposeRule
    from phaseconv.rules.im2col import Im2colRule
    from phaseconv.rules.lift_1d import Lift1dRule
    from phaseconv.rules.split_conv import SplitConvRule
    from phaseconv.rules.winograd import WinogradRule
    from phaseconv.runtimes.executorch import LoadedProgram
    from phaseconv.runtimes.timing import interleaved_times, median_ms

    def others(*excluded: str) -> list:
        return [rule for rule in DEFAULT_RULES if rule.name not in excluded]

    torch.manual_seed(0)
    migan, migan_inputs = DEMO_MODELS["migan"]()
    cases = [
        (
            "depthwise 512 k4 s2 T=25 (Mimi frame upsampler)",
            nn.ConvTranspose1d(512, 512, 4, 2, 1, groups=512, bias=False),
            (torch.randn(1, 512, 25),),
            {"per-phase convs + cat": None, "channel multiplier": [ConvTransposeRule(split_depthwise=False)]},
        ),
        (
            "depthwise 128 k4 s2 p1 64x64 (MI-GAN filter)",
            nn.ConvTranspose2d(128, 128, 4, 2, 1, groups=128, bias=False),
            (torch.randn(1, 128, 64, 64),),
            {"per-phase convs + cat": None, "channel multiplier": [ConvTransposeRule(split_depthwise=False)]},
        ),
        (
            "2d 128->64 k4 s2 p1 64x64 + ReLU",
            nn.Sequential(nn.ConvTranspose2d(128, 64, 4, 2, 1), nn.ReLU()),
            (torch.randn(1, 128, 64, 64),),
            {"ReLU after (default)": None, "ReLU before interleave": [ConvTransposeRule(commute_activations=True)]},
        ),
        (
            "1d 512->256 k16 s8 T=25 + ReLU",
            nn.Sequential(nn.ConvTranspose1d(512, 256, 16, 8), nn.ReLU()),
            (torch.randn(1, 512, 25),),
            {"ReLU after (default)": None, "ReLU before interleave": [ConvTransposeRule(commute_activations=True)]},
        ),
        (
            "MI-GAN-like generator 128x128 fp32",
            migan,
            migan_inputs,
            {"all rules": None, "without constant_operands": others("constant_operands")},
        ),
    ]

    class EluStack(nn.Module):
        """SEANet's residual unit shape: ELU, Conv1d(k7), ELU, Conv1d(k1), skip; twice."""

        def __init__(self, channels=128):
            super().__init__()
            self.convs = nn.ModuleList(nn.Conv1d(channels, channels, k, padding=k // 2) for k in (7, 1, 7, 1))

        def forward(self, x):
            for first, second in zip(self.convs[::2], self.convs[1::2]):
                x = x + second(nn.functional.elu(first(nn.functional.elu(x))))
            return x

    mimi, mimi_inputs = DEMO_MODELS["mimi-decoder"]()
    as_lowered = (LOWERING_RULES, PHASECONV_LOWERING)  # what phaseconv.lower does
    cases += [
        (
            "ELU + Conv1d(128, 128, 7/1) x2, T=8000",
            EluStack(),
            (torch.randn(1, 128, 8000),),
            {
                "XNNPACK's ELU (phaseconv.lower)": as_lowered,
                "ELU decomposed (elu rule)": (DEFAULT_RULES, {"shape_chains": True}),
            },
        ),
        (
            "Mimi-like decoder (demo), 12 frames",
            mimi,
            mimi_inputs,
            {
                "XNNPACK's ELU (phaseconv.lower)": as_lowered,
                "ELU decomposed (elu rule)": (DEFAULT_RULES, {"shape_chains": True}),
            },
        ),
    ]
    from phaseconv.models import transformers_audio

    decoders = {
        "Mimi decoder 1 frame": lambda: transformers_audio.mimi_latents_decoder(1),
        "Mimi decoder 25 frames": lambda: transformers_audio.mimi_latents_decoder(25),
        "SpeechT5 HiFi-GAN 100 frames": lambda: transformers_audio.hifigan(100),
        "HiFi-GAN V1 100 frames": lambda: transformers_audio.hifigan(100, "v1"),
        "EnCodec 24 kHz decoder 1 s": lambda: transformers_audio.encodec_decoder(1.0),
        "DAC decoder 1 s": lambda: transformers_audio.dac_decoder(1.0),
    }

    def with_and_without(rule: str, labels: tuple[str, ...], applied: str, left: str) -> None:
        """Real decoders (prepared) lowered as phaseconv.lower does, and the same without `rule`."""
        without = (tuple(r for r in LOWERING_RULES if r.name != rule), as_lowered[1])
        for label in labels:
            if only.lower() in f"{label} ({rule})".lower():
                module, inputs = decoders[label]()
                variants = {applied: as_lowered, left: without}
                cases.append((f"{label} ({rule})", phaseconv.prepare(module), inputs, variants))

    with_and_without(
        "lift_1d",
        ("Mimi decoder 25 frames", "SpeechT5 HiFi-GAN 100 frames", "EnCodec 24 kHz decoder 1 s", "DAC decoder 1 s"),
        "lift_1d (phaseconv.lower)",
        "1-D convs left 3-D",
    )
    from phaseconv.models import image, stylegan, unet

    def folded(build) -> tuple:
        """The generator's program with its constants folded, and its inputs: stock ExecuTorch lowers
        the StyleGAN2-like network only so (as in models.py)."""
        module, inputs = build()
        with torch.no_grad():
            program = torch.export.export(phaseconv.prepare(module).eval(), inputs)
            return phaseconv.rewrite(program, ["fold_constants"]), inputs

    crop_after = tuple(
        ConvTransposeRule(crop_by_phase=False) if rule.name == "conv_transpose" else rule for rule in LOWERING_RULES
    )
    for label, build in (
        ("MI-GAN-like 128x128", image.migan_generator),
        ("StyleGAN2-like", stylegan.stylegan2_generator),
    ):
        if only.lower() in f"{label} (crop_by_phase)".lower():
            variants = {
                "crop by phase (phaseconv.lower)": as_lowered,
                "crop after interleave": (crop_after, PHASECONV_LOWERING),
            }
            cases.append((f"{label} (crop_by_phase)", *folded(build), variants))
    forced = [SplitConvRule(min_weight_bytes=0, min_taps=1, min_positions=1, spatial_dims=(1, 2))]
    every_im2col = [Im2colRule(min_in_channels=1, max_taps=math.inf, max_window_bytes=math.inf)]
    host = TARGET_RULES["x86-fma3"]
    not_folded = tuple(WinogradRule(min_fold_taps=math.inf) if r.name == "winograd" else r for r in host)
    # as phaseconv.lower lowers for the host: the fold's views then move rows on the channels-last buffer
    fold_variants = {"for x86-fma3": (host, PHASECONV_LOWERING), "not folded": (not_folded, PHASECONV_LOWERING)}
    for label, (_, c_in, kernel, _, _) in MODEL_CONVOLUTIONS.items():
        conv, after_depthwise, x = model_convolution(label)
        if label in SPLIT_CANDIDATES:
            variants = {"every one split": forced, "whole": []}
            cases.append((f"{label} (split_conv)", nn.Sequential(nn.ReLU(), conv, nn.ReLU()), x, variants))
        chain = nn.Sequential(*after_depthwise, nn.ReLU())
        variants = {"as a GEMM (every one)": every_im2col, "IGEMM convolution": []}
        cases.append((f"{label} (im2col)", chain, x, variants))
        if kernel[0] <= 11 and kernel[1] == 1:
            variants = {"Winograd F(2, r)": [WinogradRule(min_channels=1)], "im2col": every_im2col}
            cases.append((f"{label} (winograd)", chain, x, variants))
        if c_in == 32 and kernel[1] == 1:
            cases.append((f"{label} (fold)", chain, x, fold_variants))
    for label in decoders:
        if only.lower() in f"{label} (im2col)".lower():
            module, inputs = decoders[label]()
            variants = {"for x86-fma3": (host, PHASECONV_LOWERING), "for any": as_lowered}
            cases.append((f"{label} (im2col)", phaseconv.prepare(module), inputs, variants))
        if only.lower() in f"{label} (winograd)".lower():
            module, inputs = decoders[label]()
            im2col_only = (tuple(r for r in host if r.name != "winograd"), PHASECONV_LOWERING)
            variants = {"for x86-fma3": (host, PHASECONV_LOWERING), "im2col only": im2col_only}
            cases.append((f"{label} (winograd)", phaseconv.prepare(module), inputs, variants))
    avx512 = (TARGET_RULES["x86-avx512"], PHASECONV_LOWERING)
    for label, build in (
        ("MI-GAN-like 128x128", image.migan_generator),
        ("StyleGAN2-like", stylegan.stylegan2_generator),
        ("U-Net 128x128", unet.unet),
    ):
        if only.lower() in f"{label} (x86-avx512)".lower():
            variants = {"for x86-avx512": avx512, "for any": as_lowered}
            cases.append((f"{label} (x86-avx512)", *folded(build), variants))
    label = "SD 1.x VAE decoder 32x32 latents (x86-avx512 large outputs)"
    if only.lower() in label.lower():
        from phaseconv.models.diffusers_vae import vae_decoder

        unlimited = copy.copy(AVX512_WINOGRAD)
        unlimited.large_outputs = math.inf
        any_size = tuple(unlimited if r is AVX512_WINOGRAD else r for r in TARGET_RULES["x86-avx512"])
        variants = {"for x86-avx512": avx512, "128 channels at any size": (any_size, PHASECONV_LOWERING)}
        cases.append((label, *folded(lambda: vae_decoder(32)), variants))
    for label in ("HiFi-GAN V1 100 frames", "SpeechT5 HiFi-GAN 100 frames"):
        if only.lower() in f"{label} (fold)".lower():
            module, inputs = decoders[label]()
            cases.append((f"{label} (fold)", phaseconv.prepare(module), inputs, fold_variants))
    before_chains = (tuple(Lift1dRule() if r.name == "lift_1d" else r for r in LOWERING_RULES), {"xnnpack_elu": True})
    for label, build in [*decoders.items(), ("MI-GAN-like 128x128", image.migan_generator)]:
        if only.lower() in f"{label} (shape_chains)".lower():
            module, inputs = build()
            variants = {"shape chains on the buffer (phaseconv.lower)": as_lowered, "through NCHW": before_chains}
            cases.append((f"{label} (shape_chains)", phaseconv.prepare(module), inputs, variants))
    for label in ("EnCodec 24 kHz decoder 1 s", "Mimi decoder 25 frames"):
        if only.lower() in f"{label} (weight_cache)".lower():
            module, inputs = decoders[label]()
            shared, private = (host, PHASECONV_LOWERING), (host, {**PHASECONV_LOWERING, "loaded_with_cache": False})
            variants = {"weight cache (phaseconv's runtime)": shared, "private packed weights": private}
            cases.append((f"{label} (weight_cache)", phaseconv.prepare(module), inputs, variants))
    label = "EnCodec 24 kHz decoder 1 s"
    if only.lower() in f"{label} (no_weight_cache)".lower():
        module, inputs = decoders[label]()
        private = {**PHASECONV_LOWERING, "loaded_with_cache": False}
        variants = {
            "private packed weights (lower)": (host, private),
            "weights at run time (lower --no-weight-cache)": (host, {**private, "weight_cache": False}),
        }
        cases.append((f"{label} (no_weight_cache)", phaseconv.prepare(module), inputs, variants))
    with_and_without("padded_taps", ("Mimi decoder 1 frame",), "taps on zeros dropped", "every tap kept")

    def without(*removed) -> tuple:
        return tuple(r for r in avx512[0] if r not in removed), avx512[1]

    transposed_linear = next(r for r in avx512[0] if r.name == "transposed_linear")
    # short_conv's linear for AVX-512 is there for transposed_linear to take: without it, without both
    weight_first = {"for x86-avx512": avx512, "without either": without(transposed_linear, AVX512_SHORT_CONV)}
    windows = {"for x86-avx512": avx512, "without short_conv": without(AVX512_SHORT_CONV)}
    for label in ("pocket-tts english_2026-09 step", "Vocos mel-24khz 94 frames", *decoders):
        for rule, variants in (("transposed_linear", weight_first), ("short_conv", windows)):
            if only.lower() not in f"{label} ({rule})".lower():
                continue
            if label.startswith("pocket-tts"):
                from phaseconv.models.pocket_tts import MimiStep, build_mimi

                module, inputs = MimiStep(build_mimi("english_2026-09")), (torch.randn(1, 1, 32),)
            elif label.startswith("Vocos"):  # its iSTFT rewritten first: stock ExecuTorch does not lower it
                from phaseconv.models.vocos import mel_vocoder

                module, inputs = mel_vocoder(94)
                module = phaseconv.rewrite(torch.export.export(module, inputs), ["istft"])
            else:
                module, inputs = decoders[label]()
            module = module if isinstance(module, torch.export.ExportedProgram) else phaseconv.prepare(module)
            cases.append((f"{label} ({rule})", module, inputs, variants))
    amd = (TARGET_RULES["x86-avx512-amd"], PHASECONV_LOWERING)
    without_rope = (tuple(r for r in amd[0] if r.name != "interleaved_rope"), amd[1])
    for config in ("english_18m_2026-10", "english_2026-09"):
        label = f"pocket-tts {config} step (interleaved_rope)"
        if only.lower() in label.lower():
            from phaseconv.models.pocket_tts import MimiStep, build_mimi

            variants = {"for x86-avx512-amd": amd, "RoPE as pocket-tts writes it": without_rope}
            cases.append((label, MimiStep(build_mimi(config)), (torch.randn(1, 1, 32),), variants))
    with_and_without(
        "split_conv",
        ("DAC decoder 1 s", "HiFi-GAN V1 100 frames", "SpeechT5 HiFi-GAN 100 frames", "Mimi decoder 25 frames"),
        "split by output channel (phaseconv.lower)",
        "convolutions whole",
    )
    rows = []
    for name, module, inputs, variants in cases:
        if only.lower() not in name.lower():
            continue
        if isinstance(module, torch.export.ExportedProgram):
            ep = module
        else:
            with torch.no_grad():
                ep = torch.export.export(module.eval(), inputs)
        variants = {
            label: v if isinstance(v, tuple) and isinstance(v[-1], dict) else (v, {}) for label, v in variants.items()
        }
        programs = {"stock": (ep, {})} | {
            label: (phaseconv.rewrite(ep, rules), options) for label, (rules, options) in variants.items()
        }
        loaded = {}
        for label, (program, options) in programs.items():
            lowering = {k: v for k, v in options.items() if k != "loaded_with_cache"}
            weight_cache = options.get("loaded_with_cache", True)
            loaded[label] = LoadedProgram(to_xnnpack(program, **lowering).buffer, weight_cache=weight_cache)
        times = interleaved_times({k: (lambda p=p, x=inputs: p.run(x)) for k, p in loaded.items()}, runs)
        if threads != 1:
            name = f"{name} [{threads} threads]"
        rows.append({"case": name, "ms": {label: median_ms(samples) for label, samples in times.items()}})

    table = Table(title=f"design choices, ExecuTorch XNNPACK, {threads} thread(s), median of {runs} interleaved runs")
    for column in ("case", "stock ms", "default ms", "alternative", "alternative ms"):
        table.add_column(column)
    for row in rows:
        (default, default_ms), (alternative, alternative_ms) = list(row["ms"].items())[1:]
        table.add_row(
            row["case"],
            f"{row['ms']['stock']:.3f}",
            f"{default_ms:.3f} ({default})",
            alternative,
            f"{alternative_ms:.3f}",
        )
    console.print(table)
    save_results(
        json_path, rows, "case" if only else None, runs=runs, threads=threads, target="per case"
    )  # a partial run updates its rows
    console.print(f"wrote {json_path}")


if __name__ == "__main__":
    typer.run(main)
