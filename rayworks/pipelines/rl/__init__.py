"""RL post-training: `grpo`, `ppo` and `asyppo` on shared rollout engines and learner."""

from rayworks.pipelines.rl import asyppo, grpo, ppo  # noqa: F401  (registers the pipelines)
