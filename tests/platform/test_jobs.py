"""Ray Jobs submission against the session head (token auth on), plus its error paths."""

from __future__ import annotations

import io
import os
import re
import shlex
import socket
import sys
from pathlib import Path

import pytest

from rayworks.core.errors import RayworksError, UnknownNameError
from rayworks.platform import jobs

PY = shlex.quote(sys.executable)  # the head's shell PATH may not reach this venv's python


def _dead_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_dashboard_address_precedence(monkeypatch):
    for var in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    one = [jobs.LocalDashboard("http://127.0.0.1:57441", "192.0.2.2:44013")]
    two = [*one, jobs.LocalDashboard("http://127.0.0.1:8265", "192.0.2.2:6379")]
    assert jobs.dashboard_address(None, lambda: one) == "http://127.0.0.1:57441"  # moved
    for running in ([], two):  # never a guess: none or several running is an error
        with pytest.raises(RayworksError, match="which Ray dashboard") as err:
            jobs.dashboard_address(None, lambda running=running: running)
        assert "--address" in str(err.value)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # a GCS address: its dashboard
    assert jobs.dashboard_address(None, lambda: two) == "http://127.0.0.1:8265"
    monkeypatch.setenv("RAY_ADDRESS", "http://10.0.0.1:8265/")
    assert jobs.dashboard_address(None, lambda: []) == "http://10.0.0.1:8265"
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "https://ray.example:443")
    assert jobs.dashboard_address(None, lambda: []) == "https://ray.example:443"
    assert jobs.dashboard_address("127.0.0.1:9000", lambda: []) == "http://127.0.0.1:9000"


def test_local_dashboards_find_the_session_head_where_it_listens(ray_head):
    """The test head's dashboard is on a free port, not 8265: discovery reads it from the
    dashboard process and checks the port listens; every listener on it is loopback."""
    import psutil

    found = {d.url: d for d in jobs.local_dashboards()}
    assert ray_head["dashboard"] in found
    assert found[ray_head["dashboard"]].gcs_address.endswith(ray_head["address"].split(":")[1])
    port = int(ray_head["dashboard"].rsplit(":", 1)[1])
    binds = [
        c.laddr.ip
        for c in psutil.net_connections("inet")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    ]
    assert binds and all(ip.startswith("127.") for ip in binds), binds


def test_entrypoint_quotes_run_args():
    cmd = jobs.build_entrypoint("lm", ["--preset", "smoke", "--set", "train.lr=1e-3 x"])
    assert shlex.split(cmd) == [
        "python",
        "-m",
        "rayworks",
        "run",
        "lm",
        "--preset",
        "smoke",
        "--set",
        "train.lr=1e-3 x",
    ]


