"""Temporary alias of `rayworks.core.errors` (removed once every module imports core)."""

from rayworks.core.errors import *  # noqa: F403
