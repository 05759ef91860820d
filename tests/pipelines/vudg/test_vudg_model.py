"""The video QA model: shapes, order-sensitive options, one step learns."""

from __future__ import annotations

import torch

from rayworks.pipelines.vudg.annotate import option_text
from rayworks.pipelines.vudg.model import VideoQAModel, encode_option, vocabulary


def test_shapes_and_option_order_matters() -> None:
    vocab = vocabulary()
    a, b = (
        encode_option(option_text("grow>spin"), vocab),
        encode_option(option_text("spin>grow"), vocab),
    )
    assert sorted(a) != sorted(b)  # same words, different clause -> different ids
    assert all(i > 0 for i in encode_option(option_text("~pick_up>drop"), vocab)[:6])
    torch.manual_seed(0)
    net = VideoQAModel(len(vocab), width=4, hidden=8)
    video = torch.randint(0, 256, (2, 4, 16, 16, 3), dtype=torch.uint8)
    options = torch.tensor([[a, b, a, b, a, b]] * 4).expand(2, 4, 6, -1)
    logits = net(video, torch.arange(4).expand(2, -1), options)
    assert logits.shape == (2, 4, 6)
    assert not torch.allclose(logits[..., 0], logits[..., 1])
    assert torch.allclose(logits[..., 0], logits[..., 2])


def test_written_out_adamw_matches_torch_and_schedule_shape() -> None:
    from rayworks.pipelines.vudg.train import AdamW, lr_at

    torch.manual_seed(0)
    target = torch.randn(5, 3)
    ours = torch.randn(5, 3, requires_grad=True)
    ref = ours.detach().clone().requires_grad_(True)
    opt = AdamW([ours], weight_decay=0.1)
    ref_opt = torch.optim.AdamW([ref], lr=0.05, weight_decay=0.1)
    for _ in range(20):
        ((ours - target) ** 2).sum().backward()
        opt.step(0.05)
        ref_opt.zero_grad()
        ((ref - target) ** 2).sum().backward()
        ref_opt.step()
    assert torch.allclose(ours, ref, atol=1e-6)
    lrs = [lr_at(s, 100, 1.0) for s in range(100)]
    assert lrs[9] == 1.0 and max(lrs) == 1.0 and lrs[-1] < 1e-3 and lrs[0] == 0.1
