"""Datasets without downloads: synthetic tasks with exact verifiers and local text files."""
