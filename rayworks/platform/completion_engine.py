"""The sampling loop behind the model endpoint: batched prompts, KV cache, stop strings.

One loop serves completions and chats, plain and streamed, so all give the same text for
the same prompt; text that may be the start of a stop string is held back until settled.
A request becomes token-id prompts (strings, token ids, or a rendered chat), is checked
against the server's limits, and runs as a `Generation` whose step events carry each
choice's new text and, when asked, the raw logprobs of its tokens (`logprobs.py`).
A generation stops at the next step once its `cancel` event is set (the HTTP client left,
`openai_api.py`); `running` counts the sampling loops in progress (`serve_metrics.py`).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from rayworks.models import load_causal_lm, load_tokenizer
from rayworks.models.generate import KVDecoder, prompt_ids
from rayworks.platform import kv_serving
from rayworks.platform.chat_prompt import chat_prompt_ids
from rayworks.platform.kv_serving import KVServing
from rayworks.platform.logprobs import TokenLogprob, prompt_logprobs, step_logprobs
from rayworks.platform.openai_responses import (
    chat_body,
    chat_chunks,
    completion_body,
    completion_chunks,
)
from rayworks.platform.openai_schema import MAX_ROWS, APIError, ChatRequest, CompletionRequest
from rayworks.platform.serve_limits import (
    ServeLimits,
    check_limits,
    check_prompt_tokens,
    timeout_error,
)
from rayworks.platform.serve_metrics import ModelMetrics
from rayworks.platform.text_stream import TextRow


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


def tokenize(tok: Any, prompt: str, index: int) -> list[int]:
    """A string prompt's token ids (`prompt_ids`: BOS alone for ""); 400 if empty and there
    is no BOS."""
    ids = prompt_ids(tok, prompt)
    if not ids:
        raise APIError(
            400, f"prompt {index} is empty and the model has no BOS token", param="prompt"
        )
    return ids


def check_context(
    ids: list[int], index: int, context: int, room: int = 1, param: str = "prompt"
) -> None:
    """400 if the prompt plus `room` generated tokens does not fit the model's context."""
    if len(ids) + room > context:
        need = ", leaving no room for a completion" if room else ""
        raise APIError(
            400,
            f"prompt {index} has {len(ids)} tokens but the model's context "
            f"(max_position_embeddings) is {context} tokens{need}; shorten the prompt",
            param=param,
            code="context_length_exceeded",
        )


def request_prompt_ids(tok: Any, context: int, prompts: list[str]) -> list[list[int]]:
    """Token ids per prompt; 400 if a prompt is empty (and there is no BOS) or leaves no room
    to generate within `context` tokens. Shared with the TTC router, which checks prompts
    before they join a batch."""
    rows = [tokenize(tok, prompt, i) for i, prompt in enumerate(prompts)]
    for i, ids in enumerate(rows):
        check_context(ids, i, context)
    return rows


class Event(NamedTuple):
    """New output of one choice in one step: text, finish reason, the released logprobs."""

    index: int
    text: str
    finish: str | None
    logprobs: list[TokenLogprob]


@dataclass
class Generation:
    """One checked request: its prompts, one TextRow per choice (prompt-major, `n` per
    prompt) and the step iterator that fills them. `events` yields, per step, the Events
    of the choices that produced output, and stops once every choice has finished."""

    prompts: list[list[int]]  # token ids per prompt
    echoes: list[str]  # per prompt, the text each of its choices starts with ("" unless echo)
    prompt_logprobs: list[list[TokenLogprob]] | None  # per prompt (echo with logprobs)
    rows: list[TextRow]
    n: int
    events: Iterator[list[Event]] = field(default_factory=lambda: iter(()))
    extra: dict[str, Callable[[], Any]] = field(default_factory=dict)  # usage extras

    def prompt_of(self, choice: int) -> int:
        return choice // self.n

    def close(self) -> None:
        """Stop the sampling loop now (a stream whose client left), freeing its seat."""
        close = getattr(self.events, "close", None)  # none without generation (max_tokens 0)
        if close is not None:
            close()

    def usage(self) -> dict[str, Any]:
        prompt, completion = sum(map(len, self.prompts)), sum(r.n_tokens for r in self.rows)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        return {**usage, **{key: value() for key, value in self.extra.items()}}


class Sampler:
    """Draws one token per row (`sample_next`); with `top_k` set, also keeps the step's raw
    logprobs (`logprobs.step_logprobs`) in `last`. One sampler serves the plain loop and
    the KV-policy loop alike, so both report logprobs the same way."""

    def __init__(
        self, temperature: float, top_p: float, gen: torch.Generator, top_k: int | None
    ) -> None:
        self.temperature, self.top_p, self.gen, self.top_k = temperature, top_p, gen, top_k
        self.last: list[TokenLogprob] | None = None

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        nxt = sample_next(logits, self.temperature, self.top_p, self.gen)
        if self.top_k is not None:
            self.last = step_logprobs(logits, nxt, self.top_k)
        return nxt


