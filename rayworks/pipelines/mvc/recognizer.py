"""A small CTC phoneme recognizer trained on ground-truth mels: the phoneme error rate of
synthesized mels under it is our WER proxy (our CPU recipe, reconstructed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rayworks.pipelines.mvc.audio import N_MELS
from rayworks.pipelines.mvc.corpus import WORD, Corpus
from rayworks.pipelines.mvc.decoder import _pad
from rayworks.pipelines.mvc.metrics import edit_distance


def targets(corpus: Corpus, i: int) -> np.ndarray:
    """The phonemes a listener hears: ids without silences and word boundaries (id 0 = pad
    doubles as the CTC blank, since pad never appears in a target)."""
    keep = {k for k, t in enumerate(corpus.vocab) if not t.startswith("<") and t != WORD}
    return np.array([p for p in corpus.phonemes[i] if p in keep], dtype=np.int64)


class Recognizer(nn.Module):
    """Per-bin standardisation (training-set mean / std, saved with the weights), conv
    (stride 1) + BiGRU + linear over the vocabulary (blank = 0). Without the
    standardisation (log-mels sit near -5 ± 3) the CTC loss stayed on its blank plateau
    (3.7 after 500 steps, PER 1.0); with it, PER on held-out ground-truth mels was 0.10
    after 500 steps and 0.035 after 750 (default bench corpus, lr 3e-3, measured)."""

    def __init__(self, vocab_size: int, width: int) -> None:
        super().__init__()
        self.register_buffer("mel_mean", torch.zeros(N_MELS))
        self.register_buffer("mel_std", torch.ones(N_MELS))
        self.conv = nn.Sequential(nn.Conv1d(N_MELS, width, 5, padding=2), nn.ReLU())
        self.gru = nn.GRU(width, width, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * width, vocab_size)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel (B, T, 80) → log-probabilities (B, T, V)."""
        x = (mel - self.mel_mean) / self.mel_std
        h = self.conv(x.transpose(1, 2)).transpose(1, 2)
        return F.log_softmax(self.out(self.gru(h)[0]), -1)


def train_recognizer(corpus: Corpus, cfg: dict[str, Any], seed: int) -> tuple[Recognizer, list]:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed + 1)
    train = corpus.index("train")
    model = Recognizer(len(corpus.vocab), cfg["width"])
    frames = np.concatenate([corpus.mels[i] for i in train])
    model.mel_mean.copy_(torch.as_tensor(frames.mean(0)))
    model.mel_std.copy_(torch.as_tensor(frames.std(0) + 1e-5))
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    losses = []
    for _ in range(cfg["steps"]):
        items = rng.choice(train, size=min(cfg["batch"], len(train)), replace=False)
        mel = _pad([corpus.mels[i] for i in items], torch.float32)
        tgt = [targets(corpus, i) for i in items]
        logp = model(mel).transpose(0, 1)
        loss = F.ctc_loss(
            logp,
            torch.as_tensor(np.concatenate(tgt)),
            torch.tensor([len(corpus.mels[i]) for i in items]),
            torch.tensor([len(t) for t in tgt]),
            zero_infinity=True,
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval().requires_grad_(False)
    return model, losses


def greedy_decode(logp: torch.Tensor, length: int) -> np.ndarray:
    """Best path: argmax per frame, merge repeats, drop blanks."""
    best = logp[:length].argmax(-1).numpy()
    merged = best[np.concatenate([[True], best[1:] != best[:-1]])]
    return merged[merged != 0]


def phoneme_error_rate(model: Recognizer, mels: list[np.ndarray], refs: list[np.ndarray]) -> float:
    """Σ edit distance / Σ reference length over utterances."""
    errors = total = 0
    with torch.no_grad():
        for mel, ref in zip(mels, refs, strict=True):
            hyp = greedy_decode(model(torch.as_tensor(mel[None], dtype=torch.float32))[0], len(mel))
            errors += edit_distance(hyp, ref)
            total += len(ref)
    return errors / max(total, 1)
