"""`rayworks serve ttc`: the router's flags and start-up, registered with the platform as
the "serve_target" extension `ttc` (`platform/serve_targets.py`)."""

from __future__ import annotations

import argparse

from rayworks.pipelines.ttc.router_api import ROUTER_LIMITS, RouterSettings
from rayworks.platform.registry import extension
from rayworks.platform.serve_targets import ServeTarget, limit_flags


def add_args(p: argparse.ArgumentParser) -> None:
    """Flags of `rayworks serve ttc` (the router's server defaults; requests may override)."""
    g = p.add_argument_group("ttc router (target ttc)")
    g.add_argument("--rule", default="elimination", help="default allocation rule")
    g.add_argument("--budget", type=int, default=8, help="default samples per prompt")
    g.add_argument("--k", type=int, default=1, help="samples per selected prompt per round")
    g.add_argument("--stop", choices=["oracle", "consistency"], help="default: oracle if --oracle")
    g.add_argument("--aggregate", choices=["majority", "best_score"])
    g.add_argument("--cap-factor", type=float, default=2.0, help="max_samples = cap x budget")
    g.add_argument("--window-ms", type=float, default=20.0, help="batching window")
    g.add_argument("--answer-pattern", default=r"A:\s*(\S+)", help="final-answer regex")
    g.add_argument("--oracle", help="module:function(prompt, completion) -> score (trusted code)")
    g.add_argument("--min-replicas", type=int, default=1, help="per model deployment")
    g.add_argument("--max-replicas", type=int, default=2, help="per model deployment")
    g.add_argument("--model-cpus", type=float, default=1.0, help="CPUs per model replica")


def serve(args: argparse.Namespace, api_key: str | None) -> None:
    """Check the flags and checkpoints, then join the cluster and serve the router."""
    from rayworks.core.config import validate
    from rayworks.pipelines.ttc.router import serve_ttc
    from rayworks.platform.cluster import connect
    from rayworks.platform.serve import checked_model_dir

    stop = args.stop or ("oracle" if args.oracle else "consistency")
    allocator = {"rule": args.rule, "k": args.k, "stop": stop}
    settings = validate(
        RouterSettings,
        {
            "allocator": allocator,
            "budget": args.budget,
            "aggregate": args.aggregate,
            "cap_factor": args.cap_factor,
            "window_ms": args.window_ms,
            "answer_pattern": args.answer_pattern,
            "oracle": args.oracle,
            "limits": limit_flags(args, ROUTER_LIMITS),
        },
        origin="serve ttc flags",
    )
    for checkpoint in args.checkpoint:
        checked_model_dir(checkpoint)  # fails here, before Ray, if anything is missing
    if args.address:
        connect(args.address)
    serve_ttc(
        args.checkpoint,
        settings,
        host=args.host,
        port=args.port,
        api_key=api_key,
        insecure_no_auth=args.insecure_no_auth,
        docs=args.docs,
        min_replicas=args.min_replicas,
        max_replicas=args.max_replicas,
        model_cpus=args.model_cpus,
        max_ongoing_requests=args.max_ongoing_requests or TARGET.max_ongoing_requests,
        max_queued_requests=args.max_queued_requests or TARGET.max_queued_requests,
        blocking=True,
    )


TARGET = extension("serve_target", "ttc")(
    ServeTarget(
        help="the TTC router: bandit test-time compute over several model deployments",
        add_args=add_args,
        serve=serve,
        limits=ROUTER_LIMITS,
        max_ongoing_requests=32,
        max_queued_requests=64,
    )
)
