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
