"""A text-to-speech program loaded for speaking: its methods by the contract's names (contract.py),
its settings and its tokenizer."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from phaseconv.errors import PhaseconvError
from phaseconv.tts.contract import (
    METHODS,
    Settings,
    decode_method,
    first_frame_method,
    generate_method,
    prompt_method,
    voice_method,
)

# Methods every program has (prompt_B, generate_B, decode_N and voice_NAME: those its settings name).
REQUIRED = [m.name for m in METHODS if not m.name.endswith(("_B", "_NAME", "_N")) and m.name != "tokenizer"]


class SpeechProgram:
    """A loaded text-to-speech program: its methods (`methods`: those to load, default all), the
    settings it carries and its tokenizer (`tokenizer`: a file to use instead)."""

    def __init__(self, path: Path, methods=None, tokenizer: Path | None = None):
        from phaseconv.runtimes.executorch import LoadedProgram
        from phaseconv.runtimes.pte import data_file

        data = data_file(path)
        start = time.perf_counter()
        self.program = LoadedProgram(path, data, methods=methods)
        self.load_ms = (time.perf_counter() - start) * 1e3
        if "settings" not in self.program.all_methods:
            raise PhaseconvError(
                f"{path} is not a text-to-speech program: it has no settings "
                "(make one with `phaseconv lower pocket-tts-tts:CONFIG`)"
            )
        try:
            self.settings = Settings.from_json(self.program.run((), "settings")[0], str(path))
        except (ValueError, TypeError) as error:
            raise PhaseconvError(str(error)) from None
        wanted = REQUIRED + [generate_method(b) for b in self.settings.generate_blocks]
        wanted += [method(b) for b in self.settings.prompt_blocks for method in (prompt_method, first_frame_method)]
        wanted += [decode_method(frames) for frames in self.settings.decode_frames]
        missing = [name for name in wanted if name not in self.program.all_methods]
        if missing:
            raise PhaseconvError(f"{path} is not a whole text-to-speech program: it has no {', '.join(missing)}")
        self.path = path
        self._tokenizer_file = tokenizer
        start = time.perf_counter()
        if decode_method(1) in self.program.method_names:
            self.warm_decoder()
        if first_frame_method(self.settings.prompt_blocks[0]) in self.program.method_names:
            self.warm_prompts()
        self.load_ms += (time.perf_counter() - start) * 1e3

    @property
    def voices(self) -> list[str]:
        return sorted(self.settings.voices)

    def tokenizer(self):
        """pocket-tts's tokenizer for the program's own tokenizer file (or the one given instead)."""
        from phaseconv.tts.source import load_tokenizer

        if self._tokenizer_file is not None:
            return load_tokenizer(self._tokenizer_file, self.settings.n_bins)
        if self.settings.tokenizer is None:
            raise PhaseconvError(f"{self.path} carries no tokenizer: give --tokenizer (the config's .model or .json)")
        (data,) = self.program.run((), "tokenizer")
        suffix = ".json" if self.settings.tokenizer == "tokenizers" else ".model"
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"tokenizer{suffix}"
            path.write_bytes(data.numpy().tobytes())
            return load_tokenizer(path, self.settings.n_bins)

    def builtin_voice(self, name: str) -> torch.Tensor:
        return self.program.run((), voice_method(name))[0]

    def prompt(self, embeddings: torch.Tensor, positions: torch.Tensor, last: int) -> list:
        """Conditioning at `positions` (at most settings.prompt_tokens), by the prompt method whose
        blocks hold `last`, the last of them."""
        return self.program.run((embeddings, positions), prompt_method(self.settings.prompt_block(last)))

    def first_frame(self, embeddings: torch.Tensor, positions: torch.Tensor, noise: torch.Tensor) -> list:
        """A chunk's last text tokens at `positions` but the last (at most settings.prompt_tokens), then
        its first frame at the last, by the prompt ladder's method whose blocks hold the frame."""
        method = first_frame_method(self.settings.prompt_block(int(positions[-1])))
        return self.program.run((embeddings, positions, noise), method)

    def generate(self, latent: torch.Tensor, start: torch.Tensor, noise: torch.Tensor, position: int) -> list:
        """One frame at `position`, by the frame method whose blocks hold it."""
        method = generate_method(self.settings.generate_block(position))
        return self.program.run((latent, start, noise, torch.tensor([position])), method)

    def decode_frames(self, latents: torch.Tensor) -> torch.Tensor:
        """latents [1, N, latent_dim] at once (N in settings.decode_frames) -> pcm [N, frame_size]."""
        (pcm,) = self.program.run((latents,), decode_method(latents.shape[1]))
        return pcm.reshape(latents.shape[1], -1)

    def warm_decoder(self) -> None:
        """One frame of silence decoded, then the decoder reset: its first call's set-up (XNNPACK's
        workspace, the first touch of its planned memory) paid while loading, not after the text."""
        self.decode_frames(torch.zeros(1, 1, self.settings.latent_dim))
        self.reset_decoder()

    def warm_prompts(self) -> None:
        """Each prompt method once at its largest call, then the cache cleared: the same set-up (a
        method of a run-time token count sizes its workspace at its first call) paid while loading."""
        s = self.settings
        tokens, noise = torch.zeros(1, s.prompt_tokens, s.dim), torch.zeros(1, s.latent_dim)
        for block in s.prompt_blocks:
            self.program.run((tokens, torch.arange(s.prompt_tokens)), prompt_method(block))
            self.program.run((tokens, torch.arange(s.prompt_tokens + 1), noise), first_frame_method(block))
        self.clear_cache()

    def __getattr__(self, method: str) -> Callable:
        if method not in REQUIRED:
            raise AttributeError(method)
        return lambda *inputs: self.program.run(inputs, method)
