"""The tables of measurements in the README and docs/, generated from results/*.json.

    python -m benchmarks.report           # rewrite every generated table in README.md and docs/*.md
    python -m benchmarks.report --check   # exit 1 if a page differs from what its results say (a test runs this)

A page asks for a table with a pair of markers, the table's kind and its results file:

    <!-- table: models results/models.json -->
    (generated: the machine, the command that measured it, the table)
    <!-- end table -->

so every figure on a page comes from a results file, with the machine it was measured on. The
figures are written by the benchmark scripts; nothing here measures anything.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"(<!-- table: (\S+) (\S+) -->\n)(.*?)(<!-- end table -->)", re.S)


def _machine(meta: dict, command: str, verb: str = "Measured") -> str:
    """Where and how a table was measured: CPU model and family, cores, vector unit, the target
    phaseconv lowered for, threads, the command, the date and the commit."""
    cpu = meta.get("cpu") or "an x86-64 CPU (model not recorded)"
    unit = f", {meta['vector_unit']}" if meta.get("vector_unit") else ""
    memory = f", {meta['memory_gib']:g} GiB of memory" if meta.get("memory_gib") else ""
    family = f" ({meta['cpu_family']}, {meta['cores']} cores{memory})" if meta.get("cpu_family") else ""
    threads = meta.get("threads")
    threads = f", {threads} thread{'s' if str(threads) != '1' else ''}" if threads is not None else ""
    target = f", target {meta['target']}" if meta.get("target") else ""
    when = f" on {meta['date']} at commit {meta['commit']}" if meta.get("date") else ""
    return f"{verb} on {cpu}{family}{unit}{target}{threads} with `{command}`{when}."


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _stock(row: dict) -> tuple[str, float]:
    """The stock program phaseconv is compared with (benchmarks/models.py's baseline)."""
    return row["baseline"], row["ms"][row["baseline"]]


LITERT = ("LiteRT, stock conversion", "LiteRT, phaseconv export")
ISTFT_IN_PYTORCH = "stock, iSTFT in PyTorch"  # benchmarks/models.py's baseline for a model no stock runtime runs


def models(data: dict, threads: tuple[int, ...] = (1, 2), memory: bool = True) -> str:
    """Whole models: stock ExecuTorch, phaseconv, ONNX Runtime and LiteRT (where measured; each as
    converted and by phaseconv's export) and eager PyTorch, in ms; resident memory where measured."""
    litert = any(LITERT[0] in row["ms"] for row in data["models"])
    header = ["model", "threads", "stock ExecuTorch", "phaseconv", "speedup", "ORT", "ORT, phaseconv export"]
    header += ["LiteRT", "LiteRT, phaseconv export"] if litert else []
    header += ["eager PyTorch", "partitions (stock / phaseconv)"]
    rows = []
    for row in data["models"]:
        if row["threads"] not in threads:
            continue
        baseline, stock = _stock(row)
        delegation = row.get("delegation", {})
        partitions = [str(delegation.get(name, {}).get("partitions", "-")) for name in (baseline, "phaseconv")]
        ms = row["ms"]
        rows.append(
            [
                row["model"],
                str(row["threads"]),
                _ms(stock) + (" (t)" if baseline == ISTFT_IN_PYTORCH else ""),
                _ms(ms["phaseconv"]),
                f"{stock / ms['phaseconv']:.2f}x",
                _ms(ms.get("ONNX Runtime, stock export")),
                _ms(ms.get("ONNX Runtime, phaseconv export")),
                *([_ms(ms.get(name)) for name in LITERT] if litert else []),
                _ms(ms.get("eager PyTorch")),
                " / ".join(partitions),
            ]
        )
    runs = data["meta"].get("runs")
    note = f" Milliseconds per call, median of {runs} interleaved runs." if runs else ""
    text = _machine(data["meta"], "python benchmarks/models.py") + note + "\n\n" + _table(header, rows)
    if any(row[2].endswith(" (t)") for row in rows):
        text += (
            "\n\n(t) The stock runtimes (ExecuTorch, ONNX export, LiteRT conversion) all fail on Vocos's "
            "complex spectrum: its stock figures are the network up to the spectrum on that runtime, then "
            "torch.istft in eager PyTorch."
        )
    return text + (_memory(data) if memory else "")


def _memory(data: dict) -> str:
    """Resident memory added at load and by the first call (`models.py --memory`), where measured."""
    rows = [
        [row["model"], program, *(f"{g['load_mib']:.0f} / {g['first_call_mib']:.0f}" for g in loaders.values())]
        for row in data["models"]
        for program, loaders in row.get("memory", {}).items()
    ]
    if not rows:
        return ""
    header = ["model", "program", "default loader: MiB at load / after the first call", "with the weight cache"]
    return (
        "\n\nResident memory each program adds, loaded alone from its file in a fresh process, one thread"
        " (`python benchmarks/models.py --memory`):\n\n" + _table(header, rows)
    )


def headline(data: dict) -> str:
    """The README's table: whole models at one thread."""
    return models(data, threads=(1,), memory=False)


def streaming(data: dict) -> str:
    """pocket-tts's Mimi decoder step, per 80 ms frame, every program interleaved."""
    header = ["config", "threads", "program", "per frame ms", "first audio ms", "p95 ms", "PCM steps vs eager"]
    header += ["SNR vs fp32 step"]
    rows = [
        [
            row["config"],
            str(row["threads"]),
            row["program"],
            _ms(row["median_ms"]),
            _ms(row["first_audio_ms"]),
            _ms(row["p95_ms"]),
            f"{row['pcm_steps']:.3f}" if row["pcm_steps"] < 10 else "-",
            f"{row['snr_db_vs_fp32_step']:.1f} dB" if "int8" in row["program"] else "-",
        ]
        for row in data["rows"]
    ]
    frames = data["meta"].get("frames")
    note = f" Medians over {frames} frames of random latents." if frames else ""
    return _machine(data["meta"], "python benchmarks/streaming.py") + note + "\n\n" + _table(header, rows)


def _planned(row: dict) -> str:
    if "planned_methods_mib" not in row:  # measured before the plans were read
        return "-"
    return f"{row['planned_methods_mib']:.1f} + {row['planned_state_mib']:.1f}"


def _program_own(row: dict) -> list[str]:
    """The growth's shared library code (pages of libtorch the runner ran), and the rest against the file."""
    if "library_code_mib" not in row:  # measured before the split
        return ["-", "-"]
    own = row["first_utterance_mib"] - row["library_code_mib"]
    return [f"{row['library_code_mib']:.1f}", f"{own / row['file_mib']:.2f}"]


def _cpp_peak(row: dict) -> str:
    """The C++ runner's peak resident memory speaking with the program, and against its file."""
    if "cpp_peak_mib" not in row:
        return "-"
    return f"{row['cpp_peak_mib']:.1f} / {row['cpp_peak_mib'] / row['file_mib']:.2f}"


def tts(data: dict) -> str:
    """Text to speech end to end, medians of the interleaved runs, and each program's memory."""
    groups: dict[tuple, list[dict]] = {}
    for row in data["rows"]:
        if "text" in row:
            groups.setdefault((row["config"], row["threads"], row["text"], row["variant"]), []).append(row)
    header = ["config", "threads", "text", "variant", "audio s", "first audio ms", "of it, text prompt ms"]
    header += ["its tokens", "real-time factor", "vs eager", "LM ms / frame", "decoder ms / frame"]

    def median(runs, key):
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) if values else None

    rows = []
    for (config, threads, text, variant), runs in groups.items():
        eager = median(groups[(config, threads, text, "pocket-tts eager")], "real_time_factor")
        rtf = median(runs, "real_time_factor")
        rows.append(
            [
                config,
                str(threads),
                text,
                variant,
                f"{median(runs, 'audio_seconds'):.1f}",
                _ms(median(runs, "first_audio_ms")),
                _ms(median(runs, "prompt_median_ms")),
                str(runs[0].get("first_chunk_tokens", "-")),
                f"{rtf:.3f}",
                f"{eager / rtf:.2f}x",
                _ms(median(runs, "lm_median_ms")),
                _ms(median(runs, "decode_median_ms")),
            ]
        )
    memory = [
        [
            row["config"],
            row["variant"],
            f"{row['file_mib']:.1f}",
            _planned(row),
            f"{row['load_mib']:.1f}",
            f"{row['first_utterance_mib']:.1f}",
            f"{row['first_utterance_mib'] / row['file_mib']:.2f}",
            *_program_own(row),
            _ms(row["reset_ms"]),
            _cpp_peak(row),
        ]
        for row in data["rows"]
        if "file_mib" in row
    ]
    memory_header = [
        "config",
        "program",
        "file MiB",
        "planned: methods + state MiB",
        "resident after load MiB",
        "after a sentence in a voice MiB",
        "/ file",
        "of it, library code MiB",
        "the program's own / file",
        "decoder reset ms",
        "C++ runner peak MiB / file",
    ]
    quality = [
        [
            row["config"],
            row["variant"],
            f"{row['snr_db_vs_fp32']:.1f} dB",
            str(row["eos_frames"]),
            str(row["fp32_eos_frames"]),
        ]
        for row in data["rows"]
        if "snr_db_vs_fp32" in row
    ]
    quality_header = ["config", "program", "SNR vs fp32 program", "end of speech at frame", "fp32: at frame"]
    runs = data["meta"].get("runs")
    return (
        _machine(data["meta"], "python benchmarks/tts.py")
        + f" Medians of {runs} interleaved runs; random weights, end of speech disabled.\n\n"
        + _table(header, rows)
        + "\n\nEach program alone in a fresh process (XNNPACK's weight cache on, as the runner loads it)"
        + (f"; the C++ runner's binary: {binary:.1f} MiB" if (binary := data["meta"].get("runner_binary_mib")) else "")
        + ":\n\n"
        + _table(memory_header, memory)
        + "\n\nQuantized language models against the fp32 program, temperature 0, three sentences"
        + " (end of speech per chunk, under the config's rule):\n\n"
        + _table(quality_header, quality)
    )


