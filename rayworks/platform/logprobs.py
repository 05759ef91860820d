"""Token logprobs of the model endpoint: how they are computed, and their two OpenAI shapes.

Values are the model's raw logprobs: `log_softmax` of its logits before temperature and
top_p touch them. That is vLLM's default (`logprobs_mode="raw_logprobs"`), and it makes a
logprob a property of the model and the text alone: the same prompt scores the same
whatever sampling settings a client sends, which is what lm-evaluation-harness's
loglikelihood tasks sum, and prompt logprobs (`echo`) could be nothing else. They are
therefore not the probabilities of the distribution sampled from when temperature != 1 or
top_p < 1 (docs/serving.md says so).

A `-inf` logprob is sent as -9999.0 (as vLLM does): JSON has no infinity.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

FLOOR = -9999.0  # stands for -inf in JSON
TextOf = Callable[[int], str]  # token id -> its text


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token's logprob and the `k` most likely tokens at its position, best first.
    `logprob` is None for a prompt's first token (nothing precedes it to predict it)."""

    token: int
    logprob: float | None
    top: tuple[tuple[int, float], ...]


def step_logprobs(logits: torch.Tensor, chosen: torch.Tensor, k: int) -> list[TokenLogprob]:
    """Raw logprobs of `chosen` under `logits` (B, V) and each row's top `k`; `chosen` (B,)."""
    lp = torch.log_softmax(logits.float(), dim=-1).clamp_(min=FLOOR)  # (B, V)
    picked = lp.gather(-1, chosen[:, None]).squeeze(-1).tolist()  # (B,)
    if k > 0:
        values, ids = lp.topk(min(k, lp.shape[-1]), dim=-1)  # (B, k), sorted
        tops = [
            tuple(zip(i, v, strict=True))
            for i, v in zip(ids.tolist(), values.tolist(), strict=True)
        ]
    else:
        tops = [()] * len(picked)
    return [
        TokenLogprob(t, p, top) for t, p, top in zip(chosen.tolist(), picked, tops, strict=True)
    ]


@torch.no_grad()
def prompt_logprobs(
    model: torch.nn.Module, ids: Sequence[int], k: int, chunk: int = 256
) -> list[TokenLogprob]:
    """Every prompt token's logprob given the tokens before it (token i from the logits at
    position i-1; the first has none), from one full forward of the prompt alone. The
    softmax runs over `chunk` positions at a time, so beside the logits themselves the
    memory is `chunk` x vocabulary floats."""
    logits = model(input_ids=torch.tensor([list(ids)])).logits[0, :-1]  # (T-1, V)
    target = torch.tensor(ids[1:])  # (T-1,)
    out = [TokenLogprob(ids[0], None, ())]
    for start in range(0, len(target), chunk):
        out += step_logprobs(logits[start : start + chunk], target[start : start + chunk], k)
    return out


def top_dict(entry: TokenLogprob, text_of: TextOf) -> dict[str, float] | None:
    """Completions' `top_logprobs` item: the top k plus the chosen token (so up to k + 1,
    as vLLM), best first, keyed by token text (tokens with the same text keep the best)."""
    if entry.logprob is None:
        return None
    pairs = dict(entry.top)
    pairs.setdefault(entry.token, entry.logprob)
    out: dict[str, float] = {}
    for token, lp in sorted(pairs.items(), key=lambda p: -p[1]):
        out.setdefault(text_of(token), lp)
    return out


def completion_logprobs(
    entries: Sequence[TokenLogprob], text_of: TextOf, offset: int = 0
) -> dict[str, Any]:
    """OpenAI's legacy `logprobs` object. `text_offset` is each token's start as the running
    length of the token texts before it, from `offset` (what a stream sent already)."""
    tokens = [text_of(e.token) for e in entries]
    starts = list(itertools.accumulate(map(len, tokens), initial=offset))[: len(tokens)]
    return {
        "tokens": tokens,
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [top_dict(e, text_of) for e in entries],
        "text_offset": starts,
    }


def chat_token(token: int, logprob: float, text_of: TextOf) -> dict[str, Any]:
    text = text_of(token)
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8", "replace"))}


def chat_logprobs(entries: Sequence[TokenLogprob], text_of: TextOf) -> dict[str, Any]:
    """The chat `logprobs` object: per generated token its text, logprob, UTF-8 bytes and
    exactly the top `top_logprobs` alternatives (the chosen one only if among them)."""
    content = []
    for e in entries:
        assert e.logprob is not None  # generated tokens always have one
        top = [chat_token(t, lp, text_of) for t, lp in e.top]
        content.append({**chat_token(e.token, e.logprob, text_of), "top_logprobs": top})
    return {"content": content}
