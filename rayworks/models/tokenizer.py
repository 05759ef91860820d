"""Local tokenizer training with `tokenizers`, saved in HF format.

Two kinds: `char` (one token per character: a BPE over single-character pre-tokens,
which learns no merges) and `bpe` (byte-level BPE). Both reserve the same special ids
(<pad>=0, <s>=1, </s>=2, <unk>=3) and load back with `AutoTokenizer.from_pretrained`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import Field
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from rayworks.core.config import Config

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]


class TokenizerSpec(Config):
    kind: Literal["char", "bpe"] = Field("char", description="char-level or byte-level BPE")
    vocab_size: int = Field(512, ge=8, description="BPE vocabulary size (char: upper bound)")
    init_from: str | None = Field(None, description="local HF tokenizer folder to use as is")


def train_tokenizer(spec: TokenizerSpec, texts: Iterable[str]) -> PreTrainedTokenizerFast:
    """Train a tokenizer of `spec.kind` on `texts` (or load `spec.init_from`)."""
    if spec.init_from:
        return load_tokenizer(spec.init_from)
    if spec.kind == "char":
        tok = Tokenizer(models.BPE(unk_token=UNK))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        tok.decoder = decoders.Fuse()
        trainer = trainers.BpeTrainer(
            vocab_size=spec.vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False
        )
    else:
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=spec.vocab_size,
            special_tokens=SPECIAL_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK
    )


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    return AutoTokenizer.from_pretrained(str(path))
