"""OpenAI-compatible HTTP surface of the model endpoint: errors, auth, routes.

`POST /v1/completions` and `POST /v1/chat/completions` (JSON or SSE stream; bodies in
`openai_schema.py`, answers in `openai_responses.py`), `GET /v1/models`, `GET /metrics`
(Prometheus text, `serve_metrics.py`), `GET /health` (open).
A generation runs in a worker thread, a stream one chunk per call; when the client goes
away (Ray Serve cancels the handler's task; Starlette also watches for the disconnect) the
generation is told to stop and the handler returns only once it has, so the request's
Serve slot and its sampling loop are free together (`in_thread`, `GenerationStream`).
FastAPI's `/docs`, `/redoc` and `/openapi.json` are off unless `docs=True` (`--docs`): they
would answer without a key and list every route to anyone who can connect.
Errors use OpenAI's shape `{"error": {"message", "type", "param", "code"}}`; a bad body is
a 400 naming the field and value (not FastAPI's 422), a field we do not support a 400
naming it; a wrong or missing bearer key is 401.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from rayworks.platform.openai_schema import APIError, ChatRequest, CompletionRequest
from rayworks.platform.serve_limits import BodyLimit, Receive, Scope, Send, ServeLimits
from rayworks.platform.serve_metrics import ModelMetrics, RequestMetrics

if TYPE_CHECKING:
    from rayworks.platform.completion_engine import CompletionEngine


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse({"error": err.body}, status_code=err.status)


def validation_error(exc: RequestValidationError) -> APIError:
    """FastAPI's 422 as a 400 naming the first bad field and the value sent; a field the
    body does not declare is named as unsupported (`openai_schema.Body`)."""
    first = exc.errors()[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid" or (
        not loc and not isinstance(first.get("input"), dict)
    ):
        message = "request body must be a JSON object (Content-Type: application/json)"
        return APIError(400, message, code="invalid_json")
    field = ".".join(loc) or "body"
    if first.get("type") == "extra_forbidden":
        message = (
            f"field '{field}' is not supported by this server (docs/serving.md lists "
            "the fields it honours); omit it"
        )
        return APIError(400, message, param=field, code="unsupported_field")
    value = json.dumps(first.get("input"), default=str)[:200]
    message = f"invalid value for '{field}': {value} ({first.get('msg', 'invalid')})"
    return APIError(400, message, param=field, code="invalid_value")


def install_error_handlers(app: FastAPI) -> None:
    """Answer APIError, bad bodies (as 400, not 422), HTTP errors and unexpected exceptions
    (500) in OpenAI's shape."""

    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    async def invalid_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(exc))

    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(APIError(exc.status_code, str(exc.detail), code=str(exc.status_code)))

    async def internal_error(_: Request, exc: Exception) -> JSONResponse:
        message = f"internal error: {type(exc).__name__}: {str(exc)[-300:]}"
        return error_response(APIError(500, message, type="server_error", code="internal_error"))

    app.add_exception_handler(APIError, api_error)
    app.add_exception_handler(Exception, internal_error)  # JSON, not a plain-text 500
    app.add_exception_handler(RequestValidationError, invalid_body)
    app.add_exception_handler(HTTPException, http_error)


def bearer_auth(api_key: str | None) -> Callable[[Request], None]:
    """A FastAPI dependency: 401 unless `Authorization: Bearer <api_key>` matches (when a
    key is set). Shared by the model endpoint and the TTC router."""

    def authorize(request: Request) -> None:
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

    return authorize


def new_app(title: str, docs: bool = False, max_body_bytes: int | None = None) -> FastAPI:
    """A FastAPI app whose interactive docs and OpenAPI schema exist only when asked for,
    answering 413 to a body over `max_body_bytes` (default: `ServeLimits`' default)."""
    app = (
        FastAPI(title=title)
        if docs
        else FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url=None)
    )
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes or ServeLimits().max_body_bytes)
    return app


ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/models", "/metrics", "/health")


def generation_pool() -> ThreadPoolExecutor:
    """Where generations run: not FastAPI's pool, so that a cancelled handler can wait for
    its thread; threads start on demand (Serve's max_ongoing_requests bounds them)."""
    return ThreadPoolExecutor(max_workers=256, thread_name_prefix="rayworks-generate")


@runtime_checkable
class Backend(Protocol):
    """What the HTTP surface answers from: a model in this process (`LocalBackend`) or the
    model replicas behind Serve's ingress (`serve_ingress.RemoteBackend`)."""

    name: str
    limits: ServeLimits
    metrics: ModelMetrics  # where this process records its requests (`RequestMetrics`)

    async def answer(self, body: CompletionRequest | ChatRequest) -> Any:
        """A JSON object, or a streaming response when `body.stream`."""
        ...

    async def metrics_text(self) -> bytes:
        """The Prometheus text `GET /metrics` answers."""
        ...


