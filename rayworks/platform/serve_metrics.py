"""Prometheus series of the model endpoint (`rayworks serve model`).

Every observation goes to two places:

- a registry private to the replica, rendered by `GET /metrics` (as the TTC router does):
  exact and immediate, but one replica's view — with `--replicas N` a scrape through the
  HTTP proxy reaches whichever replica the proxy picks;
- Ray's metrics API (`ray.serve.metrics`, inside a replica only): tagged `deployment`,
  `replica` and `application`, exported by every node's metrics agent (its
  `MetricsExportPort`, where Ray's own Serve metrics are) as `ray_<name>`, about every 10 s.
  That is the series to scrape with several replicas or nodes: Prometheus sums the
  replicas' tags. Ray approximates a histogram's `_sum` from its bucket midpoints.

The TTC router keeps a private registry only: it runs as one replica by construction.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Collection
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from rayworks.platform.serve_limits import ASGIApp, Message, Receive, Scope, Send

REQUESTS = "rayworks_model_requests"  # counter {route, status}; exported as ..._total
IN_FLIGHT = "rayworks_model_requests_in_flight"  # gauge: HTTP requests not yet answered
RUNNING = "rayworks_model_generations_running"  # gauge: sampling loops running
PROMPT_TOKENS = "rayworks_model_prompt_tokens"  # counter
GENERATED_TOKENS = "rayworks_model_generated_tokens"  # counter
LATENCY = "rayworks_model_request_latency_seconds"  # histogram {route}: until the last byte
FIRST_TOKEN = "rayworks_model_time_to_first_token_seconds"  # histogram: prefill included
CLIENT_CLOSED = 499  # status of a request whose client left first (nginx's and Serve's)

LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
FIRST_TOKEN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
SERIES = [  # (kind, name, help, labels, buckets)
    ("counter", REQUESTS, "HTTP requests by route and status", ("route", "status"), None),
    ("gauge", IN_FLIGHT, "HTTP requests being answered", (), None),
    ("gauge", RUNNING, "generations whose sampling loop is running", (), None),
    ("counter", PROMPT_TOKENS, "prompt tokens of accepted requests", (), None),
    ("counter", GENERATED_TOKENS, "tokens sampled (cancelled requests included)", (), None),
    ("histogram", LATENCY, "request latency until the last byte", ("route",), LATENCY_BUCKETS),
    ("histogram", FIRST_TOKEN, "request start to first sampled token", (), FIRST_TOKEN_BUCKETS),
]


def _local(kind: str, name: str, doc: str, labels: tuple, buckets: Any, reg: Any) -> Any:
    if kind == "counter":
        return Counter(name, doc, labels, registry=reg)
    if kind == "gauge":
        return Gauge(name, doc, labels, registry=reg)
    return Histogram(name, doc, labels, registry=reg, buckets=buckets)


def _ray(
    kind: str, name: str, doc: str, labels: tuple, buckets: Any, tags: dict[str, str] | None
) -> Any:
    """A series in Ray's metrics: Serve's classes in a replica (they add its tags), Ray's
    with `tags` as default tags elsewhere (the HTTP front, `serve_front.py`)."""
    if tags is None:
        from ray.serve import metrics
    else:
        from ray.util import metrics

        labels = (*labels, *tags)
    if kind == "counter":
        made = metrics.Counter(name, doc, tag_keys=labels)
    elif kind == "gauge":
        made = metrics.Gauge(name, doc, tag_keys=labels)
    else:
        made = metrics.Histogram(name, doc, boundaries=list(buckets), tag_keys=labels)
    return made if tags is None else made.set_default_tags(tags)


REQUEST_SERIES = frozenset({REQUESTS, IN_FLIGHT, LATENCY})
"""What the HTTP process records; the rest is recorded where the sampling loop runs."""
GENERATION_SERIES = frozenset(s[1] for s in SERIES) - REQUEST_SERIES


class ModelMetrics:
    """The endpoint's series (module constants above); thread-safe, as generations run in
    worker threads. `ray_export=True` (in a Serve replica) also records through Ray;
    outside a replica `tags` names the series' source there (`_ray`).
    `series` keeps a subset: behind an ingress (`serve_ingress.py`), the ingress holds
    `REQUEST_SERIES` and each model replica `GENERATION_SERIES`, so that one `/metrics`
    text can join both without a series twice."""

    def __init__(
        self,
        ray_export: bool = False,
        series: frozenset[str] | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        kept = [s for s in SERIES if series is None or s[1] in series]
        self.registry = CollectorRegistry()
        self.local = {s[1]: _local(*s, self.registry) for s in kept}
        self.ray = {s[1]: _ray(*s, tags) for s in kept} if ray_export else {}
        self._lock = threading.Lock()
        self.levels = {IN_FLIGHT: 0, RUNNING: 0}  # the gauges' current values

    def _add(self, name: str, value: float, **labels: str) -> None:
        metric = self.local[name]
        (metric.labels(**labels) if labels else metric).inc(value)
        if name in self.ray:
            self.ray[name].inc(value, tags=labels or None)

    def _observe(self, name: str, value: float, **labels: str) -> None:
        metric = self.local[name]
        (metric.labels(**labels) if labels else metric).observe(value)
        if name in self.ray:
            self.ray[name].observe(value, tags=labels or None)

    def _level(self, name: str, delta: int) -> None:
        with self._lock:
            self.levels[name] += delta
            value = self.levels[name]
            self.local[name].set(value)
            if name in self.ray:
                self.ray[name].set(value)

    def request_started(self) -> None:
        self._level(IN_FLIGHT, 1)

    def request_finished(self, route: str, status: int, seconds: float) -> None:
        self._level(IN_FLIGHT, -1)
        self._add(REQUESTS, 1, route=route, status=str(status))
        self._observe(LATENCY, seconds, route=route)

    def generation_started(self) -> None:
        self._level(RUNNING, 1)

    def generation_finished(self, generated_tokens: int) -> None:
        self._level(RUNNING, -1)
        self._add(GENERATED_TOKENS, generated_tokens)

    def prompt_tokens(self, n: int) -> None:
        self._add(PROMPT_TOKENS, n)

    def first_token(self, seconds: float) -> None:
        self._observe(FIRST_TOKEN, seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetrics:
    """ASGI middleware: in-flight requests, and per request its route (one of `routes`,
    else "other"), status and latency until the last byte of the answer (streams
    included). A request whose client left first counts as 499; one that raised before
    answering as 500."""

    def __init__(self, app: ASGIApp, metrics: ModelMetrics, routes: Collection[str]) -> None:
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in self.routes else "other"
        status, done, start = CLIENT_CLOSED, False, time.monotonic()

        async def observed(message: Message) -> None:
            nonlocal status, done
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                done = True
            await send(message)

        self.metrics.request_started()
        try:
            await self.app(scope, receive, observed)
            if not done:  # Starlette saw the disconnect and stopped the stream
                status = CLIENT_CLOSED
        except asyncio.CancelledError:  # Serve cancelled the handler: the client left
            status = CLIENT_CLOSED
            raise
        except Exception:  # answered 500 by the error handler outside this middleware
            status = 500
            raise
        finally:
            self.metrics.request_finished(route, status, time.monotonic() - start)
