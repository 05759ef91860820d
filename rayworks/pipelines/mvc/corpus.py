"""The local speech corpus: template-grammar sentences spoken by `espeak-ng` with several
voices, pitches and speeds, converted to 16 kHz log-mel, F0 (YIN), energy, espeak-ng
phonemes and MAS durations (our CPU recipe; everything here is reconstructed).

`build_corpus` runs espeak-ng once per utterance (`-w` for audio, `-q -x --sep=_` for the
phonemes of the same voice's language), resamples its 22.05 kHz output to 16 kHz, and
aligns phonemes to frames with the alignment teacher (`align.py`). `load_or_build` caches
the result under `<cache_root>/mvc/corpus-<hash of the corpus config>/` behind a file lock,
so every arm of a bench (running side by side) shares one build.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from rayworks.pipelines.mvc import audio
from rayworks.pipelines.mvc.align import fit_aligner

PAD, SIL, WORD = "<pad>", "<sil>", "|"
STRESS = str.maketrans("", "", "',%=")
VERSION = 1
T = TypeVar("T")

SUBJECTS = (
    "the parser",
    "this function",
    "a small buffer",
    "the default value",
    "each worker",
    "the new module",
    "our test suite",
    "the main loop",
    "a quiet reader",
    "the server",
    "every thread",
    "the old cache",
    "this method",
    "the green button",
    "a long string",
    "the last record",
    "the compiler",
    "my neighbour",
    "the river",
    "a tired student",
)
VERBS = (
    "returns",
    "reads",
    "writes",
    "checks",
    "builds",
    "sorts",
    "copies",
    "opens",
    "closes",
    "finds",
    "skips",
    "counts",
    "joins",
    "splits",
    "loads",
    "saves",
    "prints",
    "follows",
    "ignores",
    "repeats",
)
OBJECTS = (
    "a list of names",
    "the current file",
    "every open socket",
    "the first line",
    "a sorted table",
    "the whole document",
    "two small numbers",
    "the user name",
    "a fresh copy",
    "the missing keys",
    "an empty string",
    "the morning paper",
    "seven blue boxes",
    "the final answer",
    "a simple pattern",
)
TAILS = (
    "before the loop ends",
    "in a single pass",
    "without any errors",
    "when the queue is empty",
    "after a short delay",
    "for every request",
    "on the next call",
    "quite slowly",
    "again and again",
    "at the end of the day",
    "if nothing else works",
    "very carefully",
)


def sentences(n: int, min_words: int, max_words: int, rng: np.random.Generator) -> list[str]:
    """`n` sentences of the template grammar SUBJECT VERB OBJECT [TAIL] [and VERB OBJECT],
    kept when their word count lies in [min_words, max_words]."""
    out: list[str] = []
    while len(out) < n:
        parts = [rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS)]
        if rng.random() < 0.6:
            parts.append(rng.choice(TAILS))
        if rng.random() < 0.3:
            parts += ["and", rng.choice(VERBS), rng.choice(OBJECTS)]
        text = " ".join(parts)
        if min_words <= len(text.split()) <= max_words:
            out.append(text[0].upper() + text[1:] + ".")
    return out


def find_espeak(binary: str) -> str:
    """Path of the espeak-ng program, or a clear error naming the config key."""
    path = shutil.which(binary)
    if path is None:
        raise FileNotFoundError(
            f"corpus.espeak_bin={binary!r}: espeak-ng was not found on PATH. Install the "
            "Debian package (`apt-get install espeak-ng`, or `make setup`) or point "
            "corpus.espeak_bin at the program."
        )
    return path


def espeak_phonemes(binary: str, text: str, voice: str) -> list[str]:
    """espeak-ng's phoneme mnemonics (`-q -x --sep=_`), stress marks dropped, words
    separated by WORD and wrapped in SIL."""
    out = subprocess.run(
        [binary, "-q", "-x", "--sep=_", "-v", voice, text],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    tokens = [SIL]
    for word in out.split():
        phones = [p for p in word.translate(STRESS).split("_") if p]
        if phones:
            tokens += [*phones, WORD]
    tokens[-1 if tokens[-1] == WORD else len(tokens) :] = [SIL]
    return tokens


def espeak_audio(binary: str, text: str, voice: str, pitch: int, speed: int) -> np.ndarray:
    """16 kHz waveform of `text` spoken by `voice` at `-p pitch -s speed`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "u.wav"
        subprocess.run(
            [binary, "-w", str(path), "-v", voice, "-p", str(pitch), "-s", str(speed), text],
            capture_output=True,
            check=True,
        )
        wav, sr = audio.read_wav(path)
    return audio.resample(wav, sr)


@dataclass
class Corpus:
    """Utterance-level features; `split[i]` ∈ {"train", "val", "test"}."""

    texts: list[str]
    speakers: np.ndarray  # (U,) speaker index into speaker_table
    speaker_table: list[list[Any]]  # [voice, pitch, speed]
    vocab: list[str]
    phonemes: list[np.ndarray]  # (Tx,) int ids
    durations: list[np.ndarray]  # (Tx,) frames per phoneme, sum = T
    mels: list[np.ndarray]  # (T, 80)
    f0: list[np.ndarray]  # (T,) Hz, 0 where unvoiced
    energy: list[np.ndarray]  # (T,) log RMS
    split: list[str]
    wavs: dict[int, np.ndarray] = field(default_factory=dict)  # a few test waveforms

    def index(self, name: str) -> list[int]:
        return [i for i, s in enumerate(self.split) if s == name]


