"""Gate counting: budgets in whole MPS layers, and each loader's CNOT count against a hand
count of the two-qubit gates it really applies (fewest CNOTs per gate by the
Shende-Bullock-Markov criterion, `gatecount.min_cnots`, itself checked on gates whose
CNOT counts are known by hand)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import unitary_group

from rayworks.core.config import build_config
from rayworks.core.errors import ConfigError
from rayworks.pipelines.aqer import aqer as aqer_module
from rayworks.pipelines.aqer import baselines
from rayworks.pipelines.aqer.aqer import loaded_state
from rayworks.pipelines.aqer.baselines import mps_layer_load
from rayworks.pipelines.aqer.blocks import N_PARAMS, ZZ_SIGNS
from rayworks.pipelines.aqer.config import AqerConfig, layer_budgets, mps_layer_cost
from rayworks.pipelines.aqer.gatecount import min_cnots, mps_layer_cnots
from rayworks.pipelines.aqer.pieces import run_piece
from rayworks.pipelines.aqer.pipeline import plan_stages, rows_of, target_specs
from rayworks.pipelines.aqer.targets import tfim_state

CNOT = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]], dtype=complex)
SWAP = np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]], dtype=complex)


def rzz(theta: float) -> np.ndarray:
    return np.diag(np.exp(-0.5j * theta * ZZ_SIGNS))


def test_reference_on_gates_with_known_cnot_counts() -> None:
    rng = np.random.default_rng(0)
    local = np.kron(unitary_group.rvs(2, random_state=rng), unitary_group.rvs(2, random_state=rng))
    assert min_cnots(np.eye(4)) == 0 and min_cnots(local) == 0
    assert min_cnots(CNOT) == 1 and min_cnots(local @ CNOT @ local.conj().T) == 1
    assert min_cnots(rzz(np.pi / 2)) == 1  # RZZ(π/2) is CNOT up to single-qubit gates
    assert min_cnots(rzz(0.7)) == 2 and min_cnots(SWAP) == 3
    assert min_cnots(unitary_group.rvs(4, random_state=rng)) == 3
    # the hand count behind "RZZ = 2 CNOTs": RZZ(θ) = CNOT · (I ⊗ RZ(θ)) · CNOT exactly
    rz = np.diag(np.exp([-0.35j, 0.35j]))
    np.testing.assert_allclose(CNOT @ np.kron(np.eye(2), rz) @ CNOT, rzz(0.7), atol=1e-12)


@pytest.mark.parametrize(("count", "gates"), [("two_qubit", [18, 36]), ("cnot", [54, 108])])
def test_tfim10_budgets_are_whole_mps_layers(count: str, gates: list[int]) -> None:
    cfg = build_config(AqerConfig, "tfim10", (), (f"gate_count={count}",))
    layer = mps_layer_cost(10, count)
    assert layer == {"two_qubit": 9, "cnot": 27}[count]  # 9 SU(4) gates, 3 CNOTs each
    assert cfg.gates == gates and cfg.headline_gates == max(gates)
    assert all(g % layer == 0 and g % (2 if count == "cnot" else 1) == 0 for g in cfg.gates)
    assert cfg.targets.families == ["tfim"] and cfg.n_qubits == 10


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("budget_layers=[1, 2]", "budget_layers"),  # 27 CNOTs buy no whole number of RZZs
        ("budget_layers=[0]", "budget_layers"),
        ("gates=[10, 20]", "gates"),
        ("headline_gates=20", "headline_gates"),
    ],
)
def test_layer_budgets_reject_what_a_loader_cannot_use(override: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        build_config(AqerConfig, "tfim10", (), ("gate_count=cnot", override))
    assert layer_budgets(7, "cnot", [1, 3]) == [18, 54]  # N = 7: 6 x 3 CNOTs per layer


def _recorded_2q(monkeypatch, module) -> list[np.ndarray]:
    """Every 4x4 gate `module.apply_2q` applies, recorded as a numpy matrix."""
    seen: list[np.ndarray] = []
    real = module.apply_2q

    def recording(psi, gate, j, k):
        seen.append(np.asarray(gate.detach().numpy() if torch.is_tensor(gate) else gate))
        return real(psi, gate, j, k)

    monkeypatch.setattr(module, "apply_2q", recording)
    return seen


def test_cnot_count_of_each_loader_matches_a_hand_count(monkeypatch) -> None:
    """N = 4, budget of 2 MPS layers under `cnot` (G = 2 x 3 x 3 = 18): AQER 9 blocks, HEC 9
    RZZs, MPS 2 layers of 3 SU(4) gates. The pipeline's G used for each arm must equal the
    summed minimal CNOT counts of the gates that loader applies."""
    cfg = build_config(
        AqerConfig,
        None,
        (),
        (
            "n_qubits=4",
            "gate_count=cnot",
            "budget_layers=[2]",
            "targets.families=[tfim]",
            "targets.tfim_fields=[1.0]",
            "scaling_qubits=[]",
            "aqer.adam_steps=0",
            "hec.adam_steps=1",
            "hec.restarts=1",
        ),
    )
    assert cfg.gates == [18]
    first, second = plan_stages(cfg, target_specs(cfg))
    done = {c["kind"]: run_piece(**c) for c in first}
    for call in second:
        if call["kind"] == "aqer":
            call["one"] = done["step_one"]
    rows = [r for c in [*first, *second] for r in rows_of(cfg, c, run_piece(**c))]
    used = {r["arm"]: r["g_used"] for r in rows}

    rng = np.random.default_rng(1)
    blocks = second[0]["n_blocks"]
    aqer_gates = _recorded_2q(monkeypatch, aqer_module)
    alpha = torch.as_tensor(rng.uniform(-np.pi, np.pi, (blocks, N_PARAMS)))  # generic blocks
    loaded_state(alpha, torch.zeros(4), torch.zeros(4), done["step_one"]["pairs"][:blocks])
    assert len(aqer_gates) == 9 and sum(min_cnots(g) for g in aqer_gates) == used["aqer"] == 18

    base_gates = _recorded_2q(monkeypatch, baselines)
    n_rzz = next(c for c in second if c["kind"] == "hec")["n_rzz"]
    zz = torch.as_tensor(rng.uniform(0.1, 1.4, n_rzz))  # generic angles, away from π/2
    baselines.hec_state(torch.zeros((5, 4, 2), dtype=torch.float64), zz, 4)
    assert len(base_gates) == 9 and sum(min_cnots(g) for g in base_gates) == used["hec"] == 18

    base_gates.clear()
    haar = _haar_state(4, rng)
    baselines.mps_layer_load(haar, 2)
    rows = mps_layer_cnots(haar, 2)
    # a complex generic target: every SU(4) gate of the layers needs all 3 CNOTs
    assert len(base_gates) == 6 and sum(min_cnots(g) for g in base_gates) == used["mps"] == 18
    assert [r["cnots_min"] for r in rows] == [r["cnots_charged"] for r in rows] == [9, 9]


def _haar_state(n: int, rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(2**n) + 1j * rng.standard_normal(2**n)
    return (v / np.linalg.norm(v)).reshape((2,) * n)


def test_mps_layers_of_a_real_target_need_fewer_cnots_than_charged() -> None:
    """TFIM ground states are real, so the MPS gates are real orthogonal: at most 2 CNOTs
    when det = +1 (3 are charged), which `mps_layer_cnots` must see; the infidelities must
    be those of the baseline itself."""
    target = tfim_state(6, 1.0)
    rows = mps_layer_cnots(target, 3)
    assert [r["infidelity"] for r in rows] == pytest.approx(mps_layer_load(target, 3), abs=1e-12)
    for r in rows:
        assert r["cnots_charged"] == 15 and r["cnots_min"] < 15
