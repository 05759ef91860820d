"""The CLI's error paths: bad input gives one paragraph naming what was wrong, exit code 2."""

from __future__ import annotations

import pytest

from rayworks.cli import main


def _error(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    return " ".join(err.split())


def test_list_shows_pipelines_with_kind_baseline_and_headline(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for text in ("lm", "lm_plain", "job", "task", "val_loss (min)", "task_accuracy"):
        assert text in out


def test_unknown_pipeline(capsys):
    msg = _error(capsys, ["run", "lmm", "--preset", "smoke"])
    assert "unknown pipeline 'lmm'" in msg and "lm_plain" in msg


def test_unknown_key_lists_allowed_keys(capsys):
    msg = _error(capsys, ["run", "lm", "--preset", "smoke", "--set", "train.lrr=1e-3"])
    assert "unknown key 'train.lrr'" in msg and "warmup_steps" in msg


def test_wrong_type_names_key_value_and_meaning(capsys):
    msg = _error(capsys, ["run", "lm", "--set", "model.n_layer=two"])
    assert "model.n_layer='two'" in msg and "transformer blocks" in msg


def test_out_of_range_value(capsys):
    msg = _error(capsys, ["run", "lm", "--set", "train.lr=0"])
    assert "train.lr=0" in msg and "greater than 0" in msg


def test_cross_field_error_names_both_keys(capsys):
    msg = _error(
        capsys, ["run", "lm", "--set", "train.batch_size=15", "--set", "train.num_workers=2"]
    )
    assert "train.batch_size=15" in msg and "train.num_workers=2" in msg


def test_unknown_preset(capsys):
    msg = _error(capsys, ["run", "lm", "--preset", "huge"])
    assert "unknown preset 'huge'" in msg and "smoke" in msg


def test_yaml_syntax_error_names_file_and_line(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  lr: [1e-3\n")
    msg = _error(capsys, ["run", "lm", "-c", str(bad)])
    assert str(bad) in msg and "line" in msg


def test_missing_resume_dir(capsys, tmp_path):
    msg = _error(capsys, ["run", "lm", "--resume", str(tmp_path / "nope")])
    assert "nope" in msg and "config.yaml" in msg


@pytest.mark.parametrize(
    "argv", [["serve", "model", "--checkpoint"], ["eval", "lm", "--checkpoint"]]
)
def test_missing_checkpoint(capsys, tmp_path, argv):
    msg = _error(capsys, [*argv, str(tmp_path / "missing")])
    assert "missing" in msg and "no model found" in msg


def test_bad_sweep_param(capsys):
    msg = _error(capsys, ["sweep", "lm", "--param", "train.lr=gauss:1:2"])
    assert "train.lr=gauss:1:2" in msg and "loguniform" in msg


def test_sweep_param_outside_config_range(capsys):
    msg = _error(capsys, ["sweep", "lm", "--param", "train.lr=choice:0.1,2.0"])
    assert "train.lr=2.0" in msg
