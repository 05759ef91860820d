"""Sending `rayworks run ...` to a Ray cluster through the Ray Jobs API.

`rayworks submit PIPELINE -- ARGS` becomes a Ray job whose entrypoint is
`python -m rayworks run PIPELINE ARGS`; the job driver joins the cluster by itself (Ray
sets `RAY_ADDRESS` for job drivers), so the same command runs on a laptop and a cluster.

Token authentication stays on: every request carries `Authorization: Bearer <token>`,
the token taken from where Ray itself looks (`RAY_AUTH_TOKEN`, then the file at
`RAY_AUTH_TOKEN_PATH`, then `~/.ray/auth_token`). We pass the header ourselves instead of
relying on Ray's process-wide token cache, so a token changed between calls is honoured
and the client works whether or not `RAY_AUTH_MODE=token` is set in this process.
Unreachable dashboards and rejected tokens become one-paragraph `RayworksError`s.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rayworks.core.errors import RayworksError

AGENT_WAIT_S = 15.0  # how long a submit waits for the head to find a job agent

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


@dataclass(frozen=True)
class LocalDashboard:
    """A Ray dashboard running on this machine, read from its process's command line."""

    url: str
    gcs_address: str


def _flags(cmdline: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in cmdline if a.startswith("--") and "=" in a)


def local_dashboards() -> list[LocalDashboard]:
    """Every live Ray dashboard on this machine that listens where its command line says
    (`ray/dashboard/dashboard.py --host --port --gcs-address`): a `ray start` head or an
    embedded `rayworks` Ray, whose dashboard moves to a free port when 8265 is taken."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or not any(
            a.endswith(os.path.join("dashboard", "dashboard.py")) for a in cmdline
        ):
            continue
        flags = _flags(cmdline)
        try:
            port = int(flags.get("port", ""))
            listening = {
                c.laddr.port for c in proc.net_connections("inet") if c.status == psutil.CONN_LISTEN
            }
        except (ValueError, psutil.Error):
            continue
        if port in listening:
            host = flags.get("host", "127.0.0.1")
            host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
            found.append(LocalDashboard(f"http://{host}:{port}", flags.get("gcs-address", "")))
    return sorted(found, key=lambda d: d.url)


def dashboard_address(
    address: str | None, discover: Callable[[], list[LocalDashboard]] = local_dashboards
) -> str:
    """The Jobs API (dashboard) URL the token may be sent to, in this order: `address`;
    RAY_API_SERVER_ADDRESS; an http(s) RAY_ADDRESS; the dashboard of the local Ray whose GCS
    a `host:port` RAY_ADDRESS names; the one Ray dashboard running on this machine
    (`local_dashboards`). Never a guessed port: with no address and none or several local
    dashboards it raises, so the token never goes to whatever else listens on :8265. A bare
    `host:port` gets `http://`."""
    ray_address = os.environ.get("RAY_ADDRESS", "")
    address = (
        address
        or os.environ.get("RAY_API_SERVER_ADDRESS")
        or (ray_address if ray_address.startswith(("http://", "https://")) else None)
    )
    if not address:
        running = discover()
        if ray_address and ray_address != "auto":
            port = ray_address.rsplit(":", 1)[-1]
            running = [d for d in running if d.gcs_address.rsplit(":", 1)[-1] == port]
        if len(running) != 1:
            found = ", ".join(d.url for d in running) or "none"
            raise RayworksError(
                "which Ray dashboard? No --address, RAY_API_SERVER_ADDRESS or http(s) "
                f"RAY_ADDRESS is set, and the Ray dashboards running on this machine"
                f"{' for RAY_ADDRESS=' + ray_address if ray_address else ''} are: {found}. "
                "Pass --address http://HOST:PORT (for a remote cluster, forward its dashboard "
                "port first); the token is never sent to a guessed address."
            )
        address = running[0].url
    if "://" not in address:
        address = f"http://{address}"
    return address.rstrip("/")


def _token() -> tuple[str | None, str]:
    """The auth token (or None) and a phrase saying where it was looked for."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return os.environ["RAY_AUTH_TOKEN"].strip(), "$RAY_AUTH_TOKEN"
    env_path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    path = Path(env_path).expanduser() if env_path else Path.home() / ".ray" / "auth_token"
    where = f"{path}" + (" ($RAY_AUTH_TOKEN_PATH)" if env_path else "")
    try:
        return (path.read_text().strip() or None), where
    except OSError:
        return None, where


