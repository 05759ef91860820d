"""One RL step's data as tensors: rollouts -> (prompt | response) rows, and what methods add.

Layout: every row is its prompt left-padded to width P, then its response right-padded to
width T, so response token t of every row sits at column P + t and is predicted by the
logits (and scored by the value) at column P - 1 + t. Positions count real tokens only,
as in the engines, so the learner's forward reproduces the engine's logprobs.

A vision-language policy's rows also carry their image's pixel values (the prompt ids
already hold the expanded image tokens); `parts` keeps each reward component's raw score
per row for methods that combine components themselves (Trust-GRPO).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch

from rayworks.platform.rollout import Rollout

Tensor = torch.Tensor


@dataclass
class RolloutBatch:
    input_ids: Tensor  # (B, P + T) prompt (left-padded) | response (right-padded)
    attention_mask: Tensor  # (B, P + T) 1 on real tokens
    response_mask: Tensor  # (B, T) float, 1 on real response tokens
    old_logp: Tensor  # (B, T) log pi_old of each response token (0 on padding)
    rewards: Tensor  # (B,) total reward per response
    prompt_width: int  # P
    pixel_values: Tensor | None = None  # (B, 3, H, W) for a vision-language policy
    parts: dict[str, Tensor] = field(default_factory=dict)  # component -> (B,) raw scores

    @property
    def position_ids(self) -> Tensor:
        return (self.attention_mask.cumsum(-1) - 1).clamp(min=0)

    @property
    def responses(self) -> Tensor:
        return self.input_ids[:, self.prompt_width :]

    def response_slice(self, per_position: Tensor) -> Tensor:
        """(B, P + T, ...) per-position outputs -> (B, T, ...) at the states before each token."""
        p, t = self.prompt_width, self.responses.shape[1]
        return per_position[:, p - 1 : p - 1 + t]

    @property
    def model_inputs(self) -> dict[str, Tensor]:
        """Keyword arguments of the policy's forward over the rows."""
        inputs = {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "position_ids": self.position_ids,
        }
        if self.pixel_values is not None:
            inputs["pixel_values"] = self.pixel_values
        return inputs

    def rows(self, index: Tensor | list[int]) -> RolloutBatch:
        index = torch.as_tensor(index, dtype=torch.long)
        tensors = {
            f.name: getattr(self, f.name)[index]
            for f in fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        parts = {k: v[index] for k, v in self.parts.items()}
        return replace(self, **tensors, parts=parts)


def make_batch(
    rollouts: list[Rollout],
    rewards: list[float],
    pad: int,
    pixel_values: Tensor | None = None,
    parts: dict[str, list[float]] | None = None,
) -> RolloutBatch:
    """Tensors of `rollouts` (in order) with their total rewards (and per-row images and
    reward components)."""
    if not rollouts:
        raise ValueError("no rollouts to batch")
    p = max(len(r.prompt_ids) for r in rollouts)
    t = max(1, max(len(r.completion_ids) for r in rollouts))
    b = len(rollouts)
    ids = torch.full((b, p + t), pad, dtype=torch.long)
    attn = torch.zeros((b, p + t), dtype=torch.long)
    resp_mask = torch.zeros((b, t))
    old_logp = torch.zeros((b, t))
    for i, r in enumerate(rollouts):
        n, k = len(r.prompt_ids), len(r.completion_ids)
        ids[i, p - n : p] = torch.tensor(r.prompt_ids)
        attn[i, p - n : p + k] = 1
        if k:
            ids[i, p : p + k] = torch.tensor(r.completion_ids)
            resp_mask[i, :k] = 1.0
            old_logp[i, :k] = torch.tensor(r.logprobs)
    return RolloutBatch(
        ids,
        attn,
        resp_mask,
        old_logp,
        torch.tensor(rewards, dtype=torch.float),
        p,
        pixel_values=pixel_values,
        parts={k: torch.tensor(v, dtype=torch.float) for k, v in (parts or {}).items()},
    )


@dataclass
class Estimate:
    """What a method computes from a batch before the policy update.

    advantages: (B, T); returns: (B, T) critic targets or None (no critic);
    adv_mask / entropy_mask: (B, T) AsyPPO's I^A and I^H, or None (all ones);
    critic_rows: per critic, the batch rows it trains on; stats: logged scalars.
    """

    advantages: Tensor
    returns: Tensor | None = None
    adv_mask: Tensor | None = None
    entropy_mask: Tensor | None = None
    critic_rows: list[list[int]] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)

    def select(self, index: Tensor) -> Estimate:
        """The per-token tensors of rows `index` (a learner's minibatch slice)."""

        def pick(t: Tensor | None) -> Tensor | None:
            return None if t is None else t[index]

        return replace(
            self,
            advantages=self.advantages[index],
            returns=pick(self.returns),
            adv_mask=pick(self.adv_mask),
            entropy_mask=pick(self.entropy_mask),
        )
