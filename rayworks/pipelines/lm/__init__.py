"""`lm`: a tiny Llama-style LM trained with Ray Train; `lm_plain`: its plain-PyTorch baseline."""

from rayworks.pipelines.lm import pipeline, plain  # noqa: F401  (registers both)
