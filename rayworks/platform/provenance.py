"""provenance.json: what produced a run.

Every run directory (`rayworks run`, each trial of `rayworks sweep`, each arm and seed of
`rayworks bench`) and every sweep and bench directory records, beside config.yaml:

    created_at    when the record was written (Unix seconds)
    rayworks      the package version and, in a git checkout of its source, the commit,
                  whether the tree had uncommitted changes (`dirty`) and how many paths
                  differed; `git` is null for an installed wheel or where git is missing
    packages      versions of the packages a result depends on (only those installed),
                  read from their metadata, never imported
    python, platform, hostname, cwd
    ray           Ray's version and how the run reached it: `local-embedded` (a Ray this
                  process started) or `remote` (an address, with any user:password removed)
    command       the exact argv, each secret-looking value replaced by "<redacted>"
    earlier       on `--resume`: the records of the earlier attempts, oldest last

Nothing here may fail a run: a missing or slow git (5 s per call), a package without
metadata or an odd hostname leave their field empty.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rayworks.platform.atomic import write_text_atomic

FILE_NAME = "provenance.json"
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the `rayworks` package's source folder
GIT_TIMEOUT_S = 5.0
# distribution names; a tuple lists alternatives (the first one installed is reported)
PACKAGES: tuple[str | tuple[str, ...], ...] = (
    "rayworks",
    "ray",
    "torch",
    "transformers",
    "tokenizers",
    "pyarrow",
    "numpy",
    "pydantic",
    "vllm",
    "deepspeed",
    "datatrove",
    ("lm_eval", "lm-eval"),
    ("mlflow", "mlflow-skinny"),
)
REDACTED = "<redacted>"
# a word of a key that marks its value as a secret (keys split at '.', '_' and '-') ...
SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "pwd"})
# ... unless the key only names where the secret is (api_key_file, hf_token_env)
REFERENCE_WORDS = frozenset({"file", "env", "path", "var"})
URL_PASSWORD = re.compile(r"(?P<head>://[^/@:\s]*:)[^/@\s]+@")


class GitState(BaseModel):
    commit: str | None = Field(description="HEAD of the checkout (None before a first commit)")
    dirty: bool = Field(description="tracked or untracked (not ignored) paths differ from HEAD")
    changed_files: int = Field(description="how many paths `git status --porcelain` lists")


class RayInfo(BaseModel):
    version: str | None
    cluster: Literal["local-embedded", "remote"]
    address: str | None = Field(None, description="the address joined, credentials removed")


class Provenance(BaseModel):
    """One process's record of what it ran and with what."""

    model_config = ConfigDict(extra="allow")  # `earlier` on resumed runs

    created_at: float
    rayworks: str | None
    git: GitState | None
    packages: dict[str, str]
    python: str
    platform: str
    hostname: str
    cwd: str
    ray: RayInfo
    command: list[str]
    command_line: str


# ----------------------------------------------------------------------- secrets
def is_secret_key(key: str) -> bool:
    """`api_key`, `reward.hf_token`, `--password`, `DB_SECRET`: yes; `api_key_file`,
    `tokenizer`, `max_tokens`: no."""
    words = [w for w in re.split(r"[._\-]+", key.strip("-").lower()) if w]
    return bool(words) and words[-1] not in REFERENCE_WORDS and bool(SECRET_WORDS & set(words))


def redact_value(text: str) -> str:
    """`text` with the password of any `scheme://user:password@host` URL replaced."""
    return URL_PASSWORD.sub(lambda m: f"{m['head']}{REDACTED}@", text)


def _redact_assignment(token: str) -> str:
    key, _, value = token.partition("=")
    if is_secret_key(key):
        return f"{key}={REDACTED}"
    if key.startswith("-") and "=" in value:  # --set=reward.api_key=...
        return f"{key}={_redact_assignment(value)}"
    return f"{key}={redact_value(value)}"