# A transcript shows at most this many lines of a command's output: its first, and its last ones.
TRANSCRIPT_LINES = 4


def _elided(output: str) -> str:
    lines = output.splitlines()
    if len(lines) <= TRANSCRIPT_LINES:
        return output
    kept = TRANSCRIPT_LINES - 1
    return "\n".join(
        [lines[0], f"[... {len(lines) - kept} lines: the rewrite's decisions, each method's delegation]"]
        + lines[-(kept - 1) :]
    )


def console(data: dict) -> str:
    """A transcript: each command and what it printed (benchmarks/example.py runs them), long outputs elided."""
    session = "\n".join(f"$ {row['command']}\n{_elided(row['output'])}" for row in data["rows"])
    return _machine(data["meta"], "python benchmarks/example.py", "Run") + "\n\n```console\n" + session + "\n```"


def lstm_loop(data: dict) -> str:
    """An LSTM unrolled or as a loop (`benchmarks/lstm_loop.py`), default loader, one thread."""
    header = ["LSTM form", "ms per call", "max error vs eager", "partitions"]
    header += ["default loader: MiB at load / after the first call", "with the weight cache"]
    rows = [
        [
            row["program"],
            _ms(row["median_ms"]),
            f"{row['max_error']:.1e}",
            str(row["partitions"]),
            *(f"{g['load_mib']:.0f} / {g['first_call_mib']:.0f}" for g in row["memory"].values()),
        ]
        for row in data["rows"]
    ]
    steps = data["rows"][0]["steps"]
    return _machine(data["meta"], data["meta"]["command"]) + f" {steps} steps, one thread.\n\n" + _table(header, rows)


