"""User functions named by `module.path:function` (collapsing functions, oracles, rewards,
verifiers).

They are imported like any module, from code the operator installed on every node; nothing
is ever unpickled from a request or a file.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rayworks.core.errors import ConfigError


def import_callable(spec: str, key: str) -> Callable[..., Any]:
    """The callable `spec` = 'module.path:function' names; a `ConfigError` names `key` and
    `spec` when it is malformed, cannot be imported or is not callable."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{key}={spec!r} must be 'module.path:function'")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:  # TypeError: ".rel"
        raise ConfigError(f"{key}={spec!r} cannot be imported: {exc}") from None
    if not callable(fn):
        raise ConfigError(f"{key}={spec!r} is not callable")
    return fn
