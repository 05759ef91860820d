"""Registered evaluations (`rayworks eval NAME`): metrics on checkpoints or prediction files."""
