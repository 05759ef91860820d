"""Units of work, completion markers and atomic folder writes: what makes a corpus run
resumable (`rayworks run corpus --resume RUN_DIR`) without duplicating or losing rows.

The input files are cut into *units* of about `unit_bytes` of input: consecutive small
files (sorted by path) grouped until their sizes add up to `unit_bytes`, and a large file
cut into pieces (`split_file`): a jsonl(.gz) file into ranges of its uncompressed bytes
(a line belongs to the piece its first byte lies in), a parquet file into runs of row
groups. A unit is the work of one task of the scoring stage and the grain of `--resume`,
so units of a few MB keep every actor busy (a heavy last file is shared out) and a kill
redoes little. Each unit is read, scored and written on its own; its parquet lands in a
temporary folder that is renamed into place (a rename within one file system is atomic),
and only then is its marker `units/<unit>.json` written. So after a kill a unit is either
complete with a marker, or absent (a leftover temporary folder or an unmarked folder is
deleted at the next start). This is DataTrove's per-rank completion marker, applied to
units of input rather than to ranks.

The plan (which files make which unit, and the settings the units are scored under) is
written once, as `plan.json`; a resumed run must see the same input files and the same
settings, or it stops with an error naming the difference, because a marker would
otherwise vouch for rows of files it never read, or mix rows scored under two settings
(say two Gopher word floors, or two MinHash shapes whose signatures never compare) in one
output. The settings are what the runner passes: the config fields that change scored
rows, and the pipeline version (`CorpusConfig.resume_settings`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus import storage

MAX_PIECES = 1024
"""Pieces one file is cut into at most (a gzip size field that lies cannot explode a plan)."""
MIN_PIECE_BYTES = 2**20
"""A file is cut into pieces of at least this many bytes, whatever `unit_bytes` says."""


@dataclass(frozen=True)
class Unit:
    """`name` (`unit-00003`) and the input files it covers, in path order; `bytes` is its
    share of the input as stored (for MB/s). A piece of one large file has `stop` set: the
    rows of `files[0]` whose position is in `[start, stop)` (jsonl: uncompressed byte
    offsets of a line's first byte, `stop` -1 = to the end; parquet: row-group indices)."""

    name: str
    files: tuple[str, ...]
    bytes: int
    start: int = 0
    stop: int | None = None

    @property
    def index(self) -> int:
        """The unit's number in the plan (`unit-00003` -> 3)."""
        return int(self.name.rsplit("-", 1)[1])


def gzip_size(path: str) -> int:
    """A gzip file's uncompressed size from its trailer (ISIZE, modulo 2**32: a lie for
    files over 4 GiB or of several members, which only changes how finely it is cut)."""
    with storage.open_input(path) as f:
        f.seek(-4, os.SEEK_END)
        return struct.unpack("<I", f.read(4))[0]


def _parquet_groups(path: str) -> list[int]:
    """Bytes of each row group of a parquet file ([] when its footer cannot be read: the
    reader then rejects the file as a whole)."""
    import pyarrow.parquet as pq

    try:
        with storage.open_input(path) as f:
            meta = pq.ParquetFile(f).metadata
    except Exception:
        return []
    return [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]


def input_bytes(path: str, size: int, fmt: str) -> int:
    """What a unit's size counts: the bytes a reader parses (a jsonl .gz: uncompressed)."""
    if fmt == "jsonl" and path.lower().endswith(".gz") and size >= 18:
        raw = gzip_size(path)
        return raw if raw >= size else size  # a size field that cannot be right: stored size
    return size


def split_file(path: str, size: int, fmt: str, unit_bytes: int) -> list[tuple[int, int, int]]:
    """`(start, stop, stored bytes)` pieces of one file larger than `unit_bytes`, else `[]`
    (the file is grouped whole with its neighbours). `size` is its `input_bytes`."""
    piece = max(unit_bytes, MIN_PIECE_BYTES)
    if size <= piece:
        return []
    stored = storage.size(path)
    if fmt == "jsonl":
        k = min(MAX_PIECES, math.ceil(size / piece))
        cuts = [round(i * size / k) for i in range(k)]
        stops = [*cuts[1:], -1]
        return [(a, b, stored // k) for a, b in zip(cuts, stops, strict=True)]
    if fmt == "parquet":
        groups = _parquet_groups(path)
        pieces, first, acc = [], 0, 0
        for i, nbytes in enumerate(groups):
            acc += nbytes
            if acc >= piece and i + 1 < len(groups):
                pieces.append((first, i + 1))
                first, acc = i + 1, 0
        if not pieces:
            return []
        pieces.append((first, len(groups)))
        return [(a, b, stored * (b - a) // len(groups)) for a, b in pieces]
    return []


def plan_units(paths: list[str], unit_bytes: int, fmt: str = "files") -> list[Unit]:
    """Sorted `paths` cut into units of about `unit_bytes` of `input_bytes`: small files
    grouped (a group closes once it holds `unit_bytes`), a jsonl or parquet file larger
    than `unit_bytes` and `MIN_PIECE_BYTES` cut into pieces (`split_file`; other formats
    are one document per file and never cut). A unit's `bytes` is its stored size."""
    if unit_bytes <= 0:
        raise RayworksError(f"unit_bytes must be > 0, got {unit_bytes}.")
    units: list[Unit] = []
    files: list[str] = []
    size = stored_sum = 0

    def close() -> None:
        nonlocal files, size, stored_sum
        if files:
            units.append(Unit(f"unit-{len(units):05d}", tuple(files), stored_sum))
            files, size, stored_sum = [], 0, 0

    for path in sorted(paths):
        stored = storage.size(path)
        nbytes = input_bytes(path, stored, fmt)
        pieces = split_file(path, nbytes, fmt, unit_bytes)
        if pieces:
            close()
            for start, stop, share in pieces:
                units.append(Unit(f"unit-{len(units):05d}", (path,), share, start, stop))
            continue
        files.append(path)
        size += nbytes
        stored_sum += stored
        if size >= unit_bytes:
            close()
    close()
    return units


def plan_digest(units: list[Unit], settings: Mapping[str, Any]) -> str:
    """A hash of the plan: unit names, files and sizes, and the settings."""
    blob = json.dumps(
        {"units": [asdict(u) for u in units], "settings": settings}, sort_keys=True, default=str
    ).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _dotted(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested settings -> {"a.b": leaf}."""
    if not isinstance(tree, Mapping):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out |= _dotted(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def setting_differences(was: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """`key: old -> new` for every dotted key whose value differs (absent on one side
    included), sorted by key."""
    old, new = (_dotted(json.loads(json.dumps(x, default=str))) for x in (was, now))
    differ = sorted(k for k in old.keys() | new.keys() if old.get(k, ...) != new.get(k, ...))
    return [f"{k}: {old.get(k, '(absent)')!r} -> {new.get(k, '(absent)')!r}" for k in differ]


class WorkDir:
    """The run's `work/` folder: `plan.json`, per-unit markers and per-unit parquet
    (`work/scored/<unit>`). `outputs` are further folders that hold one `<unit>` folder
    per unit (the runner's `rejects/`), cleaned up alike when a unit has no marker."""

    def __init__(self, root: Path, outputs: Sequence[Path] = ()) -> None:
        self.root = root
        self.markers = root / "units"
        self.unit_parents = (root / "scored", *outputs)

    def adopt(self, units: list[Unit], settings: Mapping[str, Any]) -> list[Unit]:
        """Write the plan, or check it against the one a killed run left (the same
        settings, then the same files, else RayworksError naming what differs); delete
        partial writes (`*.tmp`) and the folders of every unit without a marker; return
        the units that still have to run."""
        self.markers.mkdir(parents=True, exist_ok=True)
        plan_path = self.root / "plan.json"
        digest = plan_digest(units, settings)
        if plan_path.exists():
            self._check(json.loads(plan_path.read_text()), plan_path, units, settings, digest)
        else:
            plan = {
                "digest": digest,
                "units": len(units),
                "settings": settings,
                "plan": [asdict(u) for u in units],
            }
            plan_path.write_text(json.dumps(plan, indent=1, sort_keys=True, default=str))
        todo = [u for u in units if not self.done(u)]
        for parent in self.unit_parents:
            for stale in [*parent.glob(".*.tmp-*"), *(parent / u.name for u in todo)]:
                shutil.rmtree(stale, ignore_errors=True)
        for tmp in [*self.root.rglob(".*.tmp-*"), *self.root.rglob(".*.old-*")]:
            shutil.rmtree(tmp, ignore_errors=True)
        for part in self.markers.glob("*.part"):  # a marker killed while being written
            part.unlink()
        return todo

    @staticmethod
    def _check(
        old: dict, plan_path: Path, units: list[Unit], settings: Mapping[str, Any], digest: str
    ) -> None:
        """Raise unless the recorded plan is this one; name the settings that differ."""
        if "settings" not in old:
            raise RayworksError(
                f"cannot resume: the run's plan {plan_path} records no settings (written by "
                "an older rayworks), so its units may have been scored differently. Start a "
                "new run."
            )
        if old["digest"] == digest:
            return
        differ = setting_differences(old["settings"], settings)
        if differ:
            raise RayworksError(
                f"cannot resume: the settings differ from the run's plan {plan_path} "
                f"({'; '.join(differ)}); its finished units were scored under the old ones. "
                "Resume without changing them, or start a new run for the new settings."
            )
        raise RayworksError(
            f"cannot resume: the input files differ from the run's plan {plan_path} "
            f"({old['units']} units, digest {old['digest']}; now {len(units)} units, "
            f"digest {digest}). Start a new run for new inputs."
        )

    def done(self, unit: Unit) -> bool:
        return (self.markers / f"{unit.name}.json").exists()

    def finish(self, unit: Unit, counts: dict[str, Any]) -> None:
        """The unit's marker, written after its folders are in place."""
        marker = self.markers / f"{unit.name}.json"
        tmp = marker.with_suffix(".json.part")
        tmp.write_text(json.dumps({"files": list(unit.files), **counts}, sort_keys=True))
        tmp.replace(marker)

    def counts(self) -> list[dict[str, Any]]:
        """Every finished unit's marker."""
        return [json.loads(p.read_text()) for p in sorted(self.markers.glob("*.json"))]
