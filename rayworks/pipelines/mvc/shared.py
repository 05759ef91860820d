"""What every arm of a bench shares, built once and cached under `ctx.cache_root`:
the corpus, the fixed decoder and the CTC recognizer (each keyed by its config and the
corpus key, behind a file lock so arms running side by side wait for one build).

The decoder and recognizer use a fixed seed (0), not the run's: the decoder is "one fixed
decoder" for every arm and every seed; only the conditioning stacks vary with the seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from rayworks.core import checkpoint as ckpt
from rayworks.pipelines.mvc.corpus import cached, config_key, load_or_build, read_corpus
from rayworks.pipelines.mvc.decoder import Decoder, pretrain_decoder
from rayworks.pipelines.mvc.recognizer import Recognizer, train_recognizer

FIXED_SEED = 0


def _save(model: torch.nn.Module, losses: list[float], folder: Path) -> None:
    ckpt.save_tree(folder, "model", dict(model.state_dict()))
    (folder / "losses.json").write_text(json.dumps(losses))


def _decoder_folder(corpus_folder: Path, cfg: dict[str, Any]) -> Path:
    return corpus_folder / f"decoder-{config_key(cfg)}"


def _recognizer_folder(corpus_folder: Path, cfg: dict[str, Any]) -> Path:
    return corpus_folder / f"recognizer-{config_key(cfg)}"


def load_decoder(corpus_folder: Path, cfg: dict[str, Any], vocab_size: int) -> Decoder:
    model = Decoder(vocab_size, cfg["width"], cfg["blocks"], cfg["style_dim"])
    model.load_state_dict(ckpt.load_tree(_decoder_folder(corpus_folder, cfg), "model"))
    return model.eval().requires_grad_(False)


def load_recognizer(corpus_folder: Path, cfg: dict[str, Any], vocab_size: int) -> Recognizer:
    model = Recognizer(vocab_size, cfg["width"])
    model.load_state_dict(ckpt.load_tree(_recognizer_folder(corpus_folder, cfg), "model"))
    return model.eval().requires_grad_(False)


def build_piece(what: str, corpus_folder: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Fan-out piece: pretrain (or find cached) the decoder or the recognizer."""
    folder = Path(corpus_folder)
    corpus = read_corpus(folder)
    train = pretrain_decoder if what == "decoder" else train_recognizer
    target = (_decoder_folder if what == "decoder" else _recognizer_folder)(folder, cfg)
    cached(target, lambda f: None, lambda f: _save(*train(corpus, cfg, FIXED_SEED), f))
    losses = json.loads((target / "losses.json").read_text())
    return {"kind": what, "final_loss": losses[-1], "first_loss": losses[0]}


def corpus_folder(cfg: dict[str, Any], cache_root: Path) -> tuple[Path, int]:
    """Build or find the corpus; returns its folder and the number of utterances."""
    corpus, folder = load_or_build(cfg, cache_root)
    return folder, len(corpus.texts)
