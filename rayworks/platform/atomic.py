"""Run files that are either whole or absent.

A kill (Ctrl-C, an OOM, a preempted node) can land in the middle of any write. A file or
folder that readers trust by its presence — config.yaml (what `--resume` reloads),
summary.json (what `bench --collect` reads), `artifacts/model` (what `serve` and
`resolve_model_dir` prefer over checkpoints) — is therefore written beside its final path
and renamed into place: `os.replace` is atomic on one filesystem, so a reader sees the old
version or the new one, never half of either.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _sibling(final: Path, tag: str) -> Path:
    return final.with_name(f".{final.name}.{tag}-{secrets.token_hex(4)}")


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, flush it to disk, rename it over
    `path`. A crash leaves `path` as it was (plus, at worst, a hidden `.name.tmp-*`)."""
    path = Path(path)
    tmp = _sibling(path, "tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_dir(final: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside `final`; when the block ends without an
    exception, it replaces `final` (an older `final` is moved aside, then removed). On an
    exception the temporary folder is removed and `final` is untouched."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(final, "tmp")
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = _sibling(final, "old") if final.exists() else None
    if old is not None:
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def save_model_dir(final: str | Path, *parts: object) -> Path:
    """`part.save_pretrained(folder)` for each part (a model, its tokenizer, ...) into a
    temporary folder renamed to `final`: a reader never finds a config.json beside
    half-written weights."""
    final = Path(final)
    with atomic_dir(final) as tmp:
        for part in parts:
            part.save_pretrained(tmp)  # type: ignore[attr-defined]
    return final
