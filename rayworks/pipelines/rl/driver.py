"""What every RL pipeline's driver does: base models, actor groups, the Ray Train learner.

The driver (a `kind="job"` pipeline) builds or finds the base policy and critic backbones,
starts the rollout-engine actors (unless the engine is colocated with the learner,
`platform/rollout_group.py`) and the critic actors, and hands their handles to a
`TorchTrainer` whose workers run `learner.rl_loop`. A method only supplies its `estimate`
function (rewards + critic values -> advantages, masks, critic targets). A run on a prompt
file first writes its rejects (`rejects.jsonl`) and puts the line counts in its summary.
"""

from __future__ import annotations

from pathlib import Path

from rayworks.core.errors import ConfigError
from rayworks.pipelines.rl.base import base_models, base_summary
from rayworks.pipelines.rl.config import RLConfig
from rayworks.pipelines.rl.critic import make_critics
from rayworks.pipelines.rl.learner import EstimateFn, rl_loop
from rayworks.pipelines.rl.prompts import record_prompt_files
from rayworks.platform.context import RunContext
from rayworks.platform.rollout import make_engine_group
from rayworks.platform.rollout_group import resolve_placement
from rayworks.platform.trainer import fit_metrics, torch_trainer


def check_fits(cfg: RLConfig, placement: str) -> None:
    """Fail now, naming the resource, when the cluster can never hold the run's actors."""
    import ray

    have = ray.cluster_resources()
    for key, need in cfg.ray_resources(placement).items():
        if need > have.get(key, 0.0) + 1e-9:
            raise ConfigError(
                f"this run needs {need:g} {key} (learner workers + rollout engines + critics) "
                f"but the cluster has {have.get(key, 0.0):g}. Lower learner.num_workers, "
                f"rollout.num_engines, rollout.engine_resources or critic.resources."
            )


def run_rl(
    cfg: RLConfig,
    ctx: RunContext,
    estimate: EstimateFn,
    models: tuple[Path, Path | None, dict[str, float]] | None = None,
) -> dict[str, float]:
    """Run `cfg` with the method's `estimate`. `models` = (policy folder, critic folder or
    None, summary entries) when the method builds its own base models (else `base_models`)."""
    import ray

    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    placement = resolve_placement(cfg.rollout.placement, cfg.rollout.engine, nodes)
    check_fits(cfg, placement)
    # a prompt file's rejects and counts, written before any model is built or actor starts
    prompts = record_prompt_files(cfg, ctx.run_dir) if cfg.data.prompts else {}
    if models is None:
        policy_dir, critic_dir = base_models(cfg, ctx.cache_root)
        summary = base_summary(policy_dir)
        base = {f"base_{k}": v for k, v in summary.items() if k == "exact_match"}
    else:
        policy_dir, critic_dir, base = models
    ro = cfg.rollout
    chat = getattr(cfg.policy, "chat_template", True)  # a VLM policy's config has no such key
    engines = []
    if placement == "separate":
        engines = make_engine_group(
            ro.engine,
            policy_dir,
            ro.num_engines,
            ro.engine_resources,
            ro.max_engine_restarts,
            ctx.run_id,
            chat_template=chat,
            **ro.engine_kwargs(),
        )
    critic_cfg, critics = cfg.critic_config(), []
    if critic_cfg is not None and critic_dir is not None:
        critics = make_critics(
            critic_cfg, critic_dir, ctx.run_dir / "critics", ctx.run_id, cfg.seed
        )
    ctx.progress(cfg.learner.max_steps, ctx.pipeline)
    loop_config = {
        "config_class": type(cfg),
        "cfg": cfg.model_dump(mode="json"),
        "policy_dir": str(policy_dir),
        "engines": engines,
        "placement": placement,
        "critics": critics,
        "estimate": estimate,
    }
    trainer = torch_trainer(
        rl_loop,
        loop_config,
        ctx,
        num_workers=cfg.learner.num_workers,
        use_gpu=cfg.learner.use_gpu,
        cpus_per_worker=cfg.learner.cpus_per_worker,
        max_failures=cfg.learner.max_failures,
    )
    try:
        metrics = fit_metrics(trainer)
    finally:
        for actor in engines + critics:
            ray.kill(actor, no_restart=True)
    return {**metrics, **base, **prompts, "colocated": float(placement == "colocated")}
