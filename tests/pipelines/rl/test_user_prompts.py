"""`data.prompts`: a user's prompt file (parsing, rejects, counts, the split rule), its
verifiers, config errors before Ray starts, and one `rayworks run grpo` on a GPT-2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.data.tasks.base import Example, split_of
from rayworks.pipelines.rl import prompt_file as pf
from rayworks.pipelines.rl.base import base_models
from rayworks.pipelines.rl.config import PPOConfig, RLConfig
from rayworks.pipelines.rl.prompts import REJECTS_FILE, prompt_set, record_prompt_files
from rayworks.pipelines.rl.rewards import CombinedReward, has_format
from rayworks.pipelines.rl.verifiers import (
    NO_COUNTDOWN_TARGET,
    NOT_A_NUMBER,
    countdown_verifier,
    exact_verifier,
    get_verifier,
    numeric_verifier,
)
from rayworks.platform import launch

GOOD = [{"prompt": f"Q: {a}+{b}=", "answer": str(a + b)} for a in range(1, 8) for b in range(1, 8)]
# (raw line, why it is rejected); bytes where the line is not text
MALFORMED: list[tuple[bytes, str]] = [
    (b"not json at all", pf.NOT_JSON),
    (b"[1, 2]", pf.NOT_OBJECT),
    (b'{"answer": "3"}', pf.BAD_PROMPT),
    (b'{"prompt": "   ", "answer": "3"}', pf.BAD_PROMPT),
    (b'{"prompt": 5, "answer": "5"}', pf.BAD_PROMPT),
    (b'{"prompt": "Q: 3+3=", "answer": ""}', pf.BAD_ANSWER),
    (b'{"prompt": "Q: x", "answer": ["a"]}', pf.BAD_ANSWER),
    (b'{"prompt": "Q: z", "answer": true}', pf.BAD_ANSWER),
    (b'{"prompt": "Q: y", "answer": "y", "difficulty": "hard"}', pf.BAD_DIFFICULTY),
    (b'{"prompt": "Q: \xff\xfe", "answer": "1"}', pf.NOT_UTF8),
    (b"  ", pf.BLANK),
]


def write_lines(path: Path, rows: list[dict | bytes]) -> Path:
    lines = [r if isinstance(r, bytes) else json.dumps(r).encode() for r in rows]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@pytest.fixture
def messy(tmp_path: Path) -> Path:
    """A byte-order mark, two good lines (one with a numeric answer and a difficulty, one
    with CRLF and non-ASCII), then one line of every malformed kind."""
    head = [
        b'\xef\xbb\xbf{"prompt": "Q: 1+1=", "answer": "2"}',
        b'{"prompt": "Q: 2+2=", "answer": 4, "difficulty": 2}',
        '{"prompt": "Q: caf\u00e9?", "answer": "\u00e9", "extra": 1}\r'.encode(),
    ]
    return write_lines(tmp_path / "messy.jsonl", [*head, *(raw for raw, _ in MALFORMED)])


def test_good_lines_are_kept_and_every_malformed_one_is_rejected_with_its_reason(messy):
    got = pf.read_prompt_file(messy, "exact")
    assert [ln.example for ln in got.kept] == [
        Example("Q: 1+1=", "", "2", 0),
        Example("Q: 2+2=", "", "4", 2),
        Example("Q: caf\u00e9?", "", "\u00e9", 0),
    ]
    assert [r["line"] for r in got.rejects] == [4 + i for i in range(len(MALFORMED))]
    for row, (_, reason) in zip(got.rejects, MALFORMED, strict=True):
        assert row["reason"].startswith(reason), row  # NOT_JSON / NOT_OBJECT add a detail
    assert got.lines == len(got.kept) + len(got.rejects) == 3 + len(MALFORMED)
    utf8 = next(r for r in got.rejects if r["reason"] == pf.NOT_UTF8)
    assert utf8["raw"] == '{"prompt": "Q: \\xff\\xfe", "answer": "1"}' and utf8["file"] == str(
        messy
    )


def test_one_file_splits_by_the_prompt_hash_and_counts_reconcile(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [*GOOD, *(raw for raw, _ in MALFORMED)])
    splits = pf.split_prompt_files(str(path), "exact")
    for name in ("train", "val", "test"):
        assert [e.prompt for e in getattr(splits, name)] == [
            g["prompt"] for g in GOOD if split_of(g["prompt"]) == name
        ]
    c = splits.counts
    assert c["prompts_lines"] == c["prompts_kept"] + c["prompts_rejected"] + c["prompts_filtered"]
    assert (c["prompts_kept"], c["prompts_rejected"], c["prompts_filtered"]) == (
        len(GOOD),
        len(MALFORMED),
        0,
    )
    assert c["prompts_train"] + c["prompts_val"] + c["prompts_test"] == len(GOOD)


def test_own_val_and_test_files_hold_out_their_prompts_from_train(tmp_path):
    main = write_lines(tmp_path / "train.jsonl", GOOD)
    val = write_lines(tmp_path / "val.jsonl", [GOOD[0], {"prompt": "Q: 9+9=", "answer": "18"}])
    test = write_lines(tmp_path / "test.jsonl", [GOOD[1], b"oops"])
    splits = pf.split_prompt_files(str(main), "exact", str(val), str(test))
    assert [e.prompt for e in splits.val] == ["Q: 1+1=", "Q: 9+9="]
    assert [e.prompt for e in splits.test] == ["Q: 1+2="]
    assert [e.prompt for e in splits.train] == [g["prompt"] for g in GOOD[2:]]  # every hash trains
    assert [(r["file"], r["line"], r["reason"]) for r in splits.rejects] == [
        (str(test), 2, f"{pf.NOT_JSON}: Expecting value: line 1 column 1 (char 0)"),
        (str(main), 1, pf.HELD_OUT),
        (str(main), 2, pf.HELD_OUT),
    ]
    c = splits.counts
    assert (
        c["prompts_lines"],
        c["prompts_kept"],
        c["prompts_rejected"],
        c["prompts_filtered"],
    ) == (
        len(GOOD) + 4,
        len(GOOD) + 1,
        1,
        2,
    )


def test_exact_numeric_and_countdown_verifiers():
    seven = Example("Q: 3+4=", "", "7", 0)
    assert [
        exact_verifier(seven, c)
        for c in ["<think>3+4=7</think>A: 7", "A: 7\nmore", " 7 ", "A: 8", "17", "A: 7 apples"]
    ] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert [
        numeric_verifier(seven, c) for c in ["so 3+4 = 7.", "A: 7.0", "7 then 8", "no number", "-7"]
    ] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert numeric_verifier(Example("q", "", "1000", 0), "it is 1,000") == 1.0
    puzzle = Example("Q: reach 24 with 3 8 2\n", "", "3*8", 0)
    assert countdown_verifier(puzzle, "A: 8*3") == 1.0  # any right expression
    assert countdown_verifier(puzzle, "A: 3*2") == 0.0
    assert get_verifier("rayworks.pipelines.rl.rewards:has_format") is has_format


def test_a_verifier_that_can_never_score_a_line_rejects_it(tmp_path):
    rows = [{"prompt": "Q: 3+4=", "answer": "seven"}, {"prompt": "Q: 1+1=", "answer": 2.0}]
    got = pf.read_prompt_file(write_lines(tmp_path / "n.jsonl", rows), "numeric")
    assert [r["reason"] for r in got.rejects] == [NOT_A_NUMBER]
    assert [ln.example.answer for ln in got.kept] == ["2.0"]
    rows = [{"prompt": "Q: reach 24 with 3 8", "answer": "3*8"}, {"prompt": "24?", "answer": "1"}]
    got = pf.read_prompt_file(write_lines(tmp_path / "c.jsonl", rows), "countdown")
    assert [(r["line"], r["reason"]) for r in got.rejects] == [(2, NO_COUNTDOWN_TARGET)]


def test_the_run_scores_and_evaluates_with_the_files_verifier(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", GOOD)
    cfg = build_config(
        RLConfig, "smoke", (), [f"data.prompts={path}", "data.verifier=numeric", "eval.n_val=3"]
    )
    (spec,) = cfg.reward_specs()
    assert spec.kwargs == {"verifier": "numeric"}
    data = prompt_set(cfg)
    assert data.verify is numeric_verifier and data.source == str(path)
    assert len(data.val) == 3 and 0 < len(data.test) <= cfg.eval.n_test  # up to eval.n_*
    ex = data.train[0]
    assert CombinedReward(cfg.reward_specs())([ex, ex], [f"A: {ex.answer}.0", "A: 0"])[0] == [
        1.0,
        0.0,
    ]
    own = build_config(
        RLConfig,
        "smoke",
        (),
        [f"data.prompts={path}", "rewards=[{name: verifier, kwargs: {task: countdown}}]"],
    )
    assert own.reward_specs()[0].kwargs == {"task": "countdown"}  # an explicit one stays
    assert build_config(RLConfig, "smoke").reward_specs()[0].kwargs == {"task": "arithmetic_mix"}


def test_record_writes_the_rejects_before_an_empty_split_fails(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [*GOOD, b"{bad"])
    cfg = build_config(RLConfig, "smoke", (), [f"data.prompts={path}"])
    counts = record_prompt_files(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / REJECTS_FILE).read_text().splitlines()]
    assert [r["line"] for r in rows] == [len(GOOD) + 1] and counts["prompts_rejected"] == 1

    val_only = [g for g in GOOD if split_of(g["prompt"]) == "val"]
    val_only_file = write_lines(tmp_path / "v.jsonl", [*val_only, b"x"])
    cfg = build_config(RLConfig, "smoke", (), [f"data.prompts={val_only_file}"])
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(ConfigError, match=r"gives no train prompts, which data\.prompts needs"):
        record_prompt_files(cfg, run)
    assert len((run / REJECTS_FILE).read_text().splitlines()) == 1  # written first

    no_test = write_lines(
        tmp_path / "t.jsonl", [g for g in GOOD if split_of(g["prompt"]) != "test"]
    )
    cfg = build_config(RLConfig, "smoke", (), [f"data.prompts={no_test}"])
    with pytest.raises(ConfigError, match=r"no test prompts, which eval\.splits=\['val', 'test'\]"):
        prompt_set(cfg)
    cfg = build_config(RLConfig, "smoke", (), [f"data.prompts={no_test}", "eval.splits=[val]"])
    assert prompt_set(cfg).test == []


@pytest.mark.parametrize(
    "sets,key",
    [
        (["data.prompts={missing}"], r"data\.prompts='.*missing\.jsonl' is invalid.*no such file"),
        (["data.prompts={bad}"], r"data\.prompts='.*bad\.jsonl' is invalid.*no usable line: all 2"),
        (["data.prompts={good}", "data.verifier=fuzzy"], r"data\.verifier='fuzzy' is invalid"),
        (
            ["data.prompts={good}", "data.verifier=nope.mod:fn"],
            r"data\.verifier='nope\.mod:fn'.*cannot be imported",
        ),
        (
            ["data.prompts={good}", "data.verifier=rayworks.pipelines.rl.rewards:REWARDS"],
            r"data\.verifier=.*is not callable",
        ),
        (["data.val={good}"], r"data\.val=.*needs data\.prompts"),
        (
            ["data.prompts={good}", "data.verifier=numeric", "data.test={words}"],
            r"data\.test=.*no usable line.*answer is not a number",
        ),
    ],
)
def test_bad_prompt_config_fails_before_ray_starts_naming_the_key(tmp_path, monkeypatch, sets, key):
    def no_ray(*args, **kwargs):
        raise AssertionError("Ray must not start for an invalid config")

    monkeypatch.setattr(launch, "connect", no_ray)
    files = {
        "missing": tmp_path / "missing.jsonl",
        "bad": write_lines(tmp_path / "bad.jsonl", [b"nope", {"prompt": "", "answer": "1"}]),
        "good": write_lines(tmp_path / "good.jsonl", GOOD),
        "words": write_lines(tmp_path / "words.jsonl", [{"prompt": "Q", "answer": "two"}]),
    }
    overrides = [s.format(**files) for s in sets]
    with pytest.raises(ConfigError, match=key):
        launch.run("grpo", preset="smoke", overrides=overrides, runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_trust_grpo_refuses_a_text_prompt_file(tmp_path):
    from rayworks.pipelines.trust_grpo.config import TrustGRPOConfig

    path = write_lines(tmp_path / "p.jsonl", GOOD)
    with pytest.raises(ConfigError, match=r"data\.prompts=.*trust_grpo trains on the image task"):
        build_config(TrustGRPOConfig, "smoke", (), [f"data.prompts={path}"])


def test_critics_start_from_the_policy_on_a_prompt_file(tmp_path, tiny_gpt2):
    policy = tiny_gpt2()
    path = write_lines(tmp_path / "p.jsonl", GOOD)
    sets = [f"policy.init_from={policy}", f"data.prompts={path}"]
    cfg = build_config(PPOConfig, "smoke", (), sets)
    assert base_models(cfg, tmp_path / "cache") == (policy, policy)  # no traces to SFT on
    given = build_config(PPOConfig, "smoke", (), [*sets, f"critic.path={policy}"])
    assert base_models(given, tmp_path / "cache")[1] == policy


def test_grpo_run_on_a_gpt2_and_a_prompt_file(cli, cli_env, tiny_gpt2, tmp_path):
    policy = tiny_gpt2([f"{g['prompt']} {g['answer']}" for g in GOOD])
    path = write_lines(tmp_path / "prompts.jsonl", [*GOOD, *(raw for raw, _ in MALFORMED[:3])])
    cli(
        [
            "run",
            "grpo",
            "--preset",
            "smoke",
            "--no-progress",
            "--set",
            f"policy.init_from={policy}",
            "--set",
            f"data.prompts={path}",
            "--set",
            "data.verifier=numeric",
            "--set",
            "learner.max_steps=2",
            "--set",
            "rollout.sampling.max_new_tokens=8",
        ]
    )
    (run_dir,) = (Path(cli_env["RAYWORKS_RUNS_DIR"]) / "grpo").glob("*")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed", summary.get("error")
    for key in ("test_accuracy", "val_accuracy", "base_test_accuracy", "reward"):
        assert isinstance(summary[key], float), key
    assert (summary["prompts_lines"], summary["prompts_kept"], summary["prompts_rejected"]) == (
        len(GOOD) + 3,
        len(GOOD),
        3,
    )
    rejects = (run_dir / REJECTS_FILE).read_text().splitlines()
    assert [json.loads(r)["line"] for r in rejects] == [len(GOOD) + 1, len(GOOD) + 2, len(GOOD) + 3]
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "test_accuracy" in r] == [0, 2]
    gaps = [r["rollout_logp_gap"] for r in records if "rollout_logp_gap" in r]
    assert gaps and max(gaps) < 1e-4  # the learner re-scores the GPT-2 engine's ids exactly
    samples = (run_dir / "artifacts" / "samples" / "step_000002.jsonl").read_text().splitlines()
    prompts = {g["prompt"] for g in GOOD}
    assert {json.loads(s)["prompt"] for s in samples} <= prompts  # the raw prompts
