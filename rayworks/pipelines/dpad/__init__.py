"""DPad: suffix dropout for masked diffusion LMs (Chen et al., ICLR 2026): the diffusion LM's
training, block decoders, the keep profile and the `dpad` / `dpad_vanilla` pipelines."""

from rayworks.pipelines.dpad import pipeline as pipeline
