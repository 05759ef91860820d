"""The `rayworks` command: list, run, sweep, serve, submit, jobs, report, bench, eval, demo.

Every subcommand validates its input before Ray starts; a `RayworksError` prints as one
paragraph and exits 2. Heavy imports (ray, torch) happen inside the handlers so `rayworks
list` and error paths stay fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from rayworks.core.errors import ConfigError, RayworksError
from rayworks.platform.registry import extension_names, get_extensions
from rayworks.platform.serve_limits import FLAGS as SERVE_LIMIT_FLAGS
from rayworks.platform.serve_limits import ServeLimits
from rayworks.platform.serve_targets import limit_flags

if TYPE_CHECKING:
    from rayworks.platform.tracking import TrackingConfig

console = Console()
err_console = Console(stderr=True)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", help="named preset of the pipeline's config (e.g. smoke, small)")
    p.add_argument(
        "--config", "-c", action="append", default=[], metavar="FILE", help="YAML config file(s)"
    )
    p.add_argument(
        "--set",
        "-s",
        action="append",
        default=[],
        dest="overrides",
        metavar="KEY=VALUE",
        help="override a config key",
    )


def _add_address(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address",
        help="Ray cluster to join ('auto', HOST:PORT); default: RAY_ADDRESS or embedded local Ray",
    )


def _add_runs_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--runs-dir", help="root of run directories (default: RAYWORKS_RUNS_DIR or ./runs)"
    )


def _add_tracking(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("experiment tracking (the run directory stays the record)")
    g.add_argument(
        "--tracking",
        choices=["none", "mlflow"],
        default="none",
        help="mirror the run(s) into MLflow (the `tracking` extra)",
    )
    g.add_argument(
        "--tracking-uri",
        metavar="URI",
        help="MLflow tracking URI (default: RAYWORKS_TRACKING_URI, else RUNS_DIR/mlruns)",
    )
    g.add_argument(
        "--tracking-artifacts",
        choices=["files", "all"],
        default="files",
        help="files: config, summary, provenance, metrics, HTML; all: the whole run "
        "directory, checkpoints included",
    )


def _tracking(args: argparse.Namespace) -> TrackingConfig:
    """The --tracking flags, checked (a URI without a backend is an error)."""
    from rayworks.core.config import validate
    from rayworks.platform.tracking import TrackingConfig

    flags = {
        "backend": args.tracking,
        "uri": args.tracking_uri,
        "artifacts": args.tracking_artifacts,
    }
    return validate(TrackingConfig, flags, origin="--tracking flags")


def build_parser(serve_target: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rayworks", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="list registered pipelines and evaluations")

    p = sub.add_parser("run", help="run a pipeline")
    p.add_argument("pipeline")
    _add_config_args(p)
    _add_address(p)
    _add_runs_dir(p)
    p.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a killed run from its last checkpoint"
    )
    p.add_argument("--no-progress", action="store_true", help="do not draw a progress bar")
    _add_tracking(p)

    p = sub.add_parser("sweep", help="Ray Tune search over a pipeline's config")
    p.add_argument("pipeline")
    _add_config_args(p)
    _add_address(p)
    _add_runs_dir(p)
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=DIST:ARGS",
        help="e.g. train.lr=loguniform:1e-4:1e-2",
    )
    p.add_argument(
        "--samples",
        type=int,
        default=None,
        help="draws of the search space (Tune's num_samples; a grid repeats that often); "
        "default 1 when every --param is a grid, else 4",
    )
    p.add_argument("--metric", help="metric to optimise (default: the pipeline's headline)")
    p.add_argument("--mode", choices=["min", "max"], help="default: the headline's mode")
    p.add_argument("--scheduler", choices=["fifo", "asha"], default="fifo")
    p.add_argument(
        "--max-concurrent", type=int, default=0, help="trials at once (0 = as resources allow)"
    )
    _add_tracking(p)

    p = sub.add_parser("serve", help="serve a model behind OpenAI-compatible HTTP (Ray Serve)")
    targets = extension_names("serve_target")
    p.add_argument(
        "target",
        choices=["model", *targets],
        help="model: one checkpoint; the others are added by pipelines "
        "(`rayworks serve TARGET --help` shows a target's flags)",
    )
    p.add_argument(
        "--checkpoint",
        required=True,
        action="append",
        help="run dir, checkpoint dir or HF model dir (a target may take several)",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="bind address; beyond loopback it needs an API key"
    )
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--api-key-file", help="require the bearer token in this file (or set RAYWORKS_API_KEY)"
    )
    p.add_argument("--api-key", help="the bearer token itself (visible in ps: prefer the file)")
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve a non-loopback --host without an API key (warned, never the default)",
    )
    p.add_argument("--docs", action="store_true", help="serve /docs and /openapi.json (no key)")
    g = p.add_argument_group(
        "limits per request (400/413/408 naming the flag; a target may accept only some)"
    )
    for key, flag in SERVE_LIMIT_FLAGS.items():
        field = ServeLimits.model_fields[key]
        g.add_argument(
            flag,
            dest=f"limit_{key}",
            type=field.annotation,
            metavar="N" if field.annotation is int else "SECONDS",
            help=f"{field.description} (default {field.default})",
        )
    p.add_argument(
        "--max-ongoing-requests",
        type=int,
        help="per replica of the ingress (model 4; a target sets its own)",
    )
    p.add_argument(
        "--max-queued-requests", type=int, help="then HTTP 503 (model 8; a target sets its own)"
    )
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument(
        "--front",
        choices=["actor", "proxy"],
        help="model only: HTTP through one uvicorn actor (default; ~2 ms) or Serve's proxy "
        "on every node (~8 ms more per request: docs/serving.md)",
    )
    p.add_argument("--name", help="model id shown by /v1/models")
    g = p.add_argument_group("KV-cache policy (target model; requests may override)")
    g.add_argument("--kv-policy", default="full", help="full or a registered policy")
    g.add_argument("--kv-budget", type=int, help="KV entries kept per layer and head")
    g.add_argument("--draft", help="draft model (run dir or HF folder) for draft-based policies")
    g.add_argument("--kv-lookahead", type=int, default=32, help="most draft tokens per prompt")
    if serve_target is not None:
        get_extensions("serve_target")[serve_target].add_args(p)
    _add_address(p)

    p = sub.add_parser("submit", help="submit `rayworks run PIPELINE ARGS` to a cluster (Ray Jobs)")
    p.add_argument("pipeline")
    p.add_argument(
        "--address",
        help="dashboard URL (default: RAY_API_SERVER_ADDRESS, else the one Ray dashboard "
        "running on this machine)",
    )
    p.add_argument("--follow", action="store_true", help="stream the job's logs until it ends")
    p.add_argument("--working-dir", help="upload this folder as the job's working_dir")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable for the job",
    )
    p.add_argument("run_args", nargs="*", help="after --: arguments of `rayworks run`")

    p = sub.add_parser("jobs", help="list submitted jobs and their status")
    p.add_argument("--address", help="dashboard URL")

    p = sub.add_parser("report", help="HTML report of runs and benches")
    p.add_argument("paths", nargs="+")
    p.add_argument("--out", help="output folder or .html file")
    p.add_argument("--title", default="rayworks report")

    p = sub.add_parser("bench", help="a pipeline against its baseline(s): same data, seeds, budget")
    p.add_argument("pipeline")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument(
        "--preset", default="smoke", help="smoke (default), or 'default' for the full config"
    )
    p.add_argument(
        "--set", "-s", action="append", default=[], dest="overrides", metavar="KEY=VALUE"
    )
    p.add_argument(
        "--no-ablations",
        dest="ablations",
        action="store_false",
        help="bench only the method and its baselines, not the pipeline's registered ablations",
    )
    p.add_argument(
        "--ablation",
        action="append",
        dest="only_ablations",
        metavar="LABEL",
        help="bench only these registered ablations (repeatable; default: all of them)",
    )
    p.add_argument(
        "--no-baselines",
        dest="baselines",
        action="store_false",
        help="leave the baseline arms out (the method against its ablations only)",
    )
    p.add_argument(
        "--collect",
        metavar="BENCH_DIR",
        help="run nothing: rewrite bench.md from the runs that finished in BENCH_DIR "
        "(runs/bench/NAME/<id> of a bench that was stopped)",
    )
    p.add_argument(
        "--resume",
        metavar="BENCH_DIR",
        help="finish a stopped bench in BENCH_DIR: give its original options again; runs that "
        "finished there with the same config are kept, the others run",
    )
    _add_address(p)
    _add_runs_dir(p)
    _add_tracking(p)

    p = sub.add_parser("eval", help="run a registered evaluation")
    p.add_argument("evaluation")
    p.add_argument("--checkpoint", help="run dir, checkpoint dir or model dir")
    p.add_argument("--predictions", help="predictions file (jsonl)")
    p.add_argument(
        "--set", "-s", action="append", default=[], dest="overrides", metavar="KEY=VALUE"
    )
    p.add_argument("--out", help="write the metrics as JSON here")
    g = p.add_argument_group("harness (lm-evaluation-harness against the served checkpoint)")
    g.add_argument("--tasks", action="append", metavar="FILE.yaml", help="lm-eval task file")
    g.add_argument("--limit", type=int, metavar="N", help="first N documents per task")
    g.add_argument(
        "--chat", action="store_true", default=None, help="generate through chat completions"
    )

    p = sub.add_parser("demo", help="bench every pipeline with its smoke preset and write a report")
    _add_runs_dir(p)
    _add_address(p)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--only", action="append", default=[], help="limit to these pipelines")
    p.add_argument("--ablations", action="store_true", help="also run every ablation arm")
    return parser


def cmd_list(args: argparse.Namespace) -> int:
    from rayworks.platform.registry import EVALUATIONS, all_pipelines, describe

    table = Table(title="pipelines")
    for col in ("name", "kind", "baseline", "headline", "description"):
        table.add_column(col)
    for spec in all_pipelines():
        table.add_row(*describe(spec).values())
    console.print(table)
    evals = Table(title="evaluations")
    evals.add_column("name")
    evals.add_column("description")
    for name in sorted(EVALUATIONS):
        evals.add_row(name, EVALUATIONS[name].description)
    console.print(evals)
    return 0


def _print_summary(summary: dict, run_dir: object) -> None:
    table = Table(title=f"summary: {run_dir}")
    table.add_column("key")
    table.add_column("value", justify="right")
    for key in sorted(summary):
        if key != "traceback":
            value = summary[key]
            table.add_row(key, f"{value:.5g}" if isinstance(value, float) else str(value))
    console.print(table)


def cmd_run(args: argparse.Namespace) -> int:
    from rayworks.platform import launch

    result = launch.run(
        args.pipeline,
        preset=args.preset,
        files=args.config,
        overrides=args.overrides,
        runs_dir=args.runs_dir,
        address=args.address,
        resume=args.resume,
        progress=not args.no_progress,
        tracking=_tracking(args),
    )
    _print_summary(result.summary, result.run_dir)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from rayworks.platform import tune

    tune.sweep(
        args.pipeline,
        params=args.param,
        preset=args.preset,
        files=args.config,
        overrides=args.overrides,
        samples=args.samples,
        metric=args.metric,
        mode=args.mode,
        scheduler=args.scheduler,
        max_concurrent=args.max_concurrent,
        runs_dir=args.runs_dir,
        address=args.address,
        console=console,
        tracking=_tracking(args),
    )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from rayworks.core.config import validate
    from rayworks.platform.access import check_bind, resolve_api_key
    from rayworks.platform.cluster import connect
    from rayworks.platform.kv_serving import KVServing
    from rayworks.platform.serve import serve_model

    api_key = resolve_api_key(args.api_key, args.api_key_file)
    # refused before Ray starts; serve_model / serve_ttc check again and warn
    check_bind(args.host, api_key, args.insecure_no_auth, warn=False)
    if args.target != "model":
        if args.front:
            raise RayworksError(f"--front is for `serve model`, not `serve {args.target}`")
        get_extensions("serve_target")[args.target].serve(args, api_key)
        return 0
    if len(args.checkpoint) != 1:
        raise RayworksError("serve model takes exactly one --checkpoint")
    if args.address:
        connect(args.address)
    serve_model(
        args.checkpoint[0],
        host=args.host,
        port=args.port,
        api_key=api_key,
        insecure_no_auth=args.insecure_no_auth,
        docs=args.docs,
        limits=validate(ServeLimits, limit_flags(args), origin="serve limit flags"),
        max_ongoing_requests=args.max_ongoing_requests or 4,
        max_queued_requests=args.max_queued_requests or 8,
        num_replicas=args.replicas,
        model_name=args.name,
        blocking=True,
        front=args.front or "actor",
        kv=KVServing(
            policy=args.kv_policy,
            budget=args.kv_budget,
            draft=args.draft,
            lookahead=args.kv_lookahead,
        ),
    )
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from rayworks.platform import jobs

    run_args = args.run_args
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RayworksError(f"bad --env {item!r}: expected KEY=VALUE.")
        env[key] = value
    job_id = jobs.submit(
        args.pipeline,
        run_args,
        address=args.address,
        working_dir=args.working_dir,
        env_vars=env or None,
    )
    console.print(f"submitted job [bold]{job_id}[/] to {jobs.dashboard_address(args.address)}")
    if args.follow:
        status = jobs.follow(job_id, address=args.address)
        console.print(f"job {job_id}: {status}")
        return 0 if status == "SUCCEEDED" else 1
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from rayworks.platform import jobs

    table = Table(title=f"jobs at {jobs.dashboard_address(args.address)}")
    rows = jobs.list_jobs(args.address)
    columns = ["submission_id", "status", "entrypoint", "start_time", "end_time"]
    for col in columns:
        table.add_column(col)
    for row in rows:
        table.add_row(*(str(row.get(c, "")) for c in columns))
    console.print(table)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from rayworks.platform.report import render_report

    out = render_report(args.paths, out=args.out, title=args.title)
    console.print(f"report written to {out}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from rayworks.platform import bench

    if args.collect and args.resume:
        raise ConfigError("--collect runs nothing and --resume runs the rest: give one of them.")
    if args.collect:
        if Path(args.collect).absolute().parent.name != args.pipeline:
            raise ConfigError(
                f"--collect {args.collect!r} is not a bench of {args.pipeline!r} "
                f"(expected runs/bench/{args.pipeline}/<id>)"
            )
        result = bench.collect(args.collect)
        console.print(result.markdown, markup=False)
        console.print(f"written to {result.out_dir}")
        return 0
    result = bench.bench(
        args.pipeline,
        seeds=args.seeds,
        preset=args.preset,
        overrides=args.overrides,
        runs_dir=args.runs_dir,
        address=args.address,
        command=" ".join(["rayworks", *sys.argv[1:]]),
        ablations=args.only_ablations if args.ablations and args.only_ablations else args.ablations,
        baselines=args.baselines,
        resume=args.resume,
        tracking=_tracking(args),
    )
    console.print(result.markdown, markup=False)  # "NAME[label]" is not a rich style tag
    console.print(f"written to {result.out_dir}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import json

    from rayworks.evals.run import run_evaluation

    given = {"tasks": args.tasks, "limit": args.limit, "chat": args.chat}
    given = {key: value for key, value in given.items() if value is not None}
    if given and args.evaluation != "harness":
        flags = ", ".join(f"--{key}" for key in given)
        raise ConfigError(f"{flags}: options of `rayworks eval harness` only.")
    overrides = [*args.overrides, *(f"{k}={json.dumps(v)}" for k, v in given.items())]
    metrics = run_evaluation(
        args.evaluation, args.checkpoint, args.predictions, overrides, args.out
    )
    _print_summary(metrics, args.evaluation)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from rayworks.platform import demo

    out = demo.demo(
        runs_dir=args.runs_dir,
        address=args.address,
        seeds=args.seeds,
        only=args.only,
        console=console,
        ablations=args.ablations,
    )
    console.print(f"demo report: {out}")
    return 0


HANDLERS = {
    "list": cmd_list,
    "run": cmd_run,
    "sweep": cmd_sweep,
    "serve": cmd_serve,
    "submit": cmd_submit,
    "jobs": cmd_jobs,
    "report": cmd_report,
    "bench": cmd_bench,
    "eval": cmd_eval,
    "demo": cmd_demo,
}


def _serve_target(argv: list[str]) -> str | None:
    """The pipeline-added target `rayworks serve TARGET` names, whose flags the parser
    then adds (only that target's module is imported)."""
    if argv[:1] != ["serve"]:
        return None
    targets = extension_names("serve_target")
    return next((token for token in argv[1:] if token in targets), None)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if argv[:1] == ["submit"] and "--" in argv:  # `submit ... -- RUN_ARGS`: split before argparse
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    args = build_parser(_serve_target(argv)).parse_args(argv)
    if args.command == "submit":
        args.run_args = [*args.run_args, *passthrough]
    try:
        return HANDLERS[args.command](args)
    except RayworksError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
