"""MOSIV multi-object system identification from videos (arXiv 2603.06022, ICLR 2026; no
official code), in 2D: a differentiable MLS-MPM, per-object continuous material fitting
with the object-wise Chamfer + silhouette loss (`mosiv`) and its baselines
(`mosiv_scenewise`, `mosiv_prototype`, `mosiv_prototype_oracle`)."""

from rayworks.pipelines.mosiv import pipeline as pipeline
