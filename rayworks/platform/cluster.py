"""Connecting to Ray: an embedded local instance by default, an existing cluster on request.

`connect(None)` with no `RAY_ADDRESS` starts a fresh local Ray from the local profile
(`clusters/local.yaml`, or `RAYWORKS_PROFILE`): CPUs, object store size, dashboard bound
to 127.0.0.1. Ray's token authentication stays on: the embedded instance uses the token
at `RAY_AUTH_TOKEN_PATH` (default `~/.ray/auth_token`), which Ray generates on first use.
`connect("auto")`, `connect("HOST:PORT")` or `RAY_ADDRESS` join an existing cluster.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import Field

from rayworks.core.config import Config, load_yaml_file, validate
from rayworks.core.environ import patched_environ

PROFILE_ENV = "RAYWORKS_PROFILE"
REPO_PROFILE = Path(__file__).resolve().parents[2] / "clusters" / "local.yaml"
# Environment every worker of a rayworks job gets: one torch thread per worker (two torch
# threads on two busy cores stall now and then, measured on our 2-core machines: an 80 ms
# step took seconds) and no tokenizer thread pools. And no transparent huge pages asked
# for by NumPy (arrays >= 4 MB) or Arrow's default allocator (mimalloc): with THP in
# `madvise` mode the kernel compacts memory on the first touch of such pages, so a fresh
# worker's first big allocations cost up to seconds when memory is fragmented (a 7 MB
# parquet write 0.03-0.66 s in a new process under mimalloc, 0.03 s under jemalloc; the
# corpus pipeline's first unit per worker, NOTES.md). Read when numpy and pyarrow load.
SMALL_PAGES_ENV = {"NUMPY_MADVISE_HUGEPAGE": "0", "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}
WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_TRAIN_V2_ENABLED": "1",
    **SMALL_PAGES_ENV,
}


class LocalProfile(Config):
    """How the embedded local Ray is started (the laptop profile)."""

    num_cpus: int | None = Field(None, ge=1, description="CPUs Ray may use (None = all)")
    object_store_memory_mb: int | None = Field(
        1024, ge=78, description="object store size in MiB (None = Ray's default)"
    )
    include_dashboard: bool = Field(True, description="start the dashboard (needed for Jobs)")
    dashboard_host: str = Field("127.0.0.1", description="dashboard bind address")
    dashboard_port: int = Field(8265, ge=1, le=65535, description="dashboard port")
    auth_mode: str = Field("token", pattern="^(token|disabled)$", description="Ray auth mode")
    idle_workers: int | None = Field(
        None,
        ge=1,
        description="idle worker processes Ray keeps instead of killing them (its "
        "num_workers_soft_limit; None: 2 per CPU + 2). Ray's default, one per CPU, kills the "
        "workers a stage warmed while actors hold the CPUs, and the next stage starts cold",
    )


def load_profile(path: str | Path | None = None) -> LocalProfile:
    path = path or os.environ.get(PROFILE_ENV) or (REPO_PROFILE if REPO_PROFILE.is_file() else None)
    if path is None:
        return LocalProfile()
    data = load_yaml_file(path)
    return validate(LocalProfile, data.get("ray_init", data), f"profile {str(path)!r}")


def _set_auth_mode(mode: str) -> None:
    """Apply the profile's auth mode unless RAY_AUTH_MODE is already set by the user.

    Ray caches its config at import, so the mode is re-read after setting the variable;
    with mode "token", `ray.init` creates `~/.ray/auth_token` (or uses RAY_AUTH_TOKEN_PATH).
    """
    if "RAY_AUTH_MODE" in os.environ:
        return
    from ray._raylet import Config

    os.environ["RAY_AUTH_MODE"] = mode
    Config.initialize("")


def _free_port(host: str, preferred: int) -> int:
    """`preferred` if nothing listens there, else a free port (a second local run, a test
    head); 0 asks for a free port."""
    with socket.socket() as sock:
        if preferred and sock.connect_ex((host, preferred)) != 0:
            return preferred
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def idle_workers(prof: LocalProfile) -> int:
    """Ray's `num_workers_soft_limit` for the embedded instance (`LocalProfile.idle_workers`)."""
    return prof.idle_workers or 2 * (prof.num_cpus or os.cpu_count() or 1) + 2


def connect(address: str | None = None, profile: LocalProfile | None = None) -> None:
    """Initialise Ray once per process (no-op if already connected)."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    runtime_env = {"env_vars": dict(WORKER_ENV)}
    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
    if address:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
        return
    prof = profile or load_profile()
    _set_auth_mode(prof.auth_mode)
    mem = prof.object_store_memory_mb
    port = _free_port(prof.dashboard_host, prof.dashboard_port)
    for attempt in range(DASHBOARD_ATTEMPTS):
        try:
            # the raylet inherits WORKER_ENV, so every worker it starts: a job runtime_env
            # would set the same variables, but the workers Ray prestarts at init have no
            # runtime env and could not serve such a job (its first tasks waited for new
            # workers: two tasks on a fresh 2-CPU Ray 1.07 s with one, 0.32 s without)
            with patched_environ(WORKER_ENV):
                ray.init(
                    address="local",
                    num_cpus=prof.num_cpus,
                    _system_config={"num_workers_soft_limit": idle_workers(prof)},
                    object_store_memory=mem * 2**20 if mem else None,
                    include_dashboard=prof.include_dashboard,
                    dashboard_host=prof.dashboard_host,
                    dashboard_port=port,
                    log_to_driver=True,
                )
            return
        except Exception as err:
            if attempt + 1 == DASHBOARD_ATTEMPTS or not _port_taken(err, port):
                raise
            ray.shutdown()  # the head processes that did start
            port = _free_port(prof.dashboard_host, 0)


DASHBOARD_ATTEMPTS = 3


def _port_taken(err: Exception, port: int) -> bool:
    """Whether `ray.init` failed because another process bound the dashboard's port between
    `_free_port`'s check and the dashboard's bind: two local runs starting together. Ray
    raises a bare Exception holding the dashboard log's last lines."""
    text = str(err)
    return "dashboard" in text and "address already in use" in text and f"{port}" in text


def is_local() -> bool:
    """True when this process runs the embedded instance rather than joining a cluster."""
    return not os.environ.get("RAY_ADDRESS")
