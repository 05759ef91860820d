"""The conditioning stacks compared under the fixed decoder (`docs/mvc.md`, arms a-d)
and the streaming causal encoder. This file is the method: read it top to bottom.

Every stack maps (phonemes, style) to what the decoder consumes — per-phoneme durations
and per-frame F0, voicing and energy — through three modules (MVC §3):
  1. text encoder     h_T = Enc(phonemes, e)
  2. duration module  (log d, h_B) = Dur(h_T, e); training aligns h_B to frames with the
                      teacher's alpha (MAS durations, `align.py`), inference with predicted d:
                      h_A = alpha · h_B  (the aligner is dropped at inference)
  3. prosody module   (ln F0, voicing, energy) = Pros(h_A, e)

arm "mvc" (b): gated Bi-Mamba text encoder (§3.1), temporal Bi-Mamba with linear fusion
  h_B = [h_f; h_b] W_f for durations (§3.2), expressive Bi-Mamba with gated fusion for
  prosody (§3.3), AdaLN style modulation after each module.
  `fusion="concat"` (c): every gate removed, h = [h_f; h_b] W_o.
  `style="concat"` (d): AdaLN removed; style concatenated to each module's input instead.
arm "attn" (a, StyleTTS2-like): Transformer text encoder, BiLSTM duration and prosody
  predictors, AdaLN.
arm "meanprosody" (the floor of the stack, ours): `MeanProsodyStack` reads the style vector
  only and predicts one log-duration, one log-F0, one voicing logit and one energy per
  utterance, spread flat over its phonemes / frames: what a conditioning stack gets
  without reading the phonemes. Its MCD minus the decoder floor (the decoder on ground-truth
  features) is the span a real stack can close (`report.floor_metrics`).
Reconstructed: the module widths / depths (scaled down), the residual pre-LN wiring of the
mixers, voicing as a separate logit, and the expressive module reading h_A only (the paper
fuses h_E with h_B; our h_B already carries the text encoding).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rayworks.pipelines.mvc.layers import (
    BiLSTM,
    ConvBlocks,
    StyleInput,
    StyleNorm,
    TransformerLayer,
    alignment,
    length_mask,
)
from rayworks.pipelines.mvc.mamba import BiMamba, Mamba, State

MAX_DURATION = 50  # frames per phoneme at inference (paper config: max_dur 50)


def _mamba_kwargs(cfg: dict[str, Any]) -> dict[str, Any]:
    return {
        "d_state": cfg["d_state"],
        "d_conv": cfg["d_conv"],
        "expand": cfg["expand"],
        "chunk": cfg["scan_chunk"],
        "parallel": cfg["scan_parallel"],
    }


class Mixer(nn.Module):
    """One residual sequence-mixing layer: x + Mix(LN(x)), Mix = Bi-Mamba (with the given
    fusion) or self-attention + FFN (the Transformer layer carries its own norms)."""

    def __init__(self, kind: str, d: int, cfg: dict[str, Any], gated: bool) -> None:
        super().__init__()
        self.kind = kind
        if kind == "attn":
            self.layer: nn.Module = TransformerLayer(d, cfg["heads"], cfg["dropout"])
        else:
            self.norm = nn.LayerNorm(d)
            self.layer = BiMamba(d, gated, **_mamba_kwargs(cfg))
            self.drop = nn.Dropout(cfg["dropout"])

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.kind == "attn":
            out = self.layer(x, mask)
        else:
            out = x + self.drop(self.layer(self.norm(x), lengths))
        return out * mask[..., None]


class TextEncoder(nn.Module):
    """Embedding → conv blocks → mixers → AdaLN (MVC §3.1; arm a: Transformer mixers)."""

    def __init__(self, arm: str, vocab_size: int, cfg: dict[str, Any], style_dim: int) -> None:
        super().__init__()
        d = cfg["width"]
        self.embed = nn.Embedding(vocab_size, d, padding_idx=0)
        self.style_in = StyleInput(d, style_dim, cfg["style"])
        self.convs = ConvBlocks(d, cfg["conv_layers"], cfg["dropout"])
        gated = cfg["fusion"] == "gated"
        self.mixers = nn.ModuleList(Mixer(arm, d, cfg, gated) for _ in range(cfg["text_layers"]))
        self.norm = StyleNorm(d, style_dim, cfg["style"])

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor, style: torch.Tensor):
        mask = length_mask(lengths, ids.shape[1])
        h = self.convs(self.style_in(self.embed(ids), style), mask)
        for mixer in self.mixers:
            h = mixer(h, lengths, mask)
        return self.norm(h, style) * mask[..., None]


class Predictor(nn.Module):
    """Style-conditioned conv blocks → one bidirectional sequence model → AdaLN → heads.
    Duration module (MVC §3.2): Bi-Mamba with linear fusion (never gated), 1 head.
    Prosody module (MVC §3.3): Bi-Mamba with gated fusion (unless ablation c), 3 heads.
    Arm a: a BiLSTM in both (StyleTTS2)."""

    def __init__(self, arm: str, cfg: dict[str, Any], style_dim: int, heads: int, gated: bool):
        super().__init__()
        d = cfg["width"]
        self.style_in = StyleInput(d, style_dim, cfg["style"])
        self.convs = ConvBlocks(d, cfg["conv_layers"], cfg["dropout"])
        self.seq = BiLSTM(d) if arm == "attn" else BiMamba(d, gated, **_mamba_kwargs(cfg))
        self.norm = StyleNorm(d, style_dim, cfg["style"])
        self.heads = nn.Linear(d, heads)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, style: torch.Tensor):
        mask = length_mask(lengths, x.shape[1])
        h = self.convs(self.style_in(x, style), mask)
        h = self.norm(h + self.seq(h, lengths), style) * mask[..., None]
        return self.heads(h), h


class ConditioningStack(nn.Module):
    """Text encoder + duration + prosody modules of one arm (see the module docstring)."""

    def __init__(self, arm: str, vocab_size: int, cfg: dict[str, Any], style_dim: int) -> None:
        super().__init__()
        gated = cfg["fusion"] == "gated"
        self.text = TextEncoder(arm, vocab_size, cfg, style_dim)
        self.duration = Predictor(arm, cfg, style_dim, heads=1, gated=False)
        self.prosody = Predictor(arm, cfg, style_dim, heads=3, gated=gated)

    def forward(
        self,
        ids: torch.Tensor,
        lengths: torch.Tensor,
        style: torch.Tensor,
        durations: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """`durations` = the teacher's (training / teacher-forced evaluation) or None (the
        stack's own rounded predictions). Returns log_dur (B, Tx), durations used (B, Tx),
        frame_lengths (B,), lf0 / voiced_logit / energy (B, T)."""
        h_t = self.text(ids, lengths, style)
        log_dur, h_b = self.duration(h_t, lengths, style)
        log_dur = log_dur[..., 0]
        if durations is None:
            durations = torch.exp(log_dur.detach()).round().clamp(1, MAX_DURATION).long()
            durations = durations * length_mask(lengths, ids.shape[1])
        frame_lengths = durations.sum(1)
        h_a = alignment(durations) @ h_b  # (B, T, d): h_A = alpha · h_B
        out, _ = self.prosody(h_a, frame_lengths, style)
        return {
            "log_dur": log_dur,
            "durations": durations,
            "frame_lengths": frame_lengths,
            "lf0": out[..., 0],
            "voiced_logit": out[..., 1],
            "energy": 5.0 * out[..., 2],
        }


class MeanProsodyStack(nn.Module):
    """The trivial predictor (arm "meanprosody"): style e → MLP → per-utterance constants
    (log d, ln F0, voicing logit, energy), the same outputs and training loss as
    `ConditioningStack`, but blind to the phonemes and to position. The MLP lets the
    constants depend on the speaker (voice, pitch and speed setting read from the
    reference), so the arm is the best flat prosody for that speaker, not one global
    mean."""

    def __init__(self, cfg: dict[str, Any], style_dim: int) -> None:
        super().__init__()
        d = cfg["width"]
        self.mlp = nn.Sequential(nn.Linear(style_dim, d), nn.LeakyReLU(0.2), nn.Linear(d, 4))

    def forward(
        self,
        ids: torch.Tensor,
        lengths: torch.Tensor,
        style: torch.Tensor,
        durations: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Same contract as `ConditioningStack.forward`; every output is constant within
        an utterance (over its real phonemes / frames)."""
        text_mask = length_mask(lengths, ids.shape[1])
        means = self.mlp(style)  # (B, 4)
        log_dur = means[:, :1].expand(-1, ids.shape[1]) * text_mask
        if durations is None:
            durations = torch.exp(log_dur.detach()).round().clamp(1, MAX_DURATION).long()
            durations = durations * text_mask
        frame_lengths = durations.sum(1)
        frames = int(frame_lengths.max())
        flat = (
            means[:, 1:, None].expand(-1, -1, frames) * length_mask(frame_lengths, frames)[:, None]
        )
        return {
            "log_dur": log_dur,
            "durations": durations,
            "frame_lengths": frame_lengths,
            "lf0": flat[:, 0],
            "voiced_logit": flat[:, 1],
            "energy": 5.0 * flat[:, 2],
        }


