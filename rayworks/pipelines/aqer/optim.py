"""Adam (Kingma & Ba 2015, torch's default β = (0.9, 0.999), ε = 1e-8) keeping the best
iterate: Step III of AQER and the HEC baseline share it.

Written out here rather than `torch.optim.Adam` because importing `torch.optim` costs
several seconds in every fresh Ray worker (it pulls in torch._dynamo), more than a
smoke-sized fit itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def adam_best(
    loss_fn: Callable[..., torch.Tensor],
    init: Sequence[torch.Tensor],
    steps: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> tuple[list[torch.Tensor], list[float]]:
    """Minimise loss_fn(*params) for `steps` Adam steps from `init`.

    Returns the parameters with the lowest loss seen (the start included, so the result is
    never worse than the start) and the loss at every iterate (steps + 1 values).
    """
    params = [p.detach().clone().requires_grad_(True) for p in init]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    best_loss, best = float("inf"), [p.detach().clone() for p in params]
    losses: list[float] = []
    for step in range(steps + 1):
        loss = loss_fn(*params)
        value = float(loss.detach())
        losses.append(value)
        if value < best_loss:
            best_loss, best = value, [p.detach().clone() for p in params]
        if step == steps:
            break
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            t = step + 1
            for p, g, m_i, v_i in zip(params, grads, m, v, strict=True):
                m_i.mul_(betas[0]).add_(g, alpha=1 - betas[0])
                v_i.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
                m_hat = m_i / (1 - betas[0] ** t)
                v_hat = v_i / (1 - betas[1] ** t)
                p.sub_(lr * m_hat / (v_hat.sqrt() + eps))
    return best, losses
