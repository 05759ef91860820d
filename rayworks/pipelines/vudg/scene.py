"""VUDG-mini scene graphs and their canonical (domain-free) rendering, in numpy.

The paper keeps semantics fixed across domains by filtering real videos to one list of
daily-activity scenes (its construction step 1). VUDG-mini gets the same property
by construction (reconstructed): a clip's meaning is a `SceneGraph` (sprite shape and
colour, a small object, two distinct actions in order); every domain renders the same
graph through `render_layers` and then its own pixel transform (`domains.py`), so the
questions and answers depend only on the graph.

Actions (recipe): move left/right/up/down, grow, shrink, spin, pick up or drop the object.
Each action fills T/2 frames; frame t shows action t // (T/2) at progress (j+1)/(T/2).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

SHAPES = ("circle", "square", "triangle", "star")
COLOURS = {
    "red": (0.9, 0.15, 0.15),
    "green": (0.15, 0.75, 0.2),
    "blue": (0.2, 0.3, 0.95),
    "yellow": (0.95, 0.85, 0.1),
    "magenta": (0.85, 0.2, 0.8),
    "cyan": (0.1, 0.8, 0.85),
}
OBJECTS = {
    "key": (0.85, 0.7, 0.2),
    "ball": (1.0, 0.5, 0.1),
    "box": (0.5, 0.3, 0.1),
    "cup": (1.0, 1.0, 1.0),
    "ring": (0.6, 0.6, 0.65),
    "flag": (0.1, 0.1, 0.1),
}
ACTIONS = ("left", "right", "up", "down", "grow", "shrink", "spin", "pick_up", "drop")
MOVES = {"left": (-1, 0), "right": (1, 0), "up": (0, -1), "down": (0, 1)}
MOVE_PX = 8 / 32  # full move, as a fraction of the frame width
SCALES = {"grow": 1.6, "shrink": 0.6}
SPIN = 1.5 * np.pi  # rotation of one full spin action (radians)
RADIUS = 5 / 32  # sprite radius, fraction of the frame width
BACKGROUND_SKY, BACKGROUND_GROUND = (0.62, 0.7, 0.8), (0.55, 0.5, 0.42)


@dataclass(frozen=True)
class SceneGraph:
    """What a clip means; the only input of the question templates."""

    shape: str
    colour: str
    object: str
    actions: tuple[str, str]
    start: tuple[float, float]  # sprite centre at t=0, fraction of the frame (x, y)

    def to_json(self) -> dict:
        return asdict(self) | {"actions": list(self.actions), "start": list(self.start)}

    @classmethod
    def from_json(cls, d: dict) -> SceneGraph:
        return cls(d["shape"], d["colour"], d["object"], tuple(d["actions"]), tuple(d["start"]))


def _states(actions: tuple[str, str], frames: int) -> list[dict]:
    """Per-frame sprite state relative to its start: offset (x, y), scale, angle, and the
    object's phase ('ground', 'held' or a blend in [0, 1] from ground to held)."""
    held = (
        0.0
        if "pick_up" in actions
        and ("drop" not in actions or actions.index("pick_up") < actions.index("drop"))
        else (1.0 if "drop" in actions else 0.0)
    )
    base = {"dx": 0.0, "dy": 0.0, "scale": 1.0, "angle": 0.0, "held": held}
    half, out = frames // 2, []
    for a in actions:
        for j in range(half):
            p, s = (j + 1) / half, dict(base)
            if a in MOVES:
                s["dx"] += MOVES[a][0] * MOVE_PX * p
                s["dy"] += MOVES[a][1] * MOVE_PX * p
            elif a in SCALES:
                s["scale"] *= SCALES[a] ** p
            elif a == "spin":
                s["angle"] += SPIN * p
            else:
                s["held"] = p if a == "pick_up" else 1.0 - p
            out.append(s)
        base = out[-1]
    return out


def sample_scene(rng: np.random.Generator, frames: int = 8) -> SceneGraph:
    """One graph from the distribution every domain shares; the start keeps the whole
    trajectory inside the frame."""
    acts = tuple(str(a) for a in rng.choice(ACTIONS, size=2, replace=False))
    states = _states(acts, frames)  # type: ignore[arg-type]
    dx = [0.0] + [s["dx"] for s in states]
    dy = [0.0] + [s["dy"] for s in states]
    margin = RADIUS * 1.7 + 0.04
    x = rng.uniform(margin - min(dx), 1 - margin - max(dx))
    y = rng.uniform(margin + 0.08 - min(dy), 1 - margin - max(dy))
    return SceneGraph(
        str(rng.choice(SHAPES)),
        str(rng.choice(list(COLOURS))),
        str(rng.choice(list(OBJECTS))),
        acts,
        (float(x), float(y)),
    )  # type: ignore[arg-type]