class LocalBackend:
    """A `CompletionEngine` in this process; generations run in worker threads (`answer`)."""

    def __init__(self, engine: CompletionEngine, workers: Executor | None = None) -> None:
        self.engine, self.name = engine, engine.name
        self.limits, self.metrics = engine.limits, engine.metrics
        self.workers = workers or generation_pool()

    async def answer(self, body: CompletionRequest | ChatRequest) -> Any:
        return await answer(self.engine, body, self.workers)

    async def metrics_text(self) -> bytes:
        return self.engine.metrics.render()


def build_app(
    engine: CompletionEngine | Backend, api_key: str | None, docs: bool = False
) -> FastAPI:
    """The HTTP API over one engine (or a `Backend`): routes, bearer-key check,
    OpenAI-shaped errors and request metrics (`/metrics` needs the key, like every route
    but `/health`)."""
    backend = engine if isinstance(engine, Backend) else LocalBackend(engine)
    app = new_app("rayworks completions", docs, backend.limits.max_body_bytes)
    app.add_middleware(RequestMetrics, metrics=backend.metrics, routes=ROUTES)  # outermost
    created = int(time.time())
    install_error_handlers(app)
    authorize = bearer_auth(api_key)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", dependencies=[Depends(authorize)])
    async def metrics() -> Response:
        text = await backend.metrics_text()
        return Response(text, media_type="text/plain; version=0.0.4")

    @app.get("/v1/models", dependencies=[Depends(authorize)])
    def models() -> dict[str, Any]:
        card = {"id": backend.name, "object": "model", "created": created, "owned_by": "rayworks"}
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions", dependencies=[Depends(authorize)])
    async def completions(body: CompletionRequest) -> Any:
        return await backend.answer(body)

    @app.post("/v1/chat/completions", dependencies=[Depends(authorize)])
    async def chat(body: ChatRequest) -> Any:
        return await backend.answer(body)

    return app


async def answer(
    engine: CompletionEngine, body: CompletionRequest | ChatRequest, workers: Executor
) -> Any:
    """The engine's answer to `body`: one JSON object, or an SSE stream when asked. Either
    stops at the next step once the client has gone."""
    cancel = threading.Event()
    if body.stream:  # checked in the thread, so a bad request is a plain error answer
        chunks = await in_thread(workers, cancel, engine.stream, body, cancel)
        return GenerationStream(chunks, cancel, workers)
    return await in_thread(workers, cancel, engine.complete, body, cancel)


async def in_thread(workers: Executor, cancel: threading.Event, fn: Callable, *args: Any) -> Any:
    """`fn(*args)` in a worker thread. If this task is cancelled (the client left), set
    `cancel` and wait for the thread to return (one sampling step) before re-raising, so
    the generation has stopped when the request's slot is released."""
    future = asyncio.get_running_loop().run_in_executor(workers, fn, *args)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        cancel.set()
        await asyncio.wait([future])
        raise


class ChunkPuller:
    """An async iterator over a generation's chunks, each pulled in a worker thread.
    `aclose` (however the consumer ends: finished, client gone, task cancelled) sets
    `cancel` and closes the chunk iterator in a worker thread once the step in flight has
    returned (the lock), which ends the sampling loop (`openai_responses.sse`) and frees
    its seat."""

    def __init__(self, chunks: Iterator[str], cancel: threading.Event, workers: Executor) -> None:
        self.chunks, self.cancel, self.workers = chunks, cancel, workers
        self.lock = threading.Lock()

    def _next(self) -> str | None:
        with self.lock:
            return next(self.chunks, None)

    def _close(self) -> None:
        with self.lock:
            self.chunks.close()  # type: ignore[attr-defined]  # a generator

    def __aiter__(self) -> ChunkPuller:
        return self

    async def __anext__(self) -> str:
        chunk = await asyncio.get_running_loop().run_in_executor(self.workers, self._next)
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        self.cancel.set()
        closed = asyncio.get_running_loop().run_in_executor(self.workers, self._close)
        await asyncio.shield(closed)


class GenerationStream(StreamingResponse):
    """An SSE response over a generation's chunks (`ChunkPuller`); however the response
    ends, the generation is stopped before the response returns."""

    def __init__(self, chunks: Iterator[str], cancel: threading.Event, workers: Executor) -> None:
        self.puller = ChunkPuller(chunks, cancel, workers)
        super().__init__(self.puller, media_type="text/event-stream")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.puller.aclose()
