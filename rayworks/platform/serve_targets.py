"""`rayworks serve NAME` targets that pipelines add (the "serve_target" extension point).

The platform serves one model itself (`rayworks serve model`); a pipeline that serves
something of its own (the ttc pipeline's router) registers a `ServeTarget` with
`registry.extension("serve_target", NAME)`. The CLI lists the names without importing
them and adds a target's flags only when that target is asked for.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rayworks.core.errors import ConfigError
from rayworks.platform.serve_limits import FLAGS


@dataclass(frozen=True)
class ServeTarget:
    """`add_args(parser)` adds the target's own flags; `serve(args, api_key)` checks them
    and serves until interrupted. `limits` names the `ServeLimits` fields (the shared
    `--max-...` flags) that apply; the two queue sizes are the defaults of
    `--max-ongoing-requests` / `--max-queued-requests`."""

    help: str
    add_args: Callable[[argparse.ArgumentParser], None]
    serve: Callable[[argparse.Namespace, str | None], None]
    limits: tuple[str, ...] = tuple(FLAGS)
    max_ongoing_requests: int = 4
    max_queued_requests: int = 8


def limit_flags(args: argparse.Namespace, allowed: Sequence[str] = tuple(FLAGS)) -> dict:
    """The limit flags given, by ServeLimits field; a flag that does not apply is an error."""
    given = {k: v for k in FLAGS if (v := getattr(args, f"limit_{k}")) is not None}
    if extra := [FLAGS[k] for k in given if k not in allowed]:
        raise ConfigError(f"{', '.join(extra)}: not a limit of `serve {args.target}`.")
    return given
