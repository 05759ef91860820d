"""AQER Steps I-III: blocks, greedy reduction, the closed-form product layer, Adam."""

from __future__ import annotations

from functools import reduce

import numpy as np
import pytest
import torch

from rayworks.pipelines.aqer.aqer import (
    full_alpha,
    loaded_state,
    reduced_by,
    step_one,
    step_three,
    step_two,
    steps_two_three,
)
from rayworks.pipelines.aqer.blocks import block_matrices, blocks_for_gates, step1_block_np, u3
from rayworks.pipelines.aqer.entropy import single_rdms, total_entropy
from rayworks.pipelines.aqer.pieces import scaling_piece
from rayworks.pipelines.aqer.targets import brickwork_state, tfim_state


def test_blocks_are_unitary_and_numpy_step1_block_agrees() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(-np.pi, np.pi, (6, 11))
    v = block_matrices(torch.from_numpy(p)).numpy()
    np.testing.assert_allclose(
        v @ v.conj().transpose(0, 2, 1), np.broadcast_to(np.eye(4), v.shape), atol=1e-12
    )
    p[:, 5:] = 0.0
    for row in p:
        np.testing.assert_allclose(
            block_matrices(torch.from_numpy(row[None]))[0].numpy(),
            step1_block_np(row[:5]),
            atol=1e-13,
        )
    zero = torch.zeros(())
    np.testing.assert_allclose(u3(zero, zero, zero).numpy(), np.eye(2), atol=1e-15)


def test_gate_counting() -> None:
    assert blocks_for_gates(40, 1) == 40 and blocks_for_gates(40, 2) == 20
    with pytest.raises(ValueError, match="multiple"):
        blocks_for_gates(5, 2)


def test_step_two_is_exactly_the_product_of_top_eigenvectors() -> None:
    rng = np.random.default_rng(1)
    q = rng.standard_normal((5, 2)) + 1j * rng.standard_normal((5, 2))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    target = reduce(np.kron, list(q)).reshape((2,) * 5)
    beta, gamma = step_two(target)
    theta = tuple(torch.from_numpy(t) for t in (np.zeros((0, 11)), beta, gamma))
    loaded = loaded_state(*theta, []).numpy()
    assert abs(np.vdot(target, loaded)) ** 2 == pytest.approx(1.0, abs=1e-12)
    # on an entangled state: each factor is the top eigenvector of its marginal
    psi = tfim_state(4, 1.0)
    beta, gamma = step_two(psi)
    from rayworks.pipelines.aqer.blocks import product_layer

    factors = product_layer(torch.from_numpy(beta), torch.from_numpy(gamma)).numpy()
    for rho, f in zip(single_rdms(psi), factors, strict=True):
        top = np.linalg.eigh(rho)[1][:, -1]
        assert abs(np.vdot(top, f)) ** 2 == pytest.approx(1.0, abs=1e-10)


def test_step_one_disentangles_a_bell_pair_and_reduces_entropy() -> None:
    bell = np.zeros((2, 2, 2), dtype=complex)
    bell[0, 0, 0] = bell[1, 0, 1] = 1 / np.sqrt(2)  # qubits 0 and 2 entangled, 1 in |0>
    one = step_one(bell, 1, max_evals=2000)
    assert one.pairs == [(0, 2)]
    assert one.entropy[0] == pytest.approx(2.0) and one.entropy[1] < 1e-3
    target = brickwork_state(5, 3, seed=0)
    one = step_one(target, 4, max_evals=200)
    assert np.all(np.diff(one.entropy) <= 1e-12)  # greedy with a zero start never increases S
    replay = reduced_by(target, full_alpha(one.params), one.pairs)
    assert total_entropy(replay) == pytest.approx(one.entropy[-1], abs=1e-10)


def test_loaded_state_is_v_dagger_w() -> None:
    """U_AQER|0> equals V(alpha)† applied to W|0> with blocks applied in the documented order."""
    rng = np.random.default_rng(2)
    alpha, pairs = rng.uniform(-3, 3, (3, 11)), [(0, 1), (2, 1), (0, 2)]
    beta, gamma = rng.uniform(-3, 3, 3), rng.uniform(-3, 3, 3)
    got = loaded_state(*(torch.from_numpy(x) for x in (alpha, beta, gamma)), pairs).numpy()
    w0 = loaded_state(*(torch.from_numpy(x) for x in (np.zeros((0, 11)), beta, gamma)), [])
    # V|got> must give back W|0>
    np.testing.assert_allclose(reduced_by(got, alpha, pairs), w0.numpy(), atol=1e-12)


def test_adam_never_ends_worse_and_improves() -> None:
    target = brickwork_state(4, 2, seed=1)
    one = step_one(target, 3, max_evals=300)
    beta, gamma = step_two(reduced_by(target, full_alpha(one.params), one.pairs))
    _, losses = step_three(target, one.pairs, (full_alpha(one.params), beta, gamma), 20, 1e-2)
    row = steps_two_three(target, one.pairs, one.params, adam_steps=20, lr=1e-2)
    assert row["infidelity"] == pytest.approx(min(losses))
    assert row["infidelity"] <= row["finetune_start"] == pytest.approx(losses[0])
    assert row["infidelity"] < losses[0] - 1e-4
    assert row["finetune_start"] == pytest.approx(row["infidelity_step2"], abs=1e-12)
    # a huge learning rate makes Adam diverge, yet the kept θ is never worse than the start
    _, wild = step_three(target, one.pairs, (full_alpha(one.params), beta, gamma), 5, 5.0)
    row = steps_two_three(target, one.pairs, one.params, adam_steps=5, lr=5.0)
    assert row["infidelity"] <= wild[0] and max(wild) > wild[0]


def test_scaling_piece_runs_and_respects_bounds() -> None:
    row = scaling_piece(
        5, 4, {"nm_tol": 1e-4, "nm_max_evals": 300, "nm_init_step": 0.5, "lr": 1e-2}
    )
    assert row["n_qubits"] == 5 and row["entropy_step1"] < row["entropy_target"]
    assert row["f1"] - 1e-12 <= row["infidelity_step2"] <= row["f2"] + 1e-12


def test_adam_best_follows_torch_adam() -> None:
    from rayworks.pipelines.aqer.optim import adam_best

    target = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)

    def loss(x: torch.Tensor) -> torch.Tensor:
        return ((x - target) ** 2 * torch.tensor([1.0, 3.0, 0.2], dtype=torch.float64)).sum()

    x0 = torch.zeros(3, dtype=torch.float64)
    _, losses = adam_best(loss, [x0], 25, 0.1)
    ref = x0.clone().requires_grad_(True)
    opt = torch.optim.Adam([ref], lr=0.1)
    want = []
    for _ in range(25):
        value = loss(ref)
        want.append(float(value.detach()))
        opt.zero_grad()
        value.backward()
        opt.step()
    np.testing.assert_allclose(losses[:25], want, rtol=1e-10)
