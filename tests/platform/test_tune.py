"""Sweeps: parameter parsing, early validation, and a 2-trial ASHA search on Ray."""

from __future__ import annotations

import json

import pytest

from rayworks.core.errors import ConfigError
from rayworks.pipelines.lm.config import LMConfig
from rayworks.platform import tune


def test_an_all_grid_space_runs_each_point_once_by_default():
    grid = [tune.parse_param("learner.lr=grid:1e-4,3e-4"), tune.parse_param("seed=grid:0,1")]
    assert tune.default_samples(grid) == 1
    assert tune.default_samples([*grid, tune.parse_param("train.lr=loguniform:1e-4:1e-2")]) == 4


def test_parse_param_forms():
    assert tune.parse_param("train.lr=loguniform:1e-4:1e-2") == tune.ParamSpec(
        "train.lr", "loguniform", (1e-4, 1e-2)
    )
    assert tune.parse_param("model.n_layer=choice:2,4").args == (2, 4)
    assert tune.parse_param("seed=randint:0:9").args == (0, 9)
    for bad in (
        "train.lr",
        "train.lr=loguniform:0:1",
        "train.lr=uniform:2:1",
        "x=normal:0:1",
        "x=uniform:a:b",
    ):
        with pytest.raises(ConfigError):
            tune.parse_param(bad)


def test_check_params_rejects_unknown_keys_before_tune_starts():
    base = LMConfig().model_dump(mode="json")
    with pytest.raises(ConfigError, match=r"model\.n_layers"):
        tune.check_params(LMConfig, base, [tune.parse_param("model.n_layers=choice:2,4")])


def _remove_leftover_placement_groups() -> None:
    """A trial ASHA stops can leave its Train worker group's placement group behind (seen
    under heavy load: 0.5 CPU held for the rest of the session, so a later test that needs a
    whole CPU waits forever); this test's job removes what it created."""
    import ray
    from ray.util.placement_group import PlacementGroup, remove_placement_group

    job = ray.get_runtime_context().get_job_id()  # hex; a group's id ends with its job's
    for pg_id, info in ray.util.placement_group_table().items():
        if info["state"] == "CREATED" and pg_id.endswith(job):
            remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(pg_id))))


def test_two_trial_asha_sweep_sees_what_the_run_logs(ray_session, tmp_path):
    sweep_dir = tune.sweep(
        "lm",
        params=["train.lr=grid:0.003,0.0001"],
        preset="smoke",
        overrides=[
            "train.num_workers=1",
            "train.cpus_per_worker=0.5",  # both trials fit the session's 2 CPUs at once
            "train.max_steps=10",
            "train.eval_every=5",
            "train.log_every=5",
        ],
        samples=1,
        metric="val_loss",
        mode="min",
        scheduler="asha",
        runs_dir=tmp_path,
    )
    _remove_leftover_placement_groups()  # before any assert: later tests need the CPUs
    rows = json.loads((sweep_dir / "trials.json").read_text())
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)
    by_lr = {r["train.lr"]: r["val_loss"] for r in rows}
    assert by_lr[0.003] < by_lr[0.0001]  # ten steps at 30x the learning rate learn more
    assert rows[0]["train.lr"] == 0.003  # the table is sorted best first
    assert all(r["iterations"] >= 2 for r in rows)  # Tune saw intermediate ctx.log reports
    # Every trial is a run directory; ASHA may stop the weak one before its summary exists.
    assert len(list((sweep_dir / "trials" / "lm").glob("*/config.yaml"))) == 2
    assert list((sweep_dir / "trials" / "lm").glob("*/summary.json"))
    assert (sweep_dir / "trials.md").read_text().startswith("| train.lr | val_loss")


def test_a_job_trial_that_cannot_fit_beside_its_driver_fails_before_tune_starts(ray_session):
    """lm with 2 workers x 1 CPU needs the session's 2 CPUs plus the trial driver's 0.01."""
    with pytest.raises(ConfigError, match=r"needs 2 CPU .* plus 0\.01 for its driver"):
        tune.sweep(
            "lm",
            params=["train.lr=grid:0.003"],
            preset="smoke",
            overrides=["train.num_workers=2"],
            samples=1,
        )
