"""`rayworks run mvc` / `rayworks bench mvc`: MambaVoiceCloning's SSM-only conditioning
stack (arm b) against the attention/LSTM stack (`mvc_attn`, arm a) under one fixed decoder
on a local espeak-ng corpus (`docs/mvc.md`; the CPU recipe is reconstructed).

One run: build or find the cached corpus (`corpus.py`), pretrain or find the cached fixed
decoder and CTC recognizer (`shared.py`, two parallel pieces), then fan out every arm
(`train.arm_piece`: train with checkpoints, evaluate, write Griffin-Lim samples) and, in
the method run, the encoder scaling pieces (`scaling.py`); finally the streaming check
(chunked causal encoder = full causal run). Ablations (c) no gates and (d) no AdaLN are
bench arms `mvc[nogate]`, `mvc[noadaln]`. Artifacts: `table.jsonl`, `table.md`,
`loss_curves.png`, `scaling.png`, `samples/*.wav`. `mvc_attn` and `mvc_meanprosody` (the
floor of the stack: flat per-utterance prosody from the style alone) are declared in-run:
the method run trains both under the same fixed decoder and recognizer for its pass rule
(parity on MCD above the decoder floor, `report.pass_rule`), so bench reads their rows from
the method's summary (`attn_` / `meanprosody_` keys) instead of training them twice.
Every arm's summary holds `mcd_above_floor` (MCD minus the decoder on ground-truth
features) and, beside a mean-prosody arm, `gain_vs_meanprosody`.
"""

from __future__ import annotations

from typing import Any

import torch

from rayworks.pipelines.mvc.config import MVCConfig
from rayworks.pipelines.mvc.corpus import find_espeak, read_corpus
from rayworks.pipelines.mvc.evaluate import reference_metrics
from rayworks.pipelines.mvc.report import (
    QUALITY,
    floor_metrics,
    pass_rule,
    slopes,
    write_plots,
    write_table,
)
from rayworks.pipelines.mvc.scaling import scaling_piece
from rayworks.pipelines.mvc.shared import build_piece, corpus_folder, load_decoder, load_recognizer
from rayworks.pipelines.mvc.stacks import CausalTextEncoder
from rayworks.pipelines.mvc.train import arm_piece
from rayworks.platform.context import RunContext
from rayworks.platform.fanout import fan_out
from rayworks.platform.registry import Arm, InRun, pipeline

REPORT = (
    "mcd",
    "gain_vs_meanprosody",
    "mcd_dtw",
    "log_f0_rmse",
    "log_dur_mae",
    "per",
    "pass_rule",
)
FLOORS = ("mcd_decoder_floor", "per_ground_truth")  # the same for every arm of a run
SCALED = ("attn", "mvc", "mvc_causal")


