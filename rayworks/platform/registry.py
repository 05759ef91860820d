"""The pipeline and evaluation registries: one decorator each, one dict each.

A pipeline is a function `run(cfg, ctx) -> dict[str, float]` plus its typed config,
registered by name with its kind (`task`: launched as one Ray task with `resources`;
`job`: a driver that creates its own actors/trainers), its baseline(s) and its headline
metric (`(key, "max" | "min")`), which `rayworks bench` compares against the baseline.
`ablations` (label -> extra `--set` overrides) add one bench arm each, and `report` names
secondary summary keys that bench tabulates beside the headline. `arms` declares the
baselines that are the method's own code with other config defaults (`Arm`): each is
registered as a pipeline of its own name (so `run`, `bench` and `list` see it as before)
whose config is the method's with those defaults, instead of a stub function and a config
subclass written by hand. An arm whose numbers the method's own run already computes on
the same seeds and data (`InRun`: it shares expensive state with the method, e.g. one
trained model every arm compresses, or one process whose timings are compared) is still
registered and listed, but `rayworks bench` reads its row from the method's runs instead
of launching it again.

Extensions are what a pipeline adds to the platform beyond a runnable method (a `serve`
target with its flags, a family of KV-cache policies for the model endpoint): the pipeline
registers them with `extension(point, name)` as it registers itself, and the platform finds
them by point (`get_extensions`) without importing or naming any pipeline.
"""

from __future__ import annotations

import copy
import functools
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError, create_model

from rayworks.core.config import Config, PipelineConfig, parse_override
from rayworks.core.errors import ConfigError, UnknownNameError

Kind = Literal["task", "job"]
Mode = Literal["max", "min"]
LABEL = re.compile(r"[A-Za-z0-9_-]+")


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
    ablations: dict[str, tuple[str, ...]] = field(default_factory=dict)
    report: tuple[str, ...] = ()
    curves: tuple[str, ...] = ()
    in_run: dict[str, InRun] = field(default_factory=dict)  # baseline -> how the run holds it


@dataclass(frozen=True)
class InRun:
    """An arm the method's own run computes beside the method, on the same seeds and data.

    `reason` says why the method run holds it (the state the arms share); the run does so
    when `member` is in its config's list field `field`, and its summary then holds every
    key of the arm's own summary as `prefix + key`, except the `shared` keys: properties of
    the shared inputs (e.g. a spectrum statistic), the same for every arm, kept unprefixed.
    `rayworks bench` then takes the arm's row from the method's runs (`bench.split_in_run`)
    instead of running it a second time.
    """

    reason: str
    member: str
    prefix: str
    field: str = "compare"
    shared: tuple[str, ...] = ()

    def computed_by(self, cfg: Any) -> bool:
        """Whether a method run with config `cfg` (a config or its dumped dict) computes it."""
        values = cfg.get(self.field) if isinstance(cfg, dict) else getattr(cfg, self.field, None)
        return self.member in (values or ())


@dataclass(frozen=True)
class Arm:
    """A baseline that runs the method's function with other config defaults: `defaults`
    maps top-level config fields to their values in this arm; `presets` adds keys to the
    method's presets of the same name (e.g. a smoke preset that skips the method-only
    sweeps); `description` is the one line `rayworks list` shows; `in_run` (`InRun`) when
    the method's run already computes this arm."""

    description: str
    defaults: dict[str, Any]
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    in_run: InRun | None = None


@dataclass(frozen=True)
class EvaluationSpec:
    name: str
    fn: Callable[..., dict[str, float]]
    config: type[Config]
    description: str


PIPELINES: dict[str, PipelineSpec] = {}
EVALUATIONS: dict[str, EvaluationSpec] = {}
EXTENSIONS: dict[str, dict[str, Any]] = {}


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0].strip() if (doc or "").strip() else ""


