"""Normalize: NFC/NFKC, line endings, control characters, spaces; empty rows dropped."""

import pytest

from rayworks.pipelines.corpus.normalize import EMPTY, Normalize, NormalizeConfig, normalize_text
from rayworks.pipelines.corpus.step import DROP, drop


def test_nfc_composes_and_nfkc_folds() -> None:
    decomposed = "Cafe\u0301 ﬁn"  # e + combining acute, fi ligature
    assert normalize_text(decomposed, NormalizeConfig()) == "Café ﬁn"
    assert normalize_text(decomposed, NormalizeConfig(form="NFKC")) == "Café fin"
    with pytest.raises(ValueError, match="form"):
        NormalizeConfig(form="NFD")


def test_line_endings_controls_and_spaces() -> None:
    text = "\ufeff  Grüße\x00 aus   Köln.  \r\nZeile\x07 zwei\rdrei\u2028\tvier  \n\n"
    assert normalize_text(text, NormalizeConfig()) == "Grüße aus Köln.\nZeile zwei\ndrei\n\tvier"


def test_indentation_kept_inner_spaces_collapsed() -> None:
    code = "def f():\n    return  1   +  2\n"
    assert normalize_text(code, NormalizeConfig()) == "def f():\n    return 1 + 2"
    kept = normalize_text(code, NormalizeConfig(collapse_spaces=False))
    assert kept == "def f():\n    return  1   +  2"


def test_step_drops_empty_and_keeps_first_reason() -> None:
    batch = {"text": ["日本語の文。", " \x00\r\n\t ", "", "déjà  vu"]}
    batch = drop(batch, ["", "", "earlier:rule", ""])
    out = Normalize()(batch)
    assert list(out["text"]) == ["日本語の文。", "", "", "déjà vu"]
    assert list(out[DROP]) == ["", EMPTY, "earlier:rule", ""]
    assert EMPTY == "normalize:empty"
    assert list(out["normalize_changed"]) == [False, True, False, True]


def _plain_normalize(text: str, cfg: NormalizeConfig) -> str:
    """`normalize_text` as every pattern applied unconditionally (before the fast checks)."""
    import re
    import unicodedata

    text = unicodedata.normalize(cfg.form, text)
    text = re.sub(r"\r\n|[\r\x85\u2028\u2029]", "\n", text)
    text = re.sub("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff]+", "", text)
    if cfg.collapse_spaces:
        text = re.sub(r"(?<=\S) {2,}", " ", text)
    return re.sub(r"[ \t]+(?=\n|\Z)", "", text).strip()


@pytest.mark.parametrize("ascii_only", [True, False])
def test_skipped_patterns_are_the_ones_without_a_match(ascii_only: bool) -> None:
    import random

    pieces = [
        "word",
        "a",
        " ",
        "  ",
        "   ",
        "\t",
        " \t",
        "\n",
        "\r\n",
        "\r",
        "\x00",
        "\x07",
        "\x0b",
        "\x1b",
        "\x1f",
        "\x7f",
        "x  ",
    ]
    if not ascii_only:
        pieces += [
            "é",
            "e\u0301",
            "ﬁ",
            "日本",
            "\x85",
            "\u2028",
            "\u2029",
            "\x80",
            "\x9f",
            "\ufeff",
            "\u00a0",
            "\u00a0 ",
            "\u3000",
            "\U0001f600",
        ]
    rng = random.Random(ascii_only)
    configs = [
        NormalizeConfig(),
        NormalizeConfig(form="NFKC"),
        NormalizeConfig(collapse_spaces=False),
    ]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))
        for cfg in configs:
            assert normalize_text(text, cfg) == _plain_normalize(text, cfg), repr(text)
