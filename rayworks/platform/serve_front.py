"""The model endpoint's HTTP front: uvicorn in one Ray actor, in place of Serve's proxy.

    client --HTTP--> HttpFront actor (uvicorn + the ModelIngress app: auth, limits,
                     validation, request metrics, retries) --handle calls--> CompletionServer

Why: through Serve's HTTP proxy a request makes two extra hops before our app sees it
(client -> proxy -> ingress replica, each an actor call carrying ASGI messages), which cost
8-9 ms per request on a 2-core machine, more than a whole handle call to the model
(docs/serving.md, "HTTP overhead"). Here the app the ingress deployment would run
(`serve_ingress.ModelIngress`) runs in the process that owns the socket, so a request pays
one HTTP parse and one handle call. Serve still runs, places, replaces and bounds the model
replicas; what it no longer does is carry HTTP (`serve_model(front="proxy")` keeps that
path: a proxy on every node, for clusters that want one). This is how vLLM's own server is
built (one uvicorn process in front of the engine).

What Serve's proxy did that is done here instead:
- a client that disconnects cancels its request's task (`CancelOnDisconnect`), so the
  handle call is cancelled and the replica stops the generation, plain requests included
  (uvicorn alone lets a plain request's handler run on after its client left);
- the actor is restarted when its process dies (`max_restarts=-1`) and binds the same
  address again; it is pinned to the node that started it, so the address stays valid;
- the request series go to Ray's metrics export with the tags a replica would have
  (application, deployment = `FRONT_NAME`).
The actor is detached (it outlives the driver, as Serve's apps do) and named
`FRONT_NAME`, so `serve_model` can find it again and `shutdown` can stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from typing import Any

from rayworks.core.errors import RayworksError
from rayworks.platform.serve_limits import Message, Receive, Scope, Send

FRONT_NAME = "HttpFront"
NAMESPACE = "rayworks"  # the front's Ray namespace (named actors are per namespace)
START_TIMEOUT_S = 30.0


class CancelOnDisconnect:
    """ASGI middleware: cancel the app's task when the client disconnects before the answer
    is complete, as Ray Serve's proxy does.

    One reader task takes every message from the server's `receive` and hands it to the
    app in order; an `http.disconnect` that arrives before the last body byte was sent
    cancels the app (its handle call is cancelled with it: `RemoteBackend._call`), and a
    cancelled app counts as 499 (`serve_metrics.RequestMetrics`). After the answer is
    complete a disconnect is only passed on.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        inbox: asyncio.Queue[Message] = asyncio.Queue()
        complete = False

        async def sent(message: Message) -> None:
            nonlocal complete
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                complete = True

        app = asyncio.ensure_future(self.app(scope, inbox.get, sent))

        async def read() -> None:
            while True:
                message = await receive()
                await inbox.put(message)
                if message["type"] == "http.disconnect":
                    if not complete:
                        app.cancel()
                    return

        reader = asyncio.ensure_future(read())
        try:
            await app
        except asyncio.CancelledError:
            if not app.cancelled():  # this middleware itself was cancelled
                raise
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader


class HttpFront:
    """uvicorn serving the ingress app of `serve model` in a thread of this actor.

    Built from plain values so that a restarted actor rebuilds the same front. The model
    replicas are reached by name (`app_name`, `deployment`), so a redeploy of the model
    behind an unchanged front is picked up by the handle.
    """

    def __init__(
        self,
        host: str,
        port: int,
        name: str,
        api_key: str | None,
        docs: bool,
        limits: dict,
        app_name: str,
        deployment: str,
    ) -> None:
        import uvicorn
        from ray import serve

        from rayworks.platform.serve_ingress import ModelIngress

        handle = serve.get_deployment_handle(deployment, app_name)
        tags = {"application": app_name, "deployment": FRONT_NAME}
        self.ingress = ModelIngress(handle, name, api_key, docs, limits, tags=tags)
        app = CancelOnDisconnect(self.ingress.__serve_build_asgi_app__())
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", access_log=False, lifespan="off"
        )
        self.address = (host, port)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="http-front", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RayworksError(
                    f"the HTTP front could not listen on {host}:{port} (is the port in use? "
                    "uvicorn's error is in the actor's log)"
                )
            time.sleep(0.02)

    def where(self) -> tuple[str, int]:
        return self.address

    def retries(self) -> int:
        """Requests sent again after a model replica died (tests, logs)."""
        return self.ingress.retries()

    def stop(self) -> None:
        """Close the socket and finish the requests in flight (uvicorn's graceful exit)."""
        self.server.should_exit = True
        self.thread.join(timeout=START_TIMEOUT_S)


@functools.cache
def front_actor() -> Any:
    """HttpFront as a Ray actor class, built on first use (importing Ray reads its auth
    settings, `serve.deployments` says why that waits)."""
    import ray

    return ray.remote(num_cpus=0, max_restarts=-1)(HttpFront)


def find_front() -> Any | None:
    """The running front of this cluster, or None."""
    import ray

    try:
        return ray.get_actor(FRONT_NAME, namespace=NAMESPACE)
    except ValueError:
        return None


def stop_front() -> None:
    """Stop the front (socket closed first) and end its actor; nothing if none runs."""
    import ray

    front = find_front()
    if front is None:
        return
    with contextlib.suppress(ray.exceptions.RayError):
        ray.get(front.stop.remote(), timeout=START_TIMEOUT_S)
    ray.kill(front, no_restart=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while find_front() is not None and time.monotonic() < deadline:  # the name is released
        time.sleep(0.05)


def start_front(host: str, port: int, **app: Any) -> Any:
    """A new front on host:port for the app arguments of `HttpFront` (a front already on
    the same address is replaced: a new key or new limits take effect); a front on another
    address is refused, as Serve refuses a second HTTP address."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    front = find_front()
    if front is not None:
        where = tuple(ray.get(front.where.remote(), timeout=START_TIMEOUT_S))
        if where != (host, port):
            raise RayworksError(
                f"the model endpoint already listens on {where[0]}:{where[1]} in this "
                f"cluster; serve there (--host {where[0]} --port {where[1]}) or stop it "
                f"first (`serve shutdown`) to use {host}:{port}."
            )
        stop_front()
    here = ray.get_runtime_context().get_node_id()  # the address the user gave is this node's
    front = (
        front_actor()
        .options(
            name=FRONT_NAME,
            namespace=NAMESPACE,
            lifetime="detached",
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
        )
        .remote(host, port, **app)
    )
    try:
        ray.get(front.where.remote(), timeout=START_TIMEOUT_S + 30)
    except ray.exceptions.RayError as err:
        ray.kill(front, no_restart=True)
        raise RayworksError(f"the HTTP front did not start on {host}:{port}: {err}") from None
    return front
