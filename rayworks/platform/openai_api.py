"""OpenAI-compatible HTTP surface of the model endpoint: errors, auth, routes.

`POST /v1/completions` and `POST /v1/chat/completions` (JSON or SSE stream; bodies in
`openai_schema.py`, answers in `openai_responses.py`), `GET /v1/models`, `GET /health`
(open).
FastAPI's `/docs`, `/redoc` and `/openapi.json` are off unless `docs=True` (`--docs`): they
would answer without a key and list every route to anyone who can connect.
Errors use OpenAI's shape `{"error": {"message", "type", "param", "code"}}`; a bad body is
a 400 naming the field and value (not FastAPI's 422), a field we do not support a 400
naming it; a wrong or missing bearer key is 401.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from rayworks.platform.openai_schema import APIError, ChatRequest, CompletionRequest
from rayworks.platform.serve_limits import BodyLimit, ServeLimits

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
        message = (f"field '{field}' is not supported by this server (docs/serving.md lists "
                   "the fields it honours); omit it")  # fmt: skip
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


def build_app(engine: CompletionEngine, api_key: str | None, docs: bool = False) -> FastAPI:
    """The HTTP API over one engine: routes, bearer-key check and OpenAI-shaped errors."""
    app = new_app("rayworks completions", docs, engine.limits.max_body_bytes)
    created = int(time.time())
    install_error_handlers(app)
    authorize = bearer_auth(api_key)

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
        return answer(engine, body)

    @app.post("/v1/chat/completions", dependencies=[Depends(authorize)])
    def chat(body: ChatRequest) -> Any:
        return answer(engine, body)

    return app


def answer(engine: CompletionEngine, body: CompletionRequest | ChatRequest) -> Any:
    """The engine's answer to `body`: one JSON object, or an SSE stream when asked."""
    if body.stream:
        return StreamingResponse(engine.stream(body), media_type="text/event-stream")
    return engine.complete(body)