def int8_sensitivity(data: dict) -> str:
    """The int8 step with one part of the decoder fp32 at a time (`benchmarks/int8_sensitivity.py`)."""
    header = ["kept fp32", "module", "SNR vs fp32 step", "gain", "convolution MACs kept fp32"]
    base = data["rows"][0]["snr_db"]
    rows = [
        [
            f"`{row['fp32']}`" if row["fp32"] else "none (every part int8)",
            row["module"] or "-",
            f"{row['snr_db']:.2f} dB",
            f"{row['snr_db'] - base:+.2f} dB",
            f"{100 * row['fp32_macs_share']:.1f}%",
        ]
        for row in data["rows"]
    ]
    meta, config = data["meta"], data["rows"][0]["config"]
    note = f" pocket-tts {config}, SNR over {meta['frames']} frames, {meta['calibration_frames']} calibration frames."
    return _machine(meta, "python benchmarks/int8_sensitivity.py") + note + "\n\n" + _table(header, rows)


def int8_runtimes(data: dict) -> str:
    """int8 on ExecuTorch and on LiteRT, each stock and by phaseconv (`benchmarks/quantized.py --litert`):
    median ms, SNR against fp32 eager in parentheses."""

    def cell(row: dict, program: str) -> str:
        if program in row["ms"]:
            return f"{_ms(row['ms'][program])} ({row['snr_db'][program]:.0f} dB)"
        return "fails" if program in row["failures"] else "-"

    header = ["case", "threads", "ExecuTorch fp32, phaseconv", "ExecuTorch int8", "ExecuTorch int8, phaseconv"]
    header += ["LiteRT fp32", "LiteRT int8", "LiteRT int8, phaseconv export"]
    programs = ["phaseconv fp32", "stock int8", "phaseconv int8", "LiteRT fp32", "LiteRT int8"]
    programs += ["LiteRT int8, phaseconv export"]
    rows = [
        [row["case"], str(row["threads"]), *(cell(row, program) for program in programs)]
        for row in data["rows"]
        if "LiteRT fp32" in row["ms"]
    ]
    return _machine(data["meta"], data["meta"]["command"]) + "\n\n" + _table(header, rows)


