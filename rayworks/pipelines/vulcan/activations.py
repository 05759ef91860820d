"""Class-specific FFN neuron activity: mean post-GELU activation a_l ∈ R^e on S-train.

Step 2 of the algorithm (checked): a forward hook on every block's GELU averages its
output over the S-train images and all tokens (class token and patches). Images are the
clean training images (no augmentation), so the statistics are deterministic.
"""

from __future__ import annotations

import torch

from rayworks.models.vit import ViT


@torch.no_grad()
def mean_ffn_activations(
    model: ViT, images: torch.Tensor, batch_size: int = 256
) -> list[torch.Tensor]:
    """Per layer l, the mean post-GELU activation of each FFN neuron: a list of [e_l]."""
    sums = [torch.zeros(b.fc1.out_features, dtype=torch.float64) for b in model.blocks]
    counts = [0] * len(sums)

    def hook(layer: int):
        def record(_module, _inputs, out: torch.Tensor) -> None:  # out: (B, T, e)
            sums[layer] += out.reshape(-1, out.shape[-1]).sum(0).double()
            counts[layer] += out.shape[0] * out.shape[1]

        return record

    handles = [b.act.register_forward_hook(hook(i)) for i, b in enumerate(model.blocks)]
    was_training = model.training
    model.eval()
    try:
        for i in range(0, images.shape[0], batch_size):
            model(images[i : i + batch_size])
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return [(s / max(n, 1)).float() for s, n in zip(sums, counts, strict=True)]
