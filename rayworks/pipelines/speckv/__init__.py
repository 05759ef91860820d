"""Draft-based approximate inference (Galim et al., ICLR 2026): SpecKV KV dropping, SpecPC
prompt compression and the SpecKV-PC cascade, with SnapKV, H2O, StreamingLLM, random and
oracle baselines (`speckv`, `snapkv`)."""

from rayworks.pipelines.speckv import pipeline as pipeline
