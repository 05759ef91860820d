"""Secure defaults of the endpoints: open binds refused, keys from files or the
environment, FastAPI's docs off unless asked."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rayworks.cli import main
from rayworks.core.errors import ConfigError
from rayworks.platform.access import (
    API_KEY_ENV,
    OpenBindError,
    check_bind,
    is_loopback,
    resolve_api_key,
)
from rayworks.platform.openai_api import build_app
from rayworks.platform.serve_limits import ServeLimits
from rayworks.platform.serve_metrics import ModelMetrics


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("192.0.2.10", False),
        ("myhost.example", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_open_bind_needs_a_key_or_an_explicit_opt_out(capsys: pytest.CaptureFixture) -> None:
    check_bind("127.0.0.1", None)  # loopback: no key needed
    check_bind("0.0.0.0", "k")  # a key: fine anywhere
    with pytest.raises(OpenBindError, match=r"--host 0\.0\.0\.0 .* no API key"):
        check_bind("0.0.0.0", None)
    assert capsys.readouterr().err == ""
    check_bind("0.0.0.0", None, insecure_no_auth=True)
    assert "WARNING: serving on 0.0.0.0 with no API key" in capsys.readouterr().err


def test_api_key_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("  from-file \n")
    env = {API_KEY_ENV: "from-env"}
    assert resolve_api_key(api_key_file=key_file, env=env) == "from-file"
    assert resolve_api_key(env=env) == "from-env"
    assert resolve_api_key(env={}) is None
    assert capsys.readouterr().err == ""
    assert resolve_api_key(api_key="on-argv", env=env) == "on-argv"
    assert "visible to other users" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="not both"):
        resolve_api_key(api_key="a", api_key_file=key_file, env={})
    with pytest.raises(ConfigError, match="cannot read the API key file"):
        resolve_api_key(api_key_file=tmp_path / "absent", env={})
    (tmp_path / "blank").write_text("\n\n")
    with pytest.raises(ConfigError, match="is empty"):
        resolve_api_key(api_key_file=tmp_path / "blank", env={})


def test_cli_refuses_open_bind_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The bind is checked before the checkpoint or Ray: a missing folder is not even read."""
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    argv = ["serve", "model", "--checkpoint", str(tmp_path / "missing"), "--host", "0.0.0.0"]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--host 0.0.0.0 accepts connections from other machines" in err
    assert "--insecure-no-auth" in err and "no model found" not in err
    ttc = ["serve", "ttc", "--checkpoint", str(tmp_path / "missing"), "--host", "::"]
    assert main(ttc) == 2
    assert "--host :: accepts connections" in " ".join(capsys.readouterr().err.split())
    # with the opt-out the bind passes and the next check (the checkpoint) answers
    assert main([*argv, "--insecure-no-auth"]) == 2
    assert "no model found" in " ".join(capsys.readouterr().err.split())


class _NoEngine:
    name = "none"
    limits = ServeLimits()
    metrics = ModelMetrics()


@pytest.mark.parametrize("docs", [False, True])
def test_docs_and_schema_only_when_asked(docs: bool) -> None:
    client = TestClient(build_app(_NoEngine(), api_key="k", docs=docs))  # type: ignore[arg-type]
    for path in ("/docs", "/openapi.json", "/redoc"):
        assert client.get(path).status_code == (200 if docs else 404), path
    assert client.get("/health").status_code == 200
    assert client.get("/v1/models").status_code == 401
    models = client.get("/v1/models", headers={"Authorization": "Bearer k"})
    assert models.json()["data"][0]["id"] == "none"
