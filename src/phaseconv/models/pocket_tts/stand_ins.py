"""Stand-ins for the files a pocket-tts model reads, for models with random weights: a tokenizer and
a voice prompt, made here in about a second.

pocket-tts's tokenizers live on a hub this machine does not reach, and a model with random weights
reads any text equally badly: what matters is that the tokenizer has exactly the config's `n_bins`
pieces (pocket-tts asserts it) and knows every character of the text, so that the runner and
pocket-tts split and read the text the same way. Trained on pseudo-English (words of random
syllables, every ASCII letter, digit and punctuation mark), as a sentencepiece `.model` or as a
tokenizers `.json`, the two kinds the shipped configs use. The voice is a synthesized buzz: any
audio conditions a random model as well as speech would.
"""

from __future__ import annotations

import random
import string
from pathlib import Path

from phaseconv.errors import PhaseconvError

ONSETS = "b c d f g h j k l m n p r s t v w y z ch sh th st tr pl bl gr qu x".split()  # noqa: SIM905
NUCLEI = "a e i o u ai ea ee oo ou ie y".split()  # noqa: SIM905
CODAS = ["", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck", "x"]
MARKS = ".,;:!?'\"-()"


def corpus(lines: int = 6000, seed: int = 0) -> list[str]:
    """Pseudo-English sentences over every printable ASCII character."""
    rng = random.Random(seed)
    words = sorted(
        {
            "".join(rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS) for _ in range(rng.randint(1, 3)))
            for _ in range(20000)
        }
    )
    words += list(string.ascii_letters + string.digits) + [str(n) for n in range(100)]
    sentences = []
    for _ in range(lines):
        chosen = [rng.choice(words) for _ in range(rng.randint(3, 14))]
        chosen[0] = chosen[0].capitalize()
        sentence = " ".join(w + (rng.choice(MARKS[1:]) if rng.random() < 0.08 else "") for w in chosen)
        sentences.append(sentence + rng.choice(".!?."))
    sentences.append(string.printable.strip())
    return sentences


def stand_in_tokenizer(path: Path, n_bins: int) -> Path:
    """Write a tokenizer of exactly `n_bins` pieces to `path` (.model: sentencepiece, .json: tokenizers)."""
    if path.suffix == ".json":
        _train_tokenizers(path, n_bins)
    elif path.suffix == ".model":
        _train_sentencepiece(path, n_bins)
    else:
        raise PhaseconvError(f"{path}: a tokenizer is a sentencepiece .model or a tokenizers .json")
    return path


def _train_sentencepiece(path: Path, n_bins: int) -> None:
    import io

    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()),
        model_writer=model,
        vocab_size=n_bins,
        model_type="bpe",
        character_coverage=1.0,
        minloglevel=2,
    )
    path.write_bytes(model.getvalue())


def _train_tokenizers(path: Path, n_bins: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=n_bins, special_tokens=["<unk>"], show_progress=False)
    tokenizer.train_from_iterator(corpus(), trainer)
    if tokenizer.get_vocab_size() != n_bins:
        raise PhaseconvError(f"the stand-in corpus gave {tokenizer.get_vocab_size()} pieces, not {n_bins}")
    tokenizer.save(str(path))


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
