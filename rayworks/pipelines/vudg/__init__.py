"""VUDG (video understanding domain generalisation, ICLR 2026; arXiv 2505.24346): the
procedural VUDG-mini benchmark under its protocols — `vudg` (multi-source LODO) and the
baselines `vudg_all` (all-domain) and `vudg_single` (single-source) — and the `vudg`
evaluation of any model's predictions file."""

from rayworks.pipelines.vudg import evaluate as evaluate
from rayworks.pipelines.vudg import pipeline as pipeline
