"""GDR least squares with block Lewis weights (Manoj & Patel, ICLR 2026; no official code):
the ball-oracle trust region (`gdr`) and its baselines (`gdr_euclid`, `gdr_ipm`,
`gdr_firstorder`)."""

from rayworks.pipelines.gdr import pipeline as pipeline
