"""The files under clusters/: local profile, cluster-launcher YAML, KubeRay manifests."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml

from rayworks.platform.cluster import LocalProfile, load_profile

CLUSTERS = Path(__file__).resolve().parents[2] / "clusters"
RAY_SCHEMA = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"


def _load(name: str) -> dict:
    return yaml.safe_load((CLUSTERS / name).read_text())


# --- local profile -------------------------------------------------------------------------


def test_local_profile_validates_and_keeps_auth_and_loopback():
    text = (CLUSTERS / "local.yaml").read_text()
    assert text.startswith("#") and "rayworks run" in text.splitlines()[2]
    data = yaml.safe_load(text)
    assert set(data) == {"ray_init"}
    LocalProfile.model_validate(data["ray_init"])
    prof = load_profile(CLUSTERS / "local.yaml")
    assert prof.auth_mode == "token"
    assert prof.dashboard_host == "127.0.0.1"
    assert prof.include_dashboard  # the Jobs API lives in the dashboard


# --- cluster launcher ----------------------------------------------------------------------


def test_gpu_cluster_validates_against_ray_schema():
    config = _load("gpu-cluster.yaml")
    jsonschema.validate(config, json.loads(RAY_SCHEMA.read_text()))
    # What `ray up` itself runs before touching AWS: merge provider defaults, re-validate.
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(config))


def test_gpu_cluster_shape_auth_and_dashboard():
    config = _load("gpu-cluster.yaml")
    types = config["available_node_types"]
    assert config["head_node_type"] in types
    workers = {k: v for k, v in types.items() if k != config["head_node_type"]}
    assert workers, "no worker node types"
    for name, node in workers.items():
        assert node["node_config"]["InstanceType"].startswith(("g5.", "g6.", "p4", "p5")), name
        assert 0 == node["min_workers"] <= node["max_workers"] <= config["max_workers"], name
    head = " ".join(config["head_start_ray_commands"])
    assert "--head" in head and "RAY_AUTH_MODE=token" in head
    assert "--dashboard-host=127.0.0.1" in head
    assert "RAY_AUTH_MODE=token" in " ".join(config["worker_start_ray_commands"])
    assert "~/.ray/auth_token" in config["file_mounts"], "workers need the head's token"
    assert any("rayworks[gpu]" in cmd for cmd in config["setup_commands"])


def test_gpu_cluster_schema_check_can_fail():
    """The schema really constrains the file (a typo'd key is rejected)."""
    config = _load("gpu-cluster.yaml")
    config["head_start_ray_comands"] = config.pop("head_start_ray_commands")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, json.loads(RAY_SCHEMA.read_text()))


# --- KubeRay -------------------------------------------------------------------------------


def _containers(template: dict, where: str) -> list[dict]:
    containers = template["spec"]["containers"]
    assert containers, f"{where}: no containers"
    for c in containers:
        assert c.get("image"), f"{where}: container {c.get('name')} has no image"
        assert c.get("name"), f"{where}: container without a name"
    return containers


def check_ray_cluster_spec(spec: dict, where: str) -> None:
    """The fields KubeRay needs in a RayClusterSpec (standalone or inside a RayJob)."""
    head = spec["headGroupSpec"]
    assert isinstance(head["rayStartParams"], dict), f"{where}: head rayStartParams"
    _containers(head["template"], f"{where}.headGroupSpec")
    assert spec.get("authOptions", {}).get("mode") == "token", f"{where}: token auth off"
    groups = spec["workerGroupSpecs"]
    assert groups, f"{where}: no worker groups"
    for g in groups:
        name = g["groupName"]
        assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"], f"{where}: {name}"
        assert isinstance(g["rayStartParams"], dict), f"{where}: {name} rayStartParams"
        _containers(g["template"], f"{where}.{name}")
    gpu_limits = [
        c["resources"]["limits"].get("nvidia.com/gpu")
        for g in groups
        for c in g["template"]["spec"]["containers"]
    ]
    assert any(int(n or 0) >= 1 for n in gpu_limits), f"{where}: no GPU worker group"


def test_raycluster_manifest():
    doc = _load("kuberay/raycluster.yaml")
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayCluster"
    assert doc["metadata"]["name"]
    check_ray_cluster_spec(doc["spec"], "raycluster.yaml")


def test_rayjob_manifest():
    doc = _load("kuberay/rayjob.yaml")
    assert doc["apiVersion"] == "ray.io/v1" and doc["kind"] == "RayJob"
    assert doc["metadata"]["name"]
    spec = doc["spec"]
    assert spec["entrypoint"].startswith("python -m rayworks run ")
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] >= 0
    check_ray_cluster_spec(spec["rayClusterSpec"], "rayjob.yaml")


def test_kuberay_check_can_fail():
    doc = _load("kuberay/raycluster.yaml")
    doc["spec"]["workerGroupSpecs"][0]["replicas"] = 99
    with pytest.raises(AssertionError):
        check_ray_cluster_spec(doc["spec"], "broken")


def test_rayjob_entrypoint_names_a_registered_pipeline_and_preset():
    from rayworks.platform.registry import PIPELINES, get_pipeline

    argv = shlex.split(_load("kuberay/rayjob.yaml")["spec"]["entrypoint"])
    assert argv[:4] == ["python", "-m", "rayworks", "run"]
    name = argv[4]
    try:
        spec = get_pipeline(name)
    except Exception as exc:  # report, don't skip: the manifest must run a real pipeline
        pytest.fail(
            f"rayjob.yaml runs pipeline {name!r}, which is not registered ({exc}); "
            f"registered: {sorted(PIPELINES)}"
        )
    if "--preset" in argv:
        preset = argv[argv.index("--preset") + 1]
        assert preset in spec.config.presets, f"{name} has no preset {preset!r}"
