"""CNOT counts of the two-qubit gates the loaders really apply, against `GATE_COST`.

`gate_count=cnot` charges every RZZ (an AQER block, an HEC entangler) 2 CNOTs and every
general two-qubit gate of an MPS layer 3, the worst case over SU(4). The gates a loader
builds can need fewer. `min_cnots` gives the fewest CNOTs (single-qubit gates free) of one
4x4 unitary by the Shende-Bullock-Markov criterion (Phys. Rev. A 69, 062321, 2004,
Thm. 1 and Prop. 3): with U scaled into SU(4) and g(U) = U (Y⊗Y) U^T (Y⊗Y), U needs 0
CNOTs iff g = ±I, 1 iff g has eigenvalues i, i, -i, -i, 2 iff tr g is real, else 3. A real orthogonal gate of
determinant 1 (what a real target such as a TFIM ground state gives the MPS loader) has a
real g, hence needs at most 2 CNOTs (Vatan & Williams 2004).

    python -m rayworks.pipelines.aqer.gatecount --n-qubits 10 --layers 6

prints, per TFIM target, each MPS layer's infidelity with its charged and its minimal CNOT
count (the layers are deterministic: no seed enters the MPS loader).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from rayworks.pipelines.aqer.baselines import mps_layer_gates, right_canonical_mps
from rayworks.pipelines.aqer.config import GATE_COST
from rayworks.pipelines.aqer.statevector import apply_2q
from rayworks.pipelines.aqer.targets import tfim_state

YY = np.kron([[0, -1j], [1j, 0]], [[0, -1j], [1j, 0]])


def min_cnots(u: np.ndarray, tol: float = 1e-8) -> int:
    """Fewest CNOTs (with free single-qubit gates) implementing the 4x4 unitary `u`."""
    u = np.asarray(u, dtype=complex)
    u = u / np.linalg.det(u) ** 0.25  # into SU(4); the 4th-root branch only flips g's sign
    g = u @ YY @ u.T @ YY
    eye = np.eye(4)
    if np.allclose(g, eye, atol=tol) or np.allclose(g, -eye, atol=tol):
        return 0
    if np.allclose(g @ g, -eye, atol=tol) and abs(np.trace(g)) < tol:
        return 1  # eigenvalues i, i, -i, -i: characteristic polynomial (x² + 1)²
    return 2 if abs(np.trace(g).imag) < tol else 3


def mps_layer_cnots(target: np.ndarray, max_layers: int, chi: int = 2) -> list[dict]:
    """The MPS-layer loader of `baselines.mps_layer_load`, layer by layer: infidelity after
    k layers, and the layer's N-1 gates counted at 3 CNOTs each and at their minimum."""
    n = target.ndim
    psi = torch.from_numpy(np.array(target, dtype=complex))
    rows = []
    for k in range(1, max_layers + 1):
        gates = mps_layer_gates(right_canonical_mps(psi.numpy(), chi))
        for site in range(n - 2, -1, -1):
            psi = apply_2q(psi, torch.from_numpy(gates[site].conj().T), site, site + 1)
        rows.append(
            {
                "layer": k,
                "infidelity": 1.0 - float(abs(psi.reshape(-1)[0]) ** 2),
                "cnots_charged": len(gates) * GATE_COST["cnot"]["su4"],
                "cnots_min": sum(min_cnots(g) for g in gates),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-qubits", type=int, default=10)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--fields", type=float, nargs="+", default=[0.5, 1.0, 1.5])
    args = ap.parse_args(argv)
    print(
        "| TFIM h | layers k | infidelity | CNOTs charged (3 per gate), cumulative "
        "| CNOTs minimal (as built), cumulative |"
    )
    print("|---:|---:|---:|---:|---:|")
    for h in args.fields:
        charged = minimal = 0
        for row in mps_layer_cnots(tfim_state(args.n_qubits, h), args.layers):
            charged, minimal = charged + row["cnots_charged"], minimal + row["cnots_min"]
            print(f"| {h} | {row['layer']} | {row['infidelity']:.5f} | {charged} | {minimal} |")


if __name__ == "__main__":
    main()
