"""Audio features without extra dependencies: log-mel (torch.stft + our own mel filterbank),
YIN F0 on the waveform, frame energy, Griffin-Lim inversion and 16-bit wav I/O.

Conventions (our CPU recipe, reconstructed): 16 kHz audio, n_fft 1024, hop 256, 80 mel
bins from 0 to 8 kHz, natural-log magnitude mel clamped at 1e-5. Frames are centred
(`torch.stft(center=True)`), so frame t covers samples around t·hop; YIN uses the same
centring so F0, energy and mel frames line up one to one.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import torch
from scipy.signal import resample_poly

SR = 16000
N_FFT = 1024
HOP = 256
N_MELS = 80
LOG_FLOOR = 1e-5


def hz_to_mel(f: np.ndarray) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + np.asarray(f, dtype=np.float64) / 700.0)


def mel_to_hz(m: np.ndarray) -> np.ndarray:
    return 700.0 * (10.0 ** (np.asarray(m, dtype=np.float64) / 2595.0) - 1.0)


def mel_filterbank(sr: int = SR, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """(n_mels, n_fft//2+1) triangular HTK-mel filters, area-normalised (Slaney style)."""
    freqs = np.linspace(0.0, sr / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (freqs[None] - lo) / (mid - lo)
    down = (hi - freqs[None]) / (hi - mid)
    tri = np.maximum(0.0, np.minimum(up, down))
    return (tri * (2.0 / (hi - lo))).astype(np.float32)


def magnitude(wav: np.ndarray) -> torch.Tensor:
    """|STFT| of a mono waveform: (frames, n_fft//2+1)."""
    x = torch.as_tensor(wav, dtype=torch.float32)
    spec = torch.stft(
        x, N_FFT, HOP, window=torch.hann_window(N_FFT), center=True, return_complex=True
    )
    return spec.abs().T


def log_mel(wav: np.ndarray) -> np.ndarray:
    """(frames, 80) natural-log mel magnitude."""
    fb = torch.from_numpy(mel_filterbank())
    mel = magnitude(wav) @ fb.T
    return torch.log(mel.clamp_min(LOG_FLOOR)).numpy()


def frame_energy(wav: np.ndarray) -> np.ndarray:
    """(frames,) log RMS of each STFT frame (StyleTTS2's "norm" / energy target)."""
    mag = magnitude(wav)
    return (0.5 * torch.log((mag**2).mean(1) + 1e-8)).numpy()


def yin_f0(
    wav: np.ndarray,
    fmin: float = 60.0,
    fmax: float = 400.0,
    threshold: float = 0.15,
    window: int = 512,
    silence_db: float = -50.0,
) -> tuple[np.ndarray, np.ndarray]:
    """YIN pitch (de Cheveigné & Kawahara 2002, steps 1-4 without parabolic refinement),
    vectorised over frames with FFT cross-correlation. Returns (f0 Hz, voiced bool) per frame;
    f0 is 0 where unvoiced (no lag below `threshold` or frame below `silence_db` RMS)."""
    x = np.pad(np.asarray(wav, dtype=np.float64), (N_FFT // 2, N_FFT // 2), mode="reflect")
    n_frames = 1 + (len(x) - N_FFT) // HOP
    idx = np.arange(N_FFT)[None] + HOP * np.arange(n_frames)[:, None]
    frames = x[idx]  # (F, N_FFT)
    frames = frames - frames.mean(1, keepdims=True)
    tau_max = int(SR / fmin)
    seg = frames[:, :window]
    size = 2 * N_FFT
    corr = np.fft.irfft(np.conj(np.fft.rfft(seg, size)) * np.fft.rfft(frames, size), size)
    r = corr[:, : tau_max + 1]  # r(τ) = Σ_j x_j x_{j+τ}, j < window
    sq = np.concatenate([np.zeros((n_frames, 1)), np.cumsum(frames**2, 1)], 1)
    taus = np.arange(tau_max + 1)
    e_tau = sq[:, taus + window] - sq[:, taus]
    diff = np.maximum(e_tau[:, :1] + e_tau - 2 * r, 0.0)  # step 2: difference function
    cum = np.cumsum(diff[:, 1:], 1)
    cmnd = np.ones_like(diff)  # step 3: cumulative mean normalised difference
    cmnd[:, 1:] = diff[:, 1:] * taus[1:] / np.maximum(cum, 1e-12)
    tau_min = int(SR / fmax)
    below = cmnd[:, tau_min:] < threshold  # step 4: absolute threshold
    has = below.any(1)
    tau = tau_min + below.argmax(1)
    for _ in range(tau_max):  # walk to the local minimum after the first dip
        nxt = np.minimum(tau + 1, tau_max)
        step = cmnd[np.arange(n_frames), nxt] < cmnd[np.arange(n_frames), tau]
        if not step.any():
            break
        tau = np.where(step, nxt, tau)
    rms_db = 10 * np.log10(e_tau[:, 0] / window + 1e-12)
    voiced = has & (rms_db > silence_db)
    return np.where(voiced, SR / tau, 0.0).astype(np.float32), voiced


def griffin_lim(log_mel_frames: np.ndarray, iters: int = 32, seed: int = 0) -> np.ndarray:
    """Waveform from a (frames, 80) log-mel: pseudo-inverse mel -> magnitude, then Griffin-Lim
    phase recovery (for listening only, never for metrics)."""
    fb = torch.from_numpy(mel_filterbank())
    mel = torch.exp(torch.as_tensor(log_mel_frames, dtype=torch.float32))
    mag = (mel @ torch.linalg.pinv(fb).T).clamp_min(0.0).T  # (freq, frames)
    window = torch.hann_window(N_FFT)
    gen = torch.Generator().manual_seed(seed)
    phase = torch.exp(2j * torch.pi * torch.rand(mag.shape, generator=gen))
    length = (mag.shape[1] - 1) * HOP
    for _ in range(iters):
        wav = torch.istft(mag * phase, N_FFT, HOP, window=window, length=length)
        spec = torch.stft(wav, N_FFT, HOP, window=window, center=True, return_complex=True)
        phase = torch.exp(1j * torch.angle(spec))
    wav = torch.istft(mag * phase, N_FFT, HOP, window=window, length=length)
    return wav.numpy()


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Mono 16-bit PCM wav -> float32 in [-1, 1] and its sample rate."""
    with wave.open(str(path), "rb") as fh:
        if fh.getsampwidth() != 2:
            raise ValueError(f"{path}: expected 16-bit PCM, got {8 * fh.getsampwidth()}-bit")
        raw = np.frombuffer(fh.readframes(fh.getnframes()), dtype="<i2")
        sr, channels = fh.getframerate(), fh.getnchannels()
    return (raw.reshape(-1, channels).mean(1) / 32768.0).astype(np.float32), sr


def write_wav(path: str | Path, wav: np.ndarray, sr: int = SR) -> None:
    """Float waveform -> mono 16-bit PCM wav (peak-normalised to 0.9 if it clips)."""
    x = np.asarray(wav, dtype=np.float64)
    peak = np.abs(x).max() if x.size else 0.0
    if peak > 1.0:
        x = 0.9 * x / peak
    with wave.open(str(path), "wb") as fh:
        fh.setnchannels(1)
        fh.setsampwidth(2)
        fh.setframerate(sr)
        fh.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())


def resample(wav: np.ndarray, sr_in: int, sr_out: int = SR) -> np.ndarray:
    """Polyphase resampling (espeak-ng writes 22.05 kHz; we keep our recipe's 16 kHz)."""
    if sr_in == sr_out:
        return wav.astype(np.float32)
    g = np.gcd(sr_in, sr_out)
    return resample_poly(wav, sr_out // g, sr_in // g).astype(np.float32)
