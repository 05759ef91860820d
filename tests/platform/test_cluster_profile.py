"""The embedded Ray's profile (clusters/local.yaml, `cluster.LocalProfile`)."""

import os

import pytest


def test_the_local_profile_keeps_idle_workers_and_reads_the_shipped_file():
    from rayworks.core.errors import ConfigError
    from rayworks.platform import cluster

    shipped = cluster.load_profile(cluster.REPO_PROFILE)
    assert shipped.idle_workers is None and shipped.dashboard_host == "127.0.0.1"
    assert cluster.idle_workers(cluster.LocalProfile(num_cpus=2)) == 6
    assert cluster.idle_workers(cluster.LocalProfile(num_cpus=1, idle_workers=9)) == 9
    with pytest.raises((ConfigError, ValueError), match="idle_workers"):
        cluster.LocalProfile(idle_workers=0)


# What `ray.init` raised when another local run bound 8265 between our check and the
# dashboard's bind (the last line of the dashboard log it quotes).
RACED = (
    "\nThe last 20 lines of /tmp/ray/session_x/logs/dashboard.log (it contains the error "
    "message from the dashboard): \nException: Failed to find a valid port for dashboard "
    "after 0 retries: [Errno 98] error while attempting to bind on address "
    "('127.0.0.1', {port}): address already in use"
)


class FakeRay:
    """`ray.init` failing like a raced dashboard bind `fails` times, then starting."""

    def __init__(self, fails: int, text: str = RACED) -> None:
        self.fails, self.text, self.ports, self.shutdowns = fails, text, [], 0

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs):
        self.ports.append(kwargs["dashboard_port"])
        self.kwargs = kwargs
        self.env = dict(os.environ)  # what a raylet started here inherits
        if len(self.ports) <= self.fails:
            raise Exception(self.text.format(port=kwargs["dashboard_port"]))

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.mark.parametrize("fails", [1, 2])
def test_a_dashboard_port_taken_by_a_run_starting_alongside_is_retried_on_a_free_port(
    monkeypatch, fails: int
):
    import sys

    from rayworks.platform import cluster

    fake = FakeRay(fails)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(cluster, "_set_auth_mode", lambda mode: None)
    cluster.connect(profile=cluster.LocalProfile(dashboard_port=1))  # nothing listens on 1
    assert fake.ports[0] == 1 and len(fake.ports) == fails + 1
    assert all(p not in (0, 1) for p in fake.ports[1:]) and fake.shutdowns == fails


def test_other_start_failures_and_a_third_race_are_raised(monkeypatch):
    import sys

    from rayworks.platform import cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(cluster, "_set_auth_mode", lambda mode: None)
    for fake in (FakeRay(1, "GCS failed to start"), FakeRay(cluster.DASHBOARD_ATTEMPTS)):
        monkeypatch.setitem(sys.modules, "ray", fake)
        with pytest.raises(Exception, match=r"GCS failed|address already in use"):
            cluster.connect(profile=cluster.LocalProfile(dashboard_port=1))


def test_the_embedded_rays_workers_inherit_the_worker_env_and_the_driver_keeps_its_own(
    monkeypatch,
):
    """The raylet (so every worker, the prestarted ones included) is started with
    `WORKER_ENV` in its environment, without a job runtime env (prestarted workers
    could not serve one); the driver's own environment is as before afterwards."""
    import sys

    from rayworks.platform import cluster

    fake = FakeRay(0)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    monkeypatch.setattr(cluster, "_set_auth_mode", lambda mode: None)
    cluster.connect(profile=cluster.LocalProfile(dashboard_port=1))
    assert {k: fake.env.get(k) for k in cluster.WORKER_ENV} == cluster.WORKER_ENV
    assert "runtime_env" not in fake.kwargs
    assert "OMP_NUM_THREADS" not in os.environ
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