def redact_argv(argv: Sequence[str]) -> list[str]:
    """argv with secret values replaced: `--api-key V`, `--api-key=V`, `KEY=V` (as given
    to `--set` or `--env`) where the key looks like a secret, and URL passwords."""
    out: list[str] = []
    hide_next = False
    for token in argv:
        if hide_next and not token.startswith("-"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if "=" in token and not token.startswith("=") and " " not in token.partition("=")[0]:
            out.append(_redact_assignment(token))
        else:
            out.append(redact_value(token))
            hide_next = token.startswith("-") and is_secret_key(token)
    return out


def redact_address(address: str | None) -> str | None:
    """A Ray address without user:password or a query string (tokens ride in either)."""
    if not address:
        return None
    address = re.sub(r"://[^/@\s]*@", "://", address)
    return address.split("?", 1)[0]


# -------------------------------------------------------------------- collection
def _git(args: Sequence[str], cwd: Path) -> str | None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_OPTIONAL_LOCKS"] = "0"  # `status` must not take index.lock in a shared tree
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):  # no git, not a repo, too slow
        return None
    return done.stdout


def git_state(source_dir: Path = PACKAGE_DIR) -> GitState | None:
    """The commit and dirtiness of the checkout holding `source_dir`; None when it is not
    a tracked folder of a git checkout (an installed wheel, a copy, no git at all)."""
    if not source_dir.is_dir() or not _git(["ls-files", "--", "."], source_dir):
        return None  # untracked here: site-packages inside some other repository, say
    head = _git(["rev-parse", "--verify", "--quiet", "HEAD"], source_dir)
    status = _git(["status", "--porcelain", "--", ":/"], source_dir)
    changed = [line for line in (status or "").splitlines() if line.strip()]
    return GitState(
        commit=head.strip() if head else None, dirty=bool(changed), changed_files=len(changed)
    )


def _version(names: str | tuple[str, ...]) -> tuple[str, str] | None:
    for name in (names,) if isinstance(names, str) else names:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    """Installed versions of `PACKAGES`, by distribution name (absent ones left out)."""
    found = (_version(names) for names in PACKAGES)
    return dict(pair for pair in found if pair is not None)


def _or_empty(read: Callable[[], str]) -> str:
    try:
        return read()
    except OSError:
        return ""


def ray_info(address: str | None = None) -> RayInfo:
    address = address or os.environ.get("RAY_ADDRESS") or None
    version = _version("ray")
    return RayInfo(
        version=version[1] if version else None,
        cluster="remote" if address else "local-embedded",
        address=redact_address(address),
    )


def collect(
    command: Sequence[str] | None = None,
    address: str | None = None,
    source_dir: Path | None = None,
) -> Provenance:
    """This process's provenance; `command` defaults to sys.argv, `source_dir` (whose
    checkout gives the commit) to the rayworks package's folder."""
    from rayworks import __version__

    argv = redact_argv(list(sys.argv if command is None else command))
    return Provenance(
        created_at=time.time(),
        rayworks=package_versions().get("rayworks", __version__),
        git=git_state((source_dir or PACKAGE_DIR).resolve()),
        packages=package_versions(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        platform=platform.platform(),
        hostname=_or_empty(socket.gethostname),
        cwd=_or_empty(os.getcwd),  # raises when the working directory was deleted
        ray=ray_info(address),
        command=argv,
        command_line=shlex.join(argv),
    )


# ---------------------------------------------------------------------- files
def read(folder: str | Path) -> dict[str, Any] | None:
    """The provenance.json in `folder` as a dict, or None (absent or unreadable)."""
    path = Path(folder) / FILE_NAME
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write(folder: str | Path, record: Provenance | None = None) -> Path:
    """Write `record` (default: `collect()`) as `folder/provenance.json`, atomically. A
    record already there (a resumed run) moves into `earlier`, newest first."""
    record = record or collect()
    data = record.model_dump(mode="json")
    previous = read(folder)
    if previous is not None:
        data["earlier"] = [
            {k: v for k, v in previous.items() if k != "earlier"},
            *previous.get("earlier", []),
        ]
    path = Path(folder) / FILE_NAME
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path
