"""Typed pipeline configs: defaults, presets, YAML files and `--set a.b=c` overrides.

Every pipeline declares one `PipelineConfig` subclass whose fields carry defaults and a
one-line `description`. A run's config is built in layers, each validated as a whole at
the end: class defaults -> preset (`smoke`, `small`, ...) -> YAML files -> `--set`
overrides. Unknown keys, wrong types and out-of-range values raise `ConfigError` naming
the dotted key, the bad value and what is allowed, before any run starts.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rayworks.core.errors import ConfigError

C = TypeVar("C", bound="Config")


class Config(BaseModel):
    """Base of every config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())


class PipelineConfig(Config):
    """Top-level config of a pipeline. `presets` maps a preset name to nested overrides."""

    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    seed: int = Field(0, ge=0, description="seed of every random stream in the run")


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Return `base` updated recursively by `update` (mappings merge, other values replace)."""
    out = copy.deepcopy(dict(base))
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one `a.b=c` override; the value is read as YAML (numbers, bools, lists)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(
            f"bad override {text!r}: expected KEY=VALUE with a dotted key, e.g. train.lr=3e-3."
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def nest(key: str, value: Any) -> dict[str, Any]:
    """`nest("a.b", 1)` -> `{"a": {"b": 1}}`."""
    out: dict[str, Any] = {}
    node = out
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def load_yaml_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; syntax errors name the file, line and column."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist or is not a file.")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"YAML syntax error in {str(path)!r}{where}: {problem}.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {str(path)!r} must hold a mapping of keys to values, "
            f"found a {type(data).__name__}."
        )
    return data


def _field_names(cls: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Names of the fields allowed at the parent of `loc` (for 'unknown key' messages)."""
    model: Any = cls
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = field.annotation
    return sorted(getattr(model, "model_fields", {}))


def _describe(cls: type[BaseModel], loc: tuple[Any, ...]) -> str:
    model: Any = cls
    field = None
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return ""
        model = field.annotation
    return f" ({field.description})" if field is not None and field.description else ""


def format_validation_error(cls: type[BaseModel], err: ValidationError, origin: str) -> str:
    """One paragraph naming each bad key, its value and what is allowed."""
    parts = []
    for item in err.errors():
        loc = tuple(item["loc"])
        key = ".".join(str(p) for p in loc) or "(top level)"
        if not loc:  # a cross-field check of the whole config: its message names the keys
            parts.append(item["msg"].removeprefix("Value error, "))
        elif item["type"] == "extra_forbidden":
            allowed = ", ".join(_field_names(cls, loc)) or "(none)"
            parts.append(f"unknown key {key!r}; allowed keys here: {allowed}")
        else:
            value = item.get("input")
            parts.append(f"{key}={value!r} is invalid: {item['msg']}{_describe(cls, loc)}")
    return f"invalid {cls.__name__} ({origin}): " + "; ".join(parts) + "."


def validate(cls: type[C], data: Mapping[str, Any], origin: str = "config") -> C:
    """Build `cls` from `data`, turning pydantic's errors into one `ConfigError`."""
    try:
        return cls.model_validate(dict(data))
    except ValidationError as err:
        raise ConfigError(format_validation_error(cls, err, origin)) from None


def _defaults(cls: type[BaseModel]) -> dict[str, Any]:
    """The default config as a tree, or {} where some field has no default."""
    try:
        return cls.model_validate({}).model_dump(mode="json")
    except ValidationError:
        return {}


def preset_names(cls: type[PipelineConfig]) -> list[str]:
    return sorted({"default", *cls.presets})


def build_config(
    cls: type[C],
    preset: str | None = None,
    files: Iterable[str | Path] = (),
    overrides: Iterable[str] = (),
    base: Mapping[str, Any] | None = None,
) -> C:
    """Layer defaults (or `base`), a preset, YAML files and `--set` overrides; validate once.

    Layers merge onto the full default tree, so setting one key of a nested section keeps
    that section's other defaults, including a subclass's `default_factory` overrides
    (e.g. `--set critic.lr=...` on AsyPPO keeps its two critics).
    """
    data: dict[str, Any] = dict(base) if base is not None else _defaults(cls)
    origin = []
    if preset is not None:
        presets = {"default": {}, **getattr(cls, "presets", {})}  # "default": the class defaults
        if preset not in presets:
            raise ConfigError(
                f"unknown preset {preset!r} for {cls.__name__}; "
                f"available presets: {', '.join(sorted(presets)) or '(none)'}."
            )
        data = deep_merge(data, presets[preset])
        origin.append(f"preset {preset!r}")
    for path in files:
        data = deep_merge(data, load_yaml_file(path))
        origin.append(f"file {str(path)!r}")
    for text in overrides:
        key, value = parse_override(text)
        data = deep_merge(data, nest(key, value))
        origin.append(f"--set {text}")
    return validate(cls, data, ", ".join(origin) or "defaults")


def to_yaml(cfg: BaseModel) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}` (for tables and Tune parameter spaces)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out
