"""Temporary alias of `rayworks.core.config` (removed once every module imports core)."""

from rayworks.core.config import *  # noqa: F403