def _shape_mask(shape: str, u: np.ndarray, v: np.ndarray, r: float, angle: float) -> np.ndarray:
    """Boolean mask of a shape of circumradius r centred at (0, 0) on offsets (u, v)."""
    rho, theta = np.hypot(u, v), np.arctan2(v, u) - angle
    if shape == "circle":
        edge = r
    elif shape == "square":
        edge = 0.8 * r / np.maximum(np.abs(np.cos(theta)), np.abs(np.sin(theta)))
    elif shape == "triangle":
        sector = np.mod(theta, 2 * np.pi / 3) - np.pi / 3
        edge = r * np.cos(np.pi / 3) / np.cos(sector)
    else:  # five-pointed star: radius oscillating between r and 0.45 r
        edge = r * (0.72 + 0.28 * np.cos(5 * theta))
    return rho <= edge


def _object_mask(kind: str, u: np.ndarray, v: np.ndarray, r: float) -> np.ndarray:
    """Small glyph of the object, half-size r, centred at (0, 0)."""
    au, av, rho = np.abs(u), np.abs(v), np.hypot(u, v)
    if kind == "ball":
        return rho <= r
    if kind == "box":
        return (au <= r) & (av <= r) & ((au >= 0.5 * r) | (av >= 0.5 * r))
    if kind == "ring":
        return (rho <= r) & (rho >= 0.55 * r)
    if kind == "cup":
        return (au <= r) & (av <= r) & ((au >= 0.55 * r) | (v >= 0.45 * r))
    if kind == "key":
        return (np.hypot(u + 0.6 * r, v) <= 0.5 * r) | (
            (u >= -0.3 * r) & (u <= r) & (av <= 0.2 * r)
        )
    return ((u >= -r) & (u <= -0.7 * r) & (av <= r)) | (  # flag: pole + pennant
        (u > -0.7 * r) & (v < 0) & (v > -r) & (u - (-0.7 * r) <= 1.6 * r * (1 + v / r))
    )


def render_layers(
    sg: SceneGraph, frames: int, size: int, supersample: int = 2
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Canonical clip: rgb (T, H, W, 3) float in [0, 1], foreground mask (T, H, W) float and
    sprite centre (T, 2) in pixels (x, y). Antialiased by `supersample`² averaging."""
    n = size * supersample
    grid = (np.arange(n) + 0.5) / n
    gx, gy = np.meshgrid(grid, grid)  # (n, n), fractions of the frame
    sky = (gy < 0.45)[..., None]
    bg = np.where(sky, BACKGROUND_SKY, BACKGROUND_GROUND)  # (n, n, 3)
    colour, ocolour = np.array(COLOURS[sg.colour]), np.array(OBJECTS[sg.object])
    states = _states(sg.actions, frames)
    half = frames // 2
    ends = [(0.0, 0.0)] + [(states[k * half - 1]["dx"], states[k * half - 1]["dy"]) for k in (1, 2)]
    hands = [k for k, a in enumerate(sg.actions) if a in ("pick_up", "drop")]
    rgb, fg, centre = [], [], []
    for t, s in enumerate(states):
        x, y, r = sg.start[0] + s["dx"], sg.start[1] + s["dy"], RADIUS * s["scale"]
        k = t // half  # the object rests beside where the sprite starts its pick-up / drop
        anchor = ends[min(hands, key=lambda i: (i < k, abs(i - k)))] if hands else ends[0]
        gx0 = sg.start[0] + anchor[0] + 1.7 * RADIUS
        gy0 = sg.start[1] + anchor[1] + 0.6 * RADIUS
        h = s["held"]
        ox, oy = gx0 + h * (x - gx0), gy0 + h * (y - r - 0.06 - gy0)
        sprite = _shape_mask(sg.shape, gx - x, gy - y, r, s["angle"])
        marker = (
            np.hypot(gx - x - 0.55 * r * np.cos(s["angle"]), gy - y - 0.55 * r * np.sin(s["angle"]))
            <= 0.22 * r
        )
        obj = _object_mask(sg.object, gx - ox, gy - oy, 0.07)
        img = np.where(sprite[..., None], colour, bg)
        img = np.where((sprite & marker)[..., None], 0.15, img)
        img = np.where(obj[..., None], ocolour, img)
        rgb.append(img)
        fg.append((sprite | obj).astype(float))
        centre.append((x * size, y * size))
    t, k = len(rgb), supersample
    rgb_px = np.stack(rgb).reshape(t, size, k, size, k, 3).mean((2, 4))
    fg_px = np.stack(fg).reshape(t, size, k, size, k).mean((2, 4))
    return rgb_px, fg_px, np.array(centre)
