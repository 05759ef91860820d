"""Decoder shapes and reload, the conditioning stacks (arms a-d) and their padding
behaviour, the mean-prosody (floor) stack, the streaming encoder, and checkpoint resume of the training loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayworks.core import checkpoint as ckpt
from rayworks.pipelines.mvc.corpus import Corpus
from rayworks.pipelines.mvc.decoder import Decoder, collate, references, speaker_pools
from rayworks.pipelines.mvc.layers import alignment
from rayworks.pipelines.mvc.stacks import (
    CausalTextEncoder,
    ConditioningStack,
    MeanProsodyStack,
    build_stack,
)
from rayworks.pipelines.mvc.train import train_stack

STACK = {
    "width": 16,
    "text_layers": 1,
    "conv_layers": 1,
    "heads": 2,
    "d_state": 2,
    "d_conv": 4,
    "expand": 1,
    "scan_chunk": 8,
    "scan_parallel": False,
    "dropout": 0.1,
    "fusion": "gated",
    "style": "adaln",
}
TRAIN = {
    "steps": 4,
    "batch": 3,
    "lr": 1e-2,
    "lambda_mel": 5.0,
    "lambda_dur": 1.0,
    "lambda_f0": 1.0,
    "lambda_energy": 1.0,
    "lambda_voiced": 0.5,
    "checkpoint_every": 2,
    "log_every": 1,
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_corpus(n: int = 8, seed: int = 0) -> Corpus:
    """Random features with consistent shapes (no espeak-ng needed)."""
    rng = np.random.default_rng(seed)
    phonemes = [rng.integers(1, 7, int(rng.integers(3, 7))) for _ in range(n)]
    durations = [rng.integers(1, 4, len(p)) for p in phonemes]
    frames = [int(d.sum()) for d in durations]
    f0 = [
        np.where(rng.random(t) < 0.6, rng.uniform(80, 200, t), 0.0).astype(np.float32)
        for t in frames
    ]
    return Corpus(
        texts=[f"s{i}" for i in range(n)],
        speakers=np.arange(n) % 2,
        speaker_table=[["a", 1, 1]] * 2,
        vocab=[str(k) for k in range(7)],
        phonemes=phonemes,
        durations=durations,
        mels=[rng.normal(-5, 1, (t, 80)).astype(np.float32) for t in frames],
        f0=f0,
        energy=[rng.normal(-3, 1, t).astype(np.float32) for t in frames],
        split=["test", "val"] + ["train"] * (n - 2),
    )


def test_alignment_expands_durations() -> None:
    a = alignment(torch.tensor([[2, 1, 0], [1, 1, 1]]))
    assert a.shape == (2, 3, 3)
    assert a[0].tolist() == [[1, 0, 0], [1, 0, 0], [0, 1, 0]]
    assert a[1].tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_decoder_shapes_and_reload(tmp_path) -> None:
    corpus = tiny_corpus()
    items = corpus.index("train")[:3]
    batch = collate(
        corpus,
        items,
        references(corpus, items, speaker_pools(corpus, items), np.random.default_rng(0)),
    )
    torch.manual_seed(0)
    dec = Decoder(7, 16, 2, 4).eval()
    mel = dec.teacher_forced(batch)
    assert mel.shape == (3, max(len(corpus.mels[i]) for i in items), 80)
    ckpt.save_tree(tmp_path, "model", dict(dec.state_dict()))
    again = Decoder(7, 16, 2, 4).eval()
    again.load_state_dict(ckpt.load_tree(tmp_path, "model"))
    torch.testing.assert_close(again.teacher_forced(batch), mel)
    with pytest.raises(RuntimeError):
        Decoder(7, 32, 2, 4).load_state_dict(ckpt.load_tree(tmp_path, "model"))


@pytest.mark.parametrize(
    "arm,fusion,style",
    [
        ("mvc", "gated", "adaln"),
        ("attn", "gated", "adaln"),
        ("mvc", "concat", "adaln"),
        ("mvc", "gated", "concat"),
    ],
)
def test_stack_outputs_and_padding(arm: str, fusion: str, style: str) -> None:
    torch.manual_seed(0)
    stack = ConditioningStack(arm, 9, {**STACK, "fusion": fusion, "style": style}, 4).eval()
    ids = torch.randint(1, 9, (2, 7))
    ids[1, 4:] = 0
    lengths, style_vec = torch.tensor([7, 4]), torch.randn(2, 4)
    dur = torch.randint(1, 4, (2, 7)) * (ids > 0)
    out = stack(ids, lengths, style_vec, dur)
    n_frames = int(dur.sum(1).max())
    assert out["lf0"].shape == out["energy"].shape == (2, n_frames)
    assert torch.equal(out["frame_lengths"], dur.sum(1))
    alone = stack(ids[1:, :4], lengths[1:], style_vec[1:], dur[1:, :4])
    torch.testing.assert_close(out["lf0"][1, : int(dur[1].sum())], alone["lf0"][0])
    free = stack(ids, lengths, style_vec)  # inference: own durations, no teacher
    assert (free["durations"][0] >= 1).all() and (free["durations"][1, 4:] == 0).all()
    gates = [m for m in stack.modules() if getattr(m, "gate", None) is not None]
    assert bool(gates) == (arm == "mvc" and fusion == "gated")
    adaln = [m for m in stack.modules() if getattr(m, "affine", None) is not None]
    assert bool(adaln) == (style == "adaln")


def test_mean_prosody_stack_is_flat_per_utterance_and_trains(tmp_path) -> None:
    torch.manual_seed(0)
    stack = build_stack("meanprosody", 9, STACK, 4)
    assert isinstance(stack, MeanProsodyStack)
    ids = torch.randint(1, 9, (2, 7))
    ids[1, 4:] = 0
    lengths, style = torch.tensor([7, 4]), torch.randn(2, 4)
    dur = torch.randint(1, 4, (2, 7)) * (ids > 0)
    out = stack(ids, lengths, style, dur)
    n = dur.sum(1)
    assert out["lf0"].shape == (2, int(n.max())) and torch.equal(out["frame_lengths"], n)
    for key in ("lf0", "voiced_logit", "energy"):
        for b in range(2):
            real = out[key][b, : int(n[b])]
            assert torch.allclose(real, real[0].expand_as(real)), key  # one value per utterance
            assert (out[key][b, int(n[b]) :] == 0).all(), key
    assert (out["log_dur"][1, 4:] == 0).all() and out["log_dur"][0].unique().numel() == 1
    other = stack(torch.randint(1, 9, (2, 7)), lengths, style, dur)  # other phonemes
    torch.testing.assert_close(other["lf0"], out["lf0"])  # blind to the phonemes
    free = stack(ids, lengths, style)
    assert (free["durations"][0] >= 1).all() and (free["durations"][1, 4:] == 0).all()

    decoder = Decoder(7, 16, 1, 4).eval().requires_grad_(False)
    flat = build_stack("meanprosody", 7, STACK, 4)
    before = [p.clone() for p in flat.parameters()]
    curve = train_stack(flat, decoder, tiny_corpus(), TRAIN, 0, tmp_path)
    assert len(curve) == TRAIN["steps"]
    assert any(not torch.equal(a, b) for a, b in zip(before, flat.parameters(), strict=True))


def test_streaming_chunks_equal_full_causal_run() -> None:
    torch.manual_seed(0)
    enc = CausalTextEncoder(9, {**STACK, "text_layers": 2, "conv_layers": 2}).eval()
    ids = torch.randint(1, 9, (2, 23))
    with torch.no_grad():
        full, _ = enc(ids)
        for chunk in (5, 23):
            torch.testing.assert_close(enc.stream(ids, chunk), full, rtol=1e-5, atol=1e-5)
        prefix, _ = enc(ids[:, :12])
    torch.testing.assert_close(prefix, full[:, :12], rtol=1e-5, atol=1e-5)  # causal


class _Crash(Exception):
    pass


def test_training_resumes_exactly_from_checkpoint(tmp_path) -> None:
    corpus = tiny_corpus()
    dec = Decoder(7, 16, 1, 4).eval().requires_grad_(False)

    def fresh() -> ConditioningStack:
        torch.manual_seed(3)
        return ConditioningStack("mvc", 7, STACK, 4)

    straight = fresh()
    curve = train_stack(straight, dec, corpus, TRAIN, seed=1, root=tmp_path / "a")
    assert [c[0] for c in curve] == [1, 2, 3, 4]

    def crash(step: int, parts: dict) -> None:
        if step == 3:
            raise _Crash

    with pytest.raises(_Crash):
        train_stack(fresh(), dec, corpus, TRAIN, seed=1, root=tmp_path / "b", on_log=crash)
    assert ckpt.latest_checkpoint(tmp_path / "b").name == "step_00000002"
    resumed = fresh()
    curve_b = train_stack(resumed, dec, corpus, TRAIN, seed=1, root=tmp_path / "b")
    assert curve_b == curve
    for (k, v), w in zip(straight.state_dict().items(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(v, w, msg=k)
