"""The espeak-ng corpus builder on a few sentences, the missing-program error, and config
errors that name the key."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.mvc.config import MVCConfig
from rayworks.pipelines.mvc.corpus import SIL, WORD, build_corpus, find_espeak, sentences
from rayworks.platform.registry import get_pipeline

ESPEAK = shutil.which("espeak-ng")
CORPUS = {
    "espeak_bin": "espeak-ng",
    "seed": 0,
    "n_utterances": 4,
    "min_words": 3,
    "max_words": 6,
    "voices": ["en-us", "en-gb+f4"],
    "pitches": [40],
    "speeds": [170],
    "val_fraction": 0.25,
    "test_fraction": 0.25,
    "aligner_iters": 2,
    "n_wav_samples": 1,
    "workers": 2,
}


@pytest.mark.skipif(ESPEAK is None, reason="espeak-ng is not installed (apt-get install espeak-ng)")
def test_espeak_corpus_builder_on_a_few_sentences() -> None:
    corpus = build_corpus(CORPUS)
    assert len(corpus.texts) == 4 and sorted(set(corpus.split)) == ["test", "train", "val"]
    assert corpus.vocab[0] == "<pad>" and SIL in corpus.vocab and WORD in corpus.vocab
    for p, d, mel, f0, energy in zip(
        corpus.phonemes, corpus.durations, corpus.mels, corpus.f0, corpus.energy, strict=True
    ):
        assert corpus.vocab[p[0]] == corpus.vocab[p[-1]] == SIL and (p > 0).all()
        assert len(d) == len(p) and (d >= 1).all() and d.sum() == len(mel)
        assert mel.shape[1] == 80 and len(f0) == len(energy) == len(mel)
        voiced = f0[f0 > 0]
        assert len(voiced) > 0.1 * len(f0) and 50 < np.median(voiced) < 400  # speech pitch
    assert list(corpus.wavs) == corpus.index("test")[:1]
    assert len(corpus.wavs[corpus.index("test")[0]]) // 256 + 1 == len(corpus.mels[0])


def test_missing_espeak_is_a_clear_error() -> None:
    with pytest.raises(FileNotFoundError, match=r"corpus.espeak_bin=.no-such-espeak.*apt-get"):
        find_espeak("no-such-espeak")


def test_sentences_respect_word_bounds() -> None:
    out = sentences(50, 4, 7, np.random.default_rng(0))
    assert len(out) == 50 and all(4 <= len(s.split()) <= 7 for s in out)


def test_presets_load_and_bad_values_name_the_key() -> None:
    for cls in (MVCConfig, get_pipeline("mvc_attn").config):
        for preset in (None, "smoke"):
            cfg = build_config(cls, preset, (), [])
            assert cfg.arm not in cfg.compare
    with pytest.raises(ConfigError, match=r"stack\.fusion"):
        build_config(MVCConfig, None, (), ["stack.fusion=sum"])
    with pytest.raises(ConfigError, match=r"corpus\.pitches"):
        build_config(MVCConfig, None, (), ["corpus.pitches=[120]"])
    with pytest.raises(ConfigError, match="compare"):
        build_config(MVCConfig, None, (), ["compare=[mvc]"])
