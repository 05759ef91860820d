"""`rayworks serve model`: a checkpoint behind Ray Serve with an OpenAI-compatible HTTP API.

    HttpFront actor (uvicorn + the ModelIngress app: auth, limits, validation, metrics)
        --handle calls--> CompletionServer x --replicas (model, sampling loop)

`front="proxy"` (`--front proxy`) puts Ray Serve's HTTP proxy and a ModelIngress deployment
in place of the actor (`serve_front.py` says why the actor is the default).

Routes: `GET /health` (open), `GET /v1/models`, `GET /metrics` (Prometheus text; also
exported through Ray's metrics API: `serve_metrics.py`), `POST /v1/completions` and
`POST /v1/chat/completions` (JSON or SSE stream; logprobs, echo, token-id prompts; fields
we do not implement are 400s naming them: docs/serving.md). Every request is bounded
(`serve_limits.py`: prompt tokens, n, max_tokens, stop strings, logprobs, chat messages,
body bytes, time; 400/413/408 naming the flag).
Errors use OpenAI's shape `{"error": {"message", "type", "param", "code"}}`. Generation is a
small KV-cache sampling loop shared by the streamed and the plain answer, so both give the
same text for the same request. A client that disconnects stops its generation at the next
step (`openai_api.in_thread`). The ingress app (`serve_ingress.py`) turns a replica's death
into a retry while Serve replaces the replica, or a 503 in OpenAI's shape; overload of the
replicas is a JSON 503 too (docs/serving.md, "Limits, metrics and failures").
"""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import requests
from fastapi import FastAPI

from rayworks.core.errors import CheckpointNotFoundError, RayworksError
from rayworks.models import resolve_model_dir
from rayworks.platform.access import check_bind
from rayworks.platform.completion_engine import CompletionEngine
from rayworks.platform.kv_serving import KVServing
from rayworks.platform.openai_api import (
    ChunkPuller,
    LocalBackend,
    build_app,
    generation_pool,
    in_thread,
)
from rayworks.platform.openai_schema import APIError, ChatRequest, CompletionRequest
from rayworks.platform.serve_front import find_front, start_front, stop_front
from rayworks.platform.serve_limits import ServeLimits
from rayworks.platform.serve_metrics import GENERATION_SERIES, ModelMetrics

APP_NAME = "rayworks"  # one app on route "/": serving again replaces it
MODEL_DEPLOYMENT = "CompletionServer"  # the model replicas of `serve model`
INGRESS_DEPLOYMENT = "ModelIngress"


def replica_error(err: APIError) -> dict[str, Any]:
    """An APIError as data: an exception would cross Ray as a RayTaskError."""
    return {"status": err.status, "error": err.body}