def _as_tuple(value: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """One string or several as a tuple (a bare string is one item, not its characters)."""
    return (value,) if isinstance(value, str) else tuple(value or ())


def _check_ablations(
    name: str, ablations: dict[str, str | tuple[str, ...]] | None
) -> dict[str, tuple[str, ...]]:
    """Ablations with simple labels (they name bench arms and folders) and KEY=VALUE overrides.

    Only the override syntax is checked here; keys and values are validated against the
    config by `rayworks bench` before any run starts.
    """
    checked: dict[str, tuple[str, ...]] = {}
    for label, overrides in (ablations or {}).items():
        if not isinstance(label, str) or not LABEL.fullmatch(label):
            raise ValueError(
                f"pipeline {name!r}: ablation label {label!r} must be letters, digits, '-' or '_'"
            )
        checked[label] = _as_tuple(overrides)
        if not checked[label]:
            raise ValueError(f"pipeline {name!r}: ablation {label!r} has no overrides")
        for text in checked[label]:
            try:
                parse_override(text)
            except ConfigError as exc:
                raise ValueError(f"pipeline {name!r}: ablation {label!r}: {exc}") from None
    return checked


def arm_config(base: type[PipelineConfig], name: str, arm: Arm) -> type[PipelineConfig]:
    """`base` with the defaults of `arm`: a subclass named after the arm whose presets are
    the method's, each extended by the arm's keys for it. A default that is not a field of
    `base` or does not validate, or a preset the method lacks, is an error at registration."""
    fields: dict[str, Any] = {}
    for key, value in arm.defaults.items():
        if key not in base.model_fields:
            raise ValueError(f"pipeline arm {name!r}: {base.__name__} has no field {key!r}")
        info = copy.copy(base.model_fields[key])
        info.default, info.default_factory = value, None
        fields[key] = (info.annotation, info)
    cls = create_model(
        f"{base.__name__}_{name}",
        __base__=base,
        __doc__=arm.description,
        __module__=base.__module__,
        **fields,
    )
    if unknown := sorted(set(arm.presets) - set(base.presets)):
        raise ValueError(f"pipeline arm {name!r}: {base.__name__} has no preset {unknown[0]!r}")
    cls.presets = {k: {**v, **arm.presets.get(k, {})} for k, v in base.presets.items()}
    try:
        cls.model_validate(arm.defaults)  # defaults are not validated unless given as input
    except ValidationError as exc:
        raise ValueError(f"pipeline arm {name!r}: its defaults do not validate: {exc}") from None
    return cls


def pipeline(
    name: str,
    *,
    config: type[PipelineConfig],
    kind: Kind = "task",
    baseline: str | tuple[str, ...] | None = None,
    headline: tuple[str, Mode] = ("val_loss", "min"),
    resources: dict[str, float] | None = None,
    ablations: dict[str, str | tuple[str, ...]] | None = None,
    arms: dict[str, Arm] | None = None,
    report: str | tuple[str, ...] = (),
    curves: str | tuple[str, ...] = (),
) -> Callable[[Callable[..., dict[str, float]]], Callable[..., dict[str, float]]]:
    """Register `fn` as pipeline `name`. The docstring's first line is its description.

    `ablations` maps a label to the extra `--set` overrides of that ablation (bench arm
    `name[label]`); `arms` maps a baseline's name to its `Arm` (registered as a pipeline
    of that name running `fn`, and a baseline of `name` after those of `baseline`; an
    `Arm.in_run` is checked against the method's defaults: they must compute it);
    `report` lists secondary summary keys bench shows beside the headline; `curves` lists
    metrics bench also plots against the step (one figure per key).
    """
    if headline[1] not in ("max", "min"):
        raise ValueError(f"headline mode must be 'max' or 'min', got {headline[1]!r}")
    if "smoke" not in config.presets:
        raise ValueError(f"pipeline {name!r}: {config.__name__} must define a 'smoke' preset")
    checked_ablations = _check_ablations(name, ablations)
    report_keys = _as_tuple(report)
    in_run = {a: arm.in_run for a, arm in (arms or {}).items() if arm.in_run is not None}
    for arm_name, how in in_run.items():
        if how.field not in config.model_fields or not how.prefix:
            raise ValueError(
                f"pipeline arm {arm_name!r}: in_run needs a prefix and a list field of "
                f"{config.__name__} (got field={how.field!r}, prefix={how.prefix!r})"
            )
        if not how.computed_by(config()):
            raise ValueError(
                f"pipeline arm {arm_name!r}: declared in_run, but {config.__name__}'s "
                f"default {how.field} does not hold {how.member!r}"
            )

    def decorate(fn: Callable[..., dict[str, float]]) -> Callable[..., dict[str, float]]:
        if name in PIPELINES and PIPELINES[name].fn is not fn:
            raise ValueError(f"pipeline {name!r} is registered twice")
        baselines = (*_as_tuple(baseline), *(arms or {}))
        for arm_name, arm in (arms or {}).items():
            if arm_name in PIPELINES and PIPELINES[arm_name].fn is not fn:
                raise ValueError(f"pipeline {arm_name!r} is registered twice")
            PIPELINES[arm_name] = PipelineSpec(
                name=arm_name,
                fn=fn,
                config=arm_config(config, arm_name, arm),
                kind=kind,
                baselines=(),
                headline=headline,
                description=arm.description,
                resources=dict(resources or {"CPU": 1}),
                report=report_keys,
                curves=_as_tuple(curves),
            )
        PIPELINES[name] = PipelineSpec(
            name=name,
            fn=fn,
            config=config,
            kind=kind,
            baselines=baselines,
            headline=headline,
            description=_first_line(fn.__doc__),
            resources=dict(resources or {"CPU": 1}),
            ablations=checked_ablations,
            report=report_keys,
            curves=_as_tuple(curves),
            in_run=in_run,
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


def extension(point: str, name: str) -> Callable[[Any], Any]:
    """Register `obj` as extension `name` of `point` (returns `obj`). Write the call with
    literal strings, `extension("point", "name")`: `get_extensions` finds the module that
    registers a point by reading the sources as text, so only that module is imported."""

    def decorate(obj: Any) -> Any:
        EXTENSIONS.setdefault(point, {})[name] = obj
        return obj

    return decorate


_EXTENSION = re.compile(
    r"""\bextension\(\s*["']([A-Za-z0-9_-]+)["']\s*,\s*["']([A-Za-z0-9_-]+)["']"""
)


def _source_files() -> Iterator[tuple[str, tuple[str, ...], str]]:
    """(root package, path parts below it without ".py", text) of every source file of
    the pipelines and evals packages: what the text scans below read instead of importing."""
    for root in ("rayworks.pipelines", "rayworks.evals"):
        pkg = importlib.import_module(root)
        for folder in map(Path, pkg.__path__):
            for path in sorted(folder.rglob("*.py")):
                parts = path.relative_to(folder).with_suffix("").parts
                yield root, parts, path.read_text(encoding="utf-8")


@functools.cache
def _extension_index() -> dict[str, dict[str, str]]:
    """point -> {name: the module whose source registers it}, read as text (no imports)
    once per process: a server asks on every request."""
    index: dict[str, dict[str, str]] = {}
    for root, parts, text in _source_files():
        module = ".".join((root, *parts[: -1 if parts[-1] == "__init__" else None]))
        for point, name in _EXTENSION.findall(text):
            index.setdefault(point, {}).setdefault(name, module)
    return index


def extension_names(point: str) -> list[str]:
    """The names registered for `point`, without importing their modules (CLI choices)."""
    return sorted(_extension_index().get(point, {}))


def get_extensions(point: str) -> dict[str, Any]:
    """Every extension of `point` (name -> object), importing only the modules that
    register one."""
    for module in sorted(set(_extension_index().get(point, {}).values())):
        importlib.import_module(module)
    return dict(EXTENSIONS.get(point, {}))


def _import_all(package: str) -> None:
    """Import every subpackage of `package` so their decorators run."""
    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(pkg.__path__, prefix=f"{package}."):
        importlib.import_module(info.name)


def load_all() -> None:
    _import_all("rayworks.pipelines")
    _import_all("rayworks.evals")


_REGISTERED = re.compile(r"""\b(pipeline|evaluation)\(\s*["']([A-Za-z0-9_-]+)["']""")
_ARM = re.compile(r"""["']([A-Za-z0-9_-]+)["']\s*:\s*Arm\(""")


def _source_index() -> dict[tuple[str, str], str]:
    """(kind, name) -> the package whose source registers it, read as text (no imports)."""
    index: dict[tuple[str, str], str] = {}
    for root, parts, text in _source_files():
        owner = f"{root}.{parts[0]}"
        for kind, name in _REGISTERED.findall(text):
            index.setdefault((kind, name), owner)
        for name in _ARM.findall(text):
            index.setdefault(("pipeline", name), owner)
    return index


def _load_for(kind: str, name: str, table: dict[str, Any]) -> None:
    """Import only the package that registers `name`; everything when the scan misses it.

    Importing every pipeline costs seconds (torch, transformers, sklearn, scipy.stats...)
    in each CLI process and each Ray worker that runs one pipeline; the text scan finds the
    one package to import, and `load_all` stays the fallback (and serves `list`, `demo`).
    """
    if name in table:
        return
    owner = _source_index().get((kind, name))
    if owner is not None:
        importlib.import_module(owner)
    if name not in table:
        load_all()


def get_pipeline(name: str) -> PipelineSpec:
    _load_for("pipeline", name, PIPELINES)
    if name not in PIPELINES:
        raise UnknownNameError("pipeline", name, list(PIPELINES))
    return PIPELINES[name]


def get_evaluation(name: str) -> EvaluationSpec:
    _load_for("evaluation", name, EVALUATIONS)
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