ORT_GEMM_KINDS = ("Conv", "FusedConv", "ConvTranspose", "Gemm", "MatMul", "FusedMatMul")


def operators(data: dict) -> str:
    """Where each model's time goes (`benchmarks/operators.py`, ETDump and ONNX Runtime's profiler):
    the convolutions and linear layers against XNNPACK's float32 GEMM at its best on the machine."""
    best = data["meta"]["gemm_gmac_s"]
    header = ["model", "XNNPACK operators ms", "of it convolutions and linears", "their GMAC/s"]
    header += [f"of XNNPACK's best ({best:.0f})", "ORT nodes ms", "of it convolutions and matrix products"]
    rows = []
    for row in data["rows"]:
        layers = row.get("layers", [])
        layer_ms, macs = sum(c["ms"] for c in layers), sum(c["macs"] for c in layers)
        rate = macs / layer_ms / 1e6 if layers else None
        ort_total = sum(ms for ms, _ in row["ort_kinds"].values())
        ort_gemm = sum(row["ort_kinds"].get(kind, [0.0])[0] for kind in ORT_GEMM_KINDS)
        rows.append(
            [
                row["model"],
                _ms(row["total_ms"]),
                _ms(layer_ms) if layers else "-",
                f"{rate:.0f}" if rate else "-",
                f"{rate / best:.0%}" if rate else "-",
                _ms(ort_total),
                _ms(ort_gemm),
            ]
        )
    meta = data["meta"]
    threads = "One thread" if meta["threads"] == 1 else f"{meta['threads']} threads"
    note = f" {threads}, each operator's median over {meta['runs']} calls, summed."
    return _machine(meta, "python benchmarks/operators.py") + note + "\n\n" + _table(header, rows)


