"""`lm_plain`: the baseline `lm` is measured against — one process, a plain PyTorch loop.

Same data, tokenizer, model, batch order, schedule and steps as `lm`; no Ray Train, no
DDP, no checkpoints. `rayworks bench lm` compares the two (quality should match), and
`benchmarks/lm_train.py` compares their throughput (the platform's overhead).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from rayworks.data.tasks import get_task
from rayworks.evals.lm_metrics import exact_match, loss_sum, perplexity
from rayworks.models import decoder_for
from rayworks.pipelines.lm.config import LMConfig
from rayworks.pipelines.lm.data import LMData, batch_rows, prepare
from rayworks.pipelines.lm.train_loop import lr_at
from rayworks.platform.context import RunContext
from rayworks.platform.registry import pipeline


def plain_threads(cfg: LMConfig) -> int:
    """The same CPU budget as the Ray run: workers x threads per worker."""
    return cfg.train.num_workers * cfg.train.threads_per_worker


def plain_steps(
    model: torch.nn.Module, data: LMData, cfg: LMConfig
) -> Iterator[tuple[int, float, int]]:
    """The plain loop's optimizer steps, with `lm`'s batch order and schedule: yields
    (step index, loss, rows in the batch) after each step."""
    t = cfg.train
    opt = torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    for step in range(t.max_steps):
        rows = batch_rows(len(data.train_ids), t.batch_size, cfg.seed, step)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = model(input_ids=data.train_ids[rows], labels=data.train_labels[rows]).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if t.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
        opt.step()
        yield step, float(loss.detach()), len(rows)


class PlainLMConfig(LMConfig):
    presets = LMConfig.presets

    def ray_resources(self) -> dict[str, float]:
        return {"CPU": float(plain_threads(self))}


@pipeline("lm_plain", config=PlainLMConfig, kind="task", headline=("val_loss", "min"))
def run(cfg: PlainLMConfig, ctx: RunContext) -> dict[str, float]:
    """Baseline of lm: the same model, data and steps in a plain single-process PyTorch loop."""
    torch.set_num_threads(plain_threads(cfg))
    tokenizer, data = prepare(cfg)
    ctx.progress(cfg.train.max_steps, "lm_plain")
    ctx.seed_everything()
    model = decoder_for(cfg.model, tokenizer)
    t, seq_len = cfg.train, data.train_ids.shape[1]
    window, tokens, started, last = [], 0, time.perf_counter(), {}
    for step, loss, n_rows in plain_steps(model, data, cfg):
        window.append(loss)
        tokens += n_rows * seq_len
        if (step + 1) % t.log_every == 0 or step + 1 == t.max_steps:
            elapsed = time.perf_counter() - started
            last = {
                "loss": sum(window) / len(window),
                "lr": lr_at(step, cfg),
                "tokens_per_s": tokens / elapsed,
            }
            ctx.log(step + 1, **last)
            window, tokens, started = [], 0, time.perf_counter()
    model.eval()
    total, count = loss_sum(model, data.val_ids, data.val_labels, t.batch_size)
    final = {"val_loss": total / max(1, count)}
    final["val_ppl"] = perplexity(final["val_loss"])
    if cfg.eval.exact_match and data.test:
        em, samples = exact_match(
            model, tokenizer, get_task(cfg.data.task), data.test, cfg.eval.max_new_tokens
        )
        final.update(em)
        ctx.write_jsonl("samples.jsonl", samples)
    final.update(
        {
            "train_loss": last.get("loss", float("nan")),
            "tokens_per_s": last.get("tokens_per_s", float("nan")),
        }
    )
    ctx.log(t.max_steps, **final)
    return final
