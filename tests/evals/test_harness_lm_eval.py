"""`rayworks eval harness`: lm-evaluation-harness (lm-eval 0.4.13) against our model endpoint.

The shipped arithmetic tasks (rayworks/evals/harness_tasks/) run on a tiny checkpoint served
by Ray Serve on the session's head, in this process (a Serve start costs seconds; a CLI
subprocess would add its imports): `rayworks eval harness` through the CLI's `main` with
lm-eval's `local-completions` (multiple_choice, loglikelihood_rolling and generate_until
requests), and `run_harness(chat=True)` with `local-chat-completions`. What lm-eval logged
per sample is checked against the model itself: loglikelihoods and greedy flags against one
forward pass (1e-4), generations against greedy decoding of the same prompt ids. Bad input
fails before Ray.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
from pathlib import Path

import pytest
import requests
import torch

from rayworks.cli import main
from rayworks.core.errors import ConfigError
from rayworks.evals import harness
from rayworks.evals.harness import HarnessConfig, run_harness
from rayworks.models import load_causal_lm, load_tokenizer
from rayworks.platform import serve as rw_serve
from rayworks.platform.chat_prompt import chat_prompt_ids
from rayworks.platform.openai_schema import ChatMessage
from rayworks.platform.report import render_report

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("lm_eval") is None,
        reason="lm-eval is not installed; it comes with the dev extra (pip install -e '.[dev]')",
    ),
    pytest.mark.usefixtures("one_torch_thread"),
]
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local json files only, never the hub

TASKS = Path(harness.__file__).parent / "harness_tasks"
MC, GEN, PPL = (TASKS / f"arithmetic_{kind}.yaml" for kind in ("mc", "gen", "ppl"))
DATA = [json.loads(line) for line in (TASKS / "arithmetic_test.jsonl").read_text().splitlines()]
LIMIT = 4
KEY = f"harness-test-key-{secrets.token_hex(8)}"


@pytest.fixture(scope="module")
def model_dir(tiny_lm) -> Path:
    texts = [r["prompt"] + r["completion"] for r in DATA] + [" ".join(r["choices"]) for r in DATA]
    return tiny_lm(texts, n_layer=1)


@pytest.fixture(scope="module")
def model(model_dir: Path) -> torch.nn.Module:
    return load_causal_lm(model_dir).eval()


@pytest.fixture(scope="module")
def tok(model_dir: Path):
    return load_tokenizer(model_dir)


@pytest.fixture(scope="module")
def completions_run(ray_session, model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """`rayworks eval harness` of the three shipped tasks (local-completions); the run's
    summary and what the endpoint was started with (its key, its answer to a request
    without one)."""
    seen: dict = {}
    real_serve = rw_serve.serve_model

    def spy(*args, **kwargs):
        url = real_serve(*args, **kwargs)
        body = {"model": kwargs["model_name"], "prompt": "Q", "max_tokens": 1}
        seen.update(api_key=kwargs["api_key"], url=url, host=kwargs.get("host", "127.0.0.1"))
        seen["without_key"] = requests.post(f"{url}/v1/completions", json=body, timeout=30)
        return url

    runs = tmp_path_factory.mktemp("runs")
    tasks = [arg for task in (MC, GEN, PPL) for arg in ("--tasks", str(task))]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness, "new_api_key", lambda: KEY)
        mp.setattr(rw_serve, "serve_model", spy)
        mp.setenv("RAYWORKS_RUNS_DIR", str(runs))
        args = ["eval", "harness", "--checkpoint", str(model_dir), "--limit", str(LIMIT)]
        assert main([*args, *tasks]) == 0
    [run_dir] = (runs / "eval_harness").iterdir()
    return {**json.loads((run_dir / "summary.json").read_text()), "run_dir": run_dir}, seen


def samples(run_dir: str | Path, task: str) -> list[dict]:
    path = Path(run_dir) / "artifacts" / "lm_eval" / f"samples_{task}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@torch.no_grad()
def scored(model: torch.nn.Module, ids: list[int], start: int) -> tuple[float, bool]:
    """(sum of log p(ids[i] | ids[:i]) for i >= start, whether each ids[i] is the argmax)."""
    logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    rows = range(start, len(ids))
    return sum(float(logp[i - 1, ids[i]]) for i in rows), all(
        int(logp[i - 1].argmax()) == ids[i] for i in rows
    )


def encode_pair(tok, context: str, continuation: str) -> tuple[int, list[int]]:
    """(context length, all ids) as lm-eval splits a pair: trailing whitespace of the
    context moves to the continuation, the whole is encoded once, no special tokens."""
    stripped = context.rstrip()
    continuation, context = context[len(stripped) :] + continuation, stripped
    ids = tok(context + continuation, add_special_tokens=False).input_ids
    return len(tok(context, add_special_tokens=False).input_ids), ids


@torch.no_grad()
def greedy_text(model, tok, ids: list[int], max_new: int, stop: str) -> str:
    """transformers' greedy decoding of `ids`, cut at EOS, the budget or `stop`."""
    out = model.generate(
        torch.tensor([ids]),
        max_new_tokens=max_new,
        do_sample=False,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )[0, len(ids) :].tolist()
    new = out[: out.index(tok.eos_token_id)] if tok.eos_token_id in out else out
    return tok.decode(new, skip_special_tokens=True).split(stop)[0]


