"""Test-split evaluation of one trained stack under the fixed decoder: teacher-forced MCD
and log-F0 RMSE (teacher durations), free-running MCD-DTW, duration error and phoneme
error rate (predicted durations), plus Griffin-Lim samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rayworks.pipelines.mvc import metrics
from rayworks.pipelines.mvc.audio import griffin_lim, write_wav
from rayworks.pipelines.mvc.corpus import Corpus
from rayworks.pipelines.mvc.decoder import (
    LF0_CENTER,
    Batch,
    Decoder,
    collate,
    references,
    speaker_pools,
)
from rayworks.pipelines.mvc.layers import length_mask
from rayworks.pipelines.mvc.recognizer import Recognizer, phoneme_error_rate, targets

EVAL_BATCH = 16


def synthesize(stack: torch.nn.Module, decoder: Decoder, batch: Batch, teacher: bool) -> dict:
    """Stack + decoder on a batch; teacher=True uses the MAS durations (teacher-forced)."""
    style = decoder.style_encoder(batch.ref_mel, batch.ref_lengths)
    out = stack(batch.ids, batch.text_lengths, style, batch.durations if teacher else None)
    mask = length_mask(out["frame_lengths"])
    voiced = torch.sigmoid(out["voiced_logit"])
    mel = decoder(batch.ids, out["durations"], out["lf0"], voiced, out["energy"], style, mask)
    return {**out, "mel": mel}


def test_batches(corpus: Corpus, seed: int) -> list[tuple[list[int], Batch]]:
    """Test utterances in fixed batches, each with a train-split reference of its speaker."""
    test = corpus.index("test")
    refs = references(
        corpus, test, speaker_pools(corpus, corpus.index("train")), np.random.default_rng(seed + 7)
    )
    chunks = [test[k : k + EVAL_BATCH] for k in range(0, len(test), EVAL_BATCH)]
    return [(items, collate(corpus, items, refs)) for items in chunks]


def evaluate_stack(
    stack: torch.nn.Module,
    decoder: Decoder,
    recognizer: Recognizer,
    corpus: Corpus,
    seed: int,
    samples_dir: Path | None,
    label: str,
    gl_iters: int,
) -> dict[str, float]:
    stack.eval()
    mcd_tf, mcd_fr, dur_err, f0_sq, f0_n, fr_mels, refs = [], [], [], 0.0, 0, [], []
    with torch.no_grad():
        for items, batch in test_batches(corpus, seed):
            tf = synthesize(stack, decoder, batch, teacher=True)
            fr = synthesize(stack, decoder, batch, teacher=False)
            for k, i in enumerate(items):
                n, n_fr, tx = (
                    len(corpus.mels[i]),
                    int(fr["frame_lengths"][k]),
                    len(corpus.phonemes[i]),
                )
                mcd_tf.append(metrics.mcd(tf["mel"][k, :n].numpy(), corpus.mels[i]))
                mcd_fr.append(metrics.mcd_dtw(fr["mel"][k, :n_fr].numpy(), corpus.mels[i]))
                sq, cnt = metrics.log_f0_rmse(tf["lf0"][k, :n].numpy() + LF0_CENTER, corpus.f0[i])
                f0_sq, f0_n = f0_sq + sq, f0_n + cnt
                dur_err.append(
                    metrics.log_duration_mae(fr["durations"][k, :tx].numpy(), corpus.durations[i])
                )
                fr_mels.append(fr["mel"][k, :n_fr].numpy())
                refs.append(targets(corpus, i))
    if samples_dir is not None:
        for i, mel in zip(corpus.index("test"), fr_mels, strict=False):
            if i not in corpus.wavs:
                break
            write_wav(samples_dir / f"{label}_utt{i}.wav", griffin_lim(mel, gl_iters))
    return {
        "mcd": float(np.mean(mcd_tf)),
        "mcd_dtw": float(np.mean(mcd_fr)),
        "log_f0_rmse": float(np.sqrt(f0_sq / max(f0_n, 1))),
        "log_dur_mae": float(np.mean(dur_err)),
        "per": phoneme_error_rate(recognizer, fr_mels, refs),
    }


def reference_metrics(
    decoder: Decoder,
    recognizer: Recognizer,
    corpus: Corpus,
    seed: int,
    samples_dir: Path | None,
    gl_iters: int,
) -> dict[str, float]:
    """Floors: the decoder on ground-truth features (teacher-forced MCD floor) and the
    recognizer's PER on ground-truth mels; GT and resynthesized samples."""
    mcds, resyn = [], []
    with torch.no_grad():
        for items, batch in test_batches(corpus, seed):
            mel = decoder.teacher_forced(batch)
            for k, i in enumerate(items):
                n = len(corpus.mels[i])
                mcds.append(metrics.mcd(mel[k, :n].numpy(), corpus.mels[i]))
                resyn.append(mel[k, :n].numpy())
    test = corpus.index("test")
    if samples_dir is not None:
        for i, mel in zip(test, resyn, strict=False):
            if i not in corpus.wavs:
                break
            write_wav(samples_dir / f"ground_truth_utt{i}.wav", corpus.wavs[i])
            write_wav(samples_dir / f"decoder_resynth_utt{i}.wav", griffin_lim(mel, gl_iters))
    per_gt = phoneme_error_rate(
        recognizer, [corpus.mels[i] for i in test], [targets(corpus, i) for i in test]
    )
    return {"mcd_decoder_floor": float(np.mean(mcds)), "per_ground_truth": per_gt}
