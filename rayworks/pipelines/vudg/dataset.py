"""VUDG-mini on disk: generate every (domain, split) clip, annotate it, write the folder.

Format (documented in docs/vudg.md and in the folder's FORMAT.md):

    <dir>/videos/<clip_id>.npy    uint8 (T, H, W, 3) clip, RGB
    <dir>/annotations.jsonl       one question per line: id, clip, domain, split, type,
                                  question, options (6 strings), option_values, answer
                                  (index 0-5), label_ok (final audit), scene_graph
    <dir>/annotation_report.json  residual label errors per stage, E3-het vs E3-self
    <dir>/manifest.json           settings, counts per domain/split/type

Clip ids are `<domain>-<split>-<index>`; question ids `<clip_id>-<type>`. Items the
humans deleted are absent (their count is in the report). The folder is built once per
settings under the run's cache root and shared by every run and bench arm.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from rayworks.core.build_cache import locked_build, settings_digest
from rayworks.pipelines.vudg.annotate import (
    QUESTION,
    TYPES,
    annotate_clip,
    option_text,
    stage_report,
)
from rayworks.pipelines.vudg.config import DOMAINS
from rayworks.pipelines.vudg.domains import render
from rayworks.pipelines.vudg.scene import SceneGraph, render_layers, sample_scene

SPLITS = ("train", "test")
FORMAT = (__doc__ or "").split("Format", 1)[1].split("Clip ids")[0]


def clip_rng(seed: int, domain: str, split: str, index: int) -> np.random.Generator:
    """Every clip's own stream: identical whichever subset of domains is generated."""
    return np.random.default_rng([seed, DOMAINS.index(domain), SPLITS.index(split), index])


def render_clip(
    sg: SceneGraph, domain: str, frames: int, size: int, rng: np.random.Generator
) -> np.ndarray:
    """The scene graph rendered in `domain`: uint8 (T, H, W, 3)."""
    return render(domain, *render_layers(sg, frames, size), rng)


def question_rows(
    clip_id: str, domain: str, split: str, sg: SceneGraph, items: list
) -> list[dict[str, Any]]:
    """The annotations.jsonl rows of one clip (deleted items left out)."""
    return [
        {
            "id": f"{clip_id}-{it.qtype}",
            "clip": clip_id,
            "domain": domain,
            "split": split,
            "type": it.qtype,
            "question": QUESTION[it.qtype].format(shape=sg.shape),
            "options": [option_text(v) for v in it.options],
            "option_values": it.options,
            "answer": it.answer,
            "label_ok": bool(it.history["final"]),
            "scene_graph": sg.to_json(),
        }
        for it in items
        if it.status != "deleted"
    ]


def _report(het: list, slf: list) -> dict[str, Any]:
    by_type = {
        t: {
            "het": stage_report([i for i in het if i.qtype == t]),
            "self": stage_report([i for i in slf if i.qtype == t]),
        }
        for t in TYPES
    }
    return {"het": stage_report(het), "self": stage_report(slf), "by_type": by_type}


def write_dataset(folder: Path, data: dict[str, Any], ann: dict[str, Any], seed: int) -> None:
    """Generate, annotate and write the whole dataset into `folder` (created)."""
    (folder / "videos").mkdir(parents=True)
    rows, het, slf = [], [], []
    for domain in data["domains"]:
        for split in SPLITS:
            for i in range(data[f"n_{split}"]):
                rng = clip_rng(seed, domain, split, i)
                scene_rng, render_rng, ann_rng = rng.spawn(3)
                sg = sample_scene(scene_rng, data["frames"])
                clip_id = f"{domain}-{split}-{i}"
                video = render_clip(sg, domain, data["frames"], data["size"], render_rng)
                np.save(folder / "videos" / f"{clip_id}.npy", video)
                result = annotate_clip(sg, ann, ann_rng)
                het += result.het
                slf += result.self
                rows += question_rows(clip_id, domain, split, sg, result.het)
    with (folder / "annotations.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    (folder / "annotation_report.json").write_text(json.dumps(_report(het, slf), indent=2))
    counts = Counter(f"{r['domain']}/{r['split']}/{r['type']}" for r in rows)
    manifest = {
        "data": data,
        "annotation": ann,
        "seed": seed,
        "questions": len(rows),
        "clips": len(data["domains"]) * (data["n_train"] + data["n_test"]),
        "counts": dict(sorted(counts.items())),
    }
    (folder / "FORMAT.md").write_text("# VUDG-mini dataset format\n" + FORMAT)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))


def cached_dataset(cache_root: Path, data: dict[str, Any], ann: dict[str, Any], seed: int) -> Path:
    """The dataset folder for these settings, built once under `<cache>/vudg/data-<hash>`."""
    key = settings_digest({"data": data, "annotation": ann, "seed": seed, "format": 1})
    folder = cache_root / "vudg" / f"data-{key}"

    def build() -> None:
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        write_dataset(tmp, data, ann, seed)
        tmp.rename(folder)

    return locked_build(folder, folder / "manifest.json", build)


def read_annotations(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "annotations.jsonl").read_text().splitlines()]


def load_clips(folder: Path, clip_ids: list[str]) -> np.ndarray:
    """uint8 (N, T, H, W, 3) for the given clip ids, in order."""
    return np.stack([np.load(folder / "videos" / f"{c}.npy") for c in clip_ids])
