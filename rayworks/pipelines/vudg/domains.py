"""The 11 VUDG domain renderers (the paper's three shifts: visual style, viewpoint, environment).

Each renderer maps the canonical layers of one clip (rgb (T, H, W, 3) float in [0, 1],
foreground mask (T, H, W), sprite centre (T, 2) px) and a seeded Generator to the domain's
rgb clip. The transforms follow our VUDG-mini recipe (reconstructed); none reads the
scene graph, so a domain changes pixels only, never meaning.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Renderer = Callable[[np.ndarray, np.ndarray, np.ndarray, np.random.Generator], np.ndarray]


def _resample(rgb: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """Nearest-neighbour lookup rgb[t, ys[t], xs[t]] with per-frame index maps (T, H, W)."""
    t = np.arange(len(rgb))[:, None, None]
    h, w = rgb.shape[1:3]
    return rgb[t, np.clip(ys, 0, h - 1), np.clip(xs, 0, w - 1)]


def _block(rgb: np.ndarray, k: int) -> np.ndarray:
    """Average kxk blocks and repeat them back (pixelation / low resolution)."""
    t, h, w, c = rgb.shape
    hk, wk = h // k * k, w // k * k
    small = rgb[:, :hk, :wk].reshape(t, hk // k, k, wk // k, k, c).mean((2, 4))
    out = rgb.copy()
    out[:, :hk, :wk] = small.repeat(k, 1).repeat(k, 2)
    return out


def cartoon(rgb, fg, centre, rng):
    """Flat colours (3 levels per channel) + black edges where the flat image changes."""
    flat = np.round(rgb * 2) / 2
    grad = np.abs(np.diff(flat, axis=1, prepend=flat[:, :1])).sum(-1) + np.abs(
        np.diff(flat, axis=2, prepend=flat[:, :, :1])
    ).sum(-1)
    return np.where((grad > 0.4)[..., None], 0.0, flat)


def game(rgb, fg, centre, rng):
    """Pixelate x4 (recipe) at 32 px; the block is size // 8 at other sizes."""
    return _block(rgb, max(2, rgb.shape[1] // 8))


def movie(rgb, fg, centre, rng):
    """Warm colour table, film grain and a letterbox (black bars, 1/8 of the height)."""
    out = np.clip(rgb * np.array([1.12, 1.0, 0.8]) + 0.03, 0, 1)
    out = out + rng.normal(0, 0.06, out.shape)
    bar = rgb.shape[1] // 8
    out[:, :bar], out[:, -bar:] = 0.0, 0.0
    return out


def virtual(rgb, fg, centre, rng):
    """Neon diagonal gradient (magenta → cyan, drifting over time) behind the foreground."""
    t, h, w, _ = rgb.shape
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    phase = (xx + yy)[None] + np.linspace(0, 0.5, t)[:, None, None]
    a = 0.5 + 0.5 * np.sin(2 * np.pi * phase)[..., None]
    neon = a * np.array([1.0, 0.1, 0.9]) + (1 - a) * np.array([0.1, 1.0, 0.9])
    return fg[..., None] * rgb + (1 - fg[..., None]) * neon * 0.8


def first_person(rgb, fg, centre, rng):
    """Crop a window of 5/8 of the frame around the sprite's start and zoom it back (the
    camera follows the agent's view, so later motion can leave the window)."""
    t, h, w, _ = rgb.shape
    side = round(h * 5 / 8)
    x0 = int(np.clip(centre[0, 0] - side / 2, 0, w - side))
    y0 = int(np.clip(centre[0, 1] - side / 2, 0, h - side))
    idx = (np.arange(h) * side / h).astype(int)
    ys = np.broadcast_to((y0 + idx)[None, :, None], (t, h, w))
    xs = np.broadcast_to((x0 + idx)[None, None, :], (t, h, w))
    return _resample(rgb, ys, xs)


def surveillance(rgb, fg, centre, rng):
    """Top-down tilt (rows compressed toward the top, far rows narrower), half resolution,
    grey tint and a blinking timestamp block in the top-left corner."""
    t, h, w, _ = rgb.shape
    v = np.arange(h) / (h - 1)
    src_y = ((v**0.7) * (h - 1)).astype(int)  # more source rows near the top
    squeeze = 0.7 + 0.3 * v  # far (top) rows see a wider strip of the scene
    u = (np.arange(w) - w / 2)[None, :] / squeeze[:, None] + w / 2
    ys = np.broadcast_to(src_y[None, :, None], (t, h, w))
    xs = np.broadcast_to(u.astype(int)[None], (t, h, w))
    out = _block(_resample(rgb, ys, xs), 2)
    out = 0.6 * out + 0.4 * out.mean(-1, keepdims=True)
    bits = (np.arange(t)[:, None] >> np.arange(6)[None, :]) & 1  # frame counter, 6 bits
    stamp = np.repeat(bits, 2, axis=1)[:, None, :, None].astype(float)
    out[:, 1:3, 1 : 1 + stamp.shape[2]] = np.broadcast_to(stamp, (t, 2, stamp.shape[2], 3))
    return out


def shaking(rgb, fg, centre, rng):
    """Hand-held camera: every frame shifted by a random integer offset in ±3 px (recipe)."""
    t, h, w, _ = rgb.shape
    amp = max(1, round(3 * h / 32))
    dy, dx = rng.integers(-amp, amp + 1, size=(2, t))
    ys = np.arange(h)[None, :, None] + dy[:, None, None]
    xs = np.arange(w)[None, None, :] + dx[:, None, None]
    return _resample(rgb, np.broadcast_to(ys, (t, h, w)), np.broadcast_to(xs, (t, h, w)))


def fog(rgb, fg, centre, rng):
    """Haze: blend 0.5 (recipe) with light grey, denser toward the top (far)."""
    h = rgb.shape[1]
    density = 0.5 + 0.15 * (1 - np.arange(h) / (h - 1))[None, :, None, None] - 0.075
    return (1 - density) * rgb + density * 0.85


def night(rgb, fg, centre, rng):
    """Dark: gamma 2.5 (recipe), blue cast and sensor noise."""
    out = rgb**2.5 * np.array([0.8, 0.85, 1.1])
    return out + rng.normal(0, 0.04, rgb.shape)


def rain(rgb, fg, centre, rng):
    """Slanted light streaks (new per frame) and a slight darkening."""
    t, h, w, _ = rgb.shape
    seeds = rng.random((t, h, w)) < 0.02
    streak = np.zeros((t, h, w))
    for k in range(4):  # each seed drawn as a 4-px streak going down-left
        streak = np.maximum(streak, np.roll(np.roll(seeds, k, axis=1), -k // 2, axis=2))
    out = rgb * 0.85
    return np.where(streak[..., None] > 0, 0.6 * out + 0.4 * np.array([0.8, 0.85, 0.95]), out)


def snow(rgb, fg, centre, rng):
    """White flakes (1-2 px, falling between frames) over a whitened, low-contrast scene."""
    t, h, w, _ = rgb.shape
    flakes0 = rng.random((h, w)) < 0.06
    fall = rng.integers(1, 3)
    flakes = np.stack([np.roll(flakes0, i * fall, axis=0) for i in range(t)])
    flakes = flakes | np.roll(flakes, 1, axis=2) & (rng.random((t, h, w)) < 0.5)
    out = 0.75 * rgb + 0.25 * 0.9
    return np.where(flakes[..., None], 0.97, out)


RENDERERS: dict[str, Renderer] = {
    "cartoon": cartoon,
    "game": game,
    "movie": movie,
    "virtual": virtual,
    "first_person": first_person,
    "surveillance": surveillance,
    "shaking": shaking,
    "fog": fog,
    "night": night,
    "rain": rain,
    "snow": snow,
}


def render(
    domain: str, rgb: np.ndarray, fg: np.ndarray, centre: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """The domain's clip as uint8 (T, H, W, 3)."""
    out = RENDERERS[domain](rgb, fg, centre, rng)
    return (np.clip(out, 0, 1) * 255 + 0.5).astype(np.uint8)