def test_endpoint_kept_auth_on_loopback_and_key_stays_out_of_files(completions_run) -> None:
    summary, seen = completions_run
    assert summary["status"] == "completed", summary.get("error")
    assert seen["api_key"] == KEY and seen["host"] == "127.0.0.1"
    assert seen["url"].startswith("http://127.0.0.1:")
    assert seen["without_key"].status_code == 401
    run_dir = Path(summary["run_dir"])
    assert run_dir.parent.name == "eval_harness"
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {"config.yaml", "summary.json", "report.html", "results.json"} <= {p.name for p in files}
    for path in files:
        assert KEY not in path.read_text(errors="replace"), path


def test_multiple_choice_loglikelihoods_equal_a_forward_pass(completions_run, model, tok) -> None:
    summary, _ = completions_run
    rows = samples(summary["run_dir"], "rayworks_arithmetic_mc")
    assert len(rows) == LIMIT
    for row in rows:
        lls = []
        for (context, continuation), [[ll, is_greedy]] in zip(
            row["arguments"], row["resps"], strict=True
        ):
            start, ids = encode_pair(tok, context, continuation)
            want, want_greedy = scored(model, ids, start)
            assert ll == pytest.approx(want, abs=1e-4)
            assert is_greedy == want_greedy
            lls.append(ll)
        assert row["acc"] == float(max(range(len(lls)), key=lls.__getitem__) == row["target"])
    accuracy = sum(row["acc"] for row in rows) / len(rows)
    assert summary["rayworks_arithmetic_mc/acc,none"] == pytest.approx(accuracy)


def test_rolling_loglikelihoods_equal_a_forward_pass(completions_run, model, tok) -> None:
    """loglikelihood_rolling: the whole text after the BOS prefix, in one window here."""
    summary, _ = completions_run
    rows = samples(summary["run_dir"], "rayworks_arithmetic_ppl")
    assert len(rows) == LIMIT
    for row in rows:
        [text] = row["arguments"][0]
        ids = [tok.bos_token_id, *tok(text, add_special_tokens=False).input_ids]
        assert row["resps"][0][0] == pytest.approx(scored(model, ids, 1)[0], abs=1e-4)
    assert summary["rayworks_arithmetic_ppl/bits_per_byte,none"] > 0


def test_generations_equal_greedy_decoding(completions_run, model, tok) -> None:
    summary, _ = completions_run
    rows = samples(summary["run_dir"], "rayworks_arithmetic_gen")
    assert len(rows) == LIMIT
    for row in rows:
        context, gen_kwargs = row["arguments"][0]
        ids = tok(context, add_special_tokens=False).input_ids
        want = greedy_text(model, tok, ids, gen_kwargs["max_gen_toks"], "\n")
        assert row["resps"] == [[want]]
    assert summary["rayworks_arithmetic_gen/exact_match,last_answer"] == pytest.approx(
        sum(row["exact_match"] for row in rows) / len(rows)
    )


def test_results_table_and_report(completions_run) -> None:
    summary, _ = completions_run
    run_dir = Path(summary["run_dir"])
    table = json.loads((run_dir / "artifacts" / harness.TABLE_FILE).read_text())
    assert table["columns"] == harness.TABLE_COLUMNS
    got = {(row[0], row[3]): row for row in table["rows"]}
    assert set(got) == {
        ("rayworks_arithmetic_mc", "acc"),
        ("rayworks_arithmetic_mc", "acc_norm"),
        ("rayworks_arithmetic_gen", "exact_match"),
        ("rayworks_arithmetic_ppl", "word_perplexity"),
        ("rayworks_arithmetic_ppl", "byte_perplexity"),
        ("rayworks_arithmetic_ppl", "bits_per_byte"),
    }
    acc = got[("rayworks_arithmetic_mc", "acc")]
    assert acc[4] == summary["rayworks_arithmetic_mc/acc,none"] and acc[6] == LIMIT
    assert isinstance(acc[5], float) and got[("rayworks_arithmetic_ppl", "bits_per_byte")][5] == "—"
    results = json.loads((run_dir / "artifacts" / "lm_eval" / "results.json").read_text())
    assert results["config"]["model"] == "local-completions"
    assert results["config"]["model_args"]["tokenizer_backend"] == "huggingface"
    report = (run_dir / "report.html").read_text()
    assert "<h3>lm-evaluation-harness</h3>" in report and "exact_match" in report


