"""Bandit allocation of test-time compute (Zuo & Zhu, ICLR 2026): allocators, the simulator
and real-sampler evaluations (`ttc`, `ttc_uniform`), and the Serve router."""

from rayworks.pipelines.ttc import pipeline as pipeline