Request = CompletionRequest | ChatRequest


class CompletionEngine:
    """A causal LM and its tokenizer, answering completion and chat requests (no Serve
    inside)."""

    def __init__(
        self,
        model_dir: str | Path,
        name: str,
        kv: KVServing | None = None,
        limits: ServeLimits | None = None,
        metrics: ModelMetrics | None = None,
    ) -> None:
        torch.set_num_threads(1)  # 2 torch threads on 2 busy cores stall (80 ms -> seconds)
        self.name = name
        self.limits = limits or ServeLimits()
        self.metrics = metrics or ModelMetrics()
        self._lock, self._running = threading.Lock(), 0
        self.model = load_causal_lm(model_dir).eval()
        self.kv = kv or KVServing()
        self.draft = kv_serving.load_draft(self.kv.draft, self.model) if self.kv.draft else None
        self.tok = load_tokenizer(model_dir)
        self.context = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.vocab = self.model.get_input_embeddings().num_embeddings
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        extra = getattr(self.model.generation_config, "eos_token_id", None)  # int or list
        ids = [self.tok.eos_token_id, *(extra if isinstance(extra, list) else [extra])]
        self.eos = {i for i in ids if i is not None}
        self._texts: dict[int, str] = {}

    @property
    def running(self) -> int:
        """Sampling loops in progress (read-only; `rayworks_model_generations_running`)."""
        return self._running

    def token_text(self, token: int) -> str:
        """One token's text as logprobs show it (special tokens included, e.g. `</s>`)."""
        if token not in self._texts:
            self._texts[token] = self.tok.decode([token])
        return self._texts[token]

    def encode(self, prompts: list[str]) -> list[list[int]]:
        """Token ids per string prompt, checked as `check_prompts` does."""
        return self.check_prompts([tokenize(self.tok, p, i) for i, p in enumerate(prompts)])

    def check_prompts(
        self, rows: list[list[int]], room: int = 1, param: str = "prompt"
    ) -> list[list[int]]:
        """`rows` if every prompt's ids are in the vocabulary, fit the context with `room`
        tokens to generate and are within `--max-prompt-tokens`; else 400 naming `param`."""
        for i, ids in enumerate(rows):
            if not ids:
                raise APIError(400, f"prompt {i} renders to no tokens", param=param)
            if max(ids) >= self.vocab:
                raise APIError(
                    400,
                    f"prompt {i} has token id {max(ids)}, outside the "
                    f"vocabulary (ids 0..{self.vocab - 1})",
                    param=param,
                )
            check_context(ids, i, self.context, room, param)
        check_prompt_tokens(self.limits, rows, param)
        return rows

    def prompt_rows(self, req: Request, room: int) -> tuple[list[list[int]], list[str]]:
        """(token ids, echoed text) per prompt: a chat renders to one prompt
        (`chat_prompt.py`); a completion's prompt is strings or token ids."""
        if isinstance(req, ChatRequest):
            ids = chat_prompt_ids(self.tok, req.messages)
            return self.check_prompts([ids], room, "messages"), [""]
        prompt = req.prompt
        prompts = [prompt] if isinstance(prompt, str) or isinstance(prompt[0], int) else prompt
        rows = [
            p if isinstance(p, list) else tokenize(self.tok, p, i) for i, p in enumerate(prompts)
        ]
        self.check_prompts(rows, room)
        if not req.echo:
            return rows, [""] * len(rows)
        return rows, [
            p if isinstance(p, str) else self.tok.decode(p, skip_special_tokens=True)
            for p in prompts
        ]

    def check_request(self, req: Request) -> None:
        """404 for another model; 400 for an unsupported value or one over a limit (naming
        the limit's flag), before any work."""
        if req.model is not None and req.model != self.name:
            raise APIError(
                404,
                f"model {req.model!r} is not served here; available: {self.name!r}",
                param="model",
                code="model_not_found",
            )
        req.check_supported()
        check_limits(self.limits, req.measures())

    @staticmethod
    def generator(seed: int | None) -> torch.Generator:
        """The request's sampling generator: its `seed`, else a fresh random one."""
        return torch.Generator().manual_seed(
            secrets.randbits(63) if seed is None else seed & 0xFFFF_FFFF_FFFF_FFFF
        )

    def steps(self, rows: list[list[int]], sample: Sampler) -> Iterator[list[int]]:
        """Left-pad the rows, then yield one sampled token per row per step, forever."""
        decoder = KVDecoder(self.model, rows, self.pad)
        while True:
            nxt = sample(decoder.logits)
            yield nxt.tolist()
            decoder.step(nxt)

    def run(self, req: Request, cancel: threading.Event | None = None) -> Generation:
        """Check `req` and return its Generation; nothing is generated until its events are
        iterated (prompt logprobs, for echo, are computed here). Once `cancel` is set, the
        next step ends the generation with a 499."""
        start = time.monotonic()
        self.check_request(req)
        policy, budget = kv_serving.resolve(
            self.kv, req.kv_policy, req.kv_budget, self.draft, self.model
        )
        cap = req.token_cap()[0]
        cap = self.limits.max_new_tokens if cap is None else cap
        top_k = req.top_k()[0]
        prompts, echoes = self.prompt_rows(req, room=min(cap, 1))
        if len(prompts) * req.n > MAX_ROWS:
            raise APIError(
                400, f"prompts x n = {len(prompts) * req.n} exceeds {MAX_ROWS}", param="n"
            )
        batch = [ids for ids in prompts for _ in range(req.n)]
        rows = [
            TextRow(self.tok, self.eos, req.stops(), min(cap, self.context - len(ids)))
            for ids in batch
        ]
        scored = None
        if isinstance(req, CompletionRequest) and req.echo and top_k is not None:
            scored = [prompt_logprobs(self.model, ids, top_k) for ids in prompts]
        gen = Generation(prompts, echoes, scored, rows, req.n)
        self.metrics.prompt_tokens(sum(map(len, prompts)))
        if cap == 0:  # echo only: score the prompt, generate nothing
            for row in rows:
                row.finish = "length"
            return gen
        sampler = Sampler(req.temperature, req.top_p, self.generator(req.seed), top_k)
        steps, gen.extra = self._steps(batch, sampler, policy, budget, cap)
        gen.events = self._events(steps, rows, sampler, start, cancel or threading.Event())
        return gen

    def _steps(
        self, batch: list[list[int]], sampler: Sampler, policy: str, budget: int | None, cap: int
    ) -> tuple[Iterator[list[int]], dict[str, Callable[[], Any]]]:
        """The step iterator (the plain batched loop, or per-row compressed caches under a
        KV policy) and its usage extras (`kv_cache`)."""
        if budget is None:
            return self.steps(batch, sampler), {}
        stats: list[dict[str, float]] = []
        steps = kv_serving.compressed_steps(
            self.model,
            self.draft,
            batch,
            policy,
            budget,
            min(cap, self.kv.lookahead),
            sampler,
            stats,
        )
        return steps, {"kv_cache": lambda: kv_serving.usage(policy, budget, stats)}

    def _events(
        self,
        steps: Iterator[list[int]],
        rows: list[TextRow],
        sampler: Sampler,
        start: float,
        cancel: threading.Event,
    ) -> Iterator[list[Event]]:
        """Per step, the choices' new text and logprobs; 408 once the request's time is up,
        499 once `cancel` is set. The loop counts as running from its first step to its
        end, however it ends (finished, failed, cancelled, or closed by its stream)."""
        self._count(1)
        first = True
        try:
            for tokens in steps:
                if first:
                    self.metrics.first_token(time.monotonic() - start)
                    first = False
                self._check_time(start, cancel)
                step, events = sampler.last, []
                for i, (row, token) in enumerate(zip(rows, tokens, strict=True)):
                    if row.finish is None:
                        if step is not None:
                            row.pending.append(step[i])
                        piece = row.push(token)
                        if piece or row.finish:
                            events.append(Event(i, piece, row.finish, row.release()))
                yield events
                if all(row.finish for row in rows):
                    return
        finally:
            steps.close()
            self._count(-1, sum(row.n_tokens for row in rows))

    def _count(self, delta: int, generated: int = 0) -> None:
        with self._lock:
            self._running += delta
        if delta > 0:
            self.metrics.generation_started()
        else:
            self.metrics.generation_finished(generated)

    def _check_time(self, start: float, cancel: threading.Event) -> None:
        """499 if the client left (`cancel`), 408 past `--request-timeout`."""
        if cancel.is_set():
            raise APIError(499, "the client closed the request", code="client_closed_request")
        if time.monotonic() - start > self.limits.request_timeout_s:
            raise timeout_error(self.limits)

    def complete(self, req: Request, cancel: threading.Event | None = None) -> dict[str, Any]:
        """The whole answer: a `text_completion` or a `chat.completion` object."""
        gen = self.run(req, cancel)
        for _ in gen.events:
            pass
        if isinstance(req, ChatRequest):
            return chat_body(gen, req, self.name, self.token_text)
        return completion_body(gen, req, self.name, self.token_text)

    def stream(self, req: Request, cancel: threading.Event | None = None) -> Iterator[str]:
        """The answer as server-sent events (`openai_responses.py`), ending with [DONE].
        The request is checked here, so its errors are answered before the stream starts;
        closing the stream closes its generation."""
        gen = self.run(req, cancel)
        if isinstance(req, ChatRequest):
            return chat_chunks(gen, req, self.name, self.token_text)
        return completion_chunks(gen, req, self.name, self.token_text)
