"""Incremental decoding and stop matching: same text as decoding everything on
every token, at a cost per token that no stop string's length can blow up."""

from __future__ import annotations

import random
import time

import pytest

from rayworks.models import TokenizerSpec, train_tokenizer
from rayworks.platform.completion_engine import TextRow
from rayworks.platform.text_stream import IncrementalDecoder, StopMatcher, prefix_function

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "héllo wörld — naïve café ✓ 日本語 テキスト",
    "0123456789 abc abd abcd abcabd",
]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(TokenizerSpec(vocab_size=300), TEXTS)


def reference(tok, ids: list[int], stop: list[str], limit: int, eos: set[int]):
    """The algorithm this replaced: decode all ids on every token, search every stop string
    in the whole text, hold the longest stop prefix the text ends with (and U+FFFD)."""
    text, emitted, kept, pieces, finish = "", 0, [], [], None
    for n, token in enumerate(ids, 1):
        if token in eos:
            finish = "stop"
            pieces.append(text[emitted:])
            break
        kept.append(token)
        text = tok.decode(kept, skip_special_tokens=True)
        hits = [i for s in stop if (i := text.find(s)) >= 0]
        if hits:
            text, finish = text[: min(hits)], "stop"
        elif n >= limit:
            finish = "length"
        if finish:
            pieces.append(text[emitted:])
            break
        hold = max((k for s in stop for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        safe = len(text) - hold
        while safe > emitted and text[safe - 1] == "\ufffd":
            safe -= 1
        pieces.append(text[emitted : max(emitted, safe)])
        emitted = max(emitted, safe)
    return text, pieces, finish


def run_row(tok, ids, stop, limit, eos):
    row = TextRow(tok, eos, stop, limit)
    pieces = []
    for token in ids:
        pieces.append(row.push(token))
        if row.finish:
            break
    return row, pieces


@pytest.mark.parametrize("seed", range(40))
def test_text_row_matches_full_decoding(tok, seed: int) -> None:
    """Random token streams (ids of multi-byte characters included), random stop strings
    cut from the corpus, EOS at the end: the final text, the finish reason and the streamed
    pieces agree with the full-decode reference."""
    rng = random.Random(seed)
    eos = {tok.eos_token_id}
    ids = [rng.randrange(len(tok)) for _ in range(rng.randint(1, 60))] + [tok.eos_token_id]
    source = rng.choice(TEXTS)
    stop = []
    for _ in range(rng.randint(0, 3)):
        i = rng.randrange(len(source))
        stop.append(source[i : i + rng.randint(1, 4)])
    limit = rng.randint(1, 70)
    want_text, want_pieces, want_finish = reference(tok, ids, stop, limit, eos)
    row, pieces = run_row(tok, ids, stop, limit, eos)
    assert (row.text, row.finish) == (want_text, want_finish)
    assert "".join(pieces) == "".join(want_pieces) == want_text


def test_decoder_pieces_add_up_to_the_full_decode(tok) -> None:
    rng = random.Random(1)
    ids = tok("héllo wörld — naïve café ✓ 日本語 テキスト the quick fox").input_ids
    ids += [rng.randrange(len(tok)) for _ in range(200)]
    dec = IncrementalDecoder(tok)
    text = "".join(dec.push(i) for i in ids) + dec.flush()
    assert text == tok.decode(ids, skip_special_tokens=True)


def test_stop_matcher_holds_prefixes_and_finds_the_earliest_start() -> None:
    m = StopMatcher(["abcd", "bc"])
    assert m.feed("xa") is None and m.hold == 1  # "a" may begin "abcd"
    assert m.feed("b") is None and m.hold == 2
    assert m.feed("c") == 2  # "bc" completes first (at "c"), starting at offset 2
    m = StopMatcher(["aab"])
    assert m.feed("aaaa") is None and m.hold == 2  # overlapping prefix kept by the KMP table
    assert m.feed("b") == 2
    assert prefix_function("abab") == [0, 0, 1, 2]


def test_huge_stop_string_costs_linear_time(tok) -> None:
    """A 100 KB stop string that the text keeps nearly matching (a denial-of-service request):
    the old algorithm scanned ~1e10 characters per token; this one stays linear."""
    stop = "a" * 100_000 + "b"
    row = TextRow(tok, {tok.eos_token_id}, [stop], limit=2_000)
    a = tok.convert_tokens_to_ids("a")
    started = time.process_time()
    for _ in range(1_999):
        assert row.push(a) == ""  # every "a" may still begin the stop string: held
    assert row.push(a) == "a" * 2_000  # the length limit releases the held text
    assert row.finish == "length"
    assert time.process_time() - started < 5.0  # old: hours; here well under 0.5 s
