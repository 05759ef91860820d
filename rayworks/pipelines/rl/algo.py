"""The math of RL post-training: advantage estimators, policy/value losses, KL, AsyPPO masks.

Pure torch functions, no Ray and no I/O; the pipelines wire them into rollouts and
learners. Shapes: B sequences, T response tokens (right-padded), M critics, G responses
per prompt. `mask` is 1.0 on real response tokens and 0.0 on padding; every reduction
ignores padding.

Advantage estimators and policy losses live in registries (`ADVANTAGES`,
`POLICY_LOSSES`): a method adds one decorated function, not a fork of the trainer. Every
advantage estimator returns `(advantages, returns)`, `returns` being the critic's target
(None for critic-free estimators).

AsyPPO (Liu et al., ICLR 2026; no official code, equations from two secondary summaries): GAE on the mean of M mini-critics' values (step 5), the inter-critic
std sigma_t (step 6), the advantage mask zeroing the lowest-k% sigma tokens (step 7) and
the entropy filter dropping the bonus on the highest-h% sigma tokens (step 8), applied in
the clipped objective (step 9). Reconstructed choices, named: ranking is batch-global
over response tokens by default (per-sequence is an option), sigma is the population std.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

Tensor = torch.Tensor
ADVANTAGES: dict[str, Callable[..., tuple[Tensor, Tensor | None]]] = {}
POLICY_LOSSES: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {}


def register_advantage(name: str) -> Callable:
    def decorate(fn: Callable) -> Callable:
        ADVANTAGES[name] = fn
        return fn

    return decorate


def register_policy_loss(name: str) -> Callable:
    def decorate(fn: Callable) -> Callable:
        POLICY_LOSSES[name] = fn
        return fn

    return decorate


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of `x` over positions where `mask` is 1 (0 where nothing is valid)."""
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


# ------------------------------------------------------------------ advantages
@register_advantage("grpo")
def grpo_advantages(
    rewards: Tensor, mask: Tensor, group_size: int, eps: float = 1e-6, scale: bool = True
) -> tuple[Tensor, None]:
    """Group-normalised outcome advantage, broadcast over each response's tokens.

    rewards: (B,) with B = prompts x G, each prompt's G responses contiguous.
    A_i = (r_i - mean_group) / (std_group + eps); with all-equal rewards A = 0 exactly
    (never a division by zero). `scale=False` only centres (Dr. GRPO-style).
    Returns ((B, T) advantages, None).
    """
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    groups = rewards.view(-1, group_size).float()
    centred = groups - groups.mean(dim=1, keepdim=True)
    if scale:
        centred = centred / (groups.std(dim=1, unbiased=False, keepdim=True) + eps)
    return centred.reshape(-1, 1) * mask, None


@register_advantage("gae")
def gae_advantages(
    token_rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over response tokens; returns (advantages, returns).

    delta_t = r_t + gamma V(s_{t+1}) - V(s_t), A_t = sum_l (gamma lam)^l delta_{t+l},
    with V = 0 after the last real token (episode end). token_rewards, values, mask: (B, T).
    Returns are A_t + V(s_t), the critic's regression target.
    """
    values = values * mask
    advantages = torch.zeros_like(values)
    running = torch.zeros(values.shape[0], dtype=values.dtype, device=values.device)
    for t in reversed(range(values.shape[1])):
        next_value = values[:, t + 1] if t + 1 < values.shape[1] else torch.zeros_like(running)
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        running = (delta + gamma * lam * running) * mask[:, t]
        advantages[:, t] = running
    return advantages, (advantages + values) * mask


def outcome_to_token_rewards(rewards: Tensor, mask: Tensor) -> Tensor:
    """Place each sequence's outcome reward on its last real token; (B,) -> (B, T)."""
    last = (mask.cumsum(dim=1) == mask.sum(dim=1, keepdim=True)) & (mask > 0)
    return last.float() * rewards.view(-1, 1)


# ------------------------------------------------------------------------ KL
def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: Literal["k1", "k2", "k3"] = "k3") -> Tensor:
    """Per-token estimators of KL(pi || ref) from samples of pi (Schulman's k1/k2/k3).

    k1 = log pi - log ref (unbiased, can be negative); k2 = (k1)^2 / 2 (biased, low
    variance); k3 = ref/pi - log(ref/pi) - 1 (unbiased, non-negative).
    """
    log_ratio = logp - ref_logp
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio**2
    if kind == "k3":
        return torch.exp(-log_ratio) + log_ratio - 1.0
    raise ValueError(f"unknown KL estimator {kind!r}; known: k1, k2, k3")


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the softmax over the last dim: (B, T, V) -> (B, T)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


# --------------------------------------------------------------- policy loss
def aggregate(loss: Tensor, mask: Tensor, mode: str) -> Tensor:
    """token-mean: over all tokens of the batch (DAPO); seq-mean-token-mean: per sequence first."""
    if mode == "token-mean":
        return masked_mean(loss, mask)
    if mode == "seq-mean-token-mean":
        return masked_mean(loss, mask, dim=1).mean()
    raise ValueError(f"unknown aggregation {mode!r}; known: token-mean, seq-mean-token-mean")


