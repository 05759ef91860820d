"""B-calibration math: collapsing functions, B-confidence, SmoothECE, binned ECE, bootstrap.

Nakkiran et al., "Trained on Tokens, Calibrated on Concepts" (ICLR 2026, arXiv 2511.04869):
a collapsing function B maps an answer text to a semantic class; the push-forward
B_x # p_x of the model's answer distribution is a K-class classifier with
conf(x) = max_k (B_x # p_x)(k) and pred(x) = argmax_k (B_x # p_x)(k). The model is
B-confidence calibrated when Pr[B_x(y) = pred(x) | conf(x) = c] = c for the gold answer y.
We estimate B_x # p_x from M sampled answers (M = 50 at temperature 1 in the paper).

Pure functions (numpy, relplot): no models, no I/O except the diagram's PNG.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from rayworks.core.errors import RayworksError
from rayworks.data.tasks.base import answer_after
from rayworks.platform.plugins import import_callable

Estimator = Literal["plugin", "heldout"]
Collapse = Callable[[str | None], str | None]

# --- collapsing functions B: answer text -> semantic class (None: no class) ------------------

_TRAILING = ".!?,;:"
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def normalize_answer(text: str | None) -> str | None:
    """Lowercase, collapse whitespace, strip quotes and trailing punctuation; "" -> None."""
    if text is None:
        return None
    out = " ".join(text.lower().split()).strip("\"'`").rstrip(_TRAILING).strip()
    return out or None


def collapse_exact(text: str | None) -> str | None:
    """B = the exact normalized answer ("Red." and "red" agree; "a red ball" does not)."""
    return normalize_answer(text)


def collapse_numeric(text: str | None) -> str | None:
    """B = the value of the first number ("1,000", "1000.0" -> "1000"; "0.50" -> "0.5")."""
    if text is None:
        return None
    match = _NUMBER_RE.search(text)
    if not match:
        return None
    value = float(match.group().replace(",", ""))
    if value.is_integer():
        return str(int(value))
    return f"{value:.10g}"


def collapse_first_token(text: str | None) -> str | None:
    """B = the first whitespace-delimited word of the normalized answer (with an empty answer
    marker: of the whole completion, the paper's next-token special case at word level)."""
    norm = normalize_answer(text)
    return norm.split(" ", 1)[0] if norm else None


COLLAPSES: dict[str, Collapse] = {
    "exact": collapse_exact,
    "numeric": collapse_numeric,
    "first_token": collapse_first_token,
}


def get_collapse(name: str, task: object | None = None) -> Collapse:
    """A collapsing function by name: `exact`, `numeric`, `first_token`, `task` (the task's
    own `answer_class` parser) or `module.path:function` (any `str | None -> str | None`)."""
    if name in COLLAPSES:
        return COLLAPSES[name]
    if name == "task":
        fn = getattr(task, "answer_class", None)
        if fn is None:
            task_name = getattr(task, "name", task)
            raise RayworksError(
                f"collapse='task' needs a task with an answer_class(text) parser; task "
                f"{task_name!r} has none. Use collapse=exact, numeric, first_token or "
                "module:function."
            )
        return fn
    if ":" not in name:
        raise RayworksError(
            f"collapse={name!r} is not one of {[*COLLAPSES, 'task']} nor 'module.path:function'."
        )
    return import_callable(name, "collapse")


def extract_answer(completion: str, marker: str = "A:") -> str | None:
    """The answer part of a completion: its first line after the last `marker` (None when the
    marker is missing); with `marker=""` the whole completion."""
    return answer_after(completion, marker) if marker else completion


# --- B-confidence -----------------------------------------------------------------------------


def b_confidence(
    answers: Sequence[str | None], estimator: Estimator = "plugin", seed: int = 0
) -> tuple[str | None, float]:
    """(prediction, confidence) of one question from its M sampled answers' classes.

    `answers` are classes already collapsed by B; None marks a sample with no class
    (unparseable). None is never the prediction, but it counts in M: the confidence is the
    share of *all* samples that fall in the predicted class, so a model that mostly emits
    garbage is not confident. All None -> (None, 0.0).

    plugin: pred = most frequent class (ties: first seen), conf = its frequency. Biased
        upward: E[max_k freq_k] >= max_k p_k, most on hard (spread) questions.
    heldout: a seeded random half picks pred, the other half estimates its frequency
        (the "Sem2" estimator of arXiv 2605.08432): unbiased for p(pred), hence never
        inflated by selecting the argmax on the same samples. Needs M >= 2.
    """
    if estimator not in ("plugin", "heldout"):
        raise RayworksError(f"estimator={estimator!r} must be 'plugin' or 'heldout'")
    items = list(answers)
    if not items:
        raise RayworksError("b_confidence needs at least one sampled answer")
    if estimator == "plugin":
        return _top_share(items, items)
    if len(items) < 2:
        raise RayworksError("the heldout estimator needs at least 2 sampled answers")
    order = np.random.default_rng(seed).permutation(len(items))
    half = len(items) // 2
    return _top_share([items[i] for i in order[:half]], [items[i] for i in order[half:]])


def _top_share(select: list[str | None], score: list[str | None]) -> tuple[str | None, float]:
    counts = Counter(a for a in select if a is not None)
    if not counts:
        return None, 0.0
    pred = counts.most_common(1)[0][0]
    return pred, sum(a == pred for a in score) / len(score)


# --- calibration errors -----------------------------------------------------------------------


def _check(conf: Sequence[float], correct: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    f, y = np.asarray(conf, dtype=float), np.asarray(correct, dtype=float)
    if f.ndim != 1 or f.shape != y.shape or f.size == 0:
        raise RayworksError(
            f"confidences {f.shape} and outcomes {y.shape} must be equal-length, non-empty 1-D"
        )
    for name, arr in (("confidence", f), ("outcome", y)):
        if not np.all(np.isfinite(arr)) or arr.min() < 0 or arr.max() > 1:
            raise RayworksError(f"every {name} must be a finite number in [0, 1]")
    return f, y


def smooth_ece(conf: Sequence[float], correct: Sequence[float]) -> float:
    """SmoothECE (Blasiok & Nakkiran 2023) via `relplot.smECE`, the paper's metric.

    smECE_sigma = integral |r_sigma(t)| delta_sigma(t) dt / integral delta_sigma(t) dt, with
    r_sigma the kernel-smoothed residual (conf - outcome) and delta_sigma the smoothed
    density of confidences (reflected Gaussian kernel); the reported value is at the fixed
    point sigma* = smECE_sigma*. Outcomes may be fractional (expected correctness).
    """
    import relplot

    f, y = _check(conf, correct)
    return float(relplot.smECE(f, y))


def binned_ece(conf: Sequence[float], correct: Sequence[float], n_bins: int = 10) -> float:
    """Binned ECE: sum over equal-width bins of (bin share) * |mean conf - mean outcome|.
    Bin b holds conf in [b/n, (b+1)/n); conf = 1 goes to the last bin."""
    if n_bins < 1:
        raise RayworksError(f"n_bins={n_bins} must be >= 1")
    f, y = _check(conf, correct)
    bins = np.minimum((f * n_bins).astype(int), n_bins - 1)
    gap = np.zeros(n_bins)
    np.add.at(gap, bins, f - y)
    return float(np.abs(gap).sum() / f.size)


def bootstrap_ci(
    stat: Callable[..., float],
    *columns: Sequence[float],
    n_boot: int = 500,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile CI of `stat(*columns)` resampling rows (questions) with replacement;
    several columns are resampled together (a paired difference keeps its pairs)."""
    arrays = [np.asarray(c, dtype=float) for c in columns]
    n = len(arrays[0])
    if n == 0 or any(len(a) != n for a in arrays):
        raise RayworksError("bootstrap_ci needs equal-length, non-empty columns")
    rng = np.random.default_rng(seed)
    draws = [stat(*(a[idx] for a in arrays)) for idx in rng.integers(0, n, size=(n_boot, n))]
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(draws, [tail, 100 - tail])
    return float(lo), float(hi)


def reliability_diagram(
    conf: Sequence[float], correct: Sequence[float], path: str | Path, title: str = ""
) -> Path:
    """Save relplot's smoothed reliability diagram (with its smECE) as a PNG at `path`."""

    import relplot

    f, y = _check(conf, correct)
    fig, ax = relplot.rel_diagram(f, y)  # (figure, axes)
    if title:
        ax.set_title(title, fontsize=9)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    return out


def mean_or_nan(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan
