"""The RL training loop, run by every Ray Train worker; rank 0 also drives the other roles.

One step:
1. rank 0 draws the step's prompts (a pure function of seed and step: the step counter is
   the whole data position), samples G responses each from the rollout source (engine
   actors, or an engine colocated with this worker: `platform/rollout_group.py`), scores them
   with the reward components, asks the critic actors for values (in parallel) and lets
   the method (`estimate`) turn rewards and values into advantages, masks and critic
   targets; the critic updates start right away and run while the policy trains;
2. the batch is broadcast and every rank trains the policy on its slice of each
   minibatch (clipped-ratio loss from `algo.POLICY_LOSSES`, optional KL and entropy bonus);
3. rank 0 waits for the critics and pushes the new weights to the engines as version
   step + 1, so the next step's rollouts come from exactly the updated policy.

`rollout.mode=async` moves generation off the critical path: step t submits step t+1's
generation before it trains, so those rows come from version t (one step off-policy,
bounded by `rollout.max_staleness`) while step t's update runs; each row keeps the version
that sampled it and its logprobs, which are the ratio's denominator. A resumed async run
generates its first step from the restored weights (lag 0).

Checkpoints (collective) hold the policy, optimizer, every rank's RNG, the step, and each
critic's model and optimizer; a resumed run (or a learner restarted by Ray Train) reloads
them and rolls the engines back to the checkpoint's weights and version. A fresh start
rolls them back to the initial weights as version 0 the same way (`StepDriver.begin`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rayworks.core.errors import RayworksError
from rayworks.data.tasks import Example
from rayworks.models import load_causal_lm, load_tokenizer
from rayworks.models.vlm import load_processor, pixel_values
from rayworks.pipelines.lm.data import batch_rows
from rayworks.pipelines.lm.train_loop import Dist, Learner, restore, save_checkpoint
from rayworks.pipelines.rl.algo import POLICY_LOSSES, entropy_from_logits, kl_estimate, masked_mean
from rayworks.pipelines.rl.batch import Estimate, RolloutBatch, make_batch
from rayworks.pipelines.rl.config import RLConfig
from rayworks.pipelines.rl.evaluate import evaluate_split, response_logits
from rayworks.pipelines.rl.prompts import prompt_set
from rayworks.pipelines.rl.rewards import CombinedReward
from rayworks.platform.atomic import save_model_dir
from rayworks.platform.context import RunContext
from rayworks.platform.rollout import Rollout, StaleWeightsError
from rayworks.platform.rollout_group import (
    EngineGroup,
    LocalRollout,
    Pending,
    RolloutSource,
    check_lag,
    get_within,
)

EstimateFn = Callable[[Any, RolloutBatch, "torch.Tensor | None", int], Estimate]
GAINS = ("accuracy", "sampled_accuracy", "pass_at_k")  # summary keys with a `_gain`
SUMMARY_SKIP = {
    "step",
    "time",
    "lr",
    "step_s",
    "gen_s",
    "sync_s",
    "update_s",
    "gen_tokens_per_s",
    "engine_restarts",
    "reward_retries",
}


def shuffled(
    totals: list[float], parts: dict[str, list[float]], seed: int
) -> tuple[list[float], dict[str, list[float]]]:
    """Rewards (and their components) permuted over the batch's rows by a seeded draw."""
    perm = torch.randperm(len(totals), generator=torch.Generator().manual_seed(seed)).tolist()
    return [totals[i] for i in perm], {k: [v[i] for i in perm] for k, v in parts.items()}


