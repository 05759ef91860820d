"""The class-specific sub-task: images of the classes in S only, labels kept as digits.

The paper keeps the base classifier's full head: post-training uses cross-entropy over all
ten logits, and S-accuracy is the argmax over all logits on S-test images (checked). So,
unlike `Digits.subset`, labels are not renumbered. `s_logit_accuracy` is the alternative
reading (argmax restricted to the logits of S), reported for the base only as context.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from rayworks.data.digits import Digits, DigitSplit


def keep_classes(split: DigitSplit, classes: Sequence[int]) -> DigitSplit:
    """Only the images of `classes`, labels unchanged (0-9)."""
    keep = torch.isin(split.y, torch.tensor(list(classes)))
    return DigitSplit(split.x[keep], split.y[keep])


def subtask(digits: Digits, classes: Sequence[int]) -> Digits:
    """Train, val and test restricted to `classes` with digit labels."""
    return Digits(
        *(keep_classes(s, classes) for s in (digits.train, digits.val, digits.test)), digits.cfg
    )


@torch.no_grad()
def s_logit_accuracy(model: nn.Module, split: DigitSplit, classes: Sequence[int]) -> float:
    """Accuracy when the prediction is the argmax over the logits of `classes` only."""
    model.eval()
    idx = torch.tensor(list(classes))
    pred = idx[model(split.x)[:, idx].argmax(-1)]
    return float((pred == split.y).float().mean())
