"""Byte-level BPE training (deterministic, local) and the `tokens` step."""

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, trainers

from rayworks.core.errors import RayworksError
from rayworks.pipelines.corpus.step import DROP, drop
from rayworks.pipelines.corpus.tokenizer import (
    END_OF_TEXT,
    GPT2_SPLIT,
    SEGMENT,
    TOKENS,
    PretokenCounter,
    TokenCount,
    TokenizerConfig,
    train_bpe,
    train_in_child,
    vocab_size,
)

TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Le renard brun rapide saute par-dessus le chien paresseux, à l'été.",
    "Der schnelle braune Fuchs springt über den faulen Hund; Straße, Größe.",
    "东京的天气很好。我们明天去公园散步吧。",
    "Быстрая коричневая лиса перепрыгивает через ленивую собаку.",
    "def add(a, b):\n    return a + b  # 🦊 emoji and tabs\t\there",
] * 20
CFG = TokenizerConfig(vocab_size=400, min_frequency=2)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_bpe(TEXTS, CFG, tmp_path_factory.mktemp("tok") / "tokenizer.json")


def test_training_is_deterministic(trained: Path, tmp_path: Path) -> None:
    again = train_bpe(iter(TEXTS), CFG, tmp_path / "sub" / "tokenizer.json")
    assert again.read_bytes() == trained.read_bytes()
    assert vocab_size(trained) == 400
    assert Tokenizer.from_file(str(trained)).token_to_id(END_OF_TEXT) == 0


def test_counts_match_encode_and_dropped_rows_count_zero(trained: Path) -> None:
    tok = Tokenizer.from_file(str(trained))
    texts = [*TEXTS[:6], "", "nouveau texte jamais vu: ÆØÅ ñ 😀"]
    batch = drop({"text": texts}, ["", "", "gopher:min_words", "", "", "", "", ""])
    out = TokenCount(trained)(batch)
    expected = [len(tok.encode(t, add_special_tokens=False).ids) for t in texts]
    expected[2] = 0  # dropped: not counted
    assert out[TOKENS].tolist() == expected
    assert out[TOKENS].dtype.kind == "i" and all(
        n > 0 for i, n in enumerate(expected) if i not in (2, 6)
    )
    assert list(out[DROP]) == list(batch[DROP])  # never drops


def test_no_drop_column_counts_every_row(trained: Path) -> None:
    out = TokenCount(trained)({"text": ["a b", "c"], "id": [1, 2]})
    assert DROP not in out and len(out[TOKENS]) == 2 and out[TOKENS].min() > 0


def test_byte_level_never_unknown(trained: Path) -> None:
    tok = Tokenizer.from_file(str(trained))
    text = "ᚠᛇᚻ unseen runes ꙮ"
    assert tok.decode(tok.encode(text).ids) == text


@pytest.mark.parametrize("threads", [1, 2])
def test_training_in_a_child_process_gives_the_same_file(
    trained: Path, tmp_path: Path, threads: int
) -> None:
    """The child counts on `threads` threads and merges on one: the file must not change,
    also on text holding the special token's text and characters from every plane."""
    assert train_bpe(TEXTS, CFG, tmp_path / "a.json", threads=threads).read_bytes() == (
        trained.read_bytes()
    )
    rng = random.Random(threads)
    odd = [
        "".join(
            chr(
                rng.choice(
                    [
                        rng.randrange(32, 0x2FF),
                        rng.randrange(0x370, 0xD7FF),
                        rng.randrange(0xE000, 0x10FFFF),
                        0x20,
                        0x0A,
                    ]
                )
            )
            for _ in range(300)
        )
        for _ in range(40)
    ] + [f"before {END_OF_TEXT} after", "x" * 5000]
    cfg = TokenizerConfig(vocab_size=600, min_frequency=1)
    here = train_bpe(odd, cfg, tmp_path / "here.json")
    child = train_bpe(odd, cfg, tmp_path / "child.json", threads=threads)
    assert child.read_bytes() == here.read_bytes()


def test_a_failed_training_process_raises_with_its_error() -> None:
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    trainer = trainers.BpeTrainer(vocab_size=300, show_progress=False)
    with pytest.raises(RayworksError, match=r"training the tokenizer failed .*\(exit 1\)"):
        train_in_child(wordpiece, trainer, ["some text"], threads=2)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        train_in_child(wordpiece, trainer, ["some text"], threads=0)


