"""The one batched, KV-cached decode loop: left-padded rows, one forward per step.

Serving (`platform/completion_engine.py`), the `hf` rollout engine (`platform/rollout.py`)
and through it calibration all decode with `KVDecoder`; each samples its own tokens from
the logits it is handed (greedy, nucleus, banned ids), so the loop itself holds no policy.
Rows are left-padded so that every row's next token sits in the last column; positions
restart at 0 after each row's padding, so a padded row decodes exactly as it would alone.
`prompt_ids` is the one way a text prompt becomes the rows' token ids (serving and the
rollout engines wrap it with their own errors).
"""

from __future__ import annotations

from typing import Any

import torch


def prompt_ids(tok: Any, prompt: str, chat: bool = False) -> list[int]:
    """A prompt's token ids: plain (the tokenizer's special tokens added; BOS alone for an
    empty prompt), or as one user turn of the tokenizer's chat template with the generation
    prompt, tokenized without adding special tokens (the template writes its own: a BOS
    added again would be doubled, as `apply_chat_template(tokenize=True)` avoids too).
    Empty when the prompt is empty and the tokenizer has no BOS."""
    if chat:
        turn = [{"role": "user", "content": prompt}]
        text = tok.apply_chat_template(turn, add_generation_prompt=True, tokenize=False)
        return tok(text, add_special_tokens=False).input_ids
    ids = tok(prompt).input_ids or [tok.bos_token_id]
    return [] if ids[0] is None else ids


class KVDecoder:
    """`logits` holds the next-token logits (B, V) of every row; `step(tokens)` appends one
    token per row and runs the forward for the next. `prefill_kwargs` (e.g. a VLM's
    `pixel_values`) go into the first forward only."""

    def __init__(
        self,
        model: Any,
        rows: list[list[int]],
        pad: int,
        device: torch.device | str = "cpu",
        prefill_kwargs: dict[str, Any] | None = None,
    ) -> None:
        width = max(map(len, rows))
        self.model = model
        self.mask = torch.tensor(
            [[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device
        )
        self.pos = (self.mask.cumsum(-1) - 1).clamp(min=0)  # each row's positions start at 0
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
        self.cache: Any = None
        self.logits = self._forward(ids, prefill_kwargs or {})

    @torch.no_grad()
    def _forward(self, ids: torch.Tensor, extra: dict[str, Any]) -> torch.Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=self.mask,
            position_ids=self.pos,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
            **extra,
        )
        self.cache = out.cache
        return out.logits[:, -1]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed `tokens` (B,) and return the logits of the position after them."""
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        self.pos = self.pos[:, -1:] + 1
        self.logits = self._forward(tokens[:, None], {})
        return self.logits
