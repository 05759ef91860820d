"""Build-once artifacts shared by runs: a folder per content hash, guarded by a file lock.

A trained base model, a response pool or a local corpus is a pure function of its
settings, so it is built once under `<cache root>/<kind>/<name>-<hash>/` and every arm and
seed of a bench (and every later run) reuses the very same files. Concurrent callers wait
on a lock file beside the folder while the first one builds.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def digest(blob: str) -> str:
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def settings_digest(settings: Any) -> str:
    """`digest` of a JSON-able value (sorted keys, so dict order never changes the key)."""
    return digest(json.dumps(settings, sort_keys=True, default=str))


def locked_build(folder: Path, done: Path, build: Callable[[], None]) -> Path:
    """Run `build()` once for `folder` (it must create `done`); concurrent callers wait on a
    file lock beside the folder and reuse what the first one built."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            build()
    return folder
