"""An explicit forward over an HF Llama's weights, with a per-(layer, KV-head) KV cache.

KV-cache dropping (SpecKV, SnapKV, H2O, StreamingLLM), prompt compression (SpecPC) and
suffix dropout in a masked diffusion LM (DPad) all need what `transformers`' own forward
hides: arbitrary token positions (RoPE uses each token's *original* position, whatever was
dropped before it), attention maps of chosen query rows, a bidirectional mode, and a cache
where every KV head keeps its own set of entries. This module re-runs a `LlamaForCausalLM`
(our tiny ones or any real checkpoint) with those controls; norms, MLPs, embeddings and the
RoPE table are the model's own modules, only attention is written out, so with no dropping
the logits equal the HF forward (tested).

Masking is by position, not by index: in causal mode a query at position p sees every key
whose original position is <= p, so a cache whose heads kept different entries, or a
sequence with holes, masks correctly without any bookkeeping of indices. `mask="none"` is
bidirectional attention (the masked diffusion LM).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

MaskMode = Literal["causal", "none"]
# record(layer, probs): probs are [B, n_heads, rows, keys] softmax rows of the recorded queries
Recorder = Callable[[int, Tensor], None]


@dataclass
class LayerKV:
    """One layer's cache: keys (RoPE applied), values and each entry's original position."""

    k: Tensor  # [B, H_kv, T, head_dim]
    v: Tensor  # [B, H_kv, T, head_dim]
    pos: Tensor  # [B, H_kv, T] long

    def gather(self, index: Tensor) -> LayerKV:
        """Keep entries `index` ([B, H_kv, C], per head) in the given order."""
        idx = index.unsqueeze(-1).expand(-1, -1, -1, self.k.shape[-1])
        return LayerKV(self.k.gather(2, idx), self.v.gather(2, idx), self.pos.gather(2, index))


class KVCache:
    """Per-layer `LayerKV`; every head of a layer holds the same number of entries."""

    def __init__(self, layers: list[LayerKV] | None = None) -> None:
        self.layers: list[LayerKV] = layers or []

    def __len__(self) -> int:
        """Entries per head (of the first layer; all layers agree unless a policy differs)."""
        return int(self.layers[0].k.shape[2]) if self.layers else 0

    def lengths(self) -> list[int]:
        return [int(layer.k.shape[2]) for layer in self.layers]

    def extend(self, layer: int, k: Tensor, v: Tensor, pos: Tensor) -> LayerKV:
        """Append new entries to `layer` (creating it on the first call); returns the layer."""
        if layer == len(self.layers):
            self.layers.append(LayerKV(k, v, pos))
        else:
            old = self.layers[layer]
            self.layers[layer] = LayerKV(
                torch.cat([old.k, k], 2), torch.cat([old.v, v], 2), torch.cat([old.pos, pos], 2)
            )
        return self.layers[layer]

    def select(self, keep: list[Tensor]) -> KVCache:
        """A cache keeping `keep[l]` ([B, H_kv, C_l] entry indices) of layer l, per head."""
        return KVCache([lay.gather(idx) for lay, idx in zip(self.layers, keep, strict=True)])

    def crop(self, n: int) -> KVCache:
        """The first `n` entries of every head (e.g. dropping re-encoded lookahead tokens)."""
        return KVCache(
            [LayerKV(x.k[:, :, :n], x.v[:, :, :n], x.pos[:, :, :n]) for x in self.layers]
        )

    def drop_positions(self, start: int) -> KVCache:
        """Drop the entries at original positions >= `start` (e.g. re-encoded lookahead).

        Every head must hold the same number of entries below `start`, so the cache stays
        rectangular; anything else is a caller's bug and raises.
        """
        keep = []
        for i, layer in enumerate(self.layers):
            below = (layer.pos < start).sum(-1)
            if (below != below.flatten()[0]).any():
                raise ValueError(
                    f"layer {i}: heads hold {below.flatten().tolist()} entries below position "
                    f"{start}; drop_positions needs the same count on every head"
                )
            order = torch.argsort((layer.pos >= start).to(torch.int8), dim=-1, stable=True)
            keep.append(order[..., : int(below.flatten()[0])])
        return self.select(keep)

    def nbytes(self) -> int:
        """Bytes of keys and values (positions are bookkeeping, not part of a KV budget)."""
        return sum(x.k.numel() * x.k.element_size() * 2 for x in self.layers)


def _attention(
    attn: torch.nn.Module,
    h: Tensor,
    cos: Tensor,
    sin: Tensor,
    positions: Tensor,
    cache: KVCache | None,
    layer: int,
    mask: MaskMode,
    key_keep: Tensor | None,
    record: Recorder | None,
    record_rows: slice,
) -> Tensor:
    b, t, _ = h.shape
    hd = attn.head_dim
    q = attn.q_proj(h).view(b, t, -1, hd).transpose(1, 2)
    k = attn.k_proj(h).view(b, t, -1, hd).transpose(1, 2)
    v = attn.v_proj(h).view(b, t, -1, hd).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    n_kv = k.shape[1]
    kpos = positions[:, None, :].expand(b, n_kv, t)
    if cache is not None:
        full = cache.extend(layer, k, v, kpos)
        k, v, kpos = full.k, full.v, full.pos
    groups = q.shape[1] // n_kv
    k_rep = k.repeat_interleave(groups, 1)
    v_rep = v.repeat_interleave(groups, 1)
    allowed: Tensor | None = None  # [B, H, Tq, Tk] or broadcastable
    if mask == "causal":
        allowed = kpos.repeat_interleave(groups, 1)[:, :, None, :] <= positions[:, None, :, None]
    if key_keep is not None:
        keep = key_keep[:, None, None, :]
        allowed = keep if allowed is None else allowed & keep
    out = F.scaled_dot_product_attention(q, k_rep, v_rep, attn_mask=allowed, scale=attn.scaling)
    if record is not None:
        rows = q[:, :, record_rows]
        scores = rows @ k_rep.transpose(-1, -2) * attn.scaling
        if allowed is not None:
            scores = scores.masked_fill(~allowed[..., record_rows, :], float("-inf"))
        record(layer, scores.softmax(-1))
    return attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))


def forward(
    model: torch.nn.Module,
    ids: Tensor,
    positions: Tensor | None = None,
    *,
    cache: KVCache | None = None,
    mask: MaskMode = "causal",
    key_keep: Tensor | None = None,
    record: Recorder | None = None,
    record_rows: slice = slice(None),
    logits_rows: slice = slice(None),
) -> Tensor:
    """Logits of `ids` ([B, T]) at `positions` ([B, T], default 0..T-1 after the cache).

    `cache`, when given, is extended in place with this call's keys and values and read by
    it (queries see cached entries plus this call's keys). `key_keep` ([B, T_keys] bool,
    keys = cache + new) hides keys from every query (padding). `record(layer, probs)` gets
    the softmax rows of queries `record_rows` for every layer. `logits_rows` limits the LM
    head to some positions (e.g. the last one while decoding).
    """
    base = model.model
    if positions is None:
        start = int(cache.layers[0].pos.max()) + 1 if cache is not None and cache.layers else 0
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        positions = positions[None].expand(ids.shape[0], -1)
    x = base.embed_tokens(ids)
    cos, sin = base.rotary_emb(x, positions)
    for i, block in enumerate(base.layers):
        h = block.input_layernorm(x)
        x = x + _attention(
            block.self_attn, h, cos, sin, positions, cache, i, mask, key_keep, record, record_rows
        )
        x = x + block.mlp(block.post_attention_layernorm(x))
    return model.lm_head(base.norm(x[:, logits_rows]))
