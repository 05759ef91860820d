"""The per-worker training loop of `lm`, run by Ray Train's TorchTrainer on every rank.

setup (model, optimizer, strategy, resume) -> train (log / eval / checkpoint) -> final eval.

Resuming: on start the loop restores the newest complete checkpoint of the run directory
(the same path serves `rayworks run --resume` and Ray Train's FailureConfig restarts):
model weights, optimizer state (per rank under ZeRO), every rank's RNG, and the step
counter, which is also the whole dataloader state (see `data.batch_rows`).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rayworks.core import checkpoint as ckpt
from rayworks.data.tasks import get_task
from rayworks.evals.lm_metrics import exact_match, loss_sum, perplexity
from rayworks.models import decoder_for, load_causal_lm, load_tokenizer
from rayworks.pipelines.lm.config import LMConfig
from rayworks.pipelines.lm.data import LMData, batch_rows, data_state
from rayworks.platform.atomic import save_model_dir
from rayworks.platform.context import RunContext


def lr_at(step: int, cfg: LMConfig) -> float:
    """Linear warmup, then cosine decay to `min_lr_ratio * lr` at `max_steps`."""
    t = cfg.train
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    progress = (step - t.warmup_steps) / max(1, t.max_steps - t.warmup_steps)
    floor = t.lr * t.min_lr_ratio
    return floor + (t.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


class Dist:
    """Rank, world size and sum all-reduce; a single process when not distributed."""

    def __init__(self) -> None:
        self.on = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.on else 0
        self.world = dist.get_world_size() if self.on else 1

    def total(self, *values: float) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64)
        if self.on:
            dist.all_reduce(t)
        return t.tolist()

    def barrier(self) -> None:
        if self.on:
            dist.barrier()


class Learner:
    """Model + optimizer under the configured strategy (DDP or DeepSpeed ZeRO).

    `train` is any config with the optimizer fields of `TrainConfig` (strategy, zero_stage,
    lr, weight_decay, grad_clip, keep_checkpoints); the RL learner shares this class.
    `micro_batch` is the rows one rank feeds per optimizer step (DeepSpeed bookkeeping).
    """

    def __init__(self, train: Any, model: torch.nn.Module, d: Dist, micro_batch: int) -> None:
        self.train, self.d = train, d
        self.deepspeed = train.strategy == "deepspeed"
        if self.deepspeed:
            import deepspeed

            ds_config = {
                "train_micro_batch_size_per_gpu": max(1, micro_batch),
                "gradient_accumulation_steps": 1,
                "gradient_clipping": train.grad_clip,
                "optimizer": {
                    "type": "AdamW",
                    "params": {
                        "lr": train.lr,
                        "weight_decay": train.weight_decay,
                        "torch_adam": True,
                    },
                },
                "zero_optimization": {"stage": train.zero_stage},
            }
            self.engine, self.optimizer, _, _ = deepspeed.initialize(
                model=model, model_parameters=model.parameters(), config=ds_config
            )
            self.module = self.engine.module
        else:
            import ray.train.torch

            self.optimizer = torch.optim.AdamW(
                model.parameters(), lr=train.lr, weight_decay=train.weight_decay
            )
            self.engine = ray.train.torch.prepare_model(model) if d.on else model
            self.module = model

    def step(self, ids: torch.Tensor, labels: torch.Tensor, lr: float) -> float:
        """One next-token-prediction step on `ids`; returns the loss."""
        return self.apply(self.engine(input_ids=ids, labels=labels).loss, lr)

    def apply(self, loss: torch.Tensor, lr: float) -> float:
        """Backward `loss` (computed through `self.engine`) and take one optimizer step."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if self.deepspeed:
            self.engine.backward(loss)
            self.engine.step()
        else:
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.train.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.engine.parameters(), self.train.grad_clip)
            self.optimizer.step()
        return float(loss.detach())

    def optimizer_state(self) -> Any:
        """The optimizer's state as a pickle-free tree.

        ZeRO's state holds two objects: the loss scaler (kept as its plain fields) and the
        parameter slice mappings (only needed for DeepSpeed's universal checkpoints, and
        rebuilt at initialisation, so not stored).
        """
        state = self.optimizer.state_dict()
        if self.deepspeed:
            scaler = state.pop("loss_scaler", None)
            state.pop("param_slice_mappings", None)
            state["loss_scaler_fields"] = {
                k: v
                for k, v in vars(scaler or object()).items()
                if isinstance(v, bool | int | float | str | None)
            }
        return state

    def load_optimizer_state(self, state: Any) -> None:
        if not self.deepspeed:
            self.optimizer.load_state_dict(state)
            return
        scaler = self.optimizer.loss_scaler
        vars(scaler).update(state.pop("loss_scaler_fields", {}))
        state["loss_scaler"] = scaler
        # ZeRO reads the entry of this rank; the saved fp32 partitions restore exactly.
        self.optimizer.load_state_dict([state] * self.d.world, load_from_fp32_weights=True)

    def optimizer_file(self) -> str:
        """ZeRO partitions optimizer state per rank; DDP keeps one full copy (rank 0's)."""
        return f"optimizer_rank{self.d.rank}" if self.deepspeed else "optimizer"


