"""Audio features, alignment search, metrics and the peak-memory meter against
independent references (closed forms, brute force, dense dynamic programmes)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from rayworks.pipelines.mvc import audio, metrics
from rayworks.pipelines.mvc.align import mas
from rayworks.pipelines.mvc.scaling import PeakMemory

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_mel_filterbank_triangles() -> None:
    fb = audio.mel_filterbank()
    assert fb.shape == (80, 513) and (fb >= 0).all()
    peaks = audio.mel_to_hz(audio.hz_to_mel(0) + np.arange(1, 81) * audio.hz_to_mel(8000) / 81)
    freqs = np.linspace(0, 8000, 513)
    assert np.all(np.abs(freqs[fb.argmax(1)] - peaks) <= 8000 / 512)  # peak at centre bin


@pytest.mark.parametrize("f0", [90.0, 150.0, 230.0])
def test_yin_recovers_a_pure_tone(f0: float) -> None:
    t = np.arange(audio.SR) / audio.SR
    hz, voiced = audio.yin_f0(0.5 * np.sin(2 * np.pi * f0 * t) + 0.2 * np.sin(4 * np.pi * f0 * t))
    assert voiced[5:-5].all()
    assert np.median(hz[voiced]) == pytest.approx(f0, rel=0.02)
    silent, v = audio.yin_f0(np.zeros(4000))
    assert not v.any() and (silent == 0).all()


def test_log_mel_frames_and_wav_roundtrip(tmp_path) -> None:
    wav = np.random.default_rng(0).normal(0, 0.1, 5000).astype(np.float32)
    assert audio.log_mel(wav).shape == (1 + 5000 // audio.HOP, 80)
    audio.write_wav(tmp_path / "x.wav", wav)
    back, sr = audio.read_wav(tmp_path / "x.wav")
    assert sr == audio.SR and np.abs(back - wav).max() < 1e-4
    assert audio.griffin_lim(audio.log_mel(wav), iters=2).shape == (
        (len(wav) // audio.HOP) * audio.HOP,
    )


def _brute_mas(log_lik: np.ndarray) -> np.ndarray:
    tx, ty = log_lik.shape
    best, arg = -np.inf, None
    for cuts in itertools.combinations(range(1, ty), tx - 1):
        edges = np.array((0, *cuts, ty))
        score = sum(log_lik[i, edges[i] : edges[i + 1]].sum() for i in range(tx))
        if score > best:
            best, arg = score, np.diff(edges)
    return arg


def test_mas_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(40):
        tx = int(rng.integers(1, 5))
        log_lik = rng.normal(size=(tx, int(rng.integers(tx, 9))))
        np.testing.assert_array_equal(mas(log_lik), _brute_mas(log_lik))
    with pytest.raises(ValueError, match="at least one frame per phoneme"):
        mas(np.zeros((4, 3)))


def test_mcd_closed_form_and_dtw() -> None:
    rng = np.random.default_rng(0)
    mel = rng.normal(size=(30, 80))
    assert metrics.mcd(mel, mel) == 0.0
    assert metrics.mcd(mel + 3.0, mel) == pytest.approx(0.0, abs=1e-9)  # offset = c0 only
    shifted = mel.copy()
    shifted[:, 0] += 1.0  # one bin: Σ_{k=1..13} c_k² = (2/80) Σ cos²(πk/160)
    k = np.arange(1, 14)
    expected = metrics.MCD_SCALE * np.sqrt((2 / 80 * np.cos(np.pi * k / 160) ** 2).sum())
    assert metrics.mcd(shifted, mel) == pytest.approx(expected)
    slow = np.repeat(mel, 2, axis=0)  # the same frames, each twice
    assert metrics.mcd_dtw(slow, mel) == pytest.approx(0.0, abs=1e-9)
    assert metrics.mcd_dtw(mel, mel) == 0.0


def _levenshtein(a, b) -> int:
    d = np.zeros((len(a) + 1, len(b) + 1), dtype=int)
    d[:, 0], d[0] = range(len(a) + 1), range(len(b) + 1)
    for i, j in itertools.product(range(1, len(a) + 1), range(1, len(b) + 1)):
        d[i, j] = min(d[i - 1, j] + 1, d[i, j - 1] + 1, d[i - 1, j - 1] + (a[i - 1] != b[j - 1]))
    return int(d[-1, -1])


def test_edit_distance_matches_dense_table() -> None:
    rng = np.random.default_rng(1)
    for _ in range(200):
        a, b = rng.integers(0, 4, rng.integers(0, 8)), rng.integers(0, 4, rng.integers(0, 8))
        assert metrics.edit_distance(a, b) == _levenshtein(a, b)


def test_f0_rmse_and_slopes() -> None:
    sq, n = metrics.log_f0_rmse(np.log([100.0, 1.0, 200.0]), np.array([110.0, 0.0, 200.0]))
    assert n == 2 and sq == pytest.approx(np.log(1.1) ** 2)
    xs = [256, 1024, 4096]
    assert metrics.loglog_slope(xs, [3 * x for x in xs]) == pytest.approx(1.0)
    assert metrics.loglog_slope(xs, [x**2 for x in xs]) == pytest.approx(2.0)


def test_peak_memory_counts_live_storages() -> None:
    with PeakMemory() as pm:
        a = torch.ones(1000, 250)  # 1 MB
        b = a * 2  # 2 MB live
        del a
        c = b.view(-1)  # a view allocates nothing
        del b, c
        d = torch.ones(500, 250)
    assert pm.peak == 2 * 10**6 and pm.current == d.numel() * 4
