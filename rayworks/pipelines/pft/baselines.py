"""The baselines of `pft` (the arms of `docs/pft.md`), each a pure function model, frames -> adapted
model, with the same adaptation budget (epochs, batch, lr) as PFT:

- AdaBN (Li et al. 2016): every BN layer's statistics re-estimated on the target frames.
- Tent (Wang et al. 2021): minimise the mean prediction entropy, updating only the BN
  affine parameters (gamma, beta), BN on batch statistics while adapting. Evaluation uses the
  target-frame statistics of the final model (AdaBN pass), not test-batch statistics, so
  no arm sees the test set's class mix (reconstructed).
- SHOT-IM (Liang et al. 2020): L = H̄(p) - H(p̄) + β·CE(ŷ_centroid), F and B updated, C frozen;
  pseudo-labels from the two-round weighted-centroid clustering in B's feature space,
  recomputed at every epoch.
- neutral-CE: fine-tune C alone with CE to "neutral" on the neutral frames (collapse).
- oracle: labelled fine-tune of F, B and C on labelled target frames (upper bound).

Every arm that trains with BN in train mode (Tent, SHOT, oracle) ends with an AdaBN pass on
its own training frames: with the momentum-averaged statistics the eval-mode network lags
the fast-moving weights (an lr-1e-3 oracle fell to chance on its own training frames).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as fn

from rayworks.pipelines.pft.model import SourceModel, batches

BN = (nn.BatchNorm1d, nn.BatchNorm2d)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Per-sample Shannon entropy (nats) of softmax(logits) [N, K] -> [N]."""
    logp = fn.log_softmax(logits, 1)
    return -(logp.exp() * logp).sum(1)


def im_loss(logits: torch.Tensor) -> torch.Tensor:
    """SHOT's information-maximisation loss: mean entropy - entropy of the mean prediction."""
    mean = logits.softmax(1).mean(0)
    return entropy(logits).mean() + (mean * torch.log(mean + 1e-5)).sum()


@torch.no_grad()
def reestimate_bn(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """AdaBN: reset every BN layer's running statistics to those of x (one full-batch pass
    in train mode, cumulative average), then eval mode."""
    model.train()
    for m in model.modules():
        if isinstance(m, BN):
            m.reset_running_stats()
            m.momentum = None
    model(x)
    for m in model.modules():
        if isinstance(m, BN):
            m.momentum = 0.1
    return model.eval()


def _fit(
    model: nn.Module,
    params: list[torch.Tensor],
    loss_fn: Any,
    n: int,
    adapt: dict[str, Any],
    lr: float,
    seed: int,
) -> None:
    """Adam on `params` for adapt.epochs over n frames; loss_fn(idx, epoch) -> loss."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(params, lr=lr)
    for epoch in range(adapt["epochs"]):
        for idx in batches(n, adapt["batch_size"], gen):
            if len(idx) < 2:
                continue  # batch statistics need two frames
            loss = loss_fn(idx, epoch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


def _only(model: nn.Module, params: list[torch.Tensor]) -> list[torch.Tensor]:
    """Freeze every parameter of model except `params` (returned)."""
    model.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    return params


def adabn(model: SourceModel, x: np.ndarray) -> SourceModel:
    return reestimate_bn(copy.deepcopy(model), torch.from_numpy(x))


def tent(model: SourceModel, x: np.ndarray, adapt: dict[str, Any], seed: int) -> SourceModel:
    model = copy.deepcopy(model).train()
    xt = torch.from_numpy(x)
    affine = [p for m in model.modules() if isinstance(m, BN) for p in (m.weight, m.bias)]
    _fit(
        model,
        _only(model, affine),
        lambda idx, _: entropy(model(xt[idx])).mean(),
        len(xt),
        adapt,
        adapt["lr"],
        seed,
    )
    return reestimate_bn(model, xt)


@torch.no_grad()
def centroid_labels(feats: torch.Tensor, logits: torch.Tensor, rounds: int = 2) -> torch.Tensor:
    """SHOT's pseudo-labels: class centroids weighted by the soft predictions, then `rounds`-1
    hard re-assignments, nearest centroid by cosine distance (features augmented with 1)."""
    z = fn.normalize(torch.cat([feats, torch.ones(len(feats), 1)], 1), dim=1)
    weights = logits.softmax(1)  # [N, K]
    for _ in range(rounds):
        centroids = fn.normalize(weights.T @ z / (weights.sum(0)[:, None] + 1e-8), dim=1)
        labels = (z @ centroids.T).argmax(1)
        weights = fn.one_hot(labels, logits.shape[1]).float()
    return labels


def shot(model: SourceModel, x: np.ndarray, adapt: dict[str, Any], seed: int) -> SourceModel:
    model = copy.deepcopy(model)
    xt = torch.from_numpy(x)
    params = _only(model, [*model.F.parameters(), *model.B.parameters()])
    pseudo: dict[int, torch.Tensor] = {}

    def loss(idx: torch.Tensor, epoch: int) -> torch.Tensor:
        if epoch not in pseudo:
            model.eval()
            with torch.no_grad():
                bottleneck = model.B(model.F(xt))
                pseudo[epoch] = centroid_labels(bottleneck, model.C(bottleneck))
            model.train()
        logits = model(xt[idx])
        return im_loss(logits) + adapt["shot_beta"] * fn.cross_entropy(logits, pseudo[epoch][idx])

    model.train()
    _fit(model, params, loss, len(xt), adapt, adapt["lr"], seed)
    return reestimate_bn(model, xt)


def neutral_ce(model: SourceModel, x: np.ndarray, adapt: dict[str, Any], seed: int) -> Any:
    model = copy.deepcopy(model).eval()
    xt = torch.from_numpy(x)
    neutral = torch.zeros(len(xt), dtype=torch.long)
    params = _only(model, list(model.C.parameters()))
    _fit(
        model,
        params,
        lambda idx, _: fn.cross_entropy(model(xt[idx]), neutral[idx]),
        len(xt),
        adapt,
        adapt["lr"],
        seed,
    )
    return model


def oracle(
    model: SourceModel, x: np.ndarray, y: np.ndarray, adapt: dict[str, Any], seed: int
) -> SourceModel:
    model = copy.deepcopy(model).train()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    params = _only(model, list(model.parameters()))
    _fit(
        model,
        params,
        lambda idx, _: fn.cross_entropy(model(xt[idx]), yt[idx]),
        len(xt),
        adapt,
        adapt["oracle_lr"],
        seed,
    )
    return reestimate_bn(model, xt)
