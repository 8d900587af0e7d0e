"""Stand-ins for the files a pocket-tts model reads, for models with random weights: a tokenizer and
a voice prompt, made here in seconds.

pocket-tts's tokenizers live on a hub this machine does not reach, and a model with random weights
reads any text equally badly: what matters is that the tokenizer has exactly the config's `n_bins`
pieces (pocket-tts asserts it), knows every character of the text, so that the runner and pocket-tts
split and read the text the same way, and cuts English into about as many tokens as an English
tokenizer does (a prompt costs what its tokens do). A sentencepiece unigram model trained on English
prose (Python's own documentation, which every Python carries) and every printable ASCII character,
as a `.model` or converted to a tokenizers `.json`, the two kinds the shipped configs use. The voice is
a synthesized buzz: any audio conditions a random model as well as speech would. A Hugging Face
cache folder laid out as the hub leaves it holds a config's files under their real names (random
weights, the stand-in tokenizer, a built-in voice made by pocket-tts's own code): the commands
then run as a user runs them.
"""

from __future__ import annotations

import contextlib
import functools
import re
import string
from pathlib import Path

from phaseconv.errors import PhaseconvError

# A line of prose: letters, spaces and the marks of sentences, at least four words.
PROSE = re.compile(r"[A-Za-z][A-Za-z ,.;:'()-]*(?: [A-Za-z,.;:'()-]+){3,}")


@functools.cache  # the standard library parsed once a process
def corpus() -> tuple[str, ...]:
    """English prose: the lines of Python's own documentation (its language reference and its standard
    library's module docstrings) that are sentences, then every printable ASCII character."""
    import ast
    import sysconfig
    from pydoc_data.topics import topics

    texts = list(topics.values())
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        with contextlib.suppress(SyntaxError, UnicodeDecodeError):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            texts += [ast.get_docstring(node) or "" for node in ast.walk(tree) if isinstance(node, documented)]
    lines = [line.strip() for text in texts for line in text.splitlines()]
    return (*[line for line in lines if PROSE.fullmatch(line)], string.printable.strip())


def stand_in_tokenizer(path: Path, n_bins: int) -> Path:
    """Write a tokenizer of exactly `n_bins` pieces to `path`: a sentencepiece unigram `.model`, or the
    same model converted to a tokenizers `.json` (the same ids), as pocket-tts's configs ship them."""
    if path.suffix not in (".json", ".model"):
        raise PhaseconvError(f"{path}: a tokenizer is a sentencepiece .model or a tokenizers .json")
    model = _train_sentencepiece(n_bins)
    path.write_bytes(_as_tokenizers_json(model) if path.suffix == ".json" else model)
    return path


def _train_sentencepiece(n_bins: int) -> bytes:
    import io

    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()),
        model_writer=model,
        vocab_size=n_bins,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
    )
    return model.getvalue()


def _as_tokenizers_json(model: bytes) -> bytes:
    """A sentencepiece unigram model as tokenizers' own converter writes it (SentencePieceUnigramTokenizer.from_spm)."""
    import sys
    import tempfile

    from sentencepiece import sentencepiece_model_pb2
    from tokenizers.implementations import SentencePieceUnigramTokenizer

    sys.modules.setdefault("sentencepiece_model_pb2", sentencepiece_model_pb2)  # where from_spm looks for it
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "tokenizer.model").write_bytes(model)
        return SentencePieceUnigramTokenizer.from_spm(str(Path(folder) / "tokenizer.model")).to_str().encode()


def stand_in_voice(path: Path, seconds: float = 2.5, rate: int = 16000) -> Path:
    """A buzz with a tremolo, then 0.3 s of silence: 16-bit mono WAV at `rate` (resampled when read)."""
    import wave

    import numpy as np

    t = np.arange(int(rate * seconds)) / rate
    signal = 0.3 * np.sin(2 * np.pi * 140 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    signal = np.concatenate([signal, np.zeros(int(rate * 0.3))])
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((signal * 32767).astype("<i2").tobytes())
    return path


def cache_file(root: Path, hub_path: str) -> Path:
    """Where the hub's file lies in the cache under `root` (HF_HOME): hub/models--owner--repo/snapshots/rev/file."""
    from phaseconv.models.pocket_tts import hub

    repo, filename, revision = hub._split(hub_path)
    path = root / "hub" / f"models--{repo.replace('/', '--')}" / "snapshots" / revision / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def stand_in_cache(root: Path, config: str, cloning: bool = True, voices=("alba",), seed: int = 0) -> dict:
    """The config's files in a cache under `root`: the weights (at the voice-cloning path, or the public
    one), its tokenizer and the built-in `voices` (the stand-in voice's state). Returns their paths."""
    import safetensors.torch
    import torch
    from pocket_tts.models.model_state import export_model_state
    from pocket_tts.utils.utils import get_predefined_voice

    from phaseconv.models.pocket_tts import hub
    from phaseconv.tts.source import build_tts

    settings = hub.load_config(config)
    tts = build_tts(config, seed=seed)
    weights = cache_file(root, settings.weights_path if cloning else settings.weights_path_without_voice_cloning)
    safetensors.torch.save_file({k: v.contiguous() for k, v in tts.state_dict().items()}, weights)
    lookup = settings.flow_lm.lookup_table
    tokenizer = stand_in_tokenizer(cache_file(root, lookup.tokenizer_path), lookup.n_bins)
    wav = stand_in_voice(root / "voice.wav")
    paths = {"weights": weights, "tokenizer": tokenizer, "wav": wav}
    for name in voices:
        with torch.no_grad():
            state = tts.get_state_for_audio_prompt(wav, truncate=True)
        paths[name] = cache_file(root, get_predefined_voice(language=config, name=name))
        export_model_state(state, paths[name])
    return paths


def environment(root: Path) -> dict:
    """The variables that point the hub's client at the cache, offline."""
    return {"HF_HOME": str(root), "HF_HUB_OFFLINE": "1"}


@contextlib.contextmanager
def offline_cache(root: Path):
    """This process's hub client pointed at the cache under `root`, offline (as environment() does for
    a new process: huggingface_hub reads its variables once, at import)."""
    from huggingface_hub import constants

    saved = constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE
    constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE = str(root / "hub"), True
    try:
        yield
    finally:
        constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE = saved
