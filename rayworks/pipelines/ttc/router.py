"""`rayworks serve ttc`: bandit allocation of test-time compute as a Ray Serve application.

    HTTP -> Router (FastAPI ingress, 1 replica)  --handle calls-->  Model0..ModelN
            window batching, Allocation,                           (one deployment per
            answer extraction, vote / oracle                        checkpoint, autoscaled)

The router accepts OpenAI `POST /v1/completions` and `/v1/chat/completions` and a batch
route `POST /v1/batch/completions` (`prompts: [...]`, one result object per prompt). Requests
that arrive within `window_ms` of each other are allocated together (`router_core`); the
reply carries the selected sample, OpenAI usage plus `samples`/`budget`/`max_samples`, and
a `ttc` object (rule, rounds, stop reason, vote share, `batch_size` = prompts in the window,
`batch_requests` = requests in it). `GET /metrics` renders Prometheus text from a registry
private to the router replica (it has one replica; the model endpoint, which may have
several, also exports through Ray's metrics API: `platform/serve_metrics.py`).
Requests are bounded by the model endpoint's limit flags where they fit
(`router_api.ROUTER_LIMITS`): 400 / 413 / 408 naming the flag.

Faults: overload is answered by Serve with HTTP 503 once the router's `max_ongoing_requests`
and `max_queued_requests` are in use. A model call whose replica died is retried
`model_retries` times with backoff while Serve replaces the replica; then the request gets a
503 `model_unavailable` naming the deployment. Ray is imported only when serving.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import re
import time
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from rayworks.core.config import validate
from rayworks.pipelines.ttc.router_api import (
    BatchBody,
    ChatBody,
    CompletionBody,
    RouterFields,
    RouterSettings,
    completion_reply,
    load_oracle,
    render_chat,
    resolve_ttc,
    sum_usage,
)
from rayworks.pipelines.ttc.router_core import Job, Query, Sampling, WindowBatcher, run_window
from rayworks.platform.access import check_bind
from rayworks.platform.completion_engine import CompletionEngine, request_prompt_ids
from rayworks.platform.openai_api import (
    APIError,
    CompletionRequest,
    bearer_auth,
    install_error_handlers,
    new_app,
)
from rayworks.platform.serve import (
    APP_NAME,
    base_url,
    checked_model_dir,
    default_model_name,
    ensure_http_address,
    serve_until_interrupted,
    wait_healthy,
)
from rayworks.platform.serve_limits import (
    ServeLimits,
    check_limits,
    check_prompt_tokens,
    timeout_error,
)

DIRECT_APP, DIRECT_PREFIX = "rayworks-direct", "/direct"  # the plain model app (benchmarks)
ROUTES = (
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/batch/completions",
    "/v1/models",
    "/metrics",
    "/health",
)


class ModelServer:
    """A model deployment: the completion engine behind `sample`, the handle method the
    router calls. Not an HTTP ingress (a Serve app may have only one): the plain model
    endpoint (`DIRECT_APP`) is `rayworks serve model`'s `CompletionServer`."""

    def __init__(self, model_dir: str, name: str, limits: dict | None = None) -> None:
        self.engine = CompletionEngine(model_dir, name, limits=ServeLimits(**(limits or {})))

    def sample(
        self, prompts: list[str], max_tokens: int, temperature: float, top_p: float, stop: list
    ) -> dict[str, Any]:
        """One sample per prompt row: `{"rows": [(text, generated tokens), ...]}`, or
        `{"error": ..., "status": ...}` for a request the engine refuses."""
        req = CompletionRequest(
            prompt=prompts,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            stop=stop or None,
        )
        try:
            gen = self.engine.run(req)
            for _ in gen.events:
                pass
        except APIError as err:
            return {"error": err.body, "status": err.status}
        return {"rows": [(row.text, row.n_tokens) for row in gen.rows]}


