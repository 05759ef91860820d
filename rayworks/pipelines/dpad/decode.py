"""Semi-autoregressive block decoding of a masked diffusion LM, with DPad suffix dropout.

The sequence is [prompt (P) | gen_length MASK tokens], decoded block by block
(`block_length`, LLaDA / Fast-dLLM). Per block [s, e) (after the official DPad code;
our simplifications are listed in `docs/dpad.md`):

1. Once per block, draw the suffix keep mask (`SuffixDropout.sample`); the pruned sequence
   is [0, e) plus the kept suffix tokens. Dropped tokens leave **both queries and keys**
   (they are not in the forward at all); kept tokens keep their **original RoPE
   positions** (never renumbered).
2. Each step: logits of the block's positions on the pruned sequence, x0 = argmax
   (temperature 0, MASK never predicted), confidence = softmax probability of x0
   (low-confidence remasking). Commit the single most confident masked position (vanilla:
   steps = gen_length, one token per step) or, with `threshold` (Fast-dLLM parallel,
   tau = 0.9), every masked position whose confidence exceeds tau, at least one. Positions
   outside the block are never committed.
3. Prefix cache (Fast-dLLM): the block's first forward runs over the whole pruned sequence
   and keeps the KV of [0, s); later steps feed only the block and the kept suffix.
4. Early termination: when a finished block holds EOS, everything after it becomes EOS and
   the sample stops.

A batch of samples is decoded together: each sample draws its own keep mask, the pruned
sequences are right-padded to the longest and the padding is hidden from every key
(`key_keep`); a sample leaves the forwards as soon as its block (or its answer, with early
termination) is done. Costs are counted per sample from its own, unpadded, pruned sequence:

- `nfe`: forward passes (function evaluations) the sample took part in;
- `token_cost` = sum over its forwards of n_q * layers (tokens through the network, the
  proxy of the linear layers' FLOPs, which dominate at this scale);
- `pair_cost` = sum over its forwards of n_q * n_k * layers (attended query-key pairs, the
  attention FLOPs proxy), with n_q the tokens fed and n_k the keys they attend (cached
  prefix included).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor
from transformers import PreTrainedModel

from rayworks.models.diffusion_lm import diffusion_logits, mask_token_id
from rayworks.models.kv_forward import KVCache, LayerKV
from rayworks.pipelines.dpad.dropout import SuffixDropout


@dataclass(frozen=True)
class Decoder:
    """One decoding recipe: parallel threshold (None = one token per step), early
    termination, prefix cache and suffix dropout."""

    threshold: float | None = None
    early_stop: bool = False
    prefix_cache: bool = False
    dropout: SuffixDropout = field(default_factory=SuffixDropout)


@dataclass
class DecodeResult:
    """Decoded sequences [N, P + G] and per-sample costs [N]."""

    tokens: Tensor
    nfe: Tensor
    token_cost: Tensor
    pair_cost: Tensor


def pruned_index(end: int, keep: Tensor) -> tuple[Tensor, Tensor]:
    """Original positions of each row's pruned sequence, right-padded, and their validity.

    [0, end) is always kept; `keep` [R, S] marks kept suffix positions end..end+S-1.
    Returns index [R, end + max kept] (padding points at position 0) and valid (bool).
    """
    rows = keep.shape[0]
    counts = keep.sum(1)
    width = int(counts.max()) if rows else 0
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :width]
    suffix_valid = torch.arange(width)[None, :] < counts[:, None]
    suffix = torch.where(suffix_valid, order + end, torch.zeros_like(order))
    prefix = torch.arange(end)[None].expand(rows, -1)
    valid = torch.cat([torch.ones(rows, end, dtype=torch.bool), suffix_valid], 1)
    return torch.cat([prefix, suffix], 1), valid


def _rows(cache: KVCache, sub: Tensor) -> KVCache:
    """The cache of batch rows `sub` (a new object: extending it leaves `cache` intact)."""
    return KVCache([LayerKV(x.k[sub], x.v[sub], x.pos[sub]) for x in cache.layers])


def _commit(x_block: Tensor, logits: Tensor, mask_id: int, threshold: float | None) -> Tensor:
    """New block tokens [R, L] after one step of low-confidence remasking."""
    logits = logits.float()
    logits[..., mask_id] = float("-inf")
    conf, x0 = logits.softmax(-1).max(-1)
    masked = x_block == mask_id
    conf = conf.masked_fill(~masked, -1.0)
    best = conf.argmax(1, keepdim=True)
    pick = torch.zeros_like(masked).scatter_(1, best, True)
    if threshold is not None:
        pick |= masked & (conf > threshold)
    return torch.where(pick, x0, x_block)


@dataclass
class _Costs:
    nfe: Tensor
    tokens: Tensor
    pairs: Tensor
    layers: int

    def add(self, rows: Tensor, n_q: Tensor, n_k: Tensor) -> None:
        self.nfe[rows] += 1
        self.tokens[rows] += (n_q * self.layers).double()
        self.pairs[rows] += (n_q * n_k * self.layers).double()


def decode_block(
    model: PreTrainedModel,
    x: Tensor,
    rows: Tensor,
    index: Tensor,
    valid: Tensor,
    start: int,
    end: int,
    dec: Decoder,
    costs: _Costs,
) -> None:
    """Denoise block [start, end) of `x` (in place) for batch rows `rows` on their pruned
    sequences (`index`, `valid` from `pruned_index`), until no MASK is left in it."""
    mask_id = mask_token_id(model)
    prefix: KVCache | None = None
    while True:
        todo = (x[rows, start:end] == mask_id).any(1)
        if not todo.any():
            return
        sub = todo.nonzero().squeeze(1)
        r, idx, ok = rows[sub], index[sub], valid[sub]
        ids = x[r].gather(1, idx)
        if prefix is None:
            cache = KVCache() if dec.prefix_cache else None
            keep = None if bool(ok.all()) else ok
            logits = diffusion_logits(
                model, ids, idx, cache=cache, key_keep=keep, logits_rows=slice(start, end)
            )
            if cache is not None:
                prefix = cache.crop(start)  # first forward: every row of the block is here
            n_q = n_k = ok.sum(1)
        else:
            new_ok = ok[:, start:]
            keep = None if bool(new_ok.all()) else torch.cat([ok[:, :start], new_ok], 1)
            logits = diffusion_logits(
                model,
                ids[:, start:],
                idx[:, start:],
                cache=_rows(prefix, sub),
                key_keep=keep,
                logits_rows=slice(0, end - start),
            )
            n_q = new_ok.sum(1)
            n_k = n_q + start
        costs.add(r, n_q, n_k)
        x[r, start:end] = _commit(x[r, start:end], logits, mask_id, dec.threshold)


@torch.no_grad()
def generate(
    model: PreTrainedModel,
    prompts: Tensor,
    gen_length: int,
    block_length: int,
    dec: Decoder,
    eos_id: int,
    generator: torch.Generator,
) -> DecodeResult:
    """Decode `gen_length` tokens after `prompts` [N, P] with recipe `dec`."""
    if gen_length % block_length:
        raise ValueError(
            f"gen_length={gen_length} is not a multiple of block_length={block_length}"
        )
    n, p = prompts.shape
    total = p + gen_length
    mask_id = mask_token_id(model)
    x = torch.cat([prompts, torch.full((n, gen_length), mask_id, dtype=prompts.dtype)], 1)
    zeros = torch.zeros(n, dtype=torch.float64)
    costs = _Costs(
        torch.zeros(n, dtype=torch.long),
        zeros.clone(),
        zeros.clone(),
        int(model.config.num_hidden_layers),
    )
    finished = torch.zeros(n, dtype=torch.bool)
    for start in range(p, total, block_length):
        end = start + block_length
        rows = (~finished).nonzero().squeeze(1)
        if rows.numel() == 0:
            break
        keep = dec.dropout.sample(rows.numel(), total - end, generator)  # once per block
        index, valid = pruned_index(end, keep)
        decode_block(model, x, rows, index, valid, start, end, dec, costs)
        if dec.early_stop:
            hit = rows[(x[rows, start:end] == eos_id).any(1)]
            x[hit, end:] = eos_id
            finished[hit] = True
    return DecodeResult(x, costs.nfe, costs.tokens, costs.pairs)
