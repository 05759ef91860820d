"""WASI: Weight-Activation Subspace Iteration (Nguyen, Tartaglione, Nguyen; ICLR 2026):
factored weights, Tucker-compressed activations, and the `wasi` / `wasi_vanilla` /
`wasi_lora` pipelines."""

from rayworks.pipelines.wasi import pipeline as pipeline
