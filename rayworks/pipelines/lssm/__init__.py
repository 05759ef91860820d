"""Sparse linear state-space models by MAP-EM (OpenReview 0lct7PrPgS; reconstructed, the
official code was not read): `lssm` (MAP-EM) and its baselines `lssm_mle`,
`lssm_mle_threshold`, `lssm_n4sid`, `lssm_hokalman`."""

from rayworks.pipelines.lssm import pipeline as pipeline
