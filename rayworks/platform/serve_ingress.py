"""The model endpoint's HTTP ingress: a light deployment in front of the model replicas.

    HTTP proxy -> ModelIngress (FastAPI: auth, body limit, validation, request metrics)
                  --handle calls--> CompletionServer replicas (tokenizer, model, sampling)

Why two deployments: when a replica dies under a request (killed, out of memory, its node
gone), Ray Serve's HTTP proxy answers that request itself, with a plain-text 500, outside
any app of ours. Behind an ingress the death is an exception at a handle call, which we
catch: the request is sent again (to another replica, or to the one Serve starts in the
dead one's place) with backoff until its time budget (`--request-timeout`) would run out,
then answered 503 `replica_unavailable` in OpenAI's error shape. A stream is sent again
only until its first chunk reached us; after that, a death ends the stream with an error
event and `[DONE]`, as any error mid-stream does (`openai_responses.sse`). Overload (every
replica's `max_ongoing_requests` and the `max_queued_requests` in use) is a JSON 503
`overloaded` with a Retry-After header, instead of the proxy's plain-text one. A client
that leaves cancels the handle call, and the replica stops the generation
(`serve.CompletionServer.answer`). The price is one more hop per request
(`benchmarks/serve_load.py` measures it).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

from rayworks.platform.openai_api import build_app, error_response
from rayworks.platform.openai_responses import stream_error
from rayworks.platform.openai_schema import APIError, ChatRequest, CompletionRequest
from rayworks.platform.serve_limits import ServeLimits
from rayworks.platform.serve_metrics import REQUEST_SERIES, ModelMetrics

FIRST_BACKOFF_S = 0.25
MAX_BACKOFF_S = 4.0
RETRY_AFTER_S = 1  # the Retry-After of an `overloaded` 503
DONE = "data: [DONE]\n\n"  # the last chunk of every finished stream (`openai_responses.sse`)


def replica_errors() -> tuple[type[BaseException], ...]:
    """The exceptions of a handle call whose replica died or is not (yet) there."""
    from ray.exceptions import ActorUnavailableError, RayActorError
    from ray.serve.exceptions import DeploymentUnavailableError, ReplicaUnavailableError

    return (
        RayActorError,
        ActorUnavailableError,
        ReplicaUnavailableError,
        DeploymentUnavailableError,
    )


def unwrap(reply: dict[str, Any]) -> Any:
    """The replica's {"ok": answer} as the answer; its error dict as the APIError."""
    if "ok" in reply:
        return reply["ok"]
    error = reply["error"]
    fields = {k: error[k] for k in ("type", "param", "code") if k in error}
    raise APIError(reply["status"], error["message"], **fields)