def test_a_text_that_cannot_be_sent_stops_the_training(tmp_path: Path) -> None:
    with pytest.raises(UnicodeEncodeError):
        train_bpe(["fine", "lone \ud800 surrogate"], CFG, tmp_path / "t.json", threads=2)
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("texts", [[], ["", None, ""]])
def test_no_text_is_an_error(texts: list, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no text"):
        train_bpe(texts, CFG, tmp_path / "tokenizer.json")
    assert not (tmp_path / "tokenizer.json").exists()


def test_max_chars_bounds_the_training_text(tmp_path: Path) -> None:
    cfg = TokenizerConfig(vocab_size=300, min_frequency=1, max_chars=10)
    small = train_bpe(["aaaa bbbb", "cccc dddd", "zzzz"], cfg, tmp_path / "a.json")
    vocab = Tokenizer.from_file(str(small)).get_vocab()
    assert "cccc" in vocab and "zzzz" not in vocab  # the 2nd doc crosses 10 chars, 3rd unread


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"vocab_size": 100}, "vocab_size"),
        ({"min_frequency": 0}, "min_frequency"),
        ({"special_tokens": ("",)}, "special_tokens"),
        ({"special_tokens": ("<a>", "<a>")}, "special_tokens"),
        ({"max_chars": 0}, "max_chars"),
    ],
)
def test_config_names_the_bad_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"TokenizerConfig.{field}"):
        TokenizerConfig(**kwargs)


def _random_texts(n: int, seed: int) -> list[str]:
    """Texts drawn from every Unicode plane that holds characters, weighted towards the
    classes the GPT-2 split turns on: spaces of every kind, letters, marks, digits of other
    scripts, apostrophes, punctuation, emoji."""
    import random

    rng = random.Random(seed)
    spaces = "\t\n\x0b\x0c\r \x1c\x1d\x1e\x1f\x85\xa0\u1680\u180e\u2000\u2005\u200a\u200b\u2028\u2029\u202f\u205f\u3000\ufeff"
    common = "aZé'sltrvdm 0123 ,.;!?-_\"()[]{}<>|/\\#@" + "²½Ⅻ٣０ß\u0301\u0308ǅʰ々"
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randrange(0, 60)):
            r = rng.random()
            if r < 0.25:
                chars.append(rng.choice(spaces))
            elif r < 0.75:
                chars.append(rng.choice(common))
            else:
                c = rng.randrange(0x20, 0x3134F)
                chars.append(chr(c) if not 0xD800 <= c < 0xE000 else "x")
        out.append("".join(chars))
    return out


def test_pretoken_counts_equal_encode_on_random_unicode(trained: Path) -> None:
    """`PretokenCounter` is exact: the segments, the regex split, the caches (also once
    emptied when full) and the special-token fallback give `encode`'s counts on every
    text."""
    tok = Tokenizer.from_file(str(trained))
    # U+001C-U+001F: whitespace to Python's `re`, punctuation to GPT-2's split (SEGMENT)
    separators = ["a!\x1c b", "!\x1c\x1d x\x1f\x1f", " \x1e y\u00a0z\u3000 \t\n w"]
    texts = [*_random_texts(3000, seed=0), *TEXTS[:6], *separators]
    texts += [f"a {END_OF_TEXT} b", END_OF_TEXT, ""]
    count = PretokenCounter(tok, max_cached=500)
    assert count.by_piece
    got = count(texts) + count(texts[::-1])  # the second pass reads the cache
    want = [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]
    assert got == want + want[::-1]
    assert len(count.cache) <= 500
    assert count([f"x{END_OF_TEXT}y"]) == [len(tok.encode(f"x{END_OF_TEXT}y").ids)] == [3]


def test_pretoken_counter_encodes_whole_with_another_pre_tokenizer(trained: Path) -> None:
    from tokenizers import pre_tokenizers

    tok = Tokenizer.from_file(str(trained))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    count = PretokenCounter(tok)
    assert not count.by_piece
    texts = ["hello world, hello", "  spaces  "]
    assert count(texts) == [len(tok.encode(t, add_special_tokens=False).ids) for t in texts]


def test_segments_split_into_exactly_the_texts_pieces() -> None:
    """A text's GPT-2 pieces are its `SEGMENT`s' pieces, concatenated (what lets the
    counter cache whole segments), on random Unicode and on U+001C-U+001F, which Python's
    `re` calls whitespace and GPT-2's split calls punctuation."""
    texts = [*_random_texts(2000, seed=1), "a!\x1c b", "!\x1c\x1d x\x1f\x1f", " \x1e y\u00a0z"]
    for text in texts:
        pieces = [p for s in SEGMENT.findall(text) for p in GPT2_SPLIT.findall(s)]
        assert pieces == GPT2_SPLIT.findall(text), repr(text)
