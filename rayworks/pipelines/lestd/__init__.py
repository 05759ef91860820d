"""LeSTD (Li, Guo, Yin, Li, ICLR 2026; reconstructed, no official code): learning-based
sparse tensor decomposition of attention (`lestd`) and its baselines (`lestd_tucker`,
`lestd_svd`)."""

from rayworks.pipelines.lestd import pipeline as pipeline