def save_checkpoint(
    ctx: RunContext,
    learner: Learner,
    tokenizer: Any,
    step: int,
    extra: dict,
    write_more: Callable[[Path], None] | None = None,
) -> None:
    """Collective: every rank writes its RNG (and ZeRO optimizer shard) into one folder.

    `write_more(folder)` runs on rank 0 before the folder is published (e.g. RL critics).
    """
    d, final = learner.d, ctx.checkpoint_dir(step)
    tmp = final.with_name(f".tmp-{final.name}")
    if d.rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        learner.module.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        state = {
            "step": step,
            "data": extra["data"],
            "world_size": d.world,
            "metrics": extra["metrics"],
        }
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2))
    d.barrier()
    ckpt.save_tree(tmp, f"rng_rank{d.rank}", ckpt.rng_state())
    if learner.deepspeed or d.rank == 0:
        ckpt.save_tree(tmp, learner.optimizer_file(), learner.optimizer_state())
    if write_more is not None and d.rank == 0:
        write_more(tmp)
    d.barrier()
    if d.rank == 0:
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        ckpt.prune(ctx.checkpoints_dir, learner.train.keep_checkpoints)
    d.barrier()


def restore(latest: Any, learner: Learner, d: Dist) -> tuple[int, dict[str, float]]:
    """Load optimizer and RNG state from `latest`; return its step and last train metrics."""
    state = json.loads((latest / "trainer_state.json").read_text())
    if learner.deepspeed and state["world_size"] != d.world:
        raise RuntimeError(
            f"checkpoint {latest} holds ZeRO shards for {state['world_size']} ranks; "
            f"resume with train.num_workers={state['world_size']}"
        )
    learner.load_optimizer_state(ckpt.load_tree(latest, learner.optimizer_file()))
    rng_file = latest / f"rng_rank{d.rank}.json"
    if rng_file.is_file():
        ckpt.set_rng_state(ckpt.load_tree(latest, f"rng_rank{d.rank}"))
    return int(state["step"]), dict(state.get("metrics") or {})