class RouterMetrics:
    """Prometheus series of one router replica (its own registry, so tests and several
    routers in one process never collide)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = reg = CollectorRegistry()
        self.requests = Counter(
            "rayworks_ttc_requests",
            "HTTP requests by route and status",
            ["route", "status"],
            registry=reg,
        )
        self.latency = Histogram(
            "rayworks_ttc_latency_seconds",
            "request latency",
            ["route"],
            registry=reg,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
        )
        self.samples = Histogram(
            "rayworks_ttc_samples_per_prompt",
            "samples drawn per prompt",
            registry=reg,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
        )
        self.budget_used = Histogram(
            "rayworks_ttc_budget_used_ratio",
            "spent / budget per prompt (samples or tokens)",
            registry=reg,
            buckets=(0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 4),
        )
        self.window = Histogram(
            "rayworks_ttc_window_prompts",
            "prompts allocated together",
            registry=reg,
            buckets=(1, 2, 4, 8, 16, 32, 64),
        )
        self.retries = Counter(
            "rayworks_ttc_model_retries",
            "model calls retried after a replica failure",
            ["model"],
            registry=reg,
        )
        self.in_flight = Gauge(
            "rayworks_ttc_model_calls_in_flight",
            "model-deployment calls awaiting their replica",
            ["model"],
            registry=reg,
        )

    def observe_results(self, results: list[dict[str, Any]]) -> None:
        for r in results:
            usage, unit = r["usage"], r["batch"]["unit"]
            spent = usage["samples"] if unit == "samples" else usage["completion_tokens"]
            self.samples.observe(usage["samples"])
            self.budget_used.observe(spent / usage["budget"])

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class Router:
    """The ingress replica: checks requests, batches them by window, runs the allocation
    against the model deployments' handles and shapes the replies."""

    def __init__(
        self,
        settings: dict,
        models: dict[str, Any],
        model_dirs: dict[str, str],
        api_key: str | None,
        docs: bool = False,
    ) -> None:
        from ray.exceptions import ActorUnavailableError, RayActorError
        from ray.serve.exceptions import DeploymentUnavailableError, ReplicaUnavailableError

        from rayworks.models import load_tokenizer

        self.settings = RouterSettings.model_validate(settings)
        self.handles, self.api_key, self.docs = models, api_key, docs
        self.pattern = re.compile(self.settings.answer_pattern)
        self.oracle = load_oracle(self.settings.oracle) if self.settings.oracle else None
        self.tokenizers = {name: load_tokenizer(d) for name, d in model_dirs.items()}
        self.contexts = {name: _context_length(d) for name, d in model_dirs.items()}
        self.next_model = itertools.cycle(list(models))
        self.metrics = RouterMetrics()
        self.replica_errors = (
            RayActorError,
            ActorUnavailableError,
            ReplicaUnavailableError,
            DeploymentUnavailableError,
        )
        self.batcher = WindowBatcher(
            self.settings.window_ms / 1000, self.settings.max_window_prompts, self._run_window
        )

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_router_app(self)

    async def _run_window(self, jobs: list[Job]) -> None:
        self.metrics.window.observe(sum(len(j.queries) for j in jobs))
        await run_window(
            jobs, self.call_model, self.pattern, self.oracle, self.settings.rows_per_call
        )

    async def complete(self, body: RouterFields, prompts: list[str]) -> tuple[str, list[dict]]:
        """Validate, queue into the current window, wait: (model name, per-prompt results).
        Past `--request-timeout` the request is a 408 (its window's other requests go on)."""
        limits = self.settings.limits
        check_limits(limits, body.measures())
        cfg, budget, cap, aggregate = resolve_ttc(body, self.settings, self.oracle is not None)
        model = self.pick_model(body.model)
        encoded = request_prompt_ids(self.tokenizers[model], self.contexts[model], prompts)
        check_prompt_tokens(limits, encoded, "messages" if isinstance(body, ChatBody) else "prompt")
        sampling = Sampling(model, body.max_tokens, body.temperature, body.top_p, body.stops())
        queries = [
            Query(p, sampling, budget, cap, len(ids))
            for p, ids in zip(prompts, encoded, strict=True)
        ]
        try:  # on timeout the job's future is cancelled: run_window skips it
            waiting = self.batcher.submit(Job(queries, cfg, aggregate))
            results = await asyncio.wait_for(waiting, limits.request_timeout_s)
        except TimeoutError:
            raise timeout_error(limits) from None
        self.metrics.observe_results(results)
        return model, results

    def pick_model(self, requested: str | None) -> str:
        if requested is None:
            return next(self.next_model)  # round robin over the checkpoints
        if requested not in self.handles:
            raise APIError(
                404,
                f"model {requested!r} is not served here; available: {sorted(self.handles)}",
                param="model",
                code="model_not_found",
            )
        return requested

    async def call_model(self, sampling: Sampling, prompts: list[str]) -> list[tuple[str, int]]:
        """One model-deployment call, retried while its replica is dead or being replaced."""
        handle, s, last = self.handles[sampling.model], self.settings, None
        for attempt in range(s.model_retries + 1):
            if attempt:
                self.metrics.retries.labels(sampling.model).inc()
                await asyncio.sleep(min(4.0, 0.5 * 2 ** (attempt - 1)))
            response = handle.sample.remote(
                prompts,
                sampling.max_tokens,
                sampling.temperature,
                sampling.top_p,
                list(sampling.stop),
            )
            try:
                with self.metrics.in_flight.labels(sampling.model).track_inprogress():
                    reply = await asyncio.wait_for(_result_of(response), s.model_timeout_s)
            except self.replica_errors as err:
                last = err
                continue
            except TimeoutError:
                response.cancel()
                raise APIError(
                    503,
                    f"model deployment {sampling.model!r} did not answer within "
                    f"{s.model_timeout_s:.0f}s",
                    type="server_error",
                    code="model_timeout",
                ) from None
            except Exception as err:
                raise APIError(
                    502,
                    f"model deployment {sampling.model!r} failed: "
                    f"{type(err).__name__}: {str(err)[-300:]}",
                    type="server_error",
                    code="model_error",
                ) from None
            if "error" in reply:
                raise APIError(
                    reply["status"], reply["error"]["message"], param=reply["error"].get("param")
                )
            return [tuple(row) for row in reply["rows"]]
        raise APIError(
            503,
            f"model deployment {sampling.model!r} is unavailable: its replica "
            f"failed {s.model_retries + 1} times ({type(last).__name__}); Serve is "
            "replacing it, retry shortly",
            type="server_error",
            code="model_unavailable",
        )


