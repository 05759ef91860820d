"""Tiny decoders and local tokenizers: exact sizes, lossless round trips, HF-format save/load."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rayworks.core.checkpoint import step_dir
from rayworks.core.errors import CheckpointNotFoundError
from rayworks.models import (
    DecoderSpec,
    TokenizerSpec,
    build_decoder,
    load_causal_lm,
    load_tokenizer,
    resolve_model_dir,
    train_tokenizer,
)
from rayworks.models.decoder import n_params

CORPUS = [
    "Q: 347+58=\n<think>7+8=15 c1|4+5+1=10 c1|3+0+1=4 c0</think>A: 405",
    "Hello, world! It's a tiny corpus.\n\tTabs and  double  spaces.\n",
    "def f(x):\n    return x * 2  # comment\n",
]
PYTHON_SOURCE = Path(__file__).read_text()


@pytest.fixture(scope="module")
def char_tok():
    return train_tokenizer(TokenizerSpec(kind="char"), CORPUS)


@pytest.fixture(scope="module")
def bpe_tok():
    return train_tokenizer(TokenizerSpec(kind="bpe", vocab_size=400), [PYTHON_SOURCE])


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


# ------------------------------------------------------------------ tokenizers


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_special_token_ids_are_fixed(kind: str) -> None:
    tok = train_tokenizer(TokenizerSpec(kind=kind, vocab_size=300), CORPUS)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert tok.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]


@pytest.mark.parametrize(
    "text",
    [
        CORPUS[0],
        "Hello , world .\nIt's\n\n  indented\ttab",  # spaces before punctuation survive
        "",
        "\n",
    ],
)
def test_char_tokenizer_round_trips(char_tok, text: str) -> None:
    ids = encode(char_tok, text)
    assert len(ids) == len(text)  # one token per character
    assert char_tok.decode(ids) == text


def test_char_tokenizer_has_one_token_per_seen_character(char_tok) -> None:
    alphabet = set("".join(CORPUS))
    assert len(char_tok) == 4 + len(alphabet)  # no merges are learned
    assert encode(char_tok, "€") == [char_tok.unk_token_id]  # unseen character


def test_bpe_tokenizer_round_trips_python_source(bpe_tok) -> None:
    ids = encode(bpe_tok, PYTHON_SOURCE)
    assert bpe_tok.decode(ids) == PYTHON_SOURCE
    assert len(ids) < 0.7 * len(PYTHON_SOURCE)  # ~140 merges on top of 256 bytes compress
    assert len(bpe_tok) == 400


def test_bpe_tokenizer_handles_unseen_bytes(bpe_tok) -> None:
    text = "naïve → 日本語 🙂"
    ids = encode(bpe_tok, text)
    assert bpe_tok.unk_token_id not in ids  # byte-level: nothing is unknown
    assert bpe_tok.decode(ids) == text


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_tokenizer_save_and_load_round_trip(tmp_path: Path, kind: str) -> None:
    tok = train_tokenizer(TokenizerSpec(kind=kind, vocab_size=300), CORPUS)
    tok.save_pretrained(str(tmp_path))
    loaded = load_tokenizer(tmp_path)
    for text in [*CORPUS, "x = 1\n"]:
        assert encode(loaded, text) == encode(tok, text)
        assert loaded.decode(encode(loaded, text)) == text
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id, loaded.unk_token_id) == (
        0,
        1,
        2,
        3,
    )
    assert len(loaded) == len(tok)


def test_init_from_loads_a_saved_tokenizer(tmp_path: Path, char_tok) -> None:
    char_tok.save_pretrained(str(tmp_path))
    tok = train_tokenizer(TokenizerSpec(init_from=str(tmp_path)), ["other text entirely"])
    assert tok.get_vocab() == char_tok.get_vocab()


# ------------------------------------------------------------------ decoder


def expected_params(
    d: int, layers: int, heads: int, kv_heads: int, ffn: int, vocab: int, tied: bool
) -> int:
    head_dim = d // heads
    attention = 2 * d * d + 2 * d * kv_heads * head_dim  # q, o + k, v (no biases)
    mlp = 3 * d * ffn  # SwiGLU: gate, up, down
    norms = 2 * d
    embeddings = vocab * d * (1 if tied else 2)
    return embeddings + layers * (attention + mlp + norms) + d  # + final norm


@pytest.mark.parametrize(
    ("spec", "vocab", "ffn", "kv"),
    [
        (DecoderSpec(d_model=32, n_layer=2, n_head=2), 50, 88, 2),  # 32*2.75 = 88
        (
            DecoderSpec(d_model=64, n_layer=3, n_head=4, n_kv_head=2, tie_embeddings=False),
            100,
            176,
            2,
        ),
        (DecoderSpec(d_model=16, n_layer=1, n_head=4, ffn_mult=1.0), 20, 16, 4),
    ],
)
def test_decoder_parameter_count_is_exact(spec: DecoderSpec, vocab: int, ffn: int, kv: int) -> None:
    model = build_decoder(spec, vocab_size=vocab)
    assert model.config.intermediate_size == ffn
    expected = expected_params(
        spec.d_model, spec.n_layer, spec.n_head, kv, ffn, vocab, spec.tie_embeddings
    )
    assert n_params(model) == expected


def test_default_decoder_is_small() -> None:
    model = build_decoder(DecoderSpec(), vocab_size=512)
    assert 500_000 < n_params(model) < 2_000_000


def test_decoder_config_carries_special_ids_and_sizes() -> None:
    spec = DecoderSpec(d_model=32, n_layer=2, n_head=2, max_seq_len=64, rope_theta=500.0)
    config = build_decoder(spec, vocab_size=40, bos=1, eos=2, pad=0).config
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, 2, 0)
    assert config.max_position_embeddings == 64
    assert config.vocab_size == 40
    assert config.tie_word_embeddings is True


def test_d_model_not_divisible_by_n_head_raises() -> None:
    with pytest.raises(ValueError, match="d_model=30 is not divisible by n_head=4"):
        build_decoder(DecoderSpec(d_model=30, n_head=4), vocab_size=10)


def test_tied_embeddings_share_storage() -> None:
    model = build_decoder(DecoderSpec(d_model=16, n_layer=1, n_head=2), vocab_size=10)
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory):
    torch.manual_seed(0)
    model = build_decoder(DecoderSpec(d_model=32, n_layer=2, n_head=2), vocab_size=30).eval()
    path = tmp_path_factory.mktemp("model")
    model.save_pretrained(str(path))
    return model, path


def test_save_pretrained_writes_safetensors_only(saved_model) -> None:
    _, path = saved_model
    names = {p.name for p in path.iterdir()}
    assert {"config.json", "model.safetensors"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pkl")) for n in names)


def test_load_causal_lm_gives_identical_logits(saved_model) -> None:
    model, path = saved_model
    loaded = load_causal_lm(path).eval()
    ids = torch.randint(0, 30, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert loaded.lm_head.weight.data_ptr() == loaded.get_input_embeddings().weight.data_ptr()


def test_init_from_builds_the_saved_model(saved_model) -> None:
    model, path = saved_model
    other = build_decoder(
        DecoderSpec(d_model=16, n_layer=1, n_head=2, init_from=str(path)), vocab_size=99
    )
    assert other.config.hidden_size == 32
    for (name, a), (_, b) in zip(
        model.state_dict().items(), other.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


# ------------------------------------------------------------------ resolve_model_dir


def fake_model(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_resolve_model_dir_on_a_model_folder(tmp_path: Path) -> None:
    model = fake_model(tmp_path / "m")
    assert resolve_model_dir(model) == model


def test_resolve_model_dir_prefers_the_final_model_of_a_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    final = fake_model(run / "artifacts" / "model")
    fake_model(step_dir(run / "checkpoints", 20))
    assert resolve_model_dir(run) == final


def test_resolve_model_dir_falls_back_to_the_latest_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "artifacts").mkdir(parents=True)
    fake_model(step_dir(run / "checkpoints", 10))
    latest = fake_model(step_dir(run / "checkpoints", 20))
    (run / "checkpoints" / ".tmp-step_00000030-1").mkdir()  # an unfinished write
    assert resolve_model_dir(run) == latest
    assert resolve_model_dir(str(run)) == latest


def test_resolve_model_dir_on_an_empty_folder_raises_naming_it(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "checkpoints").mkdir(parents=True)
    with pytest.raises(CheckpointNotFoundError) as err:
        resolve_model_dir(empty)
    assert str(empty) in str(err.value)
    assert "config.json" in str(err.value)
    with pytest.raises(CheckpointNotFoundError):
        load_causal_lm(tmp_path / "does-not-exist")
