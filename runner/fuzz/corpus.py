"""The fuzz targets' seed corpus: real files of each kind a reader takes, made here (a stand-in
tokenizer of both kinds, a WAV voice, a voice state as pocket-tts exports one, a program's settings,
texts), one folder per kind, and the tokenizer the text reader splits with.

    python runner/fuzz/corpus.py FOLDER
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CONFIG = "english_2m_2026-10"


def main(folder: Path) -> None:
    import torch
    from pocket_tts.models.model_state import export_model_state

    from phaseconv.models.pocket_tts import hub
    from phaseconv.models.pocket_tts.language_model import CACHE_BLOCK, with_cache
    from phaseconv.tts.build import settings_of
    from phaseconv.tts.source import Model, build_tts
    from phaseconv.tts.stand_ins import _as_tokenizers_json, corpus, stand_in_tokenizer, stand_in_voice

    if (folder / "done").exists():
        return
    kinds = {kind: folder / kind for kind in ("voice-state", "wav", "tokenizers", "sentencepiece", "settings", "text")}
    for path in kinds.values():
        path.mkdir(parents=True, exist_ok=True)
    n_bins = hub.load_config(CONFIG).flow_lm.lookup_table.n_bins
    stand_in_tokenizer(folder / "tokenizer.model", n_bins)
    (kinds["sentencepiece"] / "tokenizer.model").write_bytes((folder / "tokenizer.model").read_bytes())
    stand_in_tokenizer(kinds["tokenizers"] / "tokenizer.json", n_bins)
    small = small_tokenizer(folder)  # the same structures in a few KB: mutations of it run fast
    (kinds["sentencepiece"] / "small.model").write_bytes(small)
    (kinds["tokenizers"] / "small.json").write_bytes(_as_tokenizers_json(small))
    for seconds, rate in ((0.3, 16000), (0.2, 24000), (0.1, 44100)):
        stand_in_voice(kinds["wav"] / f"voice_{rate}.wav", seconds=seconds, rate=rate)
    tts = build_tts(CONFIG, tokenizer=kinds["tokenizers"] / "tokenizer.json")
    with torch.no_grad():
        state = tts.get_state_for_audio_prompt(kinds["wav"] / "voice_24000.wav", truncate=True)
    export_model_state(state, kinds["voice-state"] / "voice.safetensors")
    model = Model(tts, CONFIG, "random", True, kinds["tokenizers"] / "tokenizer.json")
    settings = settings_of(model, with_cache(tts.flow_lm, 4 * CACHE_BLOCK), None, None)
    (kinds["settings"] / "settings.json").write_text(settings.to_json())
    for number, line in enumerate(corpus()[:2000:100]):
        (kinds["text"] / f"text_{number}.txt").write_text(line)
    (kinds["text"] / "unicode.txt").write_text("Caf\u00e9 \u2019quotes\u2019 \u2014 \u00fcber 42%; \u4e2d\u6587. Done!")
    (folder / "done").write_text(json.dumps(sorted(str(p) for p in folder.rglob("*") if p.is_file())))


def small_tokenizer(folder: Path) -> bytes:
    """A sentencepiece unigram model of a hundred-odd pieces whose normalization rules (its precompiled
    character map) are a handful of user rules: one character to one, one to two, two to one."""
    import io

    import sentencepiece

    from phaseconv.tts.stand_ins import corpus

    rules = folder / "rules.tsv"
    rules.write_text("41\t61\n42\t62\nFB01\t66 69\n3000\t20\n41 300\tC0\n")
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus()[:200]),
        model_writer=model,
        vocab_size=120,
        model_type="unigram",
        normalization_rule_tsv=str(rules),
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return model.getvalue()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