@register_policy_loss("clipped")
def clipped_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    adv_mask: Tensor | None = None,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    entropy_mask: Tensor | None = None,
    agg: str = "token-mean",
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate with clip-higher (eps_low != eps_high), negated for minimisation.

    loss_t = -I^A_t min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t)
             - beta I^H_t H_t            (AsyPPO step 9; I^A = I^H = 1 for plain PPO/GRPO)
    With rho = 1 and group-centred advantages the loss is exactly 0: expected, not a bug.
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    surrogate = torch.minimum(unclipped, clipped)
    if adv_mask is not None:
        surrogate = surrogate * adv_mask
    per_token = -surrogate
    if entropy is not None and entropy_coef:
        bonus = entropy if entropy_mask is None else entropy * entropy_mask
        per_token = per_token - entropy_coef * bonus
    loss = aggregate(per_token, mask, agg)
    with torch.no_grad():
        clip_frac = masked_mean((unclipped != clipped).float(), mask)
        stats = {"clip_frac": float(clip_frac), "ratio_mean": float(masked_mean(ratio, mask))}
    return loss, stats


def value_loss(
    values: Tensor,
    returns: Tensor,
    mask: Tensor,
    old_values: Tensor | None = None,
    clip: float | None = None,
) -> Tensor:
    """Critic regression (V - R)^2 / 2, optionally PPO value clipping around `old_values`."""
    loss = (values - returns) ** 2
    if clip is not None and old_values is not None:
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        loss = torch.maximum(loss, (clipped - returns) ** 2)
    return 0.5 * masked_mean(loss, mask)


# ------------------------------------------------------------------- AsyPPO
def split_responses(
    n_prompts: int,
    group_size: int,
    n_critics: int,
    seed: int = 0,
    mode: Literal["responses", "prompts"] = "responses",
) -> list[list[int]]:
    """Row indices each mini-critic trains on (AsyPPO step 2).

    "responses" (the method text): each prompt's G responses are shuffled and dealt
    round-robin into M disjoint subsets, so every critic sees every prompt when G >= M.
    "prompts" (the abstract's wording): whole prompts dealt into M disjoint shards.
    Every row appears in exactly one subset either way.
    """
    gen = torch.Generator().manual_seed(seed)
    shards: list[list[int]] = [[] for _ in range(n_critics)]
    if mode == "prompts":
        for slot, p in enumerate(torch.randperm(n_prompts, generator=gen).tolist()):
            shards[slot % n_critics].extend(range(p * group_size, (p + 1) * group_size))
        return [sorted(s) for s in shards]
    for p in range(n_prompts):
        order = torch.randperm(group_size, generator=gen).tolist()
        offset = int(torch.randint(n_critics, (1,), generator=gen))  # spread uneven remainders
        for slot, g in enumerate(order):
            shards[(slot + offset) % n_critics].append(p * group_size + g)
    return [sorted(s) for s in shards]


def ensemble_values(values: Tensor, agg: Literal["mean", "min"] = "mean") -> tuple[Tensor, Tensor]:
    """(M, B, T) critic values -> (V_bar, sigma): mean (or min) and population std over M."""
    bar = values.mean(dim=0) if agg == "mean" else values.min(dim=0).values
    return bar, values.std(dim=0, unbiased=False)


def _rank_mask(
    sigma: Tensor, mask: Tensor, frac: float, lowest: bool, per_sequence: bool
) -> Tensor:
    """1 everywhere on valid tokens except the `frac` share with the lowest/highest sigma.

    Exactly floor(frac * n_valid) tokens are dropped per ranking population; ties are broken
    by position (stable sort), so counts are exact; padding is never ranked and stays 0.
    """
    if not 0.0 <= frac <= 1.0:
        raise ValueError(f"mask fraction must be in [0, 1], got {frac}")
    keep = mask.clone().float()
    rows = [slice(i, i + 1) for i in range(sigma.shape[0])] if per_sequence else [slice(None)]
    for row in rows:
        valid = mask[row] > 0
        n_drop = int(frac * int(valid.sum()))
        if n_drop == 0:
            continue
        scores = sigma[row][valid]
        order = torch.sort(scores if lowest else -scores, stable=True).indices[:n_drop]
        flat_keep = torch.ones_like(scores)
        flat_keep[order] = 0.0
        block = keep[row]
        block[valid] = flat_keep
        keep[row] = block
    return keep


def low_k_mask(sigma: Tensor, mask: Tensor, k: float = 0.2, per_sequence: bool = False) -> Tensor:
    """I^A (step 7): zero the advantage where critics agree most (bottom k of sigma)."""
    return _rank_mask(sigma, mask, k, lowest=True, per_sequence=per_sequence)


def top_h_mask(sigma: Tensor, mask: Tensor, h: float = 0.2, per_sequence: bool = False) -> Tensor:
    """I^H (step 8): drop the entropy bonus where critics disagree most (top h of sigma)."""
    return _rank_mask(sigma, mask, h, lowest=False, per_sequence=per_sequence)


def whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x - mean) / std over valid positions (PPO's batch advantage normalisation)."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def masked_corr(x: Tensor, y: Tensor, mask: Tensor) -> float:
    """Pearson correlation of x and y over valid positions (nan if either is constant)."""
    valid = mask > 0
    a, b = x[valid].double(), y[valid].double()
    if a.numel() < 2 or float(a.std()) == 0.0 or float(b.std()) == 0.0:
        return float("nan")
    return float(torch.corrcoef(torch.stack([a, b]))[0, 1])