class CompletionServer:
    """A model replica: the engine, answering the ingress's handle calls (`answer`,
    `answer_stream`, `metrics_text`) and in-cluster callers (`complete`)."""

    def __init__(
        self,
        model_dir: str,
        name: str,
        api_key: str | None = None,
        kv: dict | None = None,
        docs: bool = False,
        limits: dict | None = None,
        series: frozenset[str] | None = None,
    ) -> None:
        self.engine = CompletionEngine(
            model_dir,
            name,
            KVServing(**(kv or {})),
            ServeLimits(**(limits or {})),
            ModelMetrics(ray_export=True, series=series),  # in a replica: Ray's metrics too
        )
        self.api_key, self.docs = api_key, docs
        self.workers = generation_pool()

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One `/v1/completions` body through a deployment handle, for callers inside the
        cluster (Ray's token guards handles; no HTTP, no API key): the request model and
        engine call of the HTTP route, with the same limits."""
        return self.engine.complete(CompletionRequest.model_validate(body))

    async def answer(self, body: CompletionRequest | ChatRequest) -> dict[str, Any]:
        """{"ok": the JSON answer} to a body the ingress validated, or `replica_error`.
        Cancelled (the ingress's client left), it stops the generation first."""
        cancel = threading.Event()
        try:
            return {"ok": await in_thread(self.workers, cancel, self.engine.complete, body, cancel)}
        except APIError as err:
            return replica_error(err)

    async def answer_stream(self, body: CompletionRequest | ChatRequest) -> AsyncIterator[Any]:
        """{"ok": True} or `replica_error` first (the request is checked before the stream
        starts), then the SSE chunks; however the stream ends, the generation stops."""
        cancel = threading.Event()
        try:
            chunks = await in_thread(self.workers, cancel, self.engine.stream, body, cancel)
        except APIError as err:
            yield replica_error(err)
            return
        puller = ChunkPuller(chunks, cancel, self.workers)
        try:
            yield {"ok": True}
            async for chunk in puller:
                yield chunk
        finally:
            await puller.aclose()

    def metrics_text(self) -> bytes:
        return self.engine.metrics.render()


class CompletionApp(CompletionServer):
    """One replica that is also the HTTP app (no ingress in front): the TTC router's
    `/direct` baseline (`pipelines/ttc/router.py`)."""

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_app(LocalBackend(self.engine, self.workers), self.api_key, self.docs)


@functools.cache
def deployment() -> Any:
    """CompletionApp as a Serve ingress deployment, built on first use.

    Built lazily so that importing this module does not import Ray (Ray reads its auth
    settings, RAY_AUTH_MODE and RAY_AUTH_TOKEN_PATH, when first imported). The app itself
    is built in each replica (`__serve_build_asgi_app__`), so no route is pickled.
    """
    from ray import serve

    return serve.deployment(serve.ingress()(CompletionApp))


@functools.cache
def deployments() -> tuple[Any, Any]:
    """(model, ingress) deployments of `serve model`, built on first use (see above)."""
    from ray import serve

    from rayworks.platform.serve_ingress import ModelIngress

    model = serve.deployment(name=MODEL_DEPLOYMENT)(CompletionServer)
    return model, serve.deployment(name=INGRESS_DEPLOYMENT)(serve.ingress()(ModelIngress))


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
    kv: KVServing | None = None,
    insecure_no_auth: bool = False,
    docs: bool = False,
    limits: ServeLimits | None = None,
    front: Literal["actor", "proxy"] = "actor",
) -> str:
    """Serve `checkpoint` (model folder, checkpoint or run dir) and return its base URL.

    The folder is resolved before Ray is touched, so a wrong path fails fast with
    CheckpointNotFoundError. Every replica loads the model from the same absolute path, so on
    a multi-node cluster the path must be visible to every node. `blocking=False` returns
    once `/health` answers; `blocking=True` prints the URL and serves until Ctrl-C.
    `kv` sets the default KV-cache policy of requests (and the draft model, `kv_serving`).
    A non-loopback `host` needs `api_key` unless `insecure_no_auth` (`access.check_bind`);
    `docs` serves FastAPI's /docs and /openapi.json (off by default); `limits` bounds each
    request (`serve_limits.ServeLimits`: prompt, n, max_tokens, stop strings, body, time).
    `front`: HTTP through the `serve_front.HttpFront` actor, or through Serve's proxy.
    """
    from rayworks.platform import cluster

    check_bind(host, api_key, insecure_no_auth)
    model_dir = checked_model_dir(checkpoint)  # fails here, before Ray, if anything is missing
    kv = kv or KVServing()
    kv.check()
    if kv.draft is not None:
        kv = kv.model_copy(update={"draft": str(resolve_model_dir(kv.draft).resolve())})
    name = model_name or default_model_name(checkpoint, model_dir)
    if front not in ("actor", "proxy"):
        raise RayworksError(f"front={front!r}: expected 'actor' or 'proxy'")
    cluster.connect()
    from ray import serve

    if front == "proxy":
        if find_front() is not None:  # Serve runs without a proxy, the front holds the port
            shutdown()
        serve.start(http_options={"host": host, "port": port})
        ensure_http_address(host, port)
    else:
        serve.start(proxy_location="Disabled")
    limits = limits or ServeLimits()
    model, ingress = deployments()
    replicas = model.options(
        num_replicas=num_replicas,
        max_ongoing_requests=max_ongoing_requests,
        max_queued_requests=max_queued_requests,
        max_constructor_retry_count=2,  # a replica that cannot load fails the deploy fast
    ).bind(
        str(model_dir), name, None, kv.model_dump(), False, limits.model_dump(), GENERATION_SERIES
    )
    if front == "actor":
        serve.run(replicas, name=APP_NAME, route_prefix=None, blocking=False)
        start_front(
            host,
            port,
            name=name,
            api_key=api_key,
            docs=docs,
            limits=limits.model_dump(),
            app_name=APP_NAME,
            deployment=MODEL_DEPLOYMENT,
        )
        return finish(base_url(host, port), blocking, f"serving {name!r} from {model_dir}")
    proxied = ingress.options(
        num_replicas=1,
        # the replicas' own bounds decide overload (a JSON 503 from the ingress): the ingress
        # only awaits handle calls, so it takes every request at once; a bound near the
        # replicas' (replicas x 12 + 16) queued requests in front of it, 5.7 s p90 at 2x load
        # (docs/serving.md)
        max_ongoing_requests=1024,
        max_queued_requests=-1,
        ray_actor_options={"num_cpus": 0},
    )
    serve.run(
        proxied.bind(replicas, name, api_key, docs, limits.model_dump()),
        name=APP_NAME,
        route_prefix="/",
        blocking=False,
    )
    return finish(base_url(host, port), blocking, f"serving {name!r} from {model_dir}")


def finish(url: str, blocking: bool, what: str) -> str:
    """Wait for `url/health`; then return it, or serve until interrupted if `blocking`."""
    wait_healthy(url)
    if blocking:
        serve_until_interrupted(f"{what} at {url}/v1")
    return url


def shutdown() -> None:
    """Stop the model endpoint's HTTP front (if any), then Ray Serve."""
    from ray import serve

    stop_front()
    serve.shutdown()


def serve_until_interrupted(message: str) -> None:
    """Print `message`, block until Ctrl-C or SIGTERM, then shut Serve and the front down."""
    print(f"{message} (Ctrl-C to stop)", flush=True)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops Serve like Ctrl-C does
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        shutdown()