def _auth_headers() -> dict[str, str]:
    """`Authorization: Bearer <token>` unless auth is disabled or no token exists."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        return {}
    token, _ = _token()
    return {"Authorization": f"Bearer {token}"} if token else {}


@contextmanager
def _talking_to(address: str) -> Iterator[None]:
    """Turn connection, auth and server errors into one-paragraph RayworksErrors."""
    import requests
    from ray.exceptions import AuthenticationError

    try:
        yield
    except AuthenticationError as exc:
        token, where = _token()
        found = f"the token from {where}" if token else f"no token (looked in {where})"
        rejected = (
            "rejected"
            if "failed" in getattr(exc, "message", str(exc)).lower()
            else "required a token and got"
        )
        raise RayworksError(
            f"the Ray dashboard at {address} {rejected} {found}. Token auth is on: set "
            "RAY_AUTH_TOKEN_PATH to the cluster's token file (default ~/.ray/auth_token, "
            "`ray get-auth-token` prints it on the head; on KubeRay it is the cluster's "
            "Secret) or RAY_AUTH_TOKEN to its value, and check it is the token the head "
            "was started with."
        ) from None
    except (ConnectionError, requests.RequestException) as exc:
        raise RayworksError(
            f"cannot reach the Ray Jobs API at {address} ({type(exc).__name__}). Is the "
            "head up and its dashboard running? For a remote cluster, forward the port first "
            "(`ray dashboard clusters/gpu-cluster.yaml` or `kubectl port-forward "
            "svc/<cluster>-head-svc 8265`) and pass --address http://127.0.0.1:8265; "
            "RAY_API_SERVER_ADDRESS sets the default."
        ) from None
    except RuntimeError as exc:  # the client's wrapper for non-2xx answers (404 etc.)
        raise RayworksError(f"the Ray Jobs API at {address} answered: {exc}") from None


def _client(address: str | None) -> tuple[Any, str]:
    """A connected JobSubmissionClient and the URL it talks to."""
    from ray.job_submission import JobSubmissionClient

    url = dashboard_address(address)
    with _talking_to(url):
        return JobSubmissionClient(url, headers=_auth_headers()), url


def build_entrypoint(pipeline: str, run_args: list[str]) -> str:
    """The job's shell command: `python -m rayworks run PIPELINE ARGS` (args quoted)."""
    return shlex.join(["python", "-m", "rayworks", "run", pipeline, *run_args])


