"""The models RL starts from: an SFT'd policy and pretrained critic backbones.

RL from a random policy on a sparse exact-answer reward gets no signal, so the policy is
first fine-tuned on the task's traces by the platform's `lm` training loop (completion
tokens only, one example per row) for a short budget, which leaves it partially
competent. Critics are smaller LMs trained the same way (AsyPPO's "pretrained small
critics"), sharing the policy's tokenizer so token ids line up.

A base model is a pure function of its LM config, so it is built once and cached under
`<cache root>/base/<name>-<hash>/` (`runs/cache/` by default): every arm and seed of a bench (and every later
run) starts from the very same weights. Concurrent runs wait on a file lock while the
first one builds it; an interrupted build resumes from its checkpoint.

`policy.init_from` skips the SFT: RL starts from that folder. A run on a prompt file
(`data.prompts`) has no traces to pretrain critics on, so unless `critic.path` names a
backbone (or `critic.pretrained=false` asks for a random one), each critic's backbone
starts from the policy's own weights, as OpenRLHF initialises its critic from the actor
when no critic model is given; the critic is then as large as the policy, not small.
"""

from __future__ import annotations

import json
from pathlib import Path

from rayworks.core.build_cache import digest, locked_build
from rayworks.models import DecoderSpec, load_tokenizer, resolve_model_dir
from rayworks.models.decoder import decoder_for
from rayworks.pipelines.lm.config import LMConfig
from rayworks.pipelines.rl.config import RLConfig, SFTConfig
from rayworks.platform.context import RunContext


def sft_config(task: str, model: DecoderSpec, sft: SFTConfig, max_new_tokens: int) -> LMConfig:
    """The `lm` config that fine-tunes `model` on `task`'s traces (completion loss only)."""
    return LMConfig.model_validate(
        {
            "seed": sft.seed,
            "model": model.model_dump(),
            "data": {
                "source": "task",
                "task": task,
                "n_train": sft.n_train,
                "n_val": 64,
                "n_test": sft.n_test,
                "seq_len": min(sft.seq_len, model.max_seq_len),
                "packing": False,
                "loss_on": "completion",
            },
            "train": {
                "num_workers": 1,
                "batch_size": sft.batch_size,
                "max_steps": sft.steps,
                "lr": sft.lr,
                "warmup_steps": min(50, sft.steps // 10),
                "log_every": max(1, sft.steps // 10),
                "eval_every": sft.steps,
                "checkpoint_every": max(1, sft.steps // 2),
                "keep_checkpoints": 1,
            },
            "eval": {
                "val_batches": 2,
                "exact_match": sft.n_test > 0,
                "max_new_tokens": max_new_tokens,
            },
        }
    )


def vocabulary(tokenizer_from: Path | None) -> str:
    """The tokenizer's content (not its path) for cache keys: same vocabulary, same key."""
    return (tokenizer_from / "tokenizer.json").read_text() if tokenizer_from else ""


def cache_key(name: str, cfg: LMConfig, extra: str = "") -> str:
    blob = json.dumps(cfg.model_dump(mode="json"), sort_keys=True) + extra
    return f"{name}-{digest(blob)}"


def build_base(cache: Path, name: str, cfg: LMConfig, tokenizer_from: Path | None = None) -> Path:
    """SFT `cfg` once into `cache/<name>-<hash>/`; returns its HF model folder.

    `tokenizer_from` makes the model reuse that folder's tokenizer (critics use the
    policy's); its content is part of the cache key.
    """
    from rayworks.pipelines.lm.pipeline import prepare_run
    from rayworks.pipelines.lm.train_loop import train_loop

    run_dir = cache / cache_key(name, cfg, vocabulary(tokenizer_from))
    model_dir = run_dir / "artifacts" / "model"

    def build() -> None:
        ctx = RunContext(pipeline="lm", run_dir=run_dir, seed=cfg.seed)
        for sub in (ctx.artifacts_dir, ctx.checkpoints_dir):
            sub.mkdir(parents=True, exist_ok=True)
        ctx.write_config(cfg)
        if tokenizer_from is not None:
            load_tokenizer(tokenizer_from).save_pretrained(ctx.artifacts_dir / "tokenizer")
        _, data = prepare_run(cfg, ctx)
        summary = train_loop({"cfg": cfg.model_dump(mode="json"), "ctx": ctx, "data": data})
        ctx.write_summary(summary)

    locked_build(run_dir, model_dir / "config.json", build)
    return model_dir


def random_backbone(cache: Path, spec: DecoderSpec, tokenizer_from: Path, seed: int) -> Path:
    """A randomly initialised backbone of `spec` (the "critics need no pretraining" ablation)."""
    import torch

    out = cache / f"random-{digest(f'{spec.model_dump_json()}{vocabulary(tokenizer_from)}{seed}')}"

    def build() -> None:
        tokenizer = load_tokenizer(tokenizer_from)
        torch.manual_seed(seed)
        decoder_for(spec, tokenizer).save_pretrained(out)
        tokenizer.save_pretrained(out)

    return locked_build(out, out / "config.json", build)


def base_summary(model_dir: Path) -> dict[str, float]:
    """The SFT run's final metrics (exact match of the base) where it wrote them."""
    path = model_dir.parent.parent / "summary.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if isinstance(v, int | float)}


def base_models(cfg: RLConfig, cache_root: Path) -> tuple[Path, Path | None]:
    """(policy folder, critic backbone folder or None) for an RL config, building as needed."""
    cache = cache_root / "base"
    max_new = cfg.rollout.sampling.max_new_tokens
    if cfg.policy.init_from:
        policy = resolve_model_dir(cfg.policy.init_from)
    else:
        policy = build_base(
            cache, "policy", sft_config(cfg.task, cfg.policy.model, cfg.policy.sft, max_new)
        )
    critic_cfg = cfg.critic_config()
    if critic_cfg is None:
        return policy, None
    if critic_cfg.path:
        return policy, resolve_model_dir(critic_cfg.path)
    if cfg.data.prompts and critic_cfg.pretrained:
        return policy, policy  # a prompt file has no traces to pretrain on (docstring)
    spec = cfg.policy.model if critic_cfg.symmetric else critic_cfg.model
    if not critic_cfg.pretrained:
        return policy, random_backbone(cache, spec, policy, cfg.policy.sft.seed)
    sft = sft_config(cfg.task, spec, cfg.policy.sft, max_new)
    return policy, build_base(cache, "critic", sft, tokenizer_from=policy)
