"""The digit-subject benchmark: digits as "expressions", procedural "subjects" (our CPU
recipe; the whole construction is reconstructed).

Each subject is a fixed style: rotation, shear and scale (one affine map), stroke width
(grey erosion / none / dilation), gamma, an additive smooth texture and a **resting bias**:
the subject's neutral frames are blended `b ∈ bias_range` toward the subject's own expressive
template, so the neutral of some subjects looks partly expressive. That bias is the
personalisation signal a neutral-only adaptation can learn. Base images are split per class
50/50 into a source pool and a target pool (no base image is shared), and the target pool
again into an adaptation half (adaptation and oracle frames) and a test half.

Everything is a pure function of `world_seed` (and the subject's index): the same seed
renders the same arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import ndimage

STROKES = ("thin", "none", "thick")


@dataclass(frozen=True)
class Style:
    """One subject's fixed transform. `template` is its expressive base image [H, W]."""

    angle: float
    shear: float
    scale: float
    stroke: str
    gamma: float
    texture: np.ndarray
    bias: float
    template: np.ndarray


@dataclass
class Frames:
    """Images [N, 1, H, W] float32 in [0, 1], labels [N] int64 (0 = neutral)."""

    x: np.ndarray
    y: np.ndarray


@lru_cache(maxsize=4)
def base_images(classes: tuple[int, ...], size: int) -> tuple[np.ndarray, np.ndarray]:
    """sklearn's digits of `classes`, bilinearly upsampled to sizexsize in [0, 1];
    labels renumbered 0..k-1 in the order of `classes` (0 = neutral)."""
    from sklearn.datasets import load_digits

    raw = load_digits()
    keep = np.isin(raw.target, classes)
    imgs = ndimage.zoom(raw.images[keep] / 16.0, (1, size / 8, size / 8), order=1)
    relabel = {c: i for i, c in enumerate(classes)}
    return imgs.clip(0, 1).astype(np.float32), np.array([relabel[t] for t in raw.target[keep]])


def split_pools(y: np.ndarray, world_seed: int) -> dict[str, np.ndarray]:
    """Per class: half the base images to the source pool, a quarter each to the target's
    adaptation and test pools (disjoint index sets into the base images)."""
    rng = np.random.default_rng([world_seed, 7])
    pools: dict[str, list[np.ndarray]] = {"source": [], "adapt": [], "test": []}
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        half, three = len(idx) // 2, (3 * len(idx)) // 4
        pools["source"].append(idx[:half])
        pools["adapt"].append(idx[half:three])
        pools["test"].append(idx[three:])
    return {k: np.sort(np.concatenate(v)) for k, v in pools.items()}


def draw_style(
    data: dict[str, Any],
    rng: np.random.Generator,
    imgs: np.ndarray,
    labels: np.ndarray,
    pool: np.ndarray,
    bias_key: str,
) -> Style:
    """A subject's style; the expressive template is one base image from its own pool and
    the resting bias is drawn from `data[bias_key]`."""
    size = imgs.shape[-1]
    noise = ndimage.gaussian_filter(rng.standard_normal((size, size)), data["texture_sigma"])
    texture = noise / max(np.abs(noise).max(), 1e-8) * rng.uniform(*data["texture_range"])
    expressive = pool[labels[pool] == rng.integers(1, labels.max() + 1)]
    log_gamma = rng.uniform(*np.log(data["gamma_range"]))
    return Style(
        angle=float(rng.uniform(-1, 1) * data["max_rotation"]),
        shear=float(rng.uniform(-1, 1) * data["max_shear"]),
        scale=float(rng.uniform(*data["scale_range"])),
        stroke=STROKES[int(rng.integers(0, 3))],
        gamma=float(np.exp(log_gamma)),
        texture=texture.astype(np.float32),
        bias=float(rng.uniform(*data[bias_key])),
        template=imgs[rng.choice(expressive)],
    )


def render(
    base: np.ndarray,
    labels: np.ndarray,
    style: Style,
    rng: np.random.Generator,
    shift: int,
    noise: float,
) -> np.ndarray:
    """Render base images [N, H, W] (labels [N]) in `style` -> [N, 1, H, W] in [0, 1].

    Order: resting bias (neutral only) -> affine about the centre (+ per-frame shift) ->
    stroke -> gamma -> texture -> per-frame noise."""
    n, size = base.shape[0], base.shape[-1]
    x = np.where(
        (labels == 0)[:, None, None], (1 - style.bias) * base + style.bias * style.template, base
    )
    a, s = np.deg2rad(style.angle), style.shear
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    inv = np.linalg.inv(rot @ np.array([[1.0, s], [0.0, 1.0]]) * style.scale)  # output->input
    c = (size - 1) / 2
    grid = np.stack(np.meshgrid(np.arange(size), np.arange(size), indexing="ij")).reshape(2, -1)
    jitter = rng.integers(-shift, shift + 1, (n, 2, 1)) if shift else np.zeros((n, 2, 1))
    src = (inv @ (grid - c))[None] + c - jitter  # (N, 2, H·W)
    coords = np.concatenate(
        [np.repeat(np.arange(n), size * size)[None], src.transpose(1, 0, 2).reshape(2, -1)]
    )
    x = ndimage.map_coordinates(x, coords, order=1, cval=0.0).reshape(n, size, size)
    if style.stroke != "none":
        morph = ndimage.grey_dilation if style.stroke == "thick" else ndimage.grey_erosion
        x = morph(x, size=(1, 2, 2))
    x = x.clip(0, 1) ** style.gamma + style.texture
    x = x + noise * rng.standard_normal(x.shape)
    return x.clip(0, 1).astype(np.float32)[:, None]


