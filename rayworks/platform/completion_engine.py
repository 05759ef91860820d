"""The sampling loop behind the model endpoint: batched prompts, KV cache, stop strings.

One loop serves both the plain and the streamed answer, so both give the same text for
the same request; text that may be the start of a stop string is held back until settled.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from rayworks.models import load_causal_lm, load_tokenizer
from rayworks.platform import kv_serving
from rayworks.platform.kv_serving import KVServing
from rayworks.platform.openai_api import MAX_ROWS, APIError, CompletionRequest, choice
from rayworks.platform.serve_limits import ServeLimits, over_limit
from rayworks.platform.text_stream import IncrementalDecoder, StopMatcher


def sample_next(
    logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator
) -> torch.Tensor:
    """One token id per row: argmax at temperature 0, else nucleus sampling."""
    if temperature == 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        sorted_p[(sorted_p.cumsum(-1) - sorted_p) >= top_p] = 0  # the top token always stays
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return torch.multinomial(probs, 1, generator=gen).squeeze(-1)


def encode_prompts(tok: Any, context: int, prompts: list[str]) -> list[list[int]]:
    """Token ids per prompt; 400 if a prompt is empty (and there is no BOS) or leaves no room
    to generate within `context` tokens. Shared with the TTC router, which checks prompts
    before they join a batch."""
    rows = []
    for i, prompt in enumerate(prompts):
        ids = tok(prompt).input_ids or [tok.bos_token_id]
        if ids[0] is None:
            raise APIError(
                400, f"prompt {i} is empty and the model has no BOS token", param="prompt"
            )
        if len(ids) >= context:
            raise APIError(
                400,
                f"prompt {i} has {len(ids)} tokens but the model's context "
                f"(max_position_embeddings) is {context} tokens, leaving no "
                "room for a completion; shorten the prompt",
                param="prompt",
                code="context_length_exceeded",
            )
        rows.append(ids)
    return rows


class TextRow:
    """Incremental detokenisation of one choice: stop strings, held-back text, finish reason.

    Text that could still become a stop string (or an incomplete UTF-8 character) is held
    back, so the streamed pieces add up to exactly the non-streamed text. Per token, only a
    short window of ids is decoded and only the new characters are matched against the stop
    strings (`text_stream.py`), so the cost per token does not grow with the text or with a
    stop string's length.
    """

    def __init__(self, tok: Any, eos: set[int], stop: list[str], limit: int) -> None:
        self.eos, self.limit = eos, limit
        self.decoder = IncrementalDecoder(tok)
        self.matcher = StopMatcher(stop)
        self.text, self.emitted, self.n_tokens = "", 0, 0
        self.finish: str | None = None

    def push(self, token: int) -> str:
        """Add one generated token; return the text that became safe to send."""
        self.n_tokens += 1
        if token in self.eos:
            self.finish = "stop"
            self._extend(self.decoder.flush())
            return self._take(len(self.text))
        self._extend(self.decoder.push(token))
        if self.finish is None and self.n_tokens >= self.limit:
            self._extend(self.decoder.flush())
            self.finish = self.finish or "length"
        if self.finish:
            return self._take(len(self.text))
        return self._take(len(self.text) - self.matcher.hold)

    def _extend(self, piece: str) -> None:
        """Append decoded text; on a completed stop string cut the text where it starts."""
        if not piece or self.finish:
            return
        start = self.matcher.feed(piece)
        self.text += piece
        if start is not None:
            self.text, self.finish = self.text[:start], "stop"

    def _take(self, upto: int) -> str:
        piece = self.text[self.emitted : upto]
        self.emitted = max(self.emitted, upto)
        return piece


def stream_error(err: Exception) -> dict[str, Any]:
    """An error raised after a stream started, as the event that ends it (OpenAI's error
    object; vLLM's server does the same), instead of a stream that just stops."""
    if isinstance(err, APIError):
        return {"error": {**err.body, "status": err.status}}
    message = f"generation failed: {type(err).__name__}: {str(err)[-300:]}"
    return {"error": {"message": message, "type": "server_error", "param": None,
                      "code": "internal_error", "status": 500}}  # fmt: skip


class CompletionEngine:
    """A causal LM and its tokenizer, answering completion requests (no Serve inside)."""

    def __init__(
        self,
        model_dir: str | Path,
        name: str,
        kv: KVServing | None = None,
        limits: ServeLimits | None = None,
    ) -> None:
        torch.set_num_threads(1)  # two torch threads on busy cores stall (NOTES)
        self.name = name
        self.limits = limits or ServeLimits()
        self.model = load_causal_lm(model_dir).eval()
        self.kv = kv or KVServing()
        self.draft = kv_serving.load_draft(self.kv.draft, self.model) if self.kv.draft else None
        self.tok = load_tokenizer(model_dir)
        self.context = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        extra = getattr(self.model.generation_config, "eos_token_id", None)  # int or list
        ids = [self.tok.eos_token_id, *(extra if isinstance(extra, list) else [extra])]
        self.eos = {i for i in ids if i is not None}

    def encode(self, prompts: list[str]) -> list[list[int]]:
        """Token ids per prompt; 400 if a prompt is empty, leaves no room to generate or is
        over `--max-prompt-tokens`."""
        rows = encode_prompts(self.tok, self.context, prompts)
        for i, ids in enumerate(rows):
            if len(ids) > self.limits.max_prompt_tokens:
                message = over_limit(f"prompt {i}'s length in tokens", len(ids),
                                     "max_prompt_tokens", self.limits.max_prompt_tokens)  # fmt: skip
                raise APIError(400, message, param="prompt", code="prompt_too_long")
        return rows

    def check_limits(self, req: CompletionRequest, stop: list[str]) -> None:
        """400 naming the limit (and its flag) that `req` exceeds, before any work."""
        lim = self.limits
        checks = [
            ("n", req.n, "max_n", "n"),
            ("max_tokens", req.max_tokens, "max_new_tokens", "max_tokens"),
            ("the number of stop strings", len(stop), "max_stop", "stop"),
            *[(f"stop string {i}'s length", len(s), "max_stop_chars", "stop")
              for i, s in enumerate(stop)],
        ]  # fmt: skip
        for what, value, limit, param in checks:
            if value > getattr(lim, limit):
                message = over_limit(what, value, limit, getattr(lim, limit))
                raise APIError(400, message, param=param, code="limit_exceeded")

    @torch.no_grad()
    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache,
                         use_cache=True, logits_to_keep=1)  # fmt: skip
        return out.logits[:, -1], out.cache

    @staticmethod
    def generator(seed: int | None) -> torch.Generator:
        """The request's sampling generator: its `seed`, else a fresh random one."""
        return torch.Generator().manual_seed(
            secrets.randbits(63) if seed is None else seed & 0xFFFF_FFFF_FFFF_FFFF
        )

    def steps(
        self, rows: list[list[int]], temperature: float, top_p: float, seed: int | None
    ) -> Iterator[list[int]]:
        """Left-pad the rows, then yield one sampled token per row per step, forever."""
        width = max(map(len, rows))
        ids = torch.tensor([[self.pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        gen = self.generator(seed)
        logits, cache = self._forward(ids, mask, pos, None)
        while True:
            nxt = sample_next(logits, temperature, top_p, gen)
            yield nxt.tolist()
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            pos = pos[:, -1:] + 1
            logits, cache = self._forward(nxt[:, None], mask, pos, cache)

    def run(
        self, req: CompletionRequest
    ) -> tuple[list[list[int]], list[TextRow], Iterator, dict[str, Any]]:
        """Check `req`, then return the prompts, one TextRow per choice, a step iterator and
        the usage extras (filled while the iterator runs: `kv_cache` under a KV policy).

        The iterator yields `[(choice_index, new_text, finish_reason or None), ...]` per
        step and stops once every choice has finished.
        """
        if req.model is not None and req.model != self.name:
            raise APIError(
                404,
                f"model {req.model!r} is not served here; available: {self.name!r}",
                param="model",
                code="model_not_found",
            )
        prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
        stop = [req.stop] if isinstance(req.stop, str) else [s for s in req.stop or [] if s]
        self.check_limits(req, stop)
        if len(prompts) * req.n > MAX_ROWS:
            raise APIError(
                400, f"prompts x n = {len(prompts) * req.n} exceeds {MAX_ROWS}", param="n"
            )
        policy, budget = kv_serving.resolve(self.kv, req.kv_policy, req.kv_budget, self.draft,
                                            self.model)  # fmt: skip
        encoded = self.encode(prompts)
        batch = [ids for ids in encoded for _ in range(req.n)]
        limits = [min(req.max_tokens, self.context - len(ids)) for ids in batch]
        texts = [TextRow(self.tok, self.eos, stop, limit) for limit in limits]
        extra: dict[str, Any] = {}
        if budget is None:
            steps = self.steps(batch, req.temperature, req.top_p, req.seed)
        else:
            stats: list[dict[str, float]] = []
            gen = self.generator(req.seed)
            lookahead = min(req.max_tokens, self.kv.lookahead)
            steps = kv_serving.compressed_steps(
                self.model, self.draft, batch, policy, budget, lookahead,
                lambda logits: sample_next(logits, req.temperature, req.top_p, gen), stats,
            )  # fmt: skip
            extra = {"kv_cache": lambda: kv_serving.usage(policy, budget, stats)}
        deadline = time.monotonic() + self.limits.request_timeout_s
        return encoded, texts, self._events(steps, texts, deadline), extra

    def _events(
        self, steps: Iterator[list[int]], texts: list[TextRow], deadline: float
    ) -> Iterator[list[tuple[int, str, str | None]]]:
        """Per step, the choices' new text; 408 once the request's time is up."""
        for tokens in steps:
            if time.monotonic() > deadline:
                steps.close()
                limit = self.limits.request_timeout_s
                message = over_limit("the request's generation time in seconds",
                                     f"at least {limit:g}", "request_timeout_s", f"{limit:g}")  # fmt: skip
                raise APIError(408, message, type="timeout_error", code="request_timeout")
            events = []
            for i, (row, token) in enumerate(zip(texts, tokens, strict=True)):
                if row.finish is None:
                    piece = row.push(token)
                    if piece or row.finish:
                        events.append((i, piece, row.finish))
            yield events
            if all(row.finish for row in texts):
                steps.close()
                return

    def echo_text(self, req: CompletionRequest, index: int) -> str:
        prompts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
        return prompts[index // req.n] if req.echo else ""

    def complete(self, req: CompletionRequest) -> dict[str, Any]:
        """The whole completion as one OpenAI `text_completion` object."""
        encoded, texts, events, extra = self.run(req)
        for _ in events:
            pass
        choices = [
            choice(i, self.echo_text(req, i) + r.text, r.finish) for i, r in enumerate(texts)
        ]
        prompt, completion = sum(map(len, encoded)), sum(row.n_tokens for row in texts)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion}  # fmt: skip
        usage.update({key: value() for key, value in extra.items()})
        return {**self._header(), "choices": choices, "usage": usage}

    def stream(self, req: CompletionRequest) -> Iterator[str]:
        """Server-sent events: one `data: {chunk}` per step with new text, then `[DONE]`."""
        _, texts, events, _ = self.run(req)  # validation errors surface before streaming
        header = self._header()

        def chunks() -> Iterator[str]:
            first = [(i, self.echo_text(req, i), None) for i in range(len(texts)) if req.echo]
            try:
                for batch in itertools.chain([first], events):
                    if batch:
                        choices = [choice(*event) for event in batch]
                        yield f"data: {json.dumps({**header, 'choices': choices})}\n\n"
            except Exception as err:  # the status line is sent: the error becomes an event
                yield f"data: {json.dumps(stream_error(err))}\n\n"
            yield "data: [DONE]\n\n"

        return chunks()

    def _header(self) -> dict[str, Any]:
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                "created": int(time.time()), "model": self.name}  # fmt: skip
