"""Quantum data structure for sublinear-time attention rows (Song, Xue, Zhang, Zhang,
ICLR 2026; reconstructed, abstract only): its classical analogue (`attnrow`) and the
baselines `attnrow_uniform` (uniform-landmark Nyström) and `attnrow_performer`."""

from rayworks.pipelines.attnrow import pipeline as pipeline
