"""Units of work, completion markers and atomic folder writes: what makes a corpus run
resumable (`rayworks run corpus --resume RUN_DIR`) without duplicating or losing rows.

The input files are cut into *units*: consecutive files (sorted by path) whose sizes add up
to at least `unit_bytes`. Each unit is read, scored and written on its own; its parquet
lands in a temporary folder that is renamed into place (a rename within one file system is
atomic), and only then is its marker `units/<unit>.json` written. So after a kill a unit is
either complete with a marker, or absent (a leftover `*.tmp` folder or an unmarked folder is
deleted at the next start). This is DataTrove's per-rank completion marker, applied to
units of input files rather than to ranks.

The plan (which files make which unit) is written once, as `plan.json`; a resumed run must
see the same input files or it stops with an error naming the difference, because a
marker would otherwise vouch for rows of files it never read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rayworks.errors import RayworksError


@dataclass(frozen=True)
class Unit:
    """`name` (`unit-00003`) and the input files it covers, in path order."""

    name: str
    files: tuple[str, ...]
    bytes: int


def plan_units(paths: list[str], unit_bytes: int) -> list[Unit]:
    """Sorted `paths` cut into units of at least `unit_bytes` (the last may be smaller)."""
    if unit_bytes <= 0:
        raise RayworksError(f"unit_bytes must be > 0, got {unit_bytes}.")
    units: list[Unit] = []
    files: list[str] = []
    size = 0
    for path in sorted(paths):
        files.append(path)
        size += os.path.getsize(path)
        if size >= unit_bytes:
            units.append(Unit(f"unit-{len(units):05d}", tuple(files), size))
            files, size = [], 0
    if files:
        units.append(Unit(f"unit-{len(units):05d}", tuple(files), size))
    return units


def plan_digest(units: list[Unit]) -> str:
    """A hash of the plan: unit names, files and sizes."""
    blob = json.dumps([asdict(u) for u in units], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class WorkDir:
    """The run's `work/` folder: `plan.json`, per-unit markers and per-unit parquet."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.markers = root / "units"

    def adopt(self, units: list[Unit]) -> list[Unit]:
        """Write the plan, or check it against the one a killed run left; clean up
        partial writes; return the units that still have to run."""
        self.markers.mkdir(parents=True, exist_ok=True)
        plan_path = self.root / "plan.json"
        digest = plan_digest(units)
        if plan_path.exists():
            old = json.loads(plan_path.read_text())
            if old["digest"] != digest:
                raise RayworksError(
                    f"cannot resume: the input files differ from the run's plan {plan_path} "
                    f"({old['units']} units, digest {old['digest']}; now {len(units)} units, "
                    f"digest {digest}). Start a new run for new inputs."
                )
        else:
            plan_path.write_text(json.dumps(
                {"digest": digest, "units": len(units), "plan": [asdict(u) for u in units]},
                indent=1))  # fmt: skip
        for tmp in self.root.rglob("*.tmp"):
            shutil.rmtree(tmp, ignore_errors=True)
        return [u for u in units if not self.done(u)]

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


def atomic_dir(final: Path) -> Path:
    """A fresh `<final>.tmp` folder to write into before `commit_dir`."""
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def commit_dir(tmp: Path, final: Path) -> None:
    """Replace `final` by `tmp` (an older `final`, from a killed run, is removed first)."""
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
