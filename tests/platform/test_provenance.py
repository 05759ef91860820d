"""provenance.json: fields, the git state of a checkout, secrets in argv, no git at all."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rayworks.core.config import build_config
from rayworks.pipelines.lm.config import LMConfig
from rayworks.platform import provenance
from rayworks.platform.context import RunContext

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git command")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A temporary git repository whose `pkg/` folder is tracked and committed."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def test_a_run_dir_records_its_provenance(tmp_path):
    ctx = RunContext.create("lm", build_config(LMConfig, "smoke"), runs_dir=tmp_path)
    data = json.loads((ctx.run_dir / "provenance.json").read_text())
    for key in (
        "created_at",
        "rayworks",
        "git",
        "packages",
        "python",
        "platform",
        "hostname",
        "ray",
        "command",
        "command_line",
    ):
        assert key in data, key
    for package in ("rayworks", "ray", "torch", "tokenizers", "pyarrow", "numpy", "pydantic"):
        assert data["packages"][package], package
    assert data["ray"]["version"] == data["packages"]["ray"]
    assert data["ray"]["cluster"] in ("local-embedded", "remote")
    assert data["python"].split()[-1].count(".") == 2


@needs_git
def test_the_dirty_flag_follows_the_checkout(checkout):
    clean = provenance.collect(command=["rayworks"], source_dir=checkout / "pkg").git
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert clean is not None and clean.commit == head and not clean.dirty
    (checkout / "pkg" / "mod.py").write_text("x = 2\n")
    dirty = provenance.collect(command=["rayworks"], source_dir=checkout / "pkg").git
    assert dirty is not None and dirty.commit == head
    assert dirty.dirty and dirty.changed_files == 1


@needs_git
def test_an_untracked_copy_inside_another_repo_has_no_commit(checkout):
    """site-packages/rayworks inside some project's ignored .venv is not a checkout."""
    (checkout / ".gitignore").write_text("venv/\n")
    copy = checkout / "venv" / "site-packages" / "pkg"
    shutil.copytree(checkout / "pkg", copy)
    assert provenance.git_state(copy) is None


def test_without_git_the_run_still_gets_a_record(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git executable anywhere
    record = provenance.collect(command=["rayworks", "run", "lm"])
    assert record.git is None and record.rayworks
    path = provenance.write(tmp_path, record)
    assert json.loads(path.read_text())["git"] is None


def test_secrets_in_the_command_are_redacted():
    argv = [
        "rayworks",
        "serve",
        "model",
        "--api-key",
        "sk-live-1",
        "--api-key-file",
        "/keys/k",
        "--set",
        "reward.kwargs.api_key=sk-live-2",
        "--set=db.password=hunter2",
        "--env",
        "HF_TOKEN=hf_live_3",
        "--tracking-uri",
        "https://me:pw-live-4@mlflow:5000",
        "-s",
        "tokenizer.vocab_size=512",
        "--token=tok-live-5",
    ]
    record = provenance.collect(command=argv)
    text = json.dumps(record.model_dump(mode="json"))
    for secret in ("sk-live-1", "sk-live-2", "hunter2", "hf_live_3", "pw-live-4", "tok-live-5"):
        assert secret not in text, secret
    assert record.command[4] == provenance.REDACTED
    assert "/keys/k" in record.command  # names where the key is, not the key
    assert "tokenizer.vocab_size=512" in record.command  # 'tokenizer' is not 'token'
    assert "https://me:<redacted>@mlflow:5000" in record.command


def test_a_resumed_run_keeps_the_earlier_records(tmp_path):
    provenance.write(tmp_path, provenance.collect(command=["rayworks", "run", "lm"]))
    provenance.write(tmp_path, provenance.collect(command=["rayworks", "run", "--resume", "x"]))
    data = provenance.read(tmp_path)
    assert data is not None and data["command"][-1] == "x"
    assert [e["command"] for e in data["earlier"]] == [["rayworks", "run", "lm"]]