async def _result_of(response: Any) -> Any:
    return await response


def _context_length(model_dir: str) -> int:
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return int(config.get("max_position_embeddings", 2048))


def build_router_app(router: Router) -> FastAPI:
    """The router's HTTP API: three completion routes, models, metrics, health."""
    app = new_app(
        "rayworks test-time compute router", router.docs, router.settings.limits.max_body_bytes
    )
    install_error_handlers(app)
    auth = [Depends(bearer_auth(router.api_key))]
    metrics, created = router.metrics, int(time.time())

    @app.middleware("http")
    async def count(request: Request, call_next: Any) -> Response:
        route = request.url.path if request.url.path in ROUTES else "other"
        start, status = time.monotonic(), 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            metrics.requests.labels(route, str(status)).inc()
            metrics.latency.labels(route).observe(time.monotonic() - start)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", dependencies=auth)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models", dependencies=auth)
    async def models() -> dict[str, Any]:
        cards = [
            {"id": name, "object": "model", "created": created, "owned_by": "rayworks"}
            for name in router.handles
        ]
        return {"object": "list", "data": cards}

    @app.post("/v1/completions", dependencies=auth)
    async def completions(body: CompletionBody) -> dict[str, Any]:
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        model, results = await router.complete(body, prompts)
        return completion_reply(model, results, prompts, body.echo, chat=False)

    @app.post("/v1/chat/completions", dependencies=auth)
    async def chat(body: ChatBody) -> dict[str, Any]:
        if body.max_completion_tokens is not None:
            body.max_tokens = body.max_completion_tokens
        model = router.pick_model(body.model)
        body.model = model  # the template and the samples come from the same checkpoint
        prompt = render_chat(body.messages, router.tokenizers[model])
        model, results = await router.complete(body, [prompt])
        return completion_reply(model, results, [prompt], False, chat=True)

    @app.post("/v1/batch/completions", dependencies=auth)
    async def batch(body: BatchBody) -> JSONResponse:
        model, results = await router.complete(body, body.prompts)
        data = [
            completion_reply(model, [r], [p], body.echo, chat=False)
            for r, p in zip(results, body.prompts, strict=True)
        ]
        usage = sum_usage([r["usage"] for r in results])
        return JSONResponse(
            {
                "object": "list",
                "model": model,
                "data": data,
                "usage": usage,
                "ttc": results[0]["batch"],
            }
        )

    return app