def test_auth_header_sources(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    (tmp_path / "tok").write_text("file-token\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
    assert jobs._auth_headers() == {"Authorization": "Bearer file-token"}
    monkeypatch.setenv("RAY_AUTH_TOKEN", "env-token")  # Ray's precedence: env value first
    assert jobs._auth_headers() == {"Authorization": "Bearer env-token"}
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert jobs._auth_headers() == {}


def test_unknown_pipeline_fails_before_contacting_anything(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("submit contacted the cluster for an unknown pipeline")

    monkeypatch.setattr(jobs, "_client", no_network)
    with pytest.raises(UnknownNameError, match="no-such-pipeline"):
        jobs.submit("no-such-pipeline", [], address="http://127.0.0.1:1")


def test_unreachable_dashboard_is_a_clear_error():
    dead = _dead_address()
    with pytest.raises(RayworksError, match="cannot reach the Ray Jobs API") as info:
        jobs.list_jobs(dead)
    assert dead in str(info.value) and "head up" in str(info.value)


def test_submit_follow_list_status(ray_head):
    url = ray_head["dashboard"]
    job_id = jobs.submit_entrypoint(
        f"{PY} -c \"import os; print('hello from job', os.environ['RW_MARK'])\"",
        address=url,
        env_vars={"RW_MARK": "m42"},
    )
    out = io.StringIO()
    final = jobs.follow(job_id, address=url, out=out, poll_s=0.5, timeout_s=60)
    assert final == "SUCCEEDED", out.getvalue()
    assert "hello from job m42" in out.getvalue()
    assert out.getvalue().count("hello from job m42\n") == 1  # only new suffixes printed
    assert jobs.status(job_id, address=url) == "SUCCEEDED"
    assert "hello from job m42" in jobs.logs(job_id, address=url)
    row = next(r for r in jobs.list_jobs(url) if r["submission_id"] == job_id)
    assert row["status"] == "SUCCEEDED" and "hello from job" in row["entrypoint"]
    assert row["start_time"] and row["end_time"] >= row["start_time"]
    assert jobs.stop(job_id, address=url) is False  # already finished


def test_failing_job_reports_failed_and_stop_works(ray_head):
    url = ray_head["dashboard"]
    failed = jobs.submit_entrypoint(f"{PY} -c \"raise SystemExit('boom')\"", address=url)
    out = io.StringIO()
    assert jobs.follow(failed, address=url, out=out, poll_s=0.5, timeout_s=60) == "FAILED"
    assert "boom" in out.getvalue()
    sleeper = jobs.submit_entrypoint(f'{PY} -c "import time; time.sleep(120)"', address=url)
    with pytest.raises(RayworksError, match=r"still (PENDING|RUNNING)"):
        jobs.follow(sleeper, address=url, out=io.StringIO(), poll_s=0.2, timeout_s=0.5)
    assert jobs.stop(sleeper, address=url) is True
    assert jobs.follow(sleeper, address=url, out=io.StringIO(), poll_s=0.5, timeout_s=30) == (
        "STOPPED"
    )


def test_unknown_job_id_is_a_clear_error(ray_head):
    with pytest.raises(RayworksError, match=re.escape(ray_head["dashboard"])):
        jobs.status("raysubmit_doesnotexist", address=ray_head["dashboard"])


def test_wrong_token_is_a_clear_error(ray_head, monkeypatch, tmp_path: Path):
    wrong = tmp_path / "wrong_token"
    wrong.write_text("0" * 64)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(wrong))
    with pytest.raises(RayworksError, match="rejected the token") as info:
        jobs.list_jobs(ray_head["dashboard"])
    assert ray_head["dashboard"] in str(info.value) and str(wrong) in str(info.value)


def test_missing_token_is_a_clear_error(ray_head, monkeypatch, tmp_path: Path):
    import ray.dashboard.modules.dashboard_sdk as sdk

    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "absent"))
    # Ray's own fallback would read its process-wide cached token; model a client without one.
    monkeypatch.setattr(sdk, "get_auth_headers_if_auth_enabled", lambda headers: {})
    with pytest.raises(RayworksError, match="no token") as info:
        jobs.status("raysubmit_x", address=ray_head["dashboard"])
    assert "absent" in str(info.value)


@pytest.mark.slow
def test_submit_lm_smoke_reaches_succeeded(ray_head, tmp_path: Path):
    """End to end: `rayworks submit lm -- --preset smoke` on the session head."""
    url = ray_head["dashboard"]
    env = {
        # The head's shell resolves `python`; put this venv first so it finds rayworks.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAYWORKS_RUNS_DIR": str(tmp_path / "runs"),
        "HF_HUB_OFFLINE": "1",
    }
    job_id = jobs.submit("lm", ["--preset", "smoke"], address=url, env_vars=env)
    out = io.StringIO()
    final = jobs.follow(job_id, address=url, out=out, poll_s=1.0, timeout_s=300)
    assert final == "SUCCEEDED", out.getvalue()[-4000:]
    assert any((tmp_path / "runs").rglob("summary.json")), out.getvalue()[-4000:]


class _FlakyClient:
    """A JobSubmissionClient stand-in whose head has no job agent for `misses` calls."""

    def __init__(self, misses: int) -> None:
        self.misses, self.calls = misses, 0

    def submit_job(self, **_: object) -> str:
        self.calls += 1
        if self.calls <= self.misses:
            raise RuntimeError(
                "Request failed with status code 500: No available agent to submit job, "
                "please try again later.."
            )
        return "raysubmit_ok"


def test_submit_waits_for_a_job_agent_then_gives_up(monkeypatch):
    monkeypatch.setattr(jobs.time, "sleep", lambda _: None)
    flaky = _FlakyClient(misses=2)
    monkeypatch.setattr(jobs, "_client", lambda address: (flaky, "http://h:8265"))
    assert jobs.submit_entrypoint("echo hi") == "raysubmit_ok" and flaky.calls == 3
    never = _FlakyClient(misses=10**9)
    monkeypatch.setattr(jobs, "_client", lambda address: (never, "http://h:8265"))
    monkeypatch.setattr(jobs, "AGENT_WAIT_S", -1.0)  # deadline already passed: one try
    with pytest.raises(RayworksError, match="No available agent"):
        jobs.submit_entrypoint("echo hi")
    assert never.calls == 1
