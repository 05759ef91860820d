"""The two inputs of our reconstructed recipe (docs/attnrow.md): (b) synthetic clustered tokens
with a controlled kernel spectrum, and (a) Q, K, V of one head of the platform's stdlib
char LM (`lestd/lm.py`) on held-out text.

(b): C fixed cluster centres of norm r with r²/√d = `center_logit` (the logit a token
gives its own centre), tokens = centre + isotropic noise of relative size `spread`, values
= per-cluster mean + noise. The centres depend on the seed only, so the token law, hence
the spectrum of the normalised kernel K/(2n) and s_λ at λ = lambda_rel·2n, does not
change with n. A norm `scale` multiplies Q and K (logits grow as scale²).

(a): the pre-RoPE outputs of q_proj, k_proj, v_proj of layer `layer`, head `head`,
captured by forward hooks on held-out rows of `seq_len` characters, concatenated row
after row into one long sequence of n tokens. Pre-RoPE is our choice (reconstructed):
the paper's Att(Q, K, V) has no positions, and RoPE is a per-position rotation that the
content kernel does not model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from rayworks.pipelines.attnrow.config import ImbalancedConfig, LMInputConfig, SyntheticConfig
from rayworks.pipelines.lestd.lm import cached_lm, load_lm

Triple = tuple[np.ndarray, np.ndarray, np.ndarray]


def cluster_weights(clusters: int, decay: float) -> np.ndarray:
    """Input (b') cluster law: w_c = decay^c / Σ_j decay^j, c = 0..C-1 (sums to 1)."""
    w = decay ** np.arange(clusters, dtype=float)
    return w / w.sum()


def minor_clusters(weights: np.ndarray, share: float) -> np.ndarray:
    """The smallest clusters whose weights sum to <= `share` (possibly none): indices."""
    order = np.argsort(weights, kind="stable")
    return np.sort(order[np.cumsum(weights[order]) <= share])


def _draw(
    cfg: SyntheticConfig, n: int, seed: int, scale: float, weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Q, K, V and the query labels; `weights` None = uniform labels (input b, bit-for-bit
    the original draw), else labels of Q and K drawn i.i.d. from `weights`."""
    d, c = cfg.d, cfg.clusters
    law = np.random.default_rng([seed, 0])
    radius = math.sqrt(cfg.center_logit * math.sqrt(d))
    centres = law.standard_normal((c, d))
    centres *= radius / np.linalg.norm(centres, axis=1, keepdims=True)
    value_means = law.standard_normal((c, d))
    rng = np.random.default_rng([seed, 1 if weights is None else 2, n])

    def draw() -> np.ndarray:
        return rng.integers(c, size=n) if weights is None else rng.choice(c, size=n, p=weights)

    noise = cfg.spread * radius / math.sqrt(d)
    q_labels = draw()
    q = centres[q_labels] + noise * rng.standard_normal((n, d))
    labels = draw()
    k = centres[labels] + noise * rng.standard_normal((n, d))
    v = value_means[labels] + cfg.value_noise * rng.standard_normal((n, d))
    return scale * q, scale * k, v, q_labels


def clustered_tokens(cfg: SyntheticConfig, n: int, seed: int, scale: float = 1.0) -> Triple:
    """Input (b): Q, K (n, d) scaled by `scale`, V (n, d); a pure function of its args."""
    return _draw(cfg, n, seed, scale, None)[:3]


def imbalanced_tokens(
    cfg: SyntheticConfig, imb: ImbalancedConfig, n: int, seed: int, scale: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Input (b'): (b)'s centres and noise, cluster labels of Q and K drawn from
    `cluster_weights(C, imb.cluster_decay)`; returns Q, K, V and Q's labels (n,)."""
    return _draw(cfg, n, seed, scale, cluster_weights(cfg.clusters, imb.cluster_decay))


@torch.no_grad()
def capture_qkv(model: torch.nn.Module, ids: torch.Tensor, layer: int, head: int) -> Triple:
    """Per-head pre-RoPE q, k, v of `layer` for rows `ids` (R, T), rows concatenated:
    three (R·T, d_h) float64 arrays."""
    attn = model.model.layers[layer].self_attn
    d_h = attn.head_dim
    grabbed: dict[str, torch.Tensor] = {}
    hooks = [
        getattr(attn, f"{name}_proj").register_forward_hook(
            lambda _m, _i, out, name=name: grabbed.__setitem__(name, out)
        )
        for name in ("q", "k", "v")
    ]
    try:
        model(input_ids=ids, use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    heads = {name: grabbed[name][..., head * d_h : (head + 1) * d_h] for name in "qkv"}
    return tuple(heads[name].reshape(-1, d_h).double().numpy() for name in "qkv")  # type: ignore[return-value]


def lm_tokens(cfg: LMInputConfig, seed: int, cache_root: Path) -> tuple[Triple, dict[str, float]]:
    """Input (a): (Q, K, V of n tokens, LM stats). Loads `folder`, or trains the LM once
    (cached, shared with `lestd` runs of the same config, seed and runs dir). Fails naming
    the key if the folder, layer, head or held-out text length does not fit."""
    if cfg.folder is not None:
        folder = Path(cfg.folder)
        if not (folder / "val.safetensors").is_file():
            raise ValueError(
                f"lm_input.folder={cfg.folder!r} holds no trained LM (val.safetensors)"
            )
        stats = json.loads((folder / "train.json").read_text())
    else:
        folder, stats = cached_lm(cfg.lm, seed, cache_root)
    model, val = load_lm(folder)
    if cfg.layer >= len(model.model.layers) or cfg.head >= model.config.num_attention_heads:
        raise ValueError(
            f"lm_input.layer={cfg.layer} / lm_input.head={cfg.head} do not exist in the LM "
            f"at {folder} ({len(model.model.layers)} layers, "
            f"{model.config.num_attention_heads} heads)"
        )
    rows = math.ceil(cfg.n / val.shape[1])
    if rows > len(val):
        raise ValueError(
            f"lm_input.n={cfg.n} exceeds the {val.numel()} held-out tokens of the LM "
            f"({len(val)} rows of {val.shape[1]})"
        )
    q, k, v = capture_qkv(model, val[:rows], cfg.layer, cfg.head)
    return (q[: cfg.n], k[: cfg.n], v[: cfg.n]), stats
