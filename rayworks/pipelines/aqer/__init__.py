"""AQER (arXiv 2602.02165, ICLR 2026; reconstructed, no official code): approximate
quantum loading by entanglement reduction (`aqer`) and its baselines (`aqer_hec`,
`aqer_mps`)."""

from rayworks.pipelines.aqer import pipeline as pipeline
