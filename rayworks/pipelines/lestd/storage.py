"""Compression-ratio accounting, in fp32-parameter equivalents per attention layer.

    dense MHA      4 · d · (H · d_h)                       (= 4 d² when H · d_h = d)
    per-matrix SVD 4 · r · (d + H · d_h)                   (rank r for each of Q, K, V, O)
    dense Tucker   d · R1 + d_h · R2 + R1 · R2 · 4 · H     (factors + dense core)
    sparse Tucker  d · R1 + d_h · R2 + nnz + index(nnz)    (factors + core values + positions)

Index storage of a sparse core with N = R1 · R2 · 4 · H slots is the cheaper of two
encodings: coordinate lists with one ⌈log2 N⌉-bit flat index per non-zero, or a 1-bit
occupancy bitmap of all N slots; bits count as 1/32 of an fp32 parameter (rounded up).
A full core (nnz = N) needs no index. The compression ratio is dense / storage; a method
meets ratio rho when its storage is at most dense / rho.
"""

from __future__ import annotations

import math

BITS_PER_PARAM = 32  # index bits are counted against fp32 values


def index_params(nnz: int, slots: int) -> int:
    """Parameters-equivalent of the positions of `nnz` non-zeros among `slots` (see module)."""
    if nnz >= slots or nnz == 0:
        return 0
    coo = nnz * math.ceil(math.log2(slots))
    return math.ceil(min(coo, slots) / BITS_PER_PARAM)


def sparse_core_params(nnz: int, slots: int) -> int:
    return nnz + index_params(nnz, slots)


def tucker_params(d: int, hd: int, heads: int, r1: int, r2: int, nnz: int | None = None) -> int:
    """Storage of a (sparse when `nnz` is given) Tucker layer with ranks (R1, R2)."""
    slots = r1 * r2 * 4 * heads
    core = slots if nnz is None else sparse_core_params(nnz, slots)
    return d * r1 + hd * r2 + core


def svd_params(d: int, inner: int, rank: int) -> int:
    """Storage of rank-`rank` factors of the four d x inner (or inner x d) matrices."""
    return 4 * rank * (d + inner)


def max_nnz(available: int, slots: int) -> int:
    """The most non-zeros whose values and index fit in `available` parameters (0 if none)."""
    if available >= slots:
        return slots
    bits = math.ceil(math.log2(slots)) if slots > 1 else 1
    coo = math.floor(available * BITS_PER_PARAM / (BITS_PER_PARAM + bits))
    bitmap = available - math.ceil(slots / BITS_PER_PARAM)
    best = max(0, min(slots - 1, max(coo, bitmap)))
    while best > 0 and sparse_core_params(best, slots) > available:
        best -= 1
    return best


def budget(dense: int, ratio: float) -> int:
    """Largest storage that still meets compression ratio `ratio`."""
    return math.floor(dense / ratio)
