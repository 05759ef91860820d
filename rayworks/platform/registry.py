"""The pipeline and evaluation registries: one decorator each, one dict each.

A pipeline is a function `run(cfg, ctx) -> dict[str, float]` plus its typed config,
registered by name with its kind (`task`: launched as one Ray task with `resources`;
`job`: a driver that creates its own actors/trainers), its baseline(s) and its headline
metric (`(key, "max" | "min")`), which `rayworks bench` compares against the baseline.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from rayworks.errors import UnknownNameError
from rayworks.platform.config import Config, PipelineConfig

Kind = Literal["task", "job"]
Mode = Literal["max", "min"]


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    fn: Callable[..., dict[str, float]]
    config: type[PipelineConfig]
    kind: Kind
    baselines: tuple[str, ...]
    headline: tuple[str, Mode]
    description: str
    resources: dict[str, float] = field(default_factory=lambda: {"CPU": 1})


@dataclass(frozen=True)
class EvaluationSpec:
    name: str
    fn: Callable[..., dict[str, float]]
    config: type[Config]
    description: str


PIPELINES: dict[str, PipelineSpec] = {}
EVALUATIONS: dict[str, EvaluationSpec] = {}


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0].strip() if (doc or "").strip() else ""


def pipeline(
    name: str,
    *,
    config: type[PipelineConfig],
    kind: Kind = "task",
    baseline: str | tuple[str, ...] | None = None,
    headline: tuple[str, Mode] = ("val_loss", "min"),
    resources: dict[str, float] | None = None,
) -> Callable[[Callable[..., dict[str, float]]], Callable[..., dict[str, float]]]:
    """Register `fn` as pipeline `name`. The docstring's first line is its description."""
    if headline[1] not in ("max", "min"):
        raise ValueError(f"headline mode must be 'max' or 'min', got {headline[1]!r}")
    if "smoke" not in config.presets:
        raise ValueError(f"pipeline {name!r}: {config.__name__} must define a 'smoke' preset")

    def decorate(fn: Callable[..., dict[str, float]]) -> Callable[..., dict[str, float]]:
        if name in PIPELINES and PIPELINES[name].fn is not fn:
            raise ValueError(f"pipeline {name!r} is registered twice")
        baselines = (baseline,) if isinstance(baseline, str) else tuple(baseline or ())
        PIPELINES[name] = PipelineSpec(
            name=name,
            fn=fn,
            config=config,
            kind=kind,
            baselines=baselines,
            headline=headline,
            description=_first_line(fn.__doc__),
            resources=dict(resources or {"CPU": 1}),
        )
        return fn

    return decorate


def evaluation(
    name: str, *, config: type[Config]
) -> Callable[[Callable[..., dict[str, float]]], Callable[..., dict[str, float]]]:
    """Register `fn(cfg) -> metrics` as evaluation `name` (run by `rayworks eval`)."""

    def decorate(fn: Callable[..., dict[str, float]]) -> Callable[..., dict[str, float]]:
        EVALUATIONS[name] = EvaluationSpec(name, fn, config, _first_line(fn.__doc__))
        return fn

    return decorate


def _import_all(package: str) -> None:
    """Import every subpackage of `package` so their decorators run."""
    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(pkg.__path__, prefix=f"{package}."):
        importlib.import_module(info.name)


def load_all() -> None:
    _import_all("rayworks.pipelines")
    _import_all("rayworks.evals")


def get_pipeline(name: str) -> PipelineSpec:
    load_all()
    if name not in PIPELINES:
        raise UnknownNameError("pipeline", name, list(PIPELINES))
    return PIPELINES[name]


def get_evaluation(name: str) -> EvaluationSpec:
    load_all()
    if name not in EVALUATIONS:
        raise UnknownNameError("evaluation", name, list(EVALUATIONS))
    return EVALUATIONS[name]


def all_pipelines() -> list[PipelineSpec]:
    load_all()
    return [PIPELINES[k] for k in sorted(PIPELINES)]


def baseline_names() -> set[str]:
    return {b for spec in all_pipelines() for b in spec.baselines}


def describe(spec: PipelineSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "kind": spec.kind,
        "baseline": ", ".join(spec.baselines) or "-",
        "headline": f"{spec.headline[0]} ({spec.headline[1]})",
        "description": spec.description,
    }