def broadcast(obj: Any, d: Dist) -> Any:
    """Rank 0's `obj` on every rank (our own tensors between our own processes)."""
    if not d.on:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def lr_at(step: int, cfg: RLConfig) -> float:
    """Linear warmup over `warmup_steps`, then constant or cosine decay to
    `min_lr_ratio * lr` at `max_steps`."""
    t = cfg.learner
    if step < t.warmup_steps:
        return t.lr * (step + 1) / t.warmup_steps
    if t.schedule == "constant":
        return t.lr
    progress = (step - t.warmup_steps) / max(1, t.max_steps - t.warmup_steps)
    floor = t.lr * t.min_lr_ratio
    return floor + (t.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


class StepDriver:
    """Rank 0's side of a step: prompts, rollouts, rewards, critics, evaluation, weight sync."""

    def __init__(
        self,
        cfg: RLConfig,
        ctx: RunContext,
        source: RolloutSource,
        critics: list[Any],
        estimate: EstimateFn,
        pad: int,
        processor: Any = None,
    ) -> None:
        self.cfg, self.ctx, self.source, self.critics = cfg, ctx, source, critics
        self.estimate, self.pad, self.processor = estimate, pad, processor
        self.data = prompt_set(cfg)  # the same for every RL seed and arm
        self.reward = CombinedReward(cfg.reward_specs())
        self.pending: list[Any] = []
        self.ahead: dict[int, Pending] = {}  # async: the next step's generation in flight

    def prompts(self, step: int) -> list[Example]:
        pool = self.data.train
        rows = batch_rows(len(pool), self.cfg.rollout.prompts_per_step, self.cfg.seed, step)
        return [pool[i] for i in rows.tolist()]

    def images(self, examples: list[Example]) -> list[Any] | None:
        """The examples' images for a vision-language policy (None for a text policy)."""
        if self.processor is None:
            return None
        missing = [i for i, e in enumerate(examples) if e.image is None]
        if missing:
            raise RayworksError(
                f"the policy is a vision-language model but task {self.cfg.task!r} gave "
                f"examples without an image (e.g. #{missing[0]}); use an image task."
            )
        return [e.image for e in examples]

    def submit(self, examples: list[Example], n: int, sampling: Any, what: str) -> Pending:
        prompts, images = [e.prompt for e in examples], self.images(examples)
        return self.source.submit(prompts, n, sampling, images, what)

    def rollouts(self, examples: list[Example], n: int, sampling: Any, step: int) -> list[Rollout]:
        """Rollouts of the current weights (version `step`): evaluation."""
        out = self.submit(examples, n, sampling, f"evaluation at step {step}").result()
        if any(r.version != step for r in out):
            versions = sorted({r.version for r in out})
            raise StaleWeightsError(f"step {step} got rollouts of weight versions {versions}")
        return out

    def sampling(self, step: int) -> Any:
        seed = (self.cfg.seed * 1_000_003 + step) % 2**31
        return self.cfg.rollout.sampling.model_copy(update={"seed": seed})

    def launch(self, step: int) -> Pending:
        """Submit step `step`'s training generation (prompts and seed: pure functions of it)."""
        g = self.cfg.rollout.group_size
        return self.submit(self.prompts(step), g, self.sampling(step), f"training step {step}")

    def collect(self, step: int) -> tuple[RolloutBatch, Estimate, dict[str, float], list[dict]]:
        cfg, g = self.cfg, self.cfg.rollout.group_size
        started = time.perf_counter()
        examples = self.prompts(step)
        pending = self.ahead.pop(step, None) or self.launch(step)
        if cfg.rollout.mode == "async" and step + 1 < cfg.learner.max_steps:
            self.ahead[step + 1] = self.launch(step + 1)  # queued behind this step's rows
        rollouts = pending.result()
        lags = check_lag(rollouts, step, cfg.rollout.max_staleness)
        gen_s = time.perf_counter() - started  # async: only the wait not hidden by training
        per_item = [examples[r.prompt_index] for r in rollouts]
        texts = [r.text for r in rollouts]
        totals, parts = self.reward(per_item, texts)
        accuracy = [self.data.verify(e, t) for e, t in zip(per_item, texts, strict=True)]
        if cfg.shuffle_rewards:  # the no-signal control: rewards permuted within the batch
            totals, parts = shuffled(totals, parts, cfg.seed * 1_000_003 + step)
        images = self.images(examples)  # one per prompt, indexed per rollout row
        pixels = None
        if images is not None:
            pixels = pixel_values(self.processor, images)[[r.prompt_index for r in rollouts]]
        batch = make_batch(rollouts, totals, self.pad, pixels, parts)
        values = None
        if self.critics:
            refs = [c.values.remote(batch) for c in self.critics]
            values = torch.stack(self.get(refs, f"critic values at step {step}"))
        est = self.estimate(cfg, batch, values, step)
        if self.critics and est.returns is not None:
            self.pending = [
                c.update.remote(batch, est.returns, rows, step + 1)
                for c, rows in zip(self.critics, est.critic_rows, strict=True)
            ]
        n_tokens = float(batch.response_mask.sum())
        spread = batch.rewards.view(-1, g).std(dim=1, unbiased=False) > 0
        stats = {
            "reward": float(torch.tensor(totals).mean()),
            "accuracy": sum(accuracy) / len(accuracy),
            "informative_groups": float(spread.float().mean()),
            "response_len": n_tokens / len(rollouts),
            "finished_frac": sum(r.finished for r in rollouts) / len(rollouts),
            "gen_s": gen_s,
            "gen_tokens_per_s": n_tokens / max(gen_s, 1e-9),
            "rollout_lag": sum(lags) / len(lags),
            "rollout_lag_max": float(max(lags)),
            "engine_restarts": float(self.source.restarts),
            "reward_retries": float(self.reward.retries()),
            **{f"reward/{k}": sum(v) / len(v) for k, v in parts.items()},
            **est.stats,
        }
        samples = [
            {"split": "train", "prompt": e.prompt, "completion": t, "reward": r, "answer": e.answer}
            for e, t, r in list(zip(per_item, texts, totals, strict=True))[: cfg.eval.samples]
        ]
        return batch, est, stats, samples

    def get(self, refs: list[Any], what: str) -> list[Any]:
        """Results of calls to the critic actors, each with the run's deadline."""
        timeout = self.cfg.rollout.call_timeout_s
        return [get_within(r, timeout, f"critic {i}, {what}") for i, r in enumerate(refs)]

    def finish(self, step: int, weights: dict[str, torch.Tensor]) -> dict[str, float]:
        """Wait for the critic updates, then publish the policy as version step + 1 (async:
        queued behind the generation in flight, without waiting for it)."""
        stats: dict[str, float] = {}
        if self.pending:
            results = self.get(self.pending, f"critic update at step {step}")
            self.pending = []
            for key in results[0]:
                stats[key] = sum(r[key] for r in results) / len(results)
        started = time.perf_counter()
        self.source.load(weights, step + 1, wait=self.cfg.rollout.mode == "sync")
        stats["sync_s"] = time.perf_counter() - started
        return stats

    def evaluate(
        self, step: int, split: str, policy: torch.nn.Module, ref: torch.nn.Module
    ) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """Held-out metrics of `split` through the engines (rl/evaluate.py lists them)."""
        metrics, samples = evaluate_split(
            lambda examples, n, sampling: self.rollouts(examples, n, sampling, step),
            self.data,
            split,
            self.cfg.rollout.sampling,
            self.cfg.eval.samples_per_prompt,
            self.pad,
            policy,
            ref,
            self.eval_pixels if self.processor is not None else None,
        )
        return metrics, samples[: self.cfg.eval.samples]

    def eval_pixels(self, examples: list[Example], drawn: list[Rollout]) -> torch.Tensor | None:
        images = self.images(examples)
        if images is None:
            return None
        return pixel_values(self.processor, images)[[r.prompt_index for r in drawn]]

    def save_critics(self, folder: Path) -> None:
        self.get([c.save.remote(str(folder)) for c in self.critics], "critic save")

    def begin(self, folder: Path | None, step: int, weights: dict[str, torch.Tensor]) -> None:
        """Put the other roles where the learner starts: the critics restored from the
        checkpoint `folder` (None: a fresh start), the rollout source rolled back to the
        learner's `weights` as version `step`, also at step 0: engine actors outlive a Ray
        Train attempt, so one restarted before the first checkpoint finds them at the
        version the failed attempt reached, and a step-0 shard lost with a killed engine
        is generated again from this kept copy (rollout_group.EngineGroup)."""
        if folder is not None:
            self.get([c.restore.remote(str(folder)) for c in self.critics], "critic restore")
        self.source.load(weights, step, rollback=True)

    def critic_info(self) -> list[dict[str, float]]:
        return self.get([c.info.remote() for c in self.critics], "critic info")


def token_logp(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)


@torch.no_grad()
def logp_of(model: Any, batch: RolloutBatch, temperature: float = 1.0) -> torch.Tensor:
    """log pi(o_t | s_t) of the batch's response tokens under `model` at `temperature`,
    no gradient."""
    return token_logp(response_logits(model, batch, temperature), batch.responses)


def monitors(
    logp: torch.Tensor,
    sub: RolloutBatch,
    ref: Any,
    ref_logp: torch.Tensor | None,
    cfg: RLConfig,
    step: int,
) -> dict[str, float]:
    """KL to the reference and the engine-vs-learner logprob gap, on the step's first
    minibatch before any update (free: its forward is the training forward)."""
    mask = sub.response_mask
    stats = {"rollout_logp_gap": float(masked_mean((logp - sub.old_logp).abs(), mask))}
    every = cfg.loss.kl_monitor_every
    if ref_logp is not None or (every and step % every == 0):
        temp = cfg.rollout.sampling.temperature
        ref_logp = logp_of(ref, sub, temp) if ref_logp is None else ref_logp
        kl = kl_estimate(logp, ref_logp, cfg.loss.kl_estimator)
        stats["kl"] = float(masked_mean(kl, mask))
    return stats


def policy_update(
    learner: Learner,
    ref: Any,
    batch: RolloutBatch,
    est: Estimate,
    cfg: RLConfig,
    d: Dist,
    step: int,
) -> dict[str, float]:
    """`ppo_epochs` x `minibatches` clipped-ratio steps; every rank trains on its share."""
    loss_cfg, temp = cfg.loss, cfg.rollout.sampling.temperature
    ref_logp = logp_of(ref, batch, temp) if loss_cfg.kl_coef else None  # KL needs every row
    recompute = loss_cfg.old_logprobs == "recompute"
    old_logp = logp_of(learner.module, batch, temp) if recompute else batch.old_logp
    loss_fn = POLICY_LOSSES[loss_cfg.policy_loss]
    gen = torch.Generator().manual_seed(cfg.seed * 7919 + step)
    n, mb = batch.input_ids.shape[0], batch.input_ids.shape[0] // loss_cfg.minibatches
    sums: dict[str, float] = {"policy_loss": 0.0, "clip_frac": 0.0, "entropy": 0.0}
    watched: dict[str, float] = {}
    updates = 0
    for _ in range(loss_cfg.ppo_epochs):
        perm = torch.randperm(n, generator=gen)
        for j in range(loss_cfg.minibatches):
            rows = perm[j * mb : (j + 1) * mb][d.rank :: d.world]
            sub = batch.rows(rows)
            logits = response_logits(learner.engine, sub, temp)
            logp = token_logp(logits, sub.responses)
            entropy = entropy_from_logits(logits)
            sub_ref = None if ref_logp is None else ref_logp[rows]
            if not watched:
                watched = monitors(logp.detach(), sub, ref, sub_ref, cfg, step)
            part = est.select(rows)
            loss, st = loss_fn(
                logp,
                old_logp[rows],
                part.advantages,
                sub.response_mask,
                eps_low=loss_cfg.eps_low,
                eps_high=loss_cfg.eps_high,
                adv_mask=part.adv_mask,
                entropy=entropy,
                entropy_coef=loss_cfg.entropy_coef,
                entropy_mask=part.entropy_mask,
                agg=loss_cfg.agg,
            )
            if sub_ref is not None:
                kl = kl_estimate(logp, sub_ref, loss_cfg.kl_estimator)
                loss = loss + loss_cfg.kl_coef * masked_mean(kl, sub.response_mask)
            sums["policy_loss"] += learner.apply(loss, lr_at(step, cfg))
            sums["clip_frac"] += st["clip_frac"]
            sums["entropy"] += float(masked_mean(entropy.detach(), sub.response_mask))
            updates += 1
    return {**{k: v / updates for k, v in sums.items()}, **watched, "lr": lr_at(step, cfg)}


def rollout_source(
    cfg: RLConfig, config: dict[str, Any], module: torch.nn.Module, processor: Any, tok: Any
) -> RolloutSource:
    """Rank 0's rollout source: the engine actors the driver started, or an hf engine
    around this worker's own policy module (`platform/rollout_group.py`)."""
    ro = cfg.rollout
    if config.get("placement", "separate") == "separate":
        group = EngineGroup(config["engines"], ro.call_timeout_s, ro.max_engine_restarts)
        group.start()
        return group
    text_tok = getattr(tok, "tokenizer", tok)  # a VLM's processor holds its tokenizer
    chat = getattr(cfg.policy, "chat_template", True)
    return LocalRollout.around(module, text_tok, processor, chat, ro.mode == "async")


def rl_loop(config: dict[str, Any]) -> dict[str, float]:
    """Entry point of every Ray Train worker of an RL run."""
    import ray

    cfg: RLConfig = config["config_class"].model_validate(config["cfg"])
    d = Dist()
    ctx: RunContext = config["ctx"].worker(config.get("reporter", "none"), d.rank)
    torch.set_num_threads(cfg.learner.threads_per_worker)
    policy_dir = Path(config["policy_dir"])
    processor = load_processor(policy_dir)  # a VLM's; None for a text policy
    tokenizer = processor or load_tokenizer(policy_dir)  # what checkpoints save beside weights
    latest = ctx.latest_checkpoint()
    ctx.seed_everything()
    model = load_causal_lm(latest if latest is not None else policy_dir)
    rows = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    learner = Learner(cfg.learner, model, d, rows // cfg.loss.minibatches // d.world)
    ref = load_causal_lm(policy_dir).eval()
    start, _ = restore(latest, learner, d) if latest is not None else (0, {})
    ctx.seed_everything(offset=1 + d.rank + start)
    driver = None
    if d.rank == 0:
        pad_id = getattr(tokenizer, "tokenizer", tokenizer).pad_token_id
        driver = StepDriver(
            cfg,
            ctx,
            rollout_source(cfg, config, learner.module, processor, tokenizer),
            config["critics"],
            config["estimate"],
            pad_id or 0,
            processor,
        )
        driver.begin(latest, start, learner.module.state_dict())
    if latest is not None:
        ctx.truncate_metrics(start)
        ctx.record(start, resumed_from_step=start)
    else:
        evaluate_and_log(driver, ctx, d, 0, learner.module, ref)

    critic_cfg = cfg.critic_config()
    warmup = critic_cfg.warmup_steps if critic_cfg is not None else 0
    for step in range(start, cfg.learner.max_steps):
        started = time.perf_counter()
        payload = driver.collect(step) if driver is not None else None
        batch, est, stats, samples = broadcast(payload, d)
        if step >= warmup:
            update_started = time.perf_counter()
            stats.update(policy_update(learner, ref, batch, est, cfg, d, step))
            stats["update_s"] = time.perf_counter() - update_started
        if driver is not None:
            stats.update(driver.finish(step, learner.module.state_dict()))
        done = step + 1
        stats["step_s"] = time.perf_counter() - started
        if done % cfg.learner.log_every == 0 or done == cfg.learner.max_steps:
            ctx.record(done, **stats)  # files only: a Train report per step would cost a barrier
        if done % cfg.learner.eval_every == 0 or done == cfg.learner.max_steps:
            evaluate_and_log(driver, ctx, d, done, learner.module, ref, samples)
        if done % cfg.learner.checkpoint_every == 0 or done == cfg.learner.max_steps:
            extra = {"data": {"step": done}, "metrics": {}}
            write_critics = driver.save_critics if driver is not None and driver.critics else None
            save_checkpoint(ctx, learner, tokenizer, done, extra, write_critics)

    final = summarize(ctx, driver, d, learner.module)
    model_dir = ctx.artifacts_dir / "model"
    if d.rank == 0:
        driver.source.close()
        save_model_dir(model_dir, learner.module, tokenizer)  # whole or absent
        if driver.critics:
            driver.save_critics(ctx.artifacts_dir)
    d.barrier()
    if config.get("in_train"):
        final_ckpt = ray.train.Checkpoint.from_directory(str(model_dir)) if d.rank == 0 else None
        ray.train.report(final, checkpoint=final_ckpt)
    return final


def evaluate_and_log(
    driver: StepDriver | None,
    ctx: RunContext,
    d: Dist,
    step: int,
    policy: torch.nn.Module,
    ref: torch.nn.Module,
    train_samples: list[dict] | None = None,
) -> None:
    """Held-out metrics of every `eval.splits` at `step` (all ranks log them); samples to
    artifacts/samples/."""
    metrics: dict[str, float] = {}
    if driver is not None:
        rows: list[dict] = []
        for split in driver.cfg.eval.splits:
            found, samples = driver.evaluate(step, split, policy, ref)
            metrics.update(found)
            rows += samples
        folder = ctx.artifacts_dir / "samples"
        folder.mkdir(exist_ok=True)
        rows += train_samples or []
        (folder / f"step_{step:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ctx.log(step, **broadcast(metrics, d))


def summarize(
    ctx: RunContext, driver: StepDriver | None, d: Dist, module: torch.nn.Module
) -> dict[str, float]:
    """The run's summary from its own metrics log (complete also after a resume)."""
    final: dict[str, float] = {}
    if d.rank == 0:
        records = ctx.metrics()
        prefixes = tuple(f"{split}_" for split in driver.cfg.eval.splits)
        evals = [r for r in records if any(f"{p}accuracy" in r for p in prefixes)]
        trains = [r for r in records if "reward" in r]
        tail = trains[-max(1, len(trains) // 5) :]  # the last fifth of training
        final["test_accuracy"] = (
            evals[-1].get("test_accuracy", float("nan")) if evals else float("nan")
        )
        for key, value in (evals[-1] if evals else {}).items():  # e.g. test_step_correct
            if key.startswith(prefixes) and isinstance(value, int | float):
                final[key] = value
                final[f"base_{key}"] = evals[0].get(key, float("nan"))
        for split in driver.cfg.eval.splits:
            best = [r[f"{split}_accuracy"] for r in evals if f"{split}_accuracy" in r]
            final[f"best_{split}_accuracy"] = max(best, default=float("nan"))
            for metric in GAINS:  # the change from the base policy, paired within the run
                key = f"{split}_{metric}"
                if key in final:
                    final[f"{key}_gain"] = final[key] - final[f"base_{key}"]
        for key in dict.fromkeys(k for r in tail for k in r if k not in SUMMARY_SKIP):
            values = [r[key] for r in tail if isinstance(r.get(key), int | float)]
            if values:  # means over the last fifth of training
                final[key] = sum(values) / len(values)
        times = [r["step_s"] for r in trains if "step_s" in r][1:] or [float("nan")]
        final["seconds_per_step"] = sum(times) / len(times)
        final["policy_params"] = float(sum(p.numel() for p in module.parameters()))
        info = driver.critic_info() if driver.critics else []
        final["critic_params"] = float(sum(i["params"] for i in info))
        final["critic_restarts"] = float(sum(i["restarts"] for i in info))
        final["engine_restarts"] = float(driver.source.restarts)
        final["reward_retries"] = float(driver.reward.retries())
    return broadcast(final, d)
