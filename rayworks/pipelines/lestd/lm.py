"""The LM LeSTD compresses: a char-level decoder trained on Python standard-library sources.

Data: `n_files` top-level `Lib/*.py` files of the running Python (found through
`sysconfig.get_paths()["stdlib"]`), sorted by name, files above `max_file_kb` skipped,
then evenly spaced picks (deterministic). The platform's `lm` pieces do the rest: its
`prepare` (char tokenizer trained on the training files, files held out by a seeded
permutation with `val_fraction`, packing into rows) and the plain single-process loop of
`lm_plain` (AdamW, warmup + cosine schedule, seeded batch order).

The model is a pure function of (config, seed), so it is trained once and cached under
`<cache root>/lestd_lm/lm-<hash>/` (HF safetensors + tokenizer + `val.safetensors` with the
held-out rows); concurrent runs of a bench wait on a file lock and share it.
"""

from __future__ import annotations

import json
import math
import sysconfig
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from rayworks.core.build_cache import digest, locked_build
from rayworks.evals.lm_metrics import loss_sum
from rayworks.models import decoder_for, load_causal_lm
from rayworks.pipelines.lestd.config import StdlibLMConfig
from rayworks.pipelines.lm.config import LMConfig
from rayworks.pipelines.lm.data import prepare
from rayworks.pipelines.lm.plain import plain_steps


def stdlib_files(n_files: int, max_file_kb: int) -> list[str]:
    """`n_files` evenly spaced stdlib `*.py` files (sorted by name) of at most `max_file_kb`."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.stat().st_size <= max_file_kb * 1024)
    if len(files) < n_files:
        raise ValueError(
            f"lm.n_files={n_files}: only {len(files)} stdlib files in {root} are at most "
            f"lm.max_file_kb={max_file_kb} KB"
        )
    picks = [math.floor(i * len(files) / n_files) for i in range(n_files)]
    return [str(files[i]) for i in picks]


def lm_config(cfg: StdlibLMConfig, seed: int) -> LMConfig:
    """The platform `lm` config equivalent to `cfg` (data, model and schedule)."""
    return LMConfig.model_validate(
        {
            "seed": seed,
            "model": cfg.model.model_dump(),
            "tokenizer": {"kind": "char"},
            "data": {
                "source": "files",
                "files": stdlib_files(cfg.n_files, cfg.max_file_kb),
                "val_fraction": cfg.val_fraction,
                "seq_len": cfg.seq_len,
            },
            "train": {
                "num_workers": 1,
                "batch_size": cfg.batch_size,
                "max_steps": cfg.steps,
                "lr": cfg.lr,
                "warmup_steps": cfg.warmup_steps,
            },
        }
    )


def monitor_slice(n_val: int, monitor_rows: int) -> slice:
    """The LM's validation rows: the last `monitor_rows` held-out rows (all if fewer)."""
    return slice(max(0, n_val - monitor_rows), n_val)


def train(
    cfg: LMConfig, out: Path, monitor_rows: int = 128, monitor_every: int = 100
) -> dict[str, float]:
    """Train `cfg` with the `lm_plain` loop and save model, tokenizer and held-out rows.

    Every `monitor_every` steps (and at the end) the validation bits/char on the last
    `monitor_rows` held-out rows is written to `train_log.jsonl` (`val_bpc`): the split that
    chooses the LM's budget and schedule. The pipeline's reported (test) bits/char uses the
    first `eval.val_rows` held-out rows, which it checks are disjoint from these.
    """
    tokenizer, data = prepare(cfg)
    torch.manual_seed(cfg.seed)
    model = decoder_for(cfg.model, tokenizer)
    monitor = data.val_ids[monitor_slice(len(data.val_ids), monitor_rows)]
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "train_log.jsonl").open("w")
    last = cfg.train.max_steps
    val_bpc = math.nan
    for step, loss, _ in plain_steps(model, data, cfg):
        done = step + 1
        if done % monitor_every == 0 or done == last:
            model.eval()
            with torch.no_grad():
                total, count = loss_sum(model, monitor, monitor, 16)
            model.train()
            val_bpc = total / max(1, count) / math.log(2)
            elapsed = time.perf_counter() - started
            record = {"step": done, "loss": loss, "val_bpc": val_bpc, "s": elapsed}
            log.write(json.dumps(record) + "\n")
            log.flush()
    log.close()
    model.eval()
    total, count = loss_sum(model, data.val_ids[:64], data.val_labels[:64], 16)
    stats = {
        "train_s": time.perf_counter() - started,
        "final_train_loss": float(loss),
        "lm_val_bpc": total / max(1, count) / math.log(2),
        "lm_monitor_bpc": val_bpc,
        "train_rows": len(data.train_ids),
        "val_rows": len(data.val_ids),
    }
    tokenizer.save_pretrained(out)
    save_file({"val_ids": data.val_ids.contiguous()}, str(out / "val.safetensors"))
    model.save_pretrained(out)
    (out / "train.json").write_text(json.dumps(stats, indent=1))  # last: the "done" marker
    return stats


def lm_folder(cfg: StdlibLMConfig, seed: int, cache_root: Path) -> tuple[Path, LMConfig]:
    """Cache folder and platform config of the LM for run seed `seed` (`cfg.seed` wins).

    The folder name hashes the platform `lm` config only (data, model, schedule, seed), so
    the monitoring knobs do not change it and other pipelines find the same LM.
    """
    full = lm_config(cfg, seed if cfg.seed is None else cfg.seed)
    return cache_root / "lestd_lm" / f"lm-{digest(full.model_dump_json())}", full


def cached_lm(cfg: StdlibLMConfig, seed: int, cache_root: Path) -> tuple[Path, dict[str, float]]:
    """The trained LM's folder (built once per (config, LM seed)) and its training stats."""
    folder, full = lm_folder(cfg, seed, cache_root)
    locked_build(
        folder,
        folder / "train.json",
        lambda: train(full, folder, cfg.monitor_rows, cfg.monitor_every),
    )
    return folder, json.loads((folder / "train.json").read_text())


def load_lm(folder: Path) -> tuple[torch.nn.Module, torch.Tensor]:
    """(model in eval mode, held-out rows (N, T) of token ids)."""
    model = load_causal_lm(folder).eval()
    return model, load_file(str(folder / "val.safetensors"))["val_ids"]