def lowering(data: dict) -> str:
    """How long `phaseconv lower pocket-tts-tts:CONFIG` took, where the time went, the memory it held."""
    header = ["config", "cache positions", "seconds", "export s", "slowest methods s", "assembly s"]
    header += ["peak MiB, its process / all its processes", "file MiB"]
    rows = []
    for row in data["rows"]:
        slowest = sorted(row["methods_s"].items(), key=lambda item: -item[1])[:3]
        workers = f" ({row['workers']} worker{'s' if row['workers'] > 1 else ''})" if row.get("workers") else ""
        rows.append(
            [
                row["config"] + workers,
                str(row["capacity"]),
                f"{row['seconds']:.0f}",
                f"{row['export_s']:.1f}",
                ", ".join(f"{name} {seconds:.0f}" for name, seconds in slowest),
                f"{row['assemble_s']:.1f}",
                f"{row['process_mib']:.0f} / {row['processes_mib']:.0f}",
                f"{row['file_mib']:.0f}",
            ]
        )
    command = "python benchmarks/lowering.py"
    note = (
        " One run each, the methods lowered in one worker process per core unless said, random weights; memory"
        " as proportional set size (a page two processes share counts half in each), sampled every 250 ms."
    )
    return _machine(data["meta"], command) + note + "\n\n" + _table(header, rows)


def tts_limits(data: dict) -> str:
    """pocket-tts's methods per call against their floors (bytes / read rate, MACs / best kernel rate),
    then the language model step's time per kind of XNNPACK operator."""
    machine = data["meta"]["floors"]
    rates = ", ".join(f"{kernel} {rate:.1f}" for kernel, rate in machine["kernels"].items())
    header = ["config", "LM", "method", "part", "MiB read", "MMAC", "ms a call", "in operators ms", "floor ms", "bound"]
    header += ["call / floor"]
    rows = [
        [
            r["config"],
            r["quantize"],
            r["method"],
            r["part"],
            f"{r['bytes'] / 2**20:.1f}",
            f"{r['macs'] / 1e6:.1f}",
            _ms(r["ms"]),
            _ms(r["operators_ms"]),
            _ms(r["floor_ms"]),
            f"{r['bound']} ({r['read_gb_s']:.1f} GB/s)" if r["bound"] == "memory" else f"compute ({r['kernel']})",
            f"{r['of_floor']:.2f}",
        ]
        for r in data["rows"]
    ]
    steps = [r for r in data["rows"] if "operator_ms" in r]
    kinds = sorted({k for r in steps for k in r["operator_ms"]}, key=lambda k: -steps[-1]["operator_ms"].get(k, 0))

    def share(row: dict, kind: str) -> str:
        ms = row["operator_ms"].get(kind, 0.0)
        return f"{ms:.3f} ({ms / sum(row['operator_ms'].values()):.0%})"

    shown = [
        k for k in kinds if any(r["operator_ms"].get(k, 0) >= 0.01 * sum(r["operator_ms"].values()) for r in steps)
    ]
    operators = [[kind] + [share(r, kind) for r in steps] for kind in shown]
    rest = [sum(ms for k, ms in r["operator_ms"].items() if k not in shown) for r in steps]
    operators.append([f"the other {len(kinds) - len(shown)} kinds"] + [f"{ms:.3f}" for ms in rest])
    note = (
        f" One core; memory read {machine['read_1gib_gb_s']:.1f} GB/s over 1 GiB (the rate at each method's own"
        f" size is in its row); XNNPACK's best rates, GMAC/s: {rates}. A call timed through ExecuTorch's Python"
        " binding (median of consecutive calls); in operators: the ETDump times of its operators summed."
    )
    command = "python benchmarks/tts_limits.py"
    step_header = ["operator (the LM step, ETDump)"] + [f"{r['quantize']}: ms (share)" for r in steps]
    return (
        _machine(data["meta"], command) + note + "\n\n" + _table(header, rows) + "\n\n" + _table(step_header, operators)
    )


