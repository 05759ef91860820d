"""`rayworks run dpad` / `rayworks bench dpad`: DPad suffix dropout vs full suffix attention.

DPad (Chen et al., "DPad: Efficient Diffusion Language Models with Suffix Dropout", ICLR
2026, arXiv 2508.14148). One run trains (or reuses, by config hash) a tiny LLaDA-style
masked diffusion LM on synthetic copy / LSB-first addition tasks, then decodes the same
`n_test` prompts with every decoder of `decoders` at every gen length:

    vanilla             full suffix, one token per step, low-confidence remasking
    vanilla_et          + early termination at EOS
    dpad_et             DPad Gaussian suffix dropout (k, a, W) + ET (the paper's setting)
    dpad_det_et         deterministic profile (reconstructed rule, see dropout.py) + ET
    dpad_uniform_et     uniform sampler, same expected count + ET
    w0_et               W = 0: no suffix at all + ET (the scratchpad ablation)
    parallel[_et]       Fast-dLLM threshold decoding (tau) without / with ET
    parallel_dpad_et    + DPad
    parallel_cache_et   + prefix cache;  parallel_cache_dpad_et: + DPad

It logs one record per gen length (step = gen length), writes `artifacts/grid.jsonl`,
`grid.md`, `grid.png` and `samples.jsonl`, and its summary holds the `method` decoder's
accuracy at the largest gen length (the headline) and its speedups vs `vanilla` and vs
`vanilla_et`, per gen length, plus the methods file's pass rule. Simplifications (named in
docs/dpad.md): fixed-length PAD-left-padded prompts; one token per step for the vanilla
schedule (steps = gen_length); training on gen lengths drawn from `gen_lengths`.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import torch

from rayworks.models.diffusion_lm import load_diffusion_lm
from rayworks.pipelines.dpad.config import DPadConfig
from rayworks.pipelines.dpad.grid import evaluate, flat_row
from rayworks.pipelines.dpad.report import plot, write_grid
from rayworks.pipelines.dpad.tasks import make_batch
from rayworks.pipelines.dpad.train import cached_model, train_summary
from rayworks.platform.context import RunContext
from rayworks.platform.registry import Arm, pipeline

TEST_SEED_OFFSET = 10_007
REPORT = (
    "accuracy_vanilla",
    "accuracy_vanilla_et",
    "speedup_tokens_vs_vanilla",
    "speedup_tokens_vs_vanilla_et",
    "speedup_wall_vs_vanilla",
    "speedup_wall_vs_vanilla_et",
    "accuracy_g64",
    "accuracy_g128",
    "accuracy_g256",
    "accuracy_w0",
    "accuracy_uniform",
    "accuracy_deterministic",
    "speedup_wall_parallel_cache_dpad_vs_vanilla",
    "token_accuracy",
    "token_accuracy_vanilla",
)
CURVES = ("accuracy", "speedup_tokens_vs_vanilla_et")


def pass_rule(rows: list[dict[str, float]]) -> dict[str, float]:
    """Pass rule (reconstructed): acc(DPad+ET) >= acc(vanilla+ET) - 2 points at every length, and
    the token-proxy speedup of DPad+ET over vanilla+ET grows with gen length (1.0 / 0.0)."""
    if not rows or "dpad_et/acc" not in rows[0] or "vanilla_et/acc" not in rows[0]:
        return {}
    acc_ok = all(r["dpad_et/acc"] >= r["vanilla_et/acc"] - 0.02 for r in rows)
    sp = [r["dpad_et/speedup_tokens_vs_vanilla_et"] for r in rows]
    return {
        "pass_accuracy": float(acc_ok),
        "pass_speedup_grows": float(all(b > a for a, b in itertools.pairwise(sp))),
    }


def headline(rows: list[dict[str, float]], method: str) -> dict[str, float]:
    """Summary keys of the `method` decoder (at the largest length unless suffixed _g<G>)."""
    out: dict[str, float] = {}
    for r in rows:
        g = int(r["gen_length"])
        out[f"accuracy_g{g}"] = r[f"{method}/acc"]
        for k in ("tokens", "pairs", "wall"):
            for ref in ("vanilla", "vanilla_et"):
                out[f"speedup_{k}_vs_{ref}_g{g}"] = r.get(f"{method}/speedup_{k}_vs_{ref}", 1.0)
        out.update({f"{key.replace('/', '_')}_g{g}": v for key, v in r.items() if "/" in key})
    last = rows[-1]
    g = int(last["gen_length"])
    out["accuracy"] = out[f"accuracy_g{g}"]
    out["token_accuracy"] = last[f"{method}/tok"]
    prefix = f"{method}/acc_"
    out.update({f"accuracy_{k[len(prefix) :]}": v for k, v in last.items() if k.startswith(prefix)})
    if "vanilla/tok" in last:
        out["token_accuracy_vanilla"] = last["vanilla/tok"]
    for k in ("tokens", "pairs", "wall"):
        for ref in ("vanilla", "vanilla_et"):
            out[f"speedup_{k}_vs_{ref}"] = out[f"speedup_{k}_vs_{ref}_g{g}"]
    named = {
        "vanilla": "vanilla",
        "vanilla_et": "vanilla_et",
        "w0": "w0_et",
        "uniform": "dpad_uniform_et",
        "deterministic": "dpad_det_et",
    }
    for label, name in named.items():
        if f"{name}/acc" in last:
            out[f"accuracy_{label}"] = last[f"{name}/acc"]
    key = "parallel_cache_dpad_et/speedup_wall_vs_vanilla"
    if key in last:
        out["speedup_wall_parallel_cache_dpad_vs_vanilla"] = last[key]
    return out


def run_grid(cfg: DPadConfig, ctx: RunContext) -> dict[str, float]:
    """Train (or reuse) the model, decode the grid, write the artifacts, return the summary."""
    torch.set_num_threads(cfg.num_threads)
    model_dir = cached_model(cfg, ctx.cache_root)
    model = load_diffusion_lm(model_dir)
    test = make_batch(cfg.n_test, cfg.data, np.random.default_rng(cfg.seed + TEST_SEED_OFFSET))
    lengths = sorted(cfg.gen_lengths)
    ctx.progress(lengths[-1], f"dpad grid ({len(cfg.decoders)} decoders, method {cfg.method})")
    rows, samples = [], []
    for g in lengths:
        results, correct = {}, {}
        for name in cfg.decoders:
            results[name], outputs, correct[name] = evaluate(model, test, g, name, cfg)
            samples += [
                {"gen_length": g, "decoder": name, "task": t, "answer": a, "output": o}
                for t, a, o in zip(test.tasks, test.answers, outputs, strict=True)
            ][:4]
        row = flat_row(g, results, correct)
        ctx.log(g, accuracy=row[f"{cfg.method}/acc"], **row)
        rows.append(row)
    write_grid(ctx.artifacts_dir, rows, list(cfg.decoders))
    ctx.write_jsonl("samples.jsonl", samples)
    plot(rows, list(cfg.decoders), ctx.artifacts_dir / "grid.png")
    summary = {**headline(rows, cfg.method), **pass_rule(rows), **train_summary(model_dir)}
    summary["n_test"] = float(cfg.n_test)
    summary["n_params"] = float(sum(p.numel() for p in model.parameters()))
    (ctx.artifacts_dir / "model_dir.json").write_text(json.dumps({"model": str(model_dir)}))
    return summary


@pipeline(
    "dpad",
    config=DPadConfig,
    kind="task",
    arms={
        "dpad_vanilla": Arm(
            "Vanilla masked diffusion decoding (full suffix attention), same model and prompts.",
            {"decoders": ["vanilla", "vanilla_et"], "method": "vanilla"},
        ),
    },
    headline=("accuracy", "max"),
    resources={"CPU": 2},
    ablations={"w0": ("method=w0_et", "decoders=[vanilla,vanilla_et,w0_et]")},
    report=REPORT,
    curves=CURVES,
)
def run(cfg: DPadConfig, ctx: RunContext) -> dict[str, float]:
    """DPad suffix dropout for masked diffusion LMs: the decoder grid, headline DPad + ET."""
    return run_grid(cfg, ctx)
