"""SophiaVL-R1 Trust-GRPO: a tiny VLM policy, a thinking reward model, trust and annealing."""

from rayworks.pipelines.trust_grpo import trust  # noqa: F401  (registers the pipelines)