def frames_per_call(data: dict) -> str:
    """pocket-tts's decoder step over 1, 2 and 4 frames a call, per frame, against one a call."""
    header = ["config", "precision", "frames a call", "ms per frame", "against one a call", "GMAC/s", "of best GEMM"]
    single = {(r["config"], r["precision"]): r["ms_per_frame"] for r in data["rows"] if r["frames_per_call"] == 1}
    rows = [
        [
            row["config"],
            row["precision"],
            str(row["frames_per_call"]),
            _ms(row["ms_per_frame"]),
            f"{row['ms_per_frame'] / single[(row['config'], row['precision'])]:.2f}x",
            f"{row['gmac_s']:.1f}",
            f"{row['gmac_s'] / row['gemm_best_gmac_s']:.0%}",
        ]
        for row in data["rows"]
    ]
    meta = data["meta"]
    note = f" One thread, `--target {meta['target']}`, medians over {meta['runs']} calls interleaved."
    return _machine(meta, "python benchmarks/frames_per_call.py") + note + "\n\n" + _table(header, rows)


def serve(data: dict) -> str:
    """`phaseconv serve` over loopback: a request's first audio at the client, and where it went."""
    header = ["config", "threads", "first audio at the client ms (median / p95)", "runner's first audio ms"]
    header += ["voice ms", "HTTP overhead ms", "real-time factor", "server MiB after 1st / last request", "file MiB"]
    rows = [
        [
            row["config"],
            str(row["threads"]),
            f"{_ms(row['client_first_audio_ms'])} / {_ms(row['client_first_audio_p95_ms'])}",
            _ms(row["runner_first_audio_ms"]),
            _ms(row["voice_ms"]),
            _ms(row["overhead_ms"]),
            f"{row['real_time_factor']:.3f}",
            f"{row['rss_after_first_mib']:.0f} / {row['rss_after_last_mib']:.0f}",
            f"{row['file_mib']:.0f}",
        ]
        for row in data["rows"]
    ]
    note = f" Medians over {data['rows'][0]['requests']} requests, one after another, random weights."
    return _machine(data["meta"], "python benchmarks/serve.py") + note + "\n\n" + _table(header, rows)


def machine(data: dict) -> str:
    """One line: the machine and the day a results file was measured (the README's lead)."""
    meta = data["meta"]
    memory = f", {meta['memory_gib']:g} GiB of memory" if meta.get("memory_gib") else ""
    family = f" ({meta['cpu_family']}, {meta['cores']} cores{memory})" if meta.get("cpu_family") else ""
    unit = f", {meta['vector_unit']}" if meta.get("vector_unit") else ""
    when = f" on {meta['date']} at commit {meta['commit']}" if meta.get("date") else ""
    return f"The tables here were last measured on {meta.get('cpu', 'an x86-64 CPU')}{family}{unit}{when}."


TABLES: dict[str, Callable[[dict], str]] = {
    "console": console,
    "frames_per_call": frames_per_call,
    "headline": headline,
    "int8_runtimes": int8_runtimes,
    "int8_sensitivity": int8_sensitivity,
    "lowering": lowering,
    "lstm_loop": lstm_loop,
    "machine": machine,
    "models": models,
    "operators": operators,
    "serve": serve,
    "streaming": streaming,
    "tts": tts,
    "tts_limits": tts_limits,
}


def render(text: str) -> str:
    """`text` with every marked table generated anew from its results file."""

    def fill(match: re.Match) -> str:
        opening, kind, path, _, closing = match.groups()
        if kind not in TABLES:
            raise SystemExit(f"unknown table {kind!r} (known: {', '.join(TABLES)})")
        data = json.loads((ROOT / path).read_text())
        return f"{opening}{TABLES[kind](data)}\n{closing}"

    return MARKER.sub(fill, text)


def stale_pages() -> list[Path]:
    """The pages whose tables differ from what their results files say."""
    return [page for page in PAGES if render(page.read_text()) != page.read_text()]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = stale_pages()
        for page in stale:
            print(f"{page.relative_to(ROOT)}: a table differs from its results file; run python -m benchmarks.report")
        return 1 if stale else 0
    for page in PAGES:
        text = page.read_text()
        if render(text) != text:
            page.write_text(render(text))
            print(f"wrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
