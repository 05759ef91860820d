"""`rayworks serve model`: a checkpoint behind Ray Serve with an OpenAI-compatible HTTP API.

Routes: `GET /health` (open), `GET /v1/models`, `POST /v1/completions` (JSON or SSE stream).
Errors use OpenAI's shape `{"error": {"message", "type", "param", "code"}}`. Generation is a
small KV-cache sampling loop shared by the streamed and the plain answer, so both give the
same text for the same request. Overload is answered by Serve itself with HTTP 503 once
`max_ongoing_requests` per replica and `max_queued_requests` are in use.
"""

from __future__ import annotations

import functools
import itertools
import json
import secrets
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import requests
import torch
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from rayworks.errors import CheckpointNotFoundError, RayworksError
from rayworks.models import load_causal_lm, load_tokenizer, resolve_model_dir

APP_NAME = "rayworks"  # one app on route "/": serving again replaces it
MAX_ROWS = 64  # prompts x n per request: bounds the memory one request can take


class CompletionRequest(BaseModel):
    """The subset of OpenAI's `/v1/completions` body we honour; other fields are ignored."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    prompt: str | Annotated[list[str], Field(min_length=1, max_length=MAX_ROWS)]
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = Field(1, ge=1, le=16)
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    seed: int | None = None
    stream: bool = False
    echo: bool = False


class APIError(Exception):
    """An error answered as OpenAI's JSON error object with an HTTP status."""

    def __init__(self, status: int, message: str, **fields: str | None) -> None:
        """`fields`: OpenAI's `type` (default invalid_request_error), `param`, `code`."""
        super().__init__(message)
        self.status = status
        self.body = {"message": message, "type": "invalid_request_error", "param": None,
                     "code": None, **fields}  # fmt: skip


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse({"error": err.body}, status_code=err.status)


def validation_error(exc: RequestValidationError) -> APIError:
    """FastAPI's 422 as a 400 naming the first bad field and the value sent."""
    first = exc.errors()[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid" or (
        not loc and not isinstance(first.get("input"), dict)
    ):
        message = "request body must be a JSON object (Content-Type: application/json)"
        return APIError(400, message, code="invalid_json")
    field = ".".join(loc) or "body"
    value = json.dumps(first.get("input"), default=str)[:200]
    message = f"invalid value for '{field}': {value} ({first.get('msg', 'invalid')})"
    return APIError(400, message, param=field, code="invalid_value")


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


