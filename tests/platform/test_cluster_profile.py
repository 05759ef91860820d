"""The embedded Ray's profile (clusters/local.yaml, `cluster.LocalProfile`)."""

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
