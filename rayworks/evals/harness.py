"""`rayworks eval harness`: lm-evaluation-harness tasks against our own model endpoint.

The checkpoint is served exactly as `rayworks serve model` serves it (`serve.serve_model`:
Ray Serve, 127.0.0.1, a random free port, an API key made for this run only), lm-eval
(`lm_eval.simple_evaluate`, in this process) sends its requests to it over loopback, and
the results land in a run directory, `runs/eval_harness/<id>/`:

    config.yaml                       the validated HarnessConfig (never the API key)
    summary.json                      every numeric metric as "<task>/<metric>,<filter>"
    artifacts/lm_eval/results.json    lm-eval's results, configs and versions (no samples)
    artifacts/lm_eval/samples_<task>.jsonl   one line per document: arguments, resps, metrics
    artifacts/lm_eval.table.json      task, metric, value ± stderr (rendered by the report)
    report.html                       `rayworks report` of the run

Model types and request kinds. Without `chat`, lm-eval's `local-completions` talks to
/v1/completions: `loglikelihood` (multiple_choice) and `loglikelihood_rolling` requests are
batches of token-id prompts with `echo=true, max_tokens=1, logprobs=1`, whose prompt
logprobs the endpoint computes with one forward pass; `generate_until` requests are token-id
prompts with `stop` and `max_tokens`. With `chat`, `local-chat-completions` sends
`generate_until` requests as messages to /v1/chat/completions (the endpoint renders them
with the tokenizer's chat template, or its plain `role: content` one); chat has no prompt
logprobs, so loglikelihood tasks are refused before anything starts.

Tokenizer. lm-eval needs a tokenizer on its side for loglikelihood requests: it splits
context from continuation by token count (`ctxlen`) and sums the logprobs after it. We give
it the checkpoint folder itself (`tokenizer=<model dir>, tokenizer_backend=huggingface`):
transformers' `AutoTokenizer` loads its tokenizer.json offline, the same class and files the
endpoint loads (`load_tokenizer`), and with `tokenized_requests=True` (lm-eval's default)
the endpoint scores exactly the ids lm-eval counted. `tokenized_requests=False` would
decode those ids to text for the server to tokenize again, and a decode/encode round trip
is not always the identity (unknown characters, merges across the context boundary), so
`ctxlen` could point at the wrong token. The `remote` backend needs vLLM's tokenizer
routes, which the endpoint does not have, so the backend is named rather than left to
lm-eval's probing (`auto`). `max_length` is the model's context, so lm-eval truncates
exactly where the endpoint would refuse.

The key is sent in the `Authorization` header object of the lm-eval model, never in its
`model_args` (which lm-eval copies into results.json) nor in the environment. Task files
are YAML lm-eval reads (`!function`, `include`); `dataset_kwargs.data_files` given as
relative paths are resolved against the YAML's folder, so shipped tasks
(`rayworks/evals/harness_tasks/`) work from any working directory.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
import traceback
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from pydantic import Field

from rayworks.core.config import PipelineConfig
from rayworks.core.environ import patched_environ
from rayworks.core.errors import ConfigError, RayworksError
from rayworks.platform.context import RunContext
from rayworks.platform.registry import evaluation
from rayworks.platform.serve_limits import ServeLimits

PIPELINE = "eval_harness"  # runs/eval_harness/<id>/
TABLE_FILE = "lm_eval.table.json"
LOGLIKELIHOOD_KINDS = ("loglikelihood", "multiple_choice", "loglikelihood_rolling")
TABLE_COLUMNS = ["task", "filter", "n-shot", "metric", "value", "± stderr", "documents"]
REQUEST_TIMEOUT_S = 600  # per request: a batch of long prompts on a CPU replica is slow


class HarnessConfig(PipelineConfig):
    """What `rayworks eval harness` runs (`seed`: lm-eval's seeds and each request's)."""

    checkpoint: str = Field(description="run dir, checkpoint dir or HF model dir (with tokenizer)")
    tasks: list[str] = Field(min_length=1, description="lm-eval task YAML files")
    limit: int | None = Field(None, ge=1, description="first N documents per task (None: all)")
    chat: bool = Field(
        False, description="generate_until through /v1/chat/completions (local-chat-completions)"
    )
    num_fewshot: int | None = Field(None, ge=0, description="few-shot examples (None: the task's)")
    batch_size: int = Field(8, ge=1, le=64, description="prompts per /v1/completions request")
    max_gen_toks: int | None = Field(
        None, ge=1, description="generation budget of tasks that set none (None: context/2, ≤256)"
    )
    bootstrap_iters: int = Field(1000, ge=0, description="resamples for non-mean stderrs")


def new_api_key() -> str:
    """The bearer token of one harness run's endpoint; it lives in this process only."""
    return secrets.token_urlsafe(32)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_task(path: str | Path) -> dict[str, Any]:
    """One task YAML as lm-eval reads it, its relative `data_files` made absolute."""
    from lm_eval.tasks._yaml_loader import load_yaml

    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"tasks: {str(path)!r} does not exist or is not a file.")
    try:
        task = load_yaml(path, resolve_func=True)
    except Exception as exc:  # YAML syntax, a missing include or !function module
        raise ConfigError(
            f"tasks: cannot read {str(path)!r}: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(task.get("task"), str):
        raise ConfigError(
            f"tasks: {str(path)!r} has no `task: <name>` key; give one lm-eval task per file "
            "(groups of registered task names are not supported)."
        )
    files = (task.get("dataset_kwargs") or {}).get("data_files")
    if files is not None:
        task["dataset_kwargs"]["data_files"] = _resolve_files(files, path)
    return task


def _resolve_files(files: Any, yaml_path: Path) -> Any:
    """`data_files` (a path, a list or a split -> path(s) mapping) relative to the YAML."""
    if isinstance(files, dict):
        return {split: _resolve_files(f, yaml_path) for split, f in files.items()}
    if isinstance(files, list):
        return [_resolve_files(f, yaml_path) for f in files]
    full = (yaml_path.parent / str(files)).resolve()
    if "://" not in str(files) and not any(c in str(files) for c in "*?[") and not full.is_file():
        raise ConfigError(
            f"tasks: {str(yaml_path)!r}: dataset_kwargs.data_files {str(files)!r} does not exist "
            f"(resolved against the YAML's folder to {str(full)!r})."
        )
    return str(files) if "://" in str(files) else str(full)


def check_tasks(cfg: HarnessConfig, tasks: list[dict[str, Any]], context: int) -> int:
    """Refuse what cannot run on this endpoint; return the default generation budget."""
    default_gen = cfg.max_gen_toks or min(256, context // 2)
    for task in tasks:
        kind = task.get("output_type", "generate_until")
        if cfg.chat and kind in LOGLIKELIHOOD_KINDS:
            raise ConfigError(
                f"task {task['task']!r} is output_type {kind!r}: chat completions have no "
                "prompt logprobs, so loglikelihood tasks run without --chat (local-completions)."
            )
        budget = (task.get("generation_kwargs") or {}).get("max_gen_toks", default_gen)
        if kind == "generate_until" and not cfg.chat and budget >= context - 1:
            raise ConfigError(
                f"task {task['task']!r}: generation_kwargs.max_gen_toks={budget} leaves no room "
                f"for the prompt in the model's context of {context} tokens; lower it below "
                f"{context - 1}."
            )
    return default_gen


def model_context(model_dir: Path) -> int:
    """The model's context length, as the endpoint reads it (CompletionEngine.context)."""
    from transformers import AutoConfig

    return int(getattr(AutoConfig.from_pretrained(model_dir), "max_position_embeddings", 2048))


def lm_eval_model(
    cfg: HarnessConfig, url: str, name: str, model_dir: Path, context: int, max_gen_toks: int
) -> tuple[str, dict[str, Any]]:
    """(lm-eval model type, its model_args) for the endpoint at `url`; no secret inside."""
    common = {
        "model": name,
        "max_gen_toks": max_gen_toks,
        "seed": cfg.seed,
        "max_retries": 2,
        "timeout": REQUEST_TIMEOUT_S + 30,
    }
    if cfg.chat:
        return "local-chat-completions", {
            **common,
            "base_url": f"{url}/v1/chat/completions",
            "batch_size": 1,
        }
    return "local-completions", {
        **common,
        "base_url": f"{url}/v1/completions",
        "tokenizer": str(model_dir),
        "tokenizer_backend": "huggingface",
        "tokenized_requests": True,
        "max_length": context,
        "batch_size": cfg.batch_size,
    }


def _loopback_without_proxy() -> AbstractContextManager[None]:
    """lm-eval posts with `requests`, which would send loopback through $HTTP_PROXY."""
    extra = "127.0.0.1,localhost"
    values = {k: os.environ.get(k) for k in ("NO_PROXY", "no_proxy")}
    return patched_environ({k: f"{v},{extra}" if v else extra for k, v in values.items()})


def evaluate_endpoint(
    cfg: HarnessConfig,
    tasks: list[dict[str, Any]],
    url: str,
    api_key: str,
    model: tuple[str, dict[str, Any]],
) -> dict[str, Any]:
    """lm-eval's `simple_evaluate` of `tasks` against the endpoint at `url`."""
    import lm_eval
    import requests
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager

    kind, model_args = model
    header = {"Authorization": f"Bearer {api_key}"}
    lm = get_model(kind)(**model_args, header=header)
    try:
        with _loopback_without_proxy():
            results = lm_eval.simple_evaluate(
                model=lm,
                tasks=tasks,
                limit=cfg.limit,
                num_fewshot=cfg.num_fewshot,
                apply_chat_template=cfg.chat,
                bootstrap_iters=cfg.bootstrap_iters,
                task_manager=TaskManager(include_defaults=False),
                random_seed=cfg.seed,
                numpy_random_seed=cfg.seed,
                torch_random_seed=cfg.seed,
                fewshot_random_seed=cfg.seed,
            )
    except requests.HTTPError as exc:
        body = exc.response.text[:2000] if exc.response is not None else ""
        raise RayworksError(f"the endpoint refused a request of lm-eval ({exc}): {body}") from None
    results["config"].update(model=kind, model_args=model_args)  # not the LM object's name
    return results


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def metric_rows(results: dict[str, Any]) -> list[list[Any]]:
    """TABLE_COLUMNS rows: one per task, filter and metric of lm-eval's `results`."""
    rows = []
    for task, values in sorted(results["results"].items()):
        shots = results.get("n-shot", {}).get(task, 0)
        docs = (results.get("n-samples", {}).get(task) or {}).get("effective", "")
        for key, value in values.items():
            metric, sep, filt = key.partition(",")
            if not sep or "_stderr" in metric or _number(value) is None:
                continue
            stderr = _number(values.get(f"{metric}_stderr,{filt}"))
            rows.append([task, filt, shots, metric, value, "—" if stderr is None else stderr, docs])
    return rows


def write_results(ctx: RunContext, results: dict[str, Any]) -> dict[str, float]:
    """results.json, samples_<task>.jsonl and the table; return the flat metrics."""
    from lm_eval.utils import handle_non_serializable

    out = ctx.artifacts_dir / "lm_eval"
    out.mkdir(parents=True, exist_ok=True)
    samples = results.pop("samples", {})
    dump = json.dumps(results, indent=2, default=handle_non_serializable)
    (out / "results.json").write_text(dump)
    for task, rows in samples.items():
        lines = (json.dumps(r, default=handle_non_serializable) + "\n" for r in rows)
        (out / f"samples_{task}.jsonl").write_text("".join(lines))
    rows = metric_rows(results)
    table = {"title": "lm-evaluation-harness", "columns": TABLE_COLUMNS, "rows": rows}
    (ctx.artifacts_dir / TABLE_FILE).write_text(json.dumps(table, indent=1))
    return {f"{task}/{metric},{filt}": value for task, filt, _, metric, value, *_ in rows}


def run_harness(
    cfg: HarnessConfig, runs_dir: str | Path | None = None, address: str | None = None
) -> dict[str, Any]:
    """Serve `cfg.checkpoint`, run its lm-eval tasks against it, write the run; the summary.

    Everything is checked before Ray starts (checkpoint, tokenizer, task files, chat vs
    loglikelihood, generation budgets). A Ray Serve already running in the cluster is left
    alone: the harness refuses to start rather than replace its apps.
    """
    from rayworks.platform import cluster
    from rayworks.platform import serve as rw_serve
    from rayworks.platform.report import render_report

    model_dir = rw_serve.checked_model_dir(cfg.checkpoint)
    tasks = [load_task(path) for path in cfg.tasks]
    context = model_context(model_dir)
    max_gen_toks = check_tasks(cfg, tasks, context)
    cfg = cfg.model_copy(update={"tasks": [str(Path(p).resolve()) for p in cfg.tasks]})
    cluster.connect(address)
    _refuse_running_serve()
    ctx = RunContext.create(PIPELINE, cfg, runs_dir)
    started, api_key = time.time(), new_api_key()
    name = rw_serve.default_model_name(cfg.checkpoint, model_dir)
    limits = ServeLimits(
        max_prompt_tokens=context,
        max_new_tokens=context,
        max_stop=16,
        max_body_bytes=8 << 20,
        request_timeout_s=REQUEST_TIMEOUT_S,
    )
    summary: dict[str, Any] = {
        "pipeline": PIPELINE,
        "run_id": ctx.run_id,
        "model_dir": str(model_dir),
        "model_name": name,
    }
    try:
        url = rw_serve.serve_model(
            model_dir,
            port=_free_port(),
            api_key=api_key,
            model_name=name,
            blocking=False,
            limits=limits,
        )
        model = lm_eval_model(cfg, url, name, model_dir, context, max_gen_toks)
        results = evaluate_endpoint(cfg, tasks, url, api_key, model)
        summary.update(write_results(ctx, results), model_type=model[0])
        summary.update(lm_eval_version=results.get("lm_eval_version"), status="completed")
    except BaseException as exc:
        summary.update(status="failed", error=f"{type(exc).__name__}: {exc}")
        summary["traceback"] = traceback.format_exc()
        raise
    finally:
        rw_serve.shutdown()
        ctx.write_summary({**summary, "wall_s": time.time() - started})
        render_report([ctx.run_dir], out=ctx.run_dir / "report.html", title=f"{PIPELINE} {name}")
    return {**summary, "run_dir": str(ctx.run_dir)}


def _refuse_running_serve() -> None:
    try:
        from ray.serve.context import _get_global_client  # private: skip the check if gone

        running = _get_global_client(raise_if_no_controller_running=False) is not None
    except (ImportError, TypeError):
        return
    if running:
        raise RayworksError(
            "Ray Serve already runs in this cluster: `rayworks eval harness` deploys its own "
            "endpoint and shuts Serve down afterwards, which would stop those apps. Run it on "
            "an embedded Ray (no --address, no RAY_ADDRESS) or stop Serve first "
            "(`serve shutdown`)."
        )


@evaluation("harness", config=HarnessConfig)
def harness(cfg: HarnessConfig) -> dict[str, Any]:
    """lm-evaluation-harness task YAMLs against the checkpoint served on loopback."""
    return run_harness(cfg)
