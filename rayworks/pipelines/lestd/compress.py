"""Compress every attention layer of a Llama by one method at one MHA compression ratio.

Methods: `lestd` (HOOI basis + iterative importance pruning with refit), `lestd_norefit`
(same ranks, one-shot pruning), `tucker` (dense-core Tucker), `svd` (per-matrix truncated
SVD). The ratio is met per layer (the same budget for every layer: a simplification; the
paper may allocate budgets across layers). Every method yields two models: the
compressed-domain one (attention modules replaced, see `compressed_attention.py`) and the
dense model carrying the reconstructed weights, which must compute the same function.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from rayworks.pipelines.lestd.baselines import LowRank, svd_rank, truncated_svd, tucker_ranks
from rayworks.pipelines.lestd.compressed_attention import LowRankLinear, TuckerAttention
from rayworks.pipelines.lestd.hooi import Tucker, hooi
from rayworks.pipelines.lestd.lestd import choose_ranks, prune_oneshot, prune_refit
from rayworks.pipelines.lestd.storage import budget, svd_params, tucker_params
from rayworks.pipelines.lestd.tensorize import MATRICES, dense_params, from_tensor, to_tensor

Method = Literal["lestd", "lestd_norefit", "tucker", "svd"]
METHODS: tuple[Method, ...] = ("lestd", "lestd_norefit", "tucker", "svd")


@dataclass(frozen=True)
class StageOptions:
    """Knobs of the decompositions (see `LeSTDConfig` for meanings and defaults)."""

    hooi_iters: int = 10
    prune_fraction: float = 0.1
    refit_sweeps: int = 2
    r1_fractions: tuple[float, ...] = (0.03125, 0.0625, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0)
    r2_fractions: tuple[float, ...] = (0.125, 0.25, 0.5, 0.75, 1.0)


@dataclass
class LayerResult:
    """One layer's compressed weights: a Tucker form or four low-rank matrices."""

    params: int
    tucker: Tucker | None = None
    lowrank: dict[str, LowRank] | None = None
    info: dict[str, float] = field(default_factory=dict)

    def weights(self) -> dict[str, Tensor]:
        """The reconstructed `nn.Linear` weights (out x in) of q/k/v/o_proj."""
        if self.tucker is not None:
            return from_tensor(self.tucker.full())
        return {name: f.full() for name, f in (self.lowrank or {}).items()}


class LayerMemo:
    """Stage-1 HOOI results of one layer, memoised by (R1, R2) across ratios and methods."""

    def __init__(self, attn: nn.Module, iters: int) -> None:
        self.w = to_tensor(attn)
        self.mats = {n: getattr(attn, n).weight.detach().double() for n in MATRICES}
        self.dense = dense_params(attn)
        self.iters = iters
        self._hooi: dict[tuple[int, int], Tucker] = {}

    def hooi(self, r1: int, r2: int) -> Tucker:
        if (r1, r2) not in self._hooi:
            self._hooi[(r1, r2)] = hooi(self.w, r1, r2, self.iters)
        return self._hooi[(r1, r2)]


def rank_grid(d: int, hd: int, opts: StageOptions) -> list[tuple[int, int]]:
    r1s = sorted({max(1, round(f * d)) for f in opts.r1_fractions})
    r2s = sorted({max(1, round(f * hd)) for f in opts.r2_fractions})
    return [(r1, r2) for r1 in r1s for r2 in r2s]


def compress_layer(
    memo: LayerMemo, method: Method, ratio: float, opts: StageOptions
) -> LayerResult | None:
    """`method` at `ratio` on one layer, or None when no configuration meets the ratio."""
    d, hd, _, heads = memo.w.shape
    limit = budget(memo.dense, ratio)
    if method == "svd":
        inner = memo.mats["q_proj"].shape[0]
        rank = svd_rank(d, inner, limit)
        if rank is None:
            return None
        factors = {n: truncated_svd(m, rank) for n, m in memo.mats.items()}
        return LayerResult(svd_params(d, inner, rank), lowrank=factors, info={"rank": rank})
    if method == "tucker":
        ranks = tucker_ranks(memo.w, limit, memo.hooi)
        if ranks is None:
            return None
        t = memo.hooi(*ranks)
        info = {"r1": ranks[0], "r2": ranks[1], "density": 1.0}
        return LayerResult(tucker_params(d, hd, heads, *ranks), tucker=t, info=info)
    choice = choose_ranks(memo.w, limit, rank_grid(d, hd, opts), memo.hooi)
    if choice is None:
        return None
    r1, r2, nnz = choice
    base = memo.hooi(r1, r2)
    rounds = 0
    if method == "lestd":
        t, rounds = prune_refit(memo.w, base, nnz, opts.prune_fraction, opts.refit_sweeps)
    else:
        t = prune_oneshot(base, nnz)
    info = {"r1": r1, "r2": r2, "density": nnz / base.core.numel(), "rounds": rounds}
    return LayerResult(tucker_params(d, hd, heads, r1, r2, nnz), tucker=t, info=info)


@dataclass
class Compressed:
    """A compressed LM in both forms plus its accounting."""

    compressed: nn.Module  # compressed-domain modules
    reconstructed: nn.Module  # dense HF model with the reconstructed weights
    stats: dict[str, float]


def attention_layers(model: nn.Module) -> list[Any]:
    return list(model.model.layers)


def compress_model(
    model: nn.Module,
    memos: list[LayerMemo],
    method: Method,
    ratio: float,
    opts: StageOptions,
    on_layer: Callable[[int], None] | None = None,
) -> Compressed | None:
    """Compress every layer; None when some layer cannot meet `ratio` (unreachable)."""
    results = []
    for i, memo in enumerate(memos):
        res = compress_layer(memo, method, ratio, opts)
        if res is None:
            return None
        results.append(res)
        if on_layer:
            on_layer(i)
    recon, comp = copy.deepcopy(model), copy.deepcopy(model)
    comp.config.use_cache = False  # compressed-domain attention keeps no KV cache
    err = ref = 0.0
    for i, (res, memo) in enumerate(zip(results, memos, strict=True)):
        weights = res.weights()
        attn = attention_layers(recon)[i].self_attn
        for name, w in weights.items():
            getattr(attn, name).weight.data.copy_(w.to(attn.q_proj.weight.dtype))
            err += float((memo.mats[name] - w).square().sum())
            ref += float(memo.mats[name].square().sum())
        layer = attention_layers(comp)[i]
        if res.tucker is not None:
            layer.self_attn = TuckerAttention(res.tucker, i)
        else:
            for name, f in (res.lowrank or {}).items():
                setattr(layer.self_attn, name, LowRankLinear(f))
    dense = sum(m.dense for m in memos)
    stored = sum(r.params for r in results)
    stats = {"achieved_ratio": dense / stored, "weight_err": (err / ref) ** 0.5}
    for key in results[0].info:
        stats[key] = sum(r.info[key] for r in results) / len(results)
    return Compressed(comp.eval(), recon.eval(), stats)


def layer_memos(model: nn.Module, iters: int) -> list[LayerMemo]:
    with torch.no_grad():
        return [LayerMemo(layer.self_attn, iters) for layer in attention_layers(model)]
