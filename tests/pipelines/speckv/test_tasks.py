"""The synthetic tasks' answers follow from their prompts; the tokenizer loads back."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from rayworks.models.tokenizer import load_tokenizer
from rayworks.pipelines.speckv.tasks import (
    TaskConfig,
    encode,
    make_examples,
    make_tokenizer,
    record_keys,
    save_tokenizer,
    solve,
    training_tokens,
)


def _record_after(prompt: list[str], key: str, length: int) -> list[str]:
    i = prompt.index(key)  # the key occurs once in the context
    return prompt[i + 1 : i + 1 + length]


@pytest.mark.parametrize("task", ["recall", "niah"])
def test_retrieval_answer_is_the_value_after_the_key(task: str) -> None:
    cfg = TaskConfig(tasks=[task], context_len=120, value_len=5)
    for ex in make_examples(cfg, 20, seed=3):
        key = ex.prompt[-1]
        assert ex.prompt[-2:] == ["Q", key] and ex.answer[-1] == "</s>"
        assert ex.prompt[:-2].count(key) == 1
        assert _record_after(ex.prompt, key, 5) == ex.answer[:-1]
        values = [t for t in ex.prompt[:-2] if t.startswith("v")]
        assert len(values) == len(set(values))  # no value token repeats in a context
        keys = record_keys(ex.prompt[1:-2])  # keys are value tokens too (tasks.FORMAT 3)
        before = [ex.prompt[ex.prompt.index(k) - 1] for k in keys]
        assert key in keys and all(t in ("<s>", ";") or t.startswith("w") for t in before)
        assert len(keys) == (ex.prompt.count(";") if task == "recall" else 1 + cfg.n_distractors)
        # recall's 10 records (the value vocabulary's limit) sit among filler (format 4)
        assert 110 <= len(ex.prompt) <= 124


def test_default_prompts_have_the_methods_files_length() -> None:
    """Both retrieval tasks of the default config give ~230-token prompts (methods file)."""
    from rayworks.pipelines.speckv.config import SpecKVConfig

    cfg = SpecKVConfig().tasks
    for task in ("recall", "niah"):
        lengths = [
            len(e.prompt) for e in make_examples(cfg.model_copy(update={"tasks": [task]}), 50, 1)
        ]
        assert min(lengths) >= 225 and max(lengths) <= 240, (task, min(lengths), max(lengths))


def test_vt_answer_is_the_chain_of_the_queried_number() -> None:
    cfg = TaskConfig(tasks=["vt"], context_len=100)
    for ex in make_examples(cfg, 10, seed=4):
        number, chain = ex.prompt[-1], ex.answer[:-1]
        assert len(chain) == cfg.chain_len
        ctx = ex.prompt[:-2]
        assert ctx[ctx.index(chain[0]) : ctx.index(chain[0]) + 3] == [chain[0], "=", number]
        for prev, cur in itertools.pairwise(chain):
            i = ctx.index(cur)
            assert ctx[i : i + 3] == [cur, "=", prev] and i > ctx.index(prev)


def test_cwe_answer_is_the_three_most_frequent_words() -> None:
    cfg = TaskConfig(tasks=["cwe"], context_len=150)
    for ex in make_examples(cfg, 10, seed=5):
        counts = Counter(ex.prompt[1:-2])
        top = [w for w, _ in counts.most_common(3)]
        assert top == ex.answer[:-1]
        assert [counts[w] for w in top] == cfg.cwe_counts


def test_examples_are_balanced_and_reproducible() -> None:
    cfg = TaskConfig()
    a, b = make_examples(cfg, 8, seed=1), make_examples(cfg, 8, seed=1)
    assert a == b and [e.task for e in a[:4]] == ["recall", "niah", "vt", "cwe"]
    assert make_examples(cfg, 8, seed=2) != a


def test_tokenizer_round_trips_through_hf_folder(tmp_path: Path) -> None:
    save_tokenizer(tmp_path)
    loaded = load_tokenizer(tmp_path)
    ex = make_examples(TaskConfig(), 1, seed=0)[0]
    assert loaded(ex.text).input_ids == encode(make_tokenizer(), ex.prompt)[1:]
    assert loaded.pad_token_id == 0 and loaded.bos_token_id == 1 and loaded.eos_token_id == 2
    with pytest.raises(ValueError, match="unknown token"):
        encode(loaded, ["k1", "zebra"])


def test_task_config_errors_name_the_bad_value() -> None:
    with pytest.raises(ValidationError, match="qa"):
        TaskConfig(tasks=["recall", "qa"])
    with pytest.raises(ValidationError, match="cwe_counts"):
        TaskConfig(cwe_counts=[4, 6, 8])
    with pytest.raises(ValidationError, match="n_distractors=9"):
        TaskConfig(n_distractors=9, value_len=8)


def test_training_queries_are_answered_by_the_solver() -> None:
    cfg = TaskConfig(context_len=120)
    rng = random.Random(0)
    for ex in make_examples(cfg, 8, seed=6):
        assert solve(ex, ex.prompt[-1], cfg) == ex.answer
        tokens, mask = training_tokens(ex, cfg, 3, rng)
        n = len(ex.prompt)
        assert tokens[: n + len(ex.answer)] == ex.prompt + ex.answer
        assert not any(mask[:n]) and all(mask[n : n + len(ex.answer)])
        i = n + len(ex.answer)
        extra = 0
        while i < len(tokens):
            assert tokens[i] == "Q" and not any(mask[i : i + 2])
            ans = solve(ex, tokens[i + 1], cfg)
            assert tokens[i + 2 : i + 2 + len(ans)] == ans and all(mask[i + 2 : i + 2 + len(ans)])
            i += 2 + len(ans)
            extra += 1
        assert extra == (0 if ex.task == "cwe" else 2)
