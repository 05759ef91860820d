"""The one fixed decoder shared by every arm, its style encoder, the batch collation, and
its pretraining on ground-truth features (reconstructed, our recipe: "conv + AdaIN from
upsampled phoneme features + F0 + energy + style to mel, L1 mel loss").

    mel = Decoder(phonemes, durations, F0, voicing, energy, style)
    style = StyleEncoder(reference mel of the same speaker)   (voice cloning reference)

Pretrained once per corpus on ground-truth durations / F0 / energy, cached under
`<cache_root>/mvc/`, then frozen: arms differ only in the conditioning they feed it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from rayworks.pipelines.mvc.audio import N_MELS
from rayworks.pipelines.mvc.corpus import Corpus
from rayworks.pipelines.mvc.layers import alignment, length_mask, masked_l1, masked_mean

LF0_CENTER = 4.8  # ln(120 Hz): centres log-F0 for the networks


@dataclass
class Batch:
    """Padded tensors of a few utterances (teacher features from the corpus)."""

    ids: torch.Tensor  # (B, Tx) phoneme ids, 0 = pad
    text_lengths: torch.Tensor  # (B,)
    durations: torch.Tensor  # (B, Tx) teacher (MAS) durations, 0 on pad
    mel: torch.Tensor  # (B, T, 80)
    frame_lengths: torch.Tensor  # (B,)
    lf0: torch.Tensor  # (B, T) ln F0 - LF0_CENTER, 0 where unvoiced
    voiced: torch.Tensor  # (B, T) float
    energy: torch.Tensor  # (B, T)
    ref_mel: torch.Tensor  # (B, Tr, 80) reference utterance of the same speaker
    ref_lengths: torch.Tensor  # (B,)


def _pad(items: list[np.ndarray], dtype: torch.dtype) -> torch.Tensor:
    size = max(len(x) for x in items)
    out = np.zeros((len(items), size, *items[0].shape[1:]), dtype=items[0].dtype)
    for i, x in enumerate(items):
        out[i, : len(x)] = x
    return torch.as_tensor(out, dtype=dtype)


def speaker_pools(corpus: Corpus, pool: list[int]) -> dict[int, list[int]]:
    """The `pool` utterances of every speaker."""
    out: dict[int, list[int]] = {}
    for i in pool:
        out.setdefault(int(corpus.speakers[i]), []).append(i)
    return out


def references(
    corpus: Corpus, items: list[int], pools: dict[int, list[int]], rng: np.random.Generator
) -> dict[int, int]:
    """For each item, another pool utterance of the same speaker (itself when there is no
    other): the style reference, as in zero-shot voice cloning."""
    refs = {}
    for i in items:
        options = [j for j in pools.get(int(corpus.speakers[i]), []) if j != i] or [i]
        refs[i] = int(options[rng.integers(len(options))])
    return refs


def collate(corpus: Corpus, items: list[int], refs: dict[int, int]) -> Batch:
    f0 = [corpus.f0[i] for i in items]
    lf0 = [np.where(f > 0, np.log(np.maximum(f, 1.0)) - LF0_CENTER, 0.0) for f in f0]
    lengths = torch.tensor([len(corpus.mels[i]) for i in items])
    return Batch(
        ids=_pad([corpus.phonemes[i] for i in items], torch.long),
        text_lengths=torch.tensor([len(corpus.phonemes[i]) for i in items]),
        durations=_pad([corpus.durations[i] for i in items], torch.long),
        mel=_pad([corpus.mels[i] for i in items], torch.float32),
        frame_lengths=lengths,
        lf0=_pad(lf0, torch.float32),
        voiced=_pad([(f > 0).astype(np.float32) for f in f0], torch.float32),
        energy=_pad([corpus.energy[i] for i in items], torch.float32),
        ref_mel=_pad([corpus.mels[refs[i]] for i in items], torch.float32),
        ref_lengths=torch.tensor([len(corpus.mels[refs[i]]) for i in items]),
    )


class StyleEncoder(nn.Module):
    """Reference mel (B, T, 80) → style vector (B, S): two convs, masked mean, linear."""

    def __init__(self, width: int, style_dim: int) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv1d(N_MELS, width, 5, padding=2),
            nn.LeakyReLU(0.2),
            nn.Conv1d(width, width, 5, padding=2),
            nn.LeakyReLU(0.2),
        )
        self.out = nn.Linear(width, style_dim)

    def forward(self, mel: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        h = self.convs(mel.transpose(1, 2)).transpose(1, 2)
        return self.out(masked_mean(h, length_mask(lengths, mel.shape[1])))


class AdaIN(nn.Module):
    """(1 + gamma(s)) ⊙ InstanceNorm(x) + β(s), statistics over real frames only."""

    def __init__(self, width: int, style_dim: int) -> None:
        super().__init__()
        self.affine = nn.Linear(style_dim, 2 * width)

    def forward(self, x: torch.Tensor, style: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask[:, None].float()  # x: (B, C, T)
        n = m.sum(-1, keepdim=True).clamp_min(1.0)
        mean = (x * m).sum(-1, keepdim=True) / n
        var = (((x - mean) * m) ** 2).sum(-1, keepdim=True) / n
        gamma, beta = self.affine(style)[..., None].chunk(2, 1)
        return ((1 + gamma) * (x - mean) / torch.sqrt(var + 1e-5) + beta) * m


class Decoder(nn.Module):
    """Phonemes + durations + F0 + voicing + energy + style → log-mel (B, T, 80)."""

    def __init__(self, vocab_size: int, width: int, blocks: int, style_dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width // 2, padding_idx=0)
        self.inp = nn.Linear(width // 2 + 3, width)
        self.adain = nn.ModuleList(AdaIN(width, style_dim) for _ in range(blocks))
        self.convs = nn.ModuleList(
            nn.Conv1d(width, width, 5, padding=2 * 2 ** (i % 4), dilation=2 ** (i % 4))
            for i in range(blocks)
        )
        self.out = nn.Linear(width, N_MELS)
        self.style_encoder = StyleEncoder(width, style_dim)

    def forward(
        self,
        ids: torch.Tensor,
        durations: torch.Tensor,
        lf0: torch.Tensor,
        voiced: torch.Tensor,
        energy: torch.Tensor,
        style: torch.Tensor,
        frame_mask: torch.Tensor,
    ) -> torch.Tensor:
        """lf0 / voiced / energy: (B, T) (voiced may be a probability); T = frame_mask's."""
        frames = alignment(durations, frame_mask.shape[1]) @ self.embed(ids)
        prosody = torch.stack([lf0 * voiced, voiced, energy / 5.0], -1)
        h = self.inp(torch.cat([frames, prosody], -1)).transpose(1, 2)
        for norm, conv in zip(self.adain, self.convs, strict=True):
            h = h + conv(torch.nn.functional.leaky_relu(norm(h, style, frame_mask), 0.2))
        return self.out(h.transpose(1, 2))

    def teacher_forced(self, batch: Batch) -> torch.Tensor:
        """The decoder on ground-truth durations, F0, voicing and energy."""
        style = self.style_encoder(batch.ref_mel, batch.ref_lengths)
        mask = length_mask(batch.frame_lengths, batch.mel.shape[1])
        return self.forward(
            batch.ids, batch.durations, batch.lf0, batch.voiced, batch.energy, style, mask
        )


def pretrain_decoder(corpus: Corpus, cfg: dict[str, Any], seed: int) -> tuple[Decoder, list[float]]:
    """L1 mel loss on ground-truth features over the train split; returns the frozen model
    and its loss curve."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    train = corpus.index("train")
    model = Decoder(len(corpus.vocab), cfg["width"], cfg["blocks"], cfg["style_dim"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg["steps"])
    pools, losses = speaker_pools(corpus, train), []
    for _ in range(cfg["steps"]):
        items = [
            int(i) for i in rng.choice(train, size=min(cfg["batch"], len(train)), replace=False)
        ]
        batch = collate(corpus, items, references(corpus, items, pools, rng))
        mask = length_mask(batch.frame_lengths, batch.mel.shape[1])
        loss = masked_l1(model.teacher_forced(batch), batch.mel, mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval().requires_grad_(False)
    return model, losses
