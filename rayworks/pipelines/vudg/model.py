"""The small video QA model of VUDG-mini (recipe: frame CNN → temporal GRU → option scoring).

    video (B, T, H, W, 3) uint8 ─ [frame, frame - previous frame] (6 channels) ─
        frame CNN (4 conv, strides 2,1,2,2) ─ 4x4 pooled map ─
        Linear ─ GRU over T ─ h (B, D)
    question type (B, Q) ─ embedding ─ q (B, Q, D)
    options (B, Q, 6, L) word ids ─ word embeddings (2nd clause its own), masked mean ─ o (B, Q, 6, D)
    score[b, k, i] = ⟨MLP([h_b, q_bk]), o_bki⟩ → softmax over the 6 options

The model sees the question only through its type (our recipe's "question-type embedding");
the words of an option's second clause have their own embeddings, so "grows, then spins"
differs from "spins, then grows".
"""

from __future__ import annotations

import torch
from torch import nn

from rayworks.pipelines.vudg.annotate import PAIRS, SYNONYM, TEXT, TYPES, UNIVERSE, option_text

MAX_WORDS = 10


def vocabulary() -> dict[str, int]:
    """Every word any option can contain (0 = padding)."""
    texts = [option_text(v) for vs in UNIVERSE.values() for v in vs]
    texts += [option_text("~" + v) for v in list(SYNONYM) + list(PAIRS)] + list(TEXT.values())
    words = sorted({w for t in texts for w in t.replace(",", " ,").split()})
    return {w: i + 1 for i, w in enumerate(words)}


def encode_option(text: str, vocab: dict[str, int]) -> list[int]:
    """Word ids, padded to MAX_WORDS; words after "then" are shifted by len(vocab) so the
    second clause has its own embeddings ("grows, then spins" ≠ "spins, then grows")."""
    first, _, second = text.replace(",", " ,").partition(" then ")
    ids = [vocab.get(w, 0) for w in first.split()]
    ids += [vocab[w] + len(vocab) for w in second.split() if w in vocab]
    ids = ids[:MAX_WORDS]
    return ids + [0] * (MAX_WORDS - len(ids))


class VideoQAModel(nn.Module):
    """≈ 150k parameters at width 24, hidden 64."""

    def __init__(self, vocab_size: int, width: int = 24, hidden: int = 64) -> None:
        super().__init__()
        w = width
        self.frames = nn.Sequential(
            nn.Conv2d(6, w, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(w, w, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(w, 2 * w, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(2 * w, 2 * w, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(2 * w * 16, hidden),
            nn.ReLU(),
        )
        self.temporal = nn.GRU(hidden, hidden, batch_first=True)
        self.qtype = nn.Embedding(len(TYPES), hidden)
        self.words = nn.Embedding(2 * vocab_size + 1, hidden, padding_idx=0)
        nn.init.normal_(self.words.weight, std=0.1)  # small initial logits (loss ≈ ln 6)
        self.fuse = nn.Sequential(
            nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)
        )

    def encode_video(self, video: torch.Tensor) -> torch.Tensor:
        """(B, T, H, W, 3) uint8 → (B, D): last GRU state over per-frame features."""
        b, t = video.shape[:2]
        x = video.float().div(255).sub(0.5)
        motion = torch.cat([torch.zeros_like(x[:, :1]), x[:, 1:] - x[:, :-1]], 1)
        x = torch.cat([x, motion], -1).flatten(0, 1).permute(0, 3, 1, 2)  # (B·T, 6, H, W)
        feats = self.frames(x).view(b, t, -1)  # (B, T, D)
        return self.temporal(feats)[1][0]

    def forward(
        self, video: torch.Tensor, qtypes: torch.Tensor, options: torch.Tensor
    ) -> torch.Tensor:
        """video (B, T, H, W, 3), qtypes (B, Q), options (B, Q, 6, L) → logits (B, Q, 6)."""
        h = self.encode_video(video)  # (B, D)
        q = self.qtype(qtypes)  # (B, Q, D)
        z = self.fuse(torch.cat([h[:, None].expand_as(q), q], -1))  # (B, Q, D)
        mask = (options > 0).float()[..., None]  # (B, Q, 6, L, 1)
        words = self.words(options)  # (B, Q, 6, L, D)
        o = (words * mask).sum(-2) / mask.sum(-2).clamp(min=1)  # (B, Q, 6, D)
        return torch.einsum("bqd,bqod->bqo", z, o)