def _sample(
    pool: np.ndarray, labels: np.ndarray, per_class: dict[int, int], rng: np.random.Generator
) -> np.ndarray:
    """`per_class[c]` distinct base indices of class c from `pool`."""
    out = [rng.choice(pool[labels[pool] == c], k, replace=False) for c, k in per_class.items()]
    return np.concatenate(out)


def check_sizes(data: dict[str, Any], oracle_per_class: int) -> None:
    """Fail before any work when a pool is too small for the frames asked (names the key)."""
    _, labels = base_images(tuple(data["classes"]), data["image_size"])
    pools = split_pools(labels, data["world_seed"])
    asks = {
        "source": ("data.source_frames_per_class", data["source_frames_per_class"]),
        "adapt": (
            "data.adapt_frames / adapt.oracle_frames_per_class",
            max(data["adapt_frames"], oracle_per_class),
        ),
        "test": ("data.test_frames_per_class", data["test_frames_per_class"]),
    }
    for pool, (key, want) in asks.items():
        have = int(np.bincount(labels[pools[pool]]).min())
        if want > have:
            raise ValueError(f"{key}={want} exceeds the {pool} pool ({have} images per class)")


def _subject(data: dict[str, Any], subject: int, pool: str) -> tuple[Any, ...]:
    """(rng, style, base images, labels, pools) of subject index `subject` (source subjects
    are 0..n_source-1, target subject t is n_source + t); the rng continues into its frames."""
    imgs, labels = base_images(tuple(data["classes"]), data["image_size"])
    pools = split_pools(labels, data["world_seed"])
    rng = np.random.default_rng([data["world_seed"], subject])
    bias_key = "source_bias_range" if pool == "source" else "bias_range"
    style = draw_style(data, rng, imgs, labels, pools[pool], bias_key)
    return rng, style, imgs, labels, pools


def _frames(
    data: dict[str, Any],
    idx: np.ndarray,
    imgs: np.ndarray,
    labels: np.ndarray,
    style: Style,
    rng: np.random.Generator,
) -> Frames:
    x = render(imgs[idx], labels[idx], style, rng, data["frame_shift"], data["frame_noise"])
    return Frames(x, labels[idx])


def source_frames(data: dict[str, Any]) -> tuple[Frames, np.ndarray]:
    """Labelled frames of every source subject and their subject index [N]."""
    k = len(data["classes"])
    xs, ys, ss = [], [], []
    for s in range(data["n_source_subjects"]):
        rng, style, imgs, labels, pools = _subject(data, s, "source")
        per_class = dict.fromkeys(range(k), data["source_frames_per_class"])
        f = _frames(
            data, _sample(pools["source"], labels, per_class, rng), imgs, labels, style, rng
        )
        xs.append(f.x), ys.append(f.y), ss.append(np.full(len(f.y), s))
    return Frames(np.concatenate(xs), np.concatenate(ys)), np.concatenate(ss)


@dataclass
class TargetSubject:
    """One target subject: `adapt` (unlabelled neutral frames; labels kept for checks),
    `oracle` (labelled frames of every class from the adaptation pool), `test`, `style`."""

    adapt: Frames
    oracle: Frames
    test: Frames
    style: Style


def held_out_subjects(data: dict[str, Any]) -> int:
    """How many subjects a run adapts: the test subjects or, with `split="val"`, the
    validation subjects."""
    return (
        data["n_val_subjects"] if data.get("split", "test") == "val" else data["n_target_subjects"]
    )


def target_subject(data: dict[str, Any], t: int, oracle_per_class: int) -> TargetSubject:
    """Held-out subject t (0-based) rendered from the target pools only: test subject t is
    subject n_source + t; validation subject t (`split="val"`) is n_source + n_target + t,
    another style and resting bias, so choosing a knob on it never touches a test subject."""
    k = len(data["classes"])
    index = data["n_source_subjects"] + t
    if data.get("split", "test") == "val":
        index += data["n_target_subjects"]
    rng, style, imgs, labels, pools = _subject(data, index, "adapt")
    adapt = _frames(
        data,
        _sample(pools["adapt"], labels, {0: data["adapt_frames"]}, rng),
        imgs,
        labels,
        style,
        rng,
    )
    oracle = _frames(
        data,
        _sample(pools["adapt"], labels, dict.fromkeys(range(k), oracle_per_class), rng),
        imgs,
        labels,
        style,
        rng,
    )
    test = _frames(
        data,
        _sample(pools["test"], labels, dict.fromkeys(range(k), data["test_frames_per_class"]), rng),
        imgs,
        labels,
        style,
        rng,
    )
    return TargetSubject(adapt, oracle, test, style)