def test_chat_run(ray_session, model_dir: Path, model, tok, tmp_path: Path) -> None:
    """`chat`: generate_until through /v1/chat/completions (local-chat-completions)."""
    cfg = HarnessConfig(checkpoint=str(model_dir), tasks=[str(GEN)], limit=2, chat=True)
    summary = run_harness(cfg, runs_dir=tmp_path)
    assert summary["status"] == "completed" and summary["model_type"] == "local-chat-completions"
    run_dir = Path(summary["run_dir"])
    rows = samples(run_dir, "rayworks_arithmetic_gen")
    assert len(rows) == 2
    for row in rows:
        chat, gen_kwargs = row["arguments"][0]
        messages = json.loads(chat[0] if isinstance(chat, list) else chat)  # lm-eval's JsonChatStr
        assert messages == [{"role": "user", "content": row["doc"]["prompt"]}]
        ids = chat_prompt_ids(tok, [ChatMessage(**m) for m in messages])
        assert row["resps"] == [[greedy_text(model, tok, ids, gen_kwargs["max_gen_toks"], "\n")]]
    assert "lm-evaluation-harness" in (run_dir / "report.html").read_text()


def test_bad_input_fails_before_ray(model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("Ray must not be touched for bad harness input")

    monkeypatch.setattr("rayworks.platform.cluster.connect", forbidden)

    def run(task: Path | str, **kwargs) -> None:
        run_harness(HarnessConfig(checkpoint=str(model_dir), tasks=[str(task)], **kwargs))

    with pytest.raises(ConfigError, match=r"'rayworks_arithmetic_mc' is output_type .multiple"):
        run(MC, chat=True)
    with pytest.raises(ConfigError, match="does not exist or is not a file"):
        run(tmp_path / "nope.yaml")
    missing = tmp_path / "missing.yaml"
    missing.write_text(MC.read_text().replace("arithmetic_test.jsonl", "gone.jsonl"))
    with pytest.raises(ConfigError, match=r"data_files 'gone.jsonl' does not exist"):
        run(missing)
    long = tmp_path / "long.yaml"
    data = f"test: {TASKS / 'arithmetic_test.jsonl'}"
    long.write_text(
        GEN.read_text()
        .replace("max_gen_toks: 96", "max_gen_toks: 300")
        .replace("test: arithmetic_test.jsonl", data)
    )
    with pytest.raises(ConfigError, match=r"max_gen_toks=300 .* context of 256 tokens"):
        run(long)
    group = tmp_path / "group.yaml"
    group.write_text("group: mine\ntask: [hellaswag]\n")
    with pytest.raises(ConfigError, match="has no `task: <name>` key"):
        run(group)


def test_cli_flags_are_checked(model_dir: Path, capsys) -> None:
    assert main(["eval", "lm", "--checkpoint", str(model_dir), "--tasks", str(MC)]) == 2
    assert "--tasks: options of `rayworks eval harness` only" in capsys.readouterr().err
    assert main(["eval", "harness", "--checkpoint", str(model_dir), "--limit", "0"]) == 2
    err = capsys.readouterr().err
    assert "limit=0" in err and "tasks" in err


def test_report_warns_about_a_malformed_table(tmp_path: Path) -> None:
    run_dir = tmp_path / "eval_harness" / "r1"
    (run_dir / "artifacts").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("seed: 0\n")
    (run_dir / "artifacts" / "ok.table.json").write_text(
        json.dumps({"title": "T", "columns": ["a", "b"], "rows": [[1, 0.5]]})
    )
    (run_dir / "artifacts" / "bad.table.json").write_text(
        json.dumps({"columns": ["a"], "rows": [[1, 2]]})
    )
    html = render_report([run_dir], out=tmp_path / "r.html").read_text()
    assert "<h3>T</h3>" in html and "<td>0.5</td>" in html
    assert "artifact bad.table.json: not a table" in html