def build_stack(arm: str, vocab_size: int, cfg: dict[str, Any], style_dim: int) -> nn.Module:
    """The conditioning stack of `arm` ("mvc" / "attn": `ConditioningStack`;
    "meanprosody": `MeanProsodyStack`)."""
    if arm == "meanprosody":
        return MeanProsodyStack(cfg, style_dim)
    return ConditioningStack(arm, vocab_size, cfg, style_dim)


class CausalTextEncoder(nn.Module):
    """Streaming text encoder (MVC §3.4): causal conv blocks (left padding, per-frame
    LayerNorm) and uni-directional Mamba layers; `forward(ids, state)` carries the conv
    buffers and SSM states, so encoding in chunks equals one causal pass over the whole."""

    def __init__(self, vocab_size: int, cfg: dict[str, Any]) -> None:
        super().__init__()
        d = cfg["width"]
        self.embed = nn.Embedding(vocab_size, d, padding_idx=0)
        self.convs = nn.ModuleList(
            nn.Conv1d(d, d, 5, groups=max(1, d // 4)) for _ in range(cfg["conv_layers"])
        )
        self.conv_norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(cfg["conv_layers"]))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(cfg["text_layers"]))
        self.mambas = nn.ModuleList(
            Mamba(d, **_mamba_kwargs(cfg)) for _ in range(cfg["text_layers"])
        )
        self.out_norm = nn.LayerNorm(d)

    def forward(
        self, ids: torch.Tensor, state: list[Any] | None = None
    ) -> tuple[torch.Tensor, list[Any]]:
        """ids (B, T) → (B, T, d) and the state to pass with the next chunk."""
        h = self.embed(ids)
        state = state or [None] * (len(self.convs) + len(self.mambas))
        new: list[Any] = []
        for k, (conv, norm) in enumerate(zip(self.convs, self.conv_norms, strict=True)):
            x = h.transpose(1, 2)
            buf = x.new_zeros(*x.shape[:2], 4) if state[k] is None else state[k]
            xc = torch.cat([buf, x], -1)
            new.append(xc[..., -4:])
            h = h + nn.functional.leaky_relu(norm(conv(xc).transpose(1, 2)), 0.2)
        for k, (norm, mamba) in enumerate(zip(self.norms, self.mambas, strict=True)):
            s: State | None = state[len(self.convs) + k]
            y, s = mamba(norm(h), s)
            h = h + y
            new.append(s)
        return self.out_norm(h), new

    def stream(self, ids: torch.Tensor, chunk: int) -> torch.Tensor:
        """Encode `ids` chunk by chunk with the carried state."""
        state, outs = None, []
        for start in range(0, ids.shape[1], chunk):
            h, state = self.forward(ids[:, start : start + chunk], state)
            outs.append(h)
        return torch.cat(outs, 1)
