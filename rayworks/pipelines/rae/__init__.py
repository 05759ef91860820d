"""RAE: Diffusion Transformers with Representation Autoencoders (Zheng et al., ICLR 2026;
code bytetriper/RAE): `rae` (DiT^DH on frozen-encoder latents) and its baselines `rae_dit`
(wider plain DiT) and `rae_convae` (DiT^DH on reconstruction-only conv-AE latents)."""

from rayworks.pipelines.rae import pipeline as pipeline