class TextRow:
    """Incremental detokenisation of one choice: stop strings, held-back text, finish reason.

    Text that could still become a stop string (or an incomplete UTF-8 character) is held
    back, so the streamed pieces add up to exactly the non-streamed text.
    """

    def __init__(self, tok: Any, eos: set[int], stop: list[str], limit: int) -> None:
        self.tok, self.eos, self.stop, self.limit = tok, eos, stop, limit
        self.ids: list[int] = []
        self.text, self.emitted, self.n_tokens = "", 0, 0
        self.finish: str | None = None

    def push(self, token: int) -> str:
        """Add one generated token; return the text that became safe to send."""
        self.n_tokens += 1
        if token in self.eos:
            self.finish = "stop"
            return self._take(len(self.text))
        self.ids.append(token)
        self.text = self.tok.decode(self.ids, skip_special_tokens=True)
        hits = [i for s in self.stop if (i := self.text.find(s)) >= 0]
        if hits:
            self.text, self.finish = self.text[: min(hits)], "stop"
        elif self.n_tokens >= self.limit:
            self.finish = "length"
        if self.finish:
            return self._take(len(self.text))
        hold = max(
            (k for s in self.stop for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0
        )
        safe = len(self.text) - hold
        while safe > self.emitted and self.text[safe - 1] == "\ufffd":
            safe -= 1
        return self._take(safe)

    def _take(self, upto: int) -> str:
        piece = self.text[self.emitted : upto]
        self.emitted = max(self.emitted, upto)
        return piece


class CompletionEngine:
    """A causal LM and its tokenizer, answering completion requests (no Serve inside)."""

    def __init__(self, model_dir: str | Path, name: str) -> None:
        torch.set_num_threads(1)  # two torch threads on busy cores stall (NOTES)
        self.name = name
        self.model = load_causal_lm(model_dir).eval()
        self.tok = load_tokenizer(model_dir)
        self.context = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        extra = getattr(self.model.generation_config, "eos_token_id", None)  # int or list
        ids = [self.tok.eos_token_id, *(extra if isinstance(extra, list) else [extra])]
        self.eos = {i for i in ids if i is not None}

    def encode(self, prompts: list[str]) -> list[list[int]]:
        """Token ids per prompt; 400 if a prompt is empty or leaves no room to generate."""
        rows = []
        for i, prompt in enumerate(prompts):
            ids = self.tok(prompt).input_ids or [self.tok.bos_token_id]
            if ids[0] is None:
                raise APIError(
                    400, f"prompt {i} is empty and the model has no BOS token", param="prompt"
                )
            if len(ids) >= self.context:
                raise APIError(
                    400,
                    f"prompt {i} has {len(ids)} tokens but the model's context "
                    f"(max_position_embeddings) is {self.context} tokens, leaving no "
                    "room for a completion; shorten the prompt",
                    param="prompt",
                    code="context_length_exceeded",
                )
            rows.append(ids)
        return rows

    @torch.no_grad()
    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache,
                         use_cache=True, logits_to_keep=1)  # fmt: skip
        return out.logits[:, -1], out.cache

    def steps(
        self, rows: list[list[int]], temperature: float, top_p: float, seed: int | None
    ) -> Iterator[list[int]]:
        """Left-pad the rows, then yield one sampled token per row per step, forever."""
        width = max(map(len, rows))
        ids = torch.tensor([[self.pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        gen = torch.Generator().manual_seed(
            secrets.randbits(63) if seed is None else seed & 0xFFFF_FFFF_FFFF_FFFF
        )
        logits, cache = self._forward(ids, mask, pos, None)
        while True:
            nxt = sample_next(logits, temperature, top_p, gen)
            yield nxt.tolist()
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            pos = pos[:, -1:] + 1
            logits, cache = self._forward(nxt[:, None], mask, pos, cache)

    def run(self, req: CompletionRequest) -> tuple[list[list[int]], list[TextRow], Iterator]:
        """Check `req`, then return the prompts, one TextRow per choice and a step iterator.

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
        if len(prompts) * req.n > MAX_ROWS:
            raise APIError(
                400, f"prompts x n = {len(prompts) * req.n} exceeds {MAX_ROWS}", param="n"
            )
        encoded = self.encode(prompts)
        stop = [req.stop] if isinstance(req.stop, str) else [s for s in req.stop or [] if s]
        batch = [ids for ids in encoded for _ in range(req.n)]
        limits = [min(req.max_tokens, self.context - len(ids)) for ids in batch]
        texts = [TextRow(self.tok, self.eos, stop, limit) for limit in limits]
        return encoded, texts, self._events(batch, texts, req)

    def _events(
        self, batch: list[list[int]], texts: list[TextRow], req: CompletionRequest
    ) -> Iterator[list[tuple[int, str, str | None]]]:
        steps = self.steps(batch, req.temperature, req.top_p, req.seed)
        for tokens in steps:
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
        encoded, texts, events = self.run(req)
        for _ in events:
            pass
        choices = [
            choice(i, self.echo_text(req, i) + r.text, r.finish) for i, r in enumerate(texts)
        ]
        prompt, completion = sum(map(len, encoded)), sum(row.n_tokens for row in texts)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion}  # fmt: skip
        return {**self._header(), "choices": choices, "usage": usage}

    def stream(self, req: CompletionRequest) -> Iterator[str]:
        """Server-sent events: one `data: {chunk}` per step with new text, then `[DONE]`."""
        _, texts, events = self.run(req)  # validation errors surface before streaming
        header = self._header()

        def chunks() -> Iterator[str]:
            first = [(i, self.echo_text(req, i), None) for i in range(len(texts)) if req.echo]
            for batch in itertools.chain([first], events):
                if batch:
                    choices = [choice(*event) for event in batch]
                    yield f"data: {json.dumps({**header, 'choices': choices})}\n\n"
            yield "data: [DONE]\n\n"

        return chunks()

    def _header(self) -> dict[str, Any]:
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                "created": int(time.time()), "model": self.name}  # fmt: skip


def choice(index: int, text: str, finish: str | None) -> dict[str, Any]:
    return {"index": index, "text": text, "finish_reason": finish, "logprobs": None}


def build_app(engine: CompletionEngine, api_key: str | None) -> FastAPI:
    """The HTTP API over one engine: routes, bearer-key check and OpenAI-shaped errors."""
    app = FastAPI(title="rayworks completions")
    created = int(time.time())

    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    async def invalid_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(exc))

    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(APIError(exc.status_code, str(exc.detail), code=str(exc.status_code)))

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(RequestValidationError, invalid_body)
    app.add_exception_handler(HTTPException, http_error)

    def authorize(request: Request) -> None:
        """401 unless `Authorization: Bearer <api_key>` matches (when a key is set)."""
        if api_key is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(
            given.strip().encode(), api_key.encode()
        ):
            raise APIError(
                401,
                "missing or invalid API key: send 'Authorization: Bearer <key>'",
                type="authentication_error",
                code="invalid_api_key",
            )

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models", dependencies=[Depends(authorize)])
    def models() -> dict[str, Any]:
        card = {"id": engine.name, "object": "model", "created": created, "owned_by": "rayworks"}
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions", dependencies=[Depends(authorize)])
    def completions(body: CompletionRequest) -> Any:
        # Sync routes run in FastAPI's thread pool, so a long generation never blocks
        # the replica's event loop (health checks, other requests, streaming).
        if body.stream:
            return StreamingResponse(engine.stream(body), media_type="text/event-stream")
        return engine.complete(body)

    return app


class CompletionServer:
    """The Serve replica (see `deployment`): loads the engine, then builds its HTTP app."""

    def __init__(self, model_dir: str, name: str, api_key: str | None) -> None:
        self.engine = CompletionEngine(model_dir, name)
        self.api_key = api_key

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_app(self.engine, self.api_key)


@functools.cache
def deployment() -> Any:
    """CompletionServer as a Serve ingress deployment, built on first use.

    Built lazily so that importing this module does not import Ray (Ray reads its auth
    settings, RAY_AUTH_MODE and RAY_AUTH_TOKEN_PATH, when first imported). The app itself
    is built in each replica (`__serve_build_asgi_app__`), so no route is pickled.
    """
    from ray import serve

    return serve.deployment(serve.ingress()(CompletionServer))


def checked_model_dir(checkpoint: str | Path) -> Path:
    """The absolute model folder behind `checkpoint`, which must also hold a tokenizer."""
    model_dir = resolve_model_dir(checkpoint).resolve()
    if not any((model_dir / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        raise CheckpointNotFoundError(
            f"no tokenizer in {str(model_dir)!r}: serving needs the tokenizer saved next to "
            "the model (tokenizer.save_pretrained on the same folder)."
        )
    return model_dir


def ensure_http_address(host: str, port: int) -> None:
    """Fail if Serve already runs in this cluster on another address: `serve.start` would
    silently keep the old one and the URL we return would be wrong."""
    try:
        from ray.serve.context import _get_global_client  # private: skip the check if gone

        config = _get_global_client().http_config
    except (ImportError, AttributeError):
        return
    if (config.host, config.port) != (host, port):
        raise RayworksError(
            f"Ray Serve already listens on {config.host}:{config.port} in this cluster; "
            f"serve there (--host {config.host} --port {config.port}) or stop it first "
            f"(`serve shutdown`) to use {host}:{port}."
        )


def default_model_name(checkpoint: str | Path, model_dir: Path) -> str:
    """The run id for a run directory or its checkpoints, else the folder name."""
    given, model_dir = Path(checkpoint).resolve(), model_dir.resolve()
    if model_dir != given:  # a run directory was given
        return given.name
    if model_dir.parent.name == "checkpoints":
        return f"{model_dir.parent.parent.name}/{model_dir.name}"
    if model_dir.name == "model" and model_dir.parent.name == "artifacts":
        return model_dir.parent.parent.name
    return model_dir.name


def base_url(host: str, port: int) -> str:
    """The URL clients use: a wildcard bind address is reached through loopback."""
    shown = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"


def wait_healthy(url: str, timeout: float = 60.0) -> None:
    """Block until `url/health` answers 200: the proxy learns new routes a little late."""
    deadline = time.monotonic() + timeout
    with requests.Session() as http:
        http.trust_env = False  # loopback: never through an HTTP proxy from the environment
        while time.monotonic() < deadline:
            try:
                if http.get(f"{url}/health", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
    raise TimeoutError(f"{url}/health did not answer 200 within {timeout:.0f}s")


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def serve_model(
    checkpoint: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    max_ongoing_requests: int = 4,
    max_queued_requests: int = 8,
    num_replicas: int = 1,
    model_name: str | None = None,
    blocking: bool = True,
) -> str:
    """Serve `checkpoint` (model folder, checkpoint or run dir) and return its base URL.

    The folder is resolved before Ray is touched, so a wrong path fails fast with
    CheckpointNotFoundError. Every replica loads the model from the same absolute path, so on
    a multi-node cluster the path must be visible to every node. `blocking=False` returns
    once `/health` answers; `blocking=True` prints the URL and serves until Ctrl-C.
    """
    from rayworks.platform import cluster

    model_dir = checked_model_dir(checkpoint)  # fails here, before Ray, if anything is missing
    name = model_name or default_model_name(checkpoint, model_dir)
    cluster.connect()
    from ray import serve

    serve.start(http_options={"host": host, "port": port})
    ensure_http_address(host, port)
    server = deployment().options(
        num_replicas=num_replicas,
        max_ongoing_requests=max_ongoing_requests,
        max_queued_requests=max_queued_requests,
        max_constructor_retry_count=2,  # a replica that cannot load fails the deploy fast
    )
    serve.run(
        server.bind(str(model_dir), name, api_key),
        name=APP_NAME,
        route_prefix="/",
        blocking=False,
    )
    url = base_url(host, port)
    wait_healthy(url)
    if not blocking:
        return url
    print(f"serving {name!r} from {model_dir} at {url}/v1 (Ctrl-C to stop)", flush=True)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops Serve like Ctrl-C does
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        serve.shutdown()
    return url