class RemoteBackend:
    """An `openai_api.Backend` whose answers come from the model deployment's handle."""

    def __init__(self, handle: Any, name: str, limits: ServeLimits, metrics: ModelMetrics) -> None:
        self.handle, self.name, self.limits, self.metrics = handle, name, limits, metrics
        self.errors = replica_errors()
        from ray.serve.exceptions import BackPressureError

        self.overload = BackPressureError
        self.retries = 0  # requests sent again after a replica died (tests, logs)

    async def _call(self, send: Callable[[], Any], receive: Callable[[Any], Awaitable[Any]]) -> Any:
        """`receive(send())`, sent again while the replica is dead or being replaced, until
        the request's time budget would run out (then a 503); a stuck call past the
        budget is cancelled (408, as the replica's own time limit answers)."""
        start, budget, delay = time.monotonic(), self.limits.request_timeout_s, FIRST_BACKOFF_S
        while True:
            response = send()
            try:
                left = budget - (time.monotonic() - start)
                return await asyncio.wait_for(receive(response), max(left, 0.0) + 5.0)
            except self.overload:
                raise APIError(
                    503,
                    "the model replicas are at capacity (--max-ongoing-requests and "
                    "--max-queued-requests are in use); retry shortly",
                    type="server_error",
                    code="overloaded",
                ) from None
            except self.errors as err:
                if time.monotonic() - start + delay >= budget:
                    raise APIError(
                        503,
                        f"model replica unavailable ({type(err).__name__}) for "
                        f"{time.monotonic() - start:.0f}s; Serve is replacing it, retry later",
                        type="server_error",
                        code="replica_unavailable",
                    ) from None
            except TimeoutError:
                response.cancel()
                raise APIError(
                    408,
                    f"no answer within --request-timeout ({budget:g}s)",
                    type="server_error",
                    code="request_timeout",
                ) from None
            except asyncio.CancelledError:
                response.cancel()  # the client left: the replica stops its generation
                raise
            self.retries += 1
            await asyncio.sleep(delay)
            delay = min(MAX_BACKOFF_S, 2 * delay)

    async def answer(self, body: CompletionRequest | ChatRequest) -> Any:
        if not body.stream:
            reply = await self._call(lambda: self.handle.answer.remote(body), _awaited)
            return unwrap(reply)
        streaming = self.handle.options(stream=True).answer_stream

        async def first(chunks: Any) -> tuple[Any, Any]:
            return chunks, await chunks.__anext__()

        chunks, head = await self._call(lambda: streaming.remote(body), first)
        try:
            unwrap(head)
        except APIError:
            chunks.cancel()
            raise
        return StreamingResponse(self._relay(chunks), media_type="text/event-stream")

    async def _relay(self, chunks: Any) -> AsyncIterator[str]:
        """The replica's SSE chunks; its death mid-stream becomes an error event and
        `[DONE]`; however the response ends early, the replica's stream is cancelled."""
        done, last = False, ""
        try:
            async for chunk in chunks:
                if chunk.startswith('data: {"error"') and '"status": 499' in chunk:
                    raise asyncio.CancelledError  # see below
                yield chunk
                last = chunk
            if last != DONE:
                # the replica's stream ended without [DONE]: it was cancelled because this
                # request was (its client left) before the cancellation reached this task;
                # end as cancelled, so the request counts as 499 (`RequestMetrics`), not
                # as a stream that finished
                raise asyncio.CancelledError
            done = True
        except self.errors as err:
            unavailable = APIError(
                503,
                f"the model replica died mid-stream ({type(err).__name__})",
                type="server_error",
                code="replica_unavailable",
            )
            yield f"data: {json.dumps(stream_error(unavailable))}\n\n"
            yield "data: [DONE]\n\n"
            done = True
        finally:
            if not done:
                chunks.cancel()

    async def metrics_text(self) -> bytes:
        """This ingress's request series, then one model replica's generation series."""
        replica = await self.handle.metrics_text.remote()
        return self.metrics.render() + replica

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """`CompletionServer.complete` for in-cluster callers of the app's handle, with
        the ingress's retries."""
        return await self._call(lambda: self.handle.complete.remote(body), _awaited)


async def _awaited(response: Any) -> Any:
    return await response


class ModelIngress:
    """The ingress app of `serve model`: run by the HTTP front (`serve_front.py`), or as a
    deployment behind Serve's proxy (`serve.deployments`). `tags` names the source of the
    request series in Ray's metrics outside a Serve replica."""

    def __init__(
        self,
        model: Any,
        name: str,
        api_key: str | None,
        docs: bool,
        limits: dict,
        tags: dict[str, str] | None = None,
    ) -> None:
        metrics = ModelMetrics(ray_export=True, series=REQUEST_SERIES, tags=tags)
        self.backend = RemoteBackend(model, name, ServeLimits(**limits), metrics)
        self.api_key, self.docs = api_key, docs

    def __serve_build_asgi_app__(self) -> FastAPI:
        app = build_app(self.backend, self.api_key, self.docs)

        async def overloaded(_: Any, exc: APIError) -> JSONResponse:
            response = error_response(exc)
            if exc.body.get("code") == "overloaded":
                response.headers["Retry-After"] = str(RETRY_AFTER_S)
            return response

        app.add_exception_handler(APIError, overloaded)
        return app

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self.backend.complete(body)

    def retries(self) -> int:
        return self.backend.retries
