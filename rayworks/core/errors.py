"""User-facing errors: each one renders as a single paragraph and a non-zero exit.

The CLI catches `RayworksError` and prints its message without a traceback, so the
message itself must name what was wrong (key, path, value) and what is allowed.
"""

from __future__ import annotations


class RayworksError(Exception):
    """Base class for errors caused by user input (config, paths, names)."""

    exit_code = 2


class ConfigError(RayworksError):
    """A config key, value, preset or file is invalid."""


class UnknownNameError(RayworksError):
    """A pipeline, evaluation, task or other registered name does not exist."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        listing = ", ".join(sorted(known)) or "(none registered)"
        super().__init__(f"unknown {kind} {name!r}; known {kind}s: {listing}.")


class CheckpointNotFoundError(RayworksError):
    """A checkpoint or run directory given by the user does not hold what is needed."""
