"""RL post-training: rollouts, advantages, policy losses, rewards, and the grpo/ppo/asyppo pipelines."""