def run_piece(kind: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """One fan-out piece (module level, so Ray workers can import it)."""
    fn = {"build": build_piece, "arm": arm_piece, "scaling": scaling_piece}[kind]
    return fn(**kwargs)


def label_of(cfg: MVCConfig) -> str:
    if cfg.arm != "mvc":
        return cfg.arm
    tags = [
        t
        for t, on in (
            ("nogate", cfg.stack.fusion == "concat"),
            ("noadaln", cfg.stack.style == "concat"),
        )
        if on
    ]
    return "_".join(["mvc", *tags])


def streaming_gap(vocab_size: int, stack: dict[str, Any], seed: int) -> float:
    """max |chunked - full| of the causal encoder on a 300-token sequence, chunks of 37."""
    torch.manual_seed(seed)
    enc = CausalTextEncoder(vocab_size, {**stack, "dropout": 0.0}).eval()
    ids = torch.randint(1, vocab_size, (1, 300))
    with torch.no_grad():
        return float((enc(ids)[0] - enc.stream(ids, 37)).abs().max())


def run_mvc(cfg: MVCConfig, ctx: RunContext) -> dict[str, float]:
    torch.set_num_threads(1)
    find_espeak(cfg.corpus.espeak_bin)
    dump = cfg.model_dump(mode="json")
    label = label_of(cfg)
    ctx.progress(cfg.train.steps, f"mvc {label} (+{len(cfg.compare)} compared arms)")
    folder, _ = corpus_folder(dump["corpus"], ctx.cache_root)
    built = fan_out(
        run_piece,
        [
            {"kind": "build", "kwargs": {"what": w, "corpus_folder": str(folder), "cfg": dump[w]}}
            for w in ("decoder", "recognizer")
        ],
        threads=1,
    )
    arms = [(label, cfg.arm)] + [(a, a) for a in cfg.compare]
    calls = [
        {
            "kind": "arm",
            "kwargs": {
                "label": lab,
                "arm": arm,
                "cfg": dump,
                "corpus_folder": str(folder),
                "ctx": ctx,
                "seed": cfg.seed,
            },
        }
        for lab, arm in arms
    ]
    if cfg.scaling is not None:
        calls += [
            {
                "kind": "scaling",
                "kwargs": {"kind": k, "stack": dump["stack"], "scaling": dump["scaling"]},
            }
            for k in SCALED
        ]
    done = fan_out(run_piece, calls, threads=1)
    results = [r for r in done if r["kind"] == "arm"]
    scaling = [r for r in done if r["kind"] == "scaling"]

    corpus = read_corpus(folder)
    vocab = len(corpus.vocab)
    decoder, recognizer = (
        load_decoder(folder, dump["decoder"], vocab),
        load_recognizer(folder, dump["recognizer"], vocab),
    )
    floors = reference_metrics(
        decoder, recognizer, corpus, cfg.seed, ctx.artifacts_dir / "samples", cfg.griffin_lim_iters
    )
    extra = {
        "stream_max_abs_diff": streaming_gap(vocab, dump["stack"], cfg.seed),
        "decoder_final_l1": built[0]["final_loss"],
        "recognizer_final_ctc": built[1]["final_loss"],
        "n_utterances": len(corpus.texts),
        "vocab_size": vocab,
    }
    slope = slopes(scaling, cfg.scaling.fit_from) if cfg.scaling is not None else {}
    by_label = {r["label"]: r for r in results}
    floor = floors["mcd_decoder_floor"]
    mean_prosody = by_label.get("meanprosody", {}).get("mcd")
    for r in results:
        r.update(floor_metrics(r["mcd"], floor, mean_prosody))
    summary: dict[str, float] = {**floors, **extra, **slope}
    for r in results:
        prefix = "" if r["label"] == label else f"{r['label']}_"
        for key in (*QUALITY, "mcd_above_floor", "gain_vs_meanprosody", "params", "train_seconds"):
            if key in r:
                summary[prefix + key] = r[key]
    if cfg.arm == "mvc":
        summary.update(
            pass_rule(
                by_label[label],
                by_label.get("attn"),
                by_label.get("meanprosody"),
                floor,
                slope,
                cfg.parity_tolerance,
                cfg.slope_band,
            )
        )
    write_table(ctx, results, floors, scaling, slope, extra)
    write_plots(ctx, results, scaling)
    ctx.log(cfg.train.steps, **{k: v for k, v in summary.items() if k in QUALITY})
    return summary


@pipeline(
    "mvc",
    config=MVCConfig,
    kind="task",
    arms={
        "mvc_attn": Arm(
            "StyleTTS2-like stack: Transformer text encoder + BiLSTM duration / prosody predictors.",
            {"arm": "attn", "compare": [], "scaling": None},
            {"smoke": {"scaling": None}},
            in_run=InRun(
                "trained in the method run under the same fixed decoder and recognizer "
                "for its parity pass rule",
                member="attn",
                prefix="attn_",
                shared=FLOORS,
            ),
        ),
        "mvc_meanprosody": Arm(
            "The floor of the stack: flat per-utterance durations / F0 / voicing / energy "
            "predicted from the style alone, through the same frozen decoder.",
            {"arm": "meanprosody", "compare": [], "scaling": None},
            {"smoke": {"scaling": None}},
            in_run=InRun(
                "trained in the method run under the same fixed decoder: the pass rule "
                "measures MCD above the decoder floor against it",
                member="meanprosody",
                prefix="meanprosody_",
                shared=FLOORS,
            ),
        ),
    },
    headline=("mcd_above_floor", "min"),
    ablations={
        "nogate": ("stack.fusion=concat", "compare=[]", "scaling=null"),
        "noadaln": ("stack.style=concat", "compare=[]", "scaling=null"),
    },
    report=REPORT,
)
def run(cfg: MVCConfig, ctx: RunContext) -> dict[str, float]:
    """MVC: gated Bi-Mamba + temporal Bi-Mamba + expressive Mamba with AdaLN (espeak-ng TTS)."""
    return run_mvc(cfg, ctx)
