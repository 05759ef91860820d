"""Vulcan: class-specific ViTs by train-then-prune (importing registers the pipelines)."""

from rayworks.pipelines.vulcan import pipeline  # noqa: F401