@torch.no_grad()
def validation(
    learner: Learner, data: LMData, cfg: LMConfig, d: Dist, full: bool = False
) -> dict[str, float]:
    per_rank = max(1, cfg.train.batch_size // d.world)
    rows = (
        len(data.val_ids)
        if full
        else min(len(data.val_ids), cfg.eval.val_batches * per_rank * d.world)
    )
    mine = torch.arange(d.rank, rows, d.world)
    learner.module.eval()
    total, count = loss_sum(learner.module, data.val_ids[mine], data.val_labels[mine], per_rank)
    learner.module.train()
    total, count = d.total(total, count)
    val_loss = total / max(1.0, count)
    return {"val_loss": val_loss, "val_ppl": perplexity(val_loss)}


def train_loop(config: dict[str, Any]) -> dict[str, float]:
    """Entry point of every Ray Train worker (and of a single local process)."""
    import ray

    cfg = LMConfig.model_validate(config["cfg"])
    data: LMData = (
        ray.get(config["data"]) if isinstance(config["data"], ray.ObjectRef) else config["data"]
    )
    d = Dist()
    ctx: RunContext = config["ctx"].worker(config.get("reporter", "none"), d.rank)
    torch.set_num_threads(cfg.train.threads_per_worker)
    tokenizer = load_tokenizer(ctx.artifacts_dir / "tokenizer")

    latest = ctx.latest_checkpoint()
    ctx.seed_everything()
    model = load_causal_lm(latest) if latest is not None else decoder_for(cfg.model, tokenizer)
    learner = Learner(cfg.train, model, d, cfg.train.batch_size // d.world)
    start, last = restore(latest, learner, d) if latest is not None else (0, {})
    ctx.seed_everything(offset=1 + d.rank + start)  # per-rank stream, distinct after resume
    if latest is not None:
        ctx.truncate_metrics(start)
        ctx.record(start, resumed_from_step=start)

    n_rows, per_rank = len(data.train_ids), cfg.train.batch_size // d.world
    window_loss, window_steps, window_tokens, window_start = 0.0, 0, 0, time.perf_counter()
    for step in range(start, cfg.train.max_steps):
        rows = batch_rows(n_rows, cfg.train.batch_size, cfg.seed, step)[d.rank :: d.world]
        loss = learner.step(data.train_ids[rows], data.train_labels[rows], lr_at(step, cfg))
        window_loss += loss
        window_steps += 1
        window_tokens += per_rank * data.train_ids.shape[1]
        done = step + 1
        if done % cfg.train.log_every == 0 or done == cfg.train.max_steps:
            elapsed = time.perf_counter() - window_start
            mean_loss, tokens = d.total(window_loss / window_steps / d.world, window_tokens)
            last = {
                "loss": mean_loss,
                "lr": lr_at(step, cfg),
                "tokens_per_s": tokens / max(elapsed, 1e-9),
            }
            ctx.log(done, **last)
            window_loss, window_steps, window_tokens, window_start = 0.0, 0, 0, time.perf_counter()
        if done % cfg.train.eval_every == 0 and done < cfg.train.max_steps:
            ctx.log(done, **validation(learner, data, cfg, d))
        if done % cfg.train.checkpoint_every == 0 or done == cfg.train.max_steps:
            state = data_state(n_rows, cfg.train.batch_size, cfg.seed, done)
            save_checkpoint(ctx, learner, tokenizer, done, {"data": state, "metrics": last})

    final = validation(learner, data, cfg, d, full=True)
    if cfg.eval.exact_match and data.test:
        em = {}
        if d.rank == 0:
            em, samples = exact_match(
                learner.module,
                tokenizer,
                get_task(cfg.data.task),
                data.test,
                cfg.eval.max_new_tokens,
            )
            ctx.write_jsonl("samples.jsonl", samples)
        final["exact_match"] = d.total(em.get("exact_match", 0.0))[0]
        final.update({k: v for k, v in em.items() if k != "exact_match"})
    final["train_loss"] = last.get("loss", float("nan"))
    final["tokens_per_s"] = last.get("tokens_per_s", float("nan"))
    ctx.record(cfg.train.max_steps, **final)  # reported below, with the model
    model_dir = ctx.artifacts_dir / "model"
    if d.rank == 0:
        save_model_dir(model_dir, learner.module, tokenizer)  # whole or absent
    d.barrier()
    if config.get("in_train"):
        # Train V2 keeps metrics only with a checkpoint: attach the final model, which
        # also makes it reachable from the trainer's Result on remote storage.
        final_ckpt = ray.train.Checkpoint.from_directory(str(model_dir)) if d.rank == 0 else None
        ray.train.report(final, checkpoint=final_ckpt)
    return final