def _speaker_table(cfg: dict[str, Any]) -> list[list[Any]]:
    return [[v, p, s] for v in cfg["voices"] for p in cfg["pitches"] for s in cfg["speeds"]]


def build_corpus(cfg: dict[str, Any], on_item: Callable[[int], None] | None = None) -> Corpus:
    """Synthesize and featurize the whole corpus (`cfg` = the corpus config as a dict)."""
    binary = find_espeak(cfg["espeak_bin"])
    rng = np.random.default_rng(cfg["seed"])
    texts = sentences(cfg["n_utterances"], cfg["min_words"], cfg["max_words"], rng)
    table = _speaker_table(cfg)
    speakers = rng.integers(0, len(table), len(texts))
    n_test = max(1, round(cfg["test_fraction"] * len(texts)))
    n_val = max(1, round(cfg["val_fraction"] * len(texts)))
    split = ["test"] * n_test + ["val"] * n_val + ["train"] * (len(texts) - n_test - n_val)

    def featurize(i: int) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        voice, pitch, speed = table[speakers[i]]
        tokens = espeak_phonemes(binary, texts[i], voice.split("+")[0])
        wav = espeak_audio(binary, texts[i], voice, pitch, speed)
        if on_item is not None:
            on_item(i)
        return tokens, audio.log_mel(wav), audio.yin_f0(wav)[0], audio.frame_energy(wav), wav

    with ThreadPoolExecutor(cfg["workers"]) as pool:
        done = list(pool.map(featurize, range(len(texts))))
    tokens, mels, f0s, energies, all_wavs = (list(x) for x in zip(*done, strict=True))
    tests = [i for i, s in enumerate(split) if s == "test"][: cfg["n_wav_samples"]]
    wavs = {i: all_wavs[i] for i in tests}
    vocab = [PAD, *sorted({t for seq in tokens for t in seq})]
    ids = {t: k for k, t in enumerate(vocab)}
    phonemes = [np.array([ids[t] for t in seq], dtype=np.int64) for seq in tokens]
    durations, _ = fit_aligner(mels, phonemes, len(vocab), cfg["aligner_iters"])
    return Corpus(
        texts, speakers, table, vocab, phonemes, durations, mels, f0s, energies, split, wavs
    )


def config_key(cfg: dict[str, Any], *extra: Any) -> str:
    blob = json.dumps([VERSION, cfg, *extra], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


@contextmanager
def locked(folder: Path):
    """Exclusive lock on `folder` (other runs of a bench wait while one builds)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cached(folder: Path, load: Callable[[Path], T], build: Callable[[Path], None]) -> T:
    """`load(folder)` once `build(folder)` has completed there (under the folder's lock)."""
    with locked(folder):
        if not (folder / "done").is_file():
            build(folder)
            (folder / "done").write_text("ok\n")
        return load(folder)


def _ragged(items: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(x) for x in items], dtype=np.int64)
    return np.concatenate(items), np.concatenate([[0], np.cumsum(lengths)])


def _unragged(flat: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    return [flat[a:b] for a, b in itertools.pairwise(offsets)]


RAGGED = ("phonemes", "durations", "mels", "f0", "energy")


def save_corpus(corpus: Corpus, folder: Path) -> None:
    arrays: dict[str, np.ndarray] = {"speakers": corpus.speakers}
    for name in RAGGED:
        arrays[name], arrays[f"{name}_offsets"] = _ragged(getattr(corpus, name))
    for i, wav in corpus.wavs.items():
        arrays[f"wav_{i}"] = wav
    np.savez(folder / "corpus.npz", **arrays)
    meta = {
        "texts": corpus.texts,
        "speaker_table": corpus.speaker_table,
        "vocab": corpus.vocab,
        "split": corpus.split,
    }
    (folder / "corpus.json").write_text(json.dumps(meta))


def read_corpus(folder: Path) -> Corpus:
    meta = json.loads((folder / "corpus.json").read_text())
    with np.load(folder / "corpus.npz", allow_pickle=False) as data:
        ragged = {n: _unragged(data[n], data[f"{n}_offsets"]) for n in RAGGED}
        wavs = {int(k[4:]): data[k] for k in data.files if k.startswith("wav_")}
        speakers = data["speakers"]
    return Corpus(
        meta["texts"],
        speakers,
        meta["speaker_table"],
        meta["vocab"],
        ragged["phonemes"],
        ragged["durations"],
        ragged["mels"],
        ragged["f0"],
        ragged["energy"],
        meta["split"],
        wavs,
    )


def load_or_build(cfg: dict[str, Any], cache_root: Path) -> tuple[Corpus, Path]:
    """The cached corpus for `cfg` (built on first use) and its cache folder."""
    folder = Path(cache_root) / "mvc" / f"corpus-{config_key(cfg)}"
    corpus = cached(folder, read_corpus, lambda f: save_corpus(build_corpus(cfg), f))
    return corpus, folder