def submit_entrypoint(
    entrypoint: str,
    address: str | None = None,
    working_dir: str | None = None,
    env_vars: dict[str, str] | None = None,
    pip: list[str] | None = None,
    submission_id: str | None = None,
) -> str:
    """Submit any shell command as a Ray job; returns its submission id.

    The runtime_env holds only what was given, so a cluster whose image already has
    rayworks installed gets no upload and no pip install.
    """
    runtime_env: dict[str, Any] = {}
    if working_dir:
        runtime_env["working_dir"] = working_dir
    if env_vars:
        runtime_env["env_vars"] = dict(env_vars)
    if pip:
        runtime_env["pip"] = list(pip)
    client, url = _client(address)
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            with _talking_to(url):
                return client.submit_job(
                    entrypoint=entrypoint,
                    runtime_env=runtime_env or None,
                    submission_id=submission_id,
                )
        except RayworksError as exc:
            # the head answers 500 "No available agent" until a node's job agent has
            # registered (a fresh cluster) or while its agent is slow to answer (a busy
            # node); Ray itself says to try again later
            if "no available agent" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def submit(
    pipeline: str,
    run_args: list[str],
    address: str | None = None,
    working_dir: str | None = None,
    env_vars: dict[str, str] | None = None,
    pip: list[str] | None = None,
    submission_id: str | None = None,
) -> str:
    """Submit `rayworks run PIPELINE RUN_ARGS` as a Ray job; returns its submission id.

    The pipeline name is checked against the local registry first, so a typo fails here
    with the list of known names instead of minutes later on the cluster.
    """
    from rayworks.platform.registry import get_pipeline

    get_pipeline(pipeline)  # raises UnknownNameError
    return submit_entrypoint(
        build_entrypoint(pipeline, run_args),
        address=address,
        working_dir=working_dir,
        env_vars=env_vars,
        pip=pip,
        submission_id=submission_id,
    )


def follow(
    job_id: str,
    address: str | None = None,
    out: TextIO = sys.stdout,
    poll_s: float = 1.0,
    timeout_s: float | None = None,
) -> str:
    """Print the job's log as it grows until it ends; returns the final status.

    Polls `get_job_logs` and prints only the new suffix: simpler than the websocket tail
    and it survives dashboard restarts. Past `timeout_s` the job is left running and a
    RayworksError says how to look at it again.
    """
    client, url = _client(address)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    shown = 0
    while True:
        with _talking_to(url):
            status = str(client.get_job_status(job_id).value)
            logs = client.get_job_logs(job_id)
        if len(logs) < shown:  # log replaced (e.g. job resubmitted under this id)
            shown = 0
        if len(logs) > shown:
            out.write(logs[shown:])
            out.flush()
            shown = len(logs)
        if status in TERMINAL:
            return status
        if deadline is not None and time.monotonic() >= deadline:
            raise RayworksError(
                f"job {job_id} is still {status} after {timeout_s:g}s; it keeps running on "
                f"{url}. `rayworks jobs` lists it; `ray job logs -f {job_id} --address {url}` "
                f"follows it and `ray job stop {job_id} --address {url}` stops it."
            )
        time.sleep(poll_s)


def list_jobs(address: str | None = None) -> list[dict]:
    """All jobs the cluster knows, oldest first (times are epoch milliseconds).

    `type` is SUBMISSION for `rayworks submit` jobs and DRIVER for processes that joined
    the cluster directly (`rayworks run --address auto` on the head).
    """
    client, url = _client(address)
    with _talking_to(url):
        jobs = client.list_jobs()
    rows = [
        {
            "id": job.submission_id or job.job_id,
            "submission_id": job.submission_id,
            "job_id": job.job_id,
            "type": str(getattr(job.type, "value", job.type)),
            "status": str(job.status.value),
            "entrypoint": job.entrypoint,
            "start_time": job.start_time,
            "end_time": job.end_time,
            "message": job.message,
        }
        for job in jobs
    ]
    return sorted(rows, key=lambda r: r["start_time"] or 0)


def status(job_id: str, address: str | None = None) -> str:
    """The job's status: PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED."""
    client, url = _client(address)
    with _talking_to(url):
        return str(client.get_job_status(job_id).value)


def logs(job_id: str, address: str | None = None) -> str:
    """The job's whole log so far."""
    client, url = _client(address)
    with _talking_to(url):
        return client.get_job_logs(job_id)


def stop(job_id: str, address: str | None = None) -> bool:
    """Ask the cluster to stop the job; False when it had already ended. Its status is
    read first: Ray's `stop_job` answers True while the finished job's supervisor actor
    is still exiting, which a loaded machine stretches to seconds."""
    client, url = _client(address)
    with _talking_to(url):
        if str(client.get_job_status(job_id).value) in TERMINAL:
            return False
        return bool(client.stop_job(job_id))
