"""The decoder grid: named decoding recipes, one evaluation pass, and paired speedups.

Every decoder of a run sees the same model, the same test prompts and, per gen length, the
same random stream. Speedups are ratios measured in one run: FLOP proxies (`token_cost`,
`pair_cost`, see `decode.py`) and wall-clock seconds per sample. They are reported against
`vanilla` (full suffix, one token per step, no early termination) **and** against
`vanilla_et` (the same with early termination), kept apart because the paper mixes them.
"""

from __future__ import annotations

import time

import torch
from transformers import PreTrainedModel

from rayworks.pipelines.dpad.config import DPadConfig
from rayworks.pipelines.dpad.decode import Decoder, generate
from rayworks.pipelines.dpad.dropout import SuffixDropout
from rayworks.pipelines.dpad.tasks import EOS, Batch, extract_answer
from rayworks.platform.stats import paired_ci

METRICS = ("acc", "sec", "nfe", "tokens", "pairs", "tok")
# decoder -> (the decoder it is paired with for its own speedup row in the table)
PAIRS = {
    "dpad_et": "vanilla_et",
    "dpad_det_et": "vanilla_et",
    "dpad_uniform_et": "vanilla_et",
    "w0_et": "vanilla_et",
    "parallel_dpad_et": "parallel_et",
    "parallel_cache_dpad_et": "parallel_cache_et",
}
# (decoder, reference): exact-match differences reported with a paired 95% CI over the test
# prompts: each suffix variant against full suffix attention (and DPad composed with
# parallel decoding / prefix cache against the same without it), Gaussian against uniform
# at equal count, and no suffix (W = 0) against DPad.
ACC_DIFFS = (*PAIRS.items(), ("dpad_et", "dpad_uniform_et"), ("w0_et", "dpad_et"))


def decoder(name: str, cfg: DPadConfig) -> Decoder:
    """The recipe behind a grid name."""
    d = cfg.dropout
    gaussian = SuffixDropout("gaussian", d.window, d.k, d.a)
    dropout = {
        "dpad_et": gaussian,
        "dpad_det_et": SuffixDropout("deterministic", d.window, d.k, d.a),
        "dpad_uniform_et": SuffixDropout("uniform", d.window, d.k, d.a),
        "w0_et": SuffixDropout("gaussian", 0, d.k, d.a),
        "parallel_dpad_et": gaussian,
        "parallel_cache_dpad_et": gaussian,
    }.get(name, SuffixDropout("full"))
    return Decoder(
        threshold=cfg.threshold if name.startswith("parallel") else None,
        early_stop=name.endswith("_et"),
        prefix_cache="_cache" in name,
        dropout=dropout,
    )


def evaluate(
    model: PreTrainedModel, batch: Batch, gen_length: int, name: str, cfg: DPadConfig
) -> tuple[dict[str, float], list[list[int]], list[bool]]:
    """Accuracy and mean per-sample costs of decoder `name` on `batch` at `gen_length`,
    the decoded answers, and per prompt whether it is an exact match."""
    dec = decoder(name, cfg)
    gen = torch.Generator().manual_seed(cfg.seed * 100_003 + gen_length)
    n, p = batch.prompts.shape
    outputs, nfe, tokens, pairs, tok = [], 0.0, 0.0, 0.0, 0.0
    t0 = time.perf_counter()
    for lo in range(0, n, cfg.eval_batch):
        res = generate(
            model,
            batch.prompts[lo : lo + cfg.eval_batch],
            gen_length,
            cfg.block_length,
            dec,
            EOS,
            gen,
        )
        outputs += [extract_answer(row[p:]) for row in res.tokens]
        answers = batch.answers[lo : lo + cfg.eval_batch]
        tok += sum(
            token_accuracy(row[p:], ans) for row, ans in zip(res.tokens, answers, strict=True)
        )
        nfe += float(res.nfe.sum())
        tokens += float(res.token_cost.sum())
        pairs += float(res.pair_cost.sum())
    sec = time.perf_counter() - t0
    correct = [out == ans for out, ans in zip(outputs, batch.answers, strict=True)]
    row = {
        "acc": sum(correct) / n,
        "sec": sec / n,
        "nfe": nfe / n,
        "tokens": tokens / n,
        "pairs": pairs / n,
        "tok": tok / n,
    }
    for task in sorted(set(batch.tasks)):
        hits = [c for c, t in zip(correct, batch.tasks, strict=True) if t == task]
        row[f"acc_{task}"] = sum(hits) / len(hits)
    return row, outputs, correct


def token_accuracy(generated: torch.Tensor, answer: list[int]) -> float:
    """Share of the target's positions (answer, then its EOS) decoded right: partial credit
    beside exact match, for models that get few answers entirely right."""
    target = torch.tensor([*answer, EOS])
    return float((generated[: target.numel()] == target).float().mean())


def speedups(row: dict[str, float], ref: dict[str, float]) -> dict[str, float]:
    """Cost ratios ref / row (> 1: `row` is cheaper) for the FLOP proxies and wall-clock."""
    return {
        "tokens": ref["tokens"] / row["tokens"],
        "pairs": ref["pairs"] / row["pairs"],
        "wall": ref["sec"] / row["sec"],
        "nfe": ref["nfe"] / row["nfe"],
    }


def accuracy_diffs(correct: dict[str, list[bool]]) -> dict[str, float]:
    """`{name}/acc_diff_vs_{ref}` (and `_lo`, `_hi`: the paired 95% CI) for each pair of
    `ACC_DIFFS` whose decoders both ran; `correct[name]` is per test prompt, same order."""
    out: dict[str, float] = {}
    for name, ref in ACC_DIFFS:
        if name in correct and ref in correct:
            key = f"{name}/acc_diff_vs_{ref}"
            out[key], out[f"{key}_lo"], out[f"{key}_hi"] = paired_ci(correct[name], correct[ref])
    return out


def flat_row(
    gen_length: int, results: dict[str, dict[str, float]], correct: dict[str, list[bool]]
) -> dict[str, float]:
    """One log record: every decoder's metrics, speedups vs vanilla / vanilla_et, and the
    paired accuracy differences of `ACC_DIFFS`."""
    out: dict[str, float] = {"gen_length": float(gen_length), **accuracy_diffs(correct)}
    for name, row in results.items():
        out.update(
            {f"{name}/{m}": v for m, v in row.items() if m in METRICS or m.startswith("acc_")}
        )
        for ref in ("vanilla", "vanilla_et"):
            if ref in results and ref != name:
                for k, v in speedups(row, results[ref]).items():
                    out[f"{name}/speedup_{k}_vs_{ref}"] = v
        pair = PAIRS.get(name)
        if pair in results:
            for k, v in speedups(row, results[pair]).items():
                out[f"{name}/speedup_{k}_vs_{pair}"] = v
    return out