@functools.cache
def deployments() -> tuple[Any, Any]:
    """(model, router) Serve deployments, built on first use so importing this module does
    not import Ray (Ray reads its auth settings when first imported)."""
    from ray import serve

    return serve.deployment(ModelServer), serve.deployment(serve.ingress()(Router))


def model_names(checkpoints: list[str | Path], dirs: list[Path]) -> list[str]:
    """Default model ids (run id or folder name), made unique with a `-2`, `-3` suffix."""
    names: list[str] = []
    for checkpoint, model_dir in zip(checkpoints, dirs, strict=True):
        name, i = default_model_name(checkpoint, model_dir), 2
        base = name
        while name in names:
            name, i = f"{base}-{i}", i + 1
        names.append(name)
    return names


def serve_ttc(
    checkpoints: list[str | Path],
    settings: RouterSettings | dict | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    min_replicas: int = 1,
    max_replicas: int = 2,
    model_cpus: float = 1.0,
    model_max_ongoing: int = 4,
    max_ongoing_requests: int = 32,
    max_queued_requests: int = 64,
    direct: bool = False,
    blocking: bool = True,
    insecure_no_auth: bool = False,
    docs: bool = False,
) -> str:
    """Serve `checkpoints` behind the TTC router and return the base URL.

    Everything is checked before Ray starts: each checkpoint (with its tokenizer), the
    settings (unknown keys, bad values, an oracle that does not import). Each checkpoint
    becomes one autoscaled deployment (`min_replicas`..`max_replicas`, aiming at 2 ongoing
    calls per replica). `direct=True` also serves the first checkpoint as the plain model
    endpoint under `/direct` (what `benchmarks/ttc_serve.py` compares against). A
    non-loopback `host` needs `api_key` unless `insecure_no_auth`; `docs` serves /docs.
    """
    from rayworks.core.errors import ConfigError
    from rayworks.platform import cluster

    check_bind(host, api_key, insecure_no_auth)
    if not checkpoints:
        raise ConfigError("serve ttc needs at least one --checkpoint")
    if not 1 <= min_replicas <= max_replicas:
        raise ConfigError(
            f"need 1 <= min_replicas ({min_replicas}) <= max_replicas ({max_replicas})"
        )
    dirs = [checked_model_dir(c) for c in checkpoints]
    names = model_names(checkpoints, dirs)
    if not isinstance(settings, RouterSettings):
        settings = validate(RouterSettings, settings or {}, origin="ttc router settings")
    cluster.connect()
    from ray import serve

    serve.start(http_options={"host": host, "port": port})
    ensure_http_address(host, port)
    model, router = deployments()
    autoscaling = {
        "min_replicas": min_replicas,
        "max_replicas": max_replicas,
        "initial_replicas": min_replicas,
        "target_ongoing_requests": 2,
        "upscale_delay_s": 3,
        "downscale_delay_s": 60,
    }
    bound = {
        name: model.options(
            name=f"Model{i}",
            autoscaling_config=autoscaling,
            max_ongoing_requests=model_max_ongoing,
            max_queued_requests=-1,
            ray_actor_options={"num_cpus": model_cpus},
            max_constructor_retry_count=2,
        ).bind(str(d), name, settings.limits.model_dump())
        for i, (name, d) in enumerate(zip(names, dirs, strict=True))
    }
    ingress = router.options(
        name="TTCRouter",
        max_ongoing_requests=max_ongoing_requests,
        max_queued_requests=max_queued_requests,
        ray_actor_options={"num_cpus": 0},
    )
    dir_map = {n: str(d) for n, d in zip(names, dirs, strict=True)}
    app = ingress.bind(settings.model_dump(), bound, dir_map, api_key, docs)
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    url = base_url(host, port)
    if direct:
        from rayworks.platform.serve import deployment as plain_deployment

        plain = plain_deployment().options(
            name="Direct",
            num_replicas=min_replicas,
            max_ongoing_requests=model_max_ongoing,
            ray_actor_options={"num_cpus": model_cpus},
        )
        serve.run(
            plain.bind(str(dirs[0]), names[0], api_key, None, docs),
            name=DIRECT_APP,
            route_prefix=DIRECT_PREFIX,
            blocking=False,
        )
        wait_healthy(url + DIRECT_PREFIX)
    wait_healthy(url)
    if not blocking:
        return url
    serve_until_interrupted(f"serving {names} behind the TTC router at {url}/v1")
    return url
