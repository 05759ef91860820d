"""Configs of `aqer` (the method) and its baselines `aqer_hec`, `aqer_mps`.

    rayworks run aqer --preset smoke
    rayworks bench aqer --preset default --seeds 1     # AQER vs HEC vs MPS-layer loader
    rayworks bench aqer --preset tfim10 --seeds 3 --no-ablations --set compare=[] \
        --set gate_count=cnot                          # TFIM, N = 10, budgets in MPS layers

Defaults follow our reconstructed CPU recipe (docs/aqer.md), scaled to the ~10-minute
bench budget on 2 shared cores: N = 8 qubits instead of 10, 3 digits / 3 TFIM fields /
3 brickwork states instead of 5 / 3 / 5, G ∈ {10, 20, 40} instead of {10, 20, 40, 80},
300 Adam steps instead of 2000 (AQER Step III and HEC alike), HEC best of 2 starts
instead of 3.

`budget_layers` states the budgets as whole MPS layers instead: G = k x (the cost of one
MPS layer under `gate_count`), so the MPS-layer loader uses its budget exactly and AQER
(one RZZ per block) and the HEC (RZZ gates) get the same G; `layer_budgets` derives them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rayworks.core.config import Config, PipelineConfig

Arm = Literal["aqer", "hec", "mps"]
Family = Literal["digits", "tfim", "brickwork"]
GateCount = Literal["two_qubit", "cnot"]

# Two-qubit cost of each gate kind under each counting convention (reconstructed):
# "two_qubit" counts every two-qubit gate once (the paper's MPS counts, 36 = 4 x 9 at N=10,
# suggest this); "cnot" counts an RZZ as 2 CNOTs (exact) and a general SU(4) gate as 3 (its
# worst case: the real orthogonal gates the MPS loader builds for a real target can need 2,
# see `gatecount.py`).
GATE_COST = {"two_qubit": {"rzz": 1, "su4": 1}, "cnot": {"rzz": 2, "su4": 3}}
DEFAULT_GATES = [10, 20, 40]
DEFAULT_HEADLINE_GATES = 40


def block_cost(gate_count: GateCount) -> int:
    """Cost of one AQER block or one HEC entangler: a single RZZ (1, or 2 CNOTs)."""
    return GATE_COST[gate_count]["rzz"]


def mps_layer_cost(n_qubits: int, gate_count: GateCount) -> int:
    """Cost of one MPS layer: a staircase of N-1 general SU(4) gates (N-1, or 3(N-1) CNOTs)."""
    return (n_qubits - 1) * GATE_COST[gate_count]["su4"]


def layer_budgets(n_qubits: int, gate_count: GateCount, layers: list[int]) -> list[int]:
    """Budgets G = k x (one MPS layer's cost) for k in `layers`, each also a whole number of
    AQER blocks / HEC RZZs (under `cnot` at N = 10 a layer is 27 CNOTs, so k must be even).

    Raises ValueError naming `budget_layers` when some k gives a budget that the RZZ-based
    loaders cannot use exactly."""
    per_layer, per_block = mps_layer_cost(n_qubits, gate_count), block_cost(gate_count)
    if not layers or any(k < 1 for k in layers):
        raise ValueError(f"budget_layers={layers} must be a non-empty list of positive integers")
    gates = [k * per_layer for k in layers]
    bad = [k for k, g in zip(layers, gates, strict=True) if g % per_block]
    if bad:
        raise ValueError(
            f"budget_layers={layers}: {bad} layers of {per_layer} gates (N={n_qubits}, "
            f"gate_count={gate_count!r}) are not a multiple of {per_block}, the cost of one "
            "AQER block / HEC RZZ; use multiples that are"
        )
    return gates


class TargetsConfig(Config):
    """The target states (recipe: digits, GS-TFIM, random-circuit states)."""

    families: list[Family] = Field(
        default_factory=lambda: ["digits", "tfim", "brickwork"],
        description="target families loaded",
    )
    n_digits: int = Field(3, ge=1, le=1797, description="load_digits images 0..n-1 (recipe: 5)")
    tfim_fields: list[float] = Field(
        default_factory=lambda: [0.5, 1.0, 1.5],
        description="transverse fields h of the TFIM ground states (recipe: 0.5, 1.0, 1.5)",
    )
    n_brickwork: int = Field(3, ge=1, description="random brickwork states (recipe: 5)")
    brickwork_depth: int = Field(
        4, ge=1, description="brickwork layers of Haar two-qubit gates (recipe: 4-6; reconstructed)"
    )


class AqerSettings(Config):
    """AQER Steps I-III."""

    nm_tol: float = Field(1e-4, gt=0, description="Nelder-Mead xatol = fatol (paper: 1e-4)")
    nm_max_evals: int = Field(1000, ge=10, description="Nelder-Mead evaluations per pair")
    nm_init_step: float = Field(
        0.5, gt=0, description="initial simplex edge around alpha = 0, radians (reconstructed)"
    )
    adam_steps: int = Field(300, ge=0, description="Step III Adam steps (paper: 2000; scaled)")
    lr: float = Field(1e-2, gt=0, description="Step III Adam learning rate (paper: 1e-2)")
    pair_order: Literal["greedy", "random"] = Field(
        "greedy", description="Step I pair choice: greedy argmin (paper) or random (ablation)"
    )
    init: Literal["step_one", "random"] = Field(
        "step_one", description="Step III start: Steps I-II (paper) or random θ (ablation)"
    )


class HecSettings(Config):
    """Hardware-efficient circuit baseline."""

    adam_steps: int = Field(300, ge=1, description="Adam steps per start (recipe: 2000; scaled)")
    lr: float = Field(1e-2, gt=0, description="Adam learning rate (recipe: 1e-2)")
    restarts: int = Field(2, ge=1, description="random starts, best kept (recipe: 3; scaled)")


class AqerConfig(PipelineConfig):
    """Load every target at every gate budget G with `arm` (and `compare`); one record each."""

    presets = {
        "smoke": {
            "n_qubits": 5,
            "gates": [4, 8],
            "headline_gates": 8,
            "targets": {
                "n_digits": 1,
                "tfim_fields": [1.0],
                "n_brickwork": 1,
                "brickwork_depth": 3,
            },
            "aqer": {"adam_steps": 20, "nm_max_evals": 300},
            "hec": {"adam_steps": 20, "restarts": 1},
            "scaling_qubits": [],
        },
        # The TFIM cells at the paper's N = 10, budgets of 2 and 4 MPS layers under
        # either counting (two_qubit: G = 18, 36; --set gate_count=cnot: G = 54, 108).
        "tfim10": {
            "n_qubits": 10,
            "budget_layers": [2, 4],
            "targets": {"families": ["tfim"]},
            "scaling_qubits": [],
        },
    }

    arm: Arm = Field("aqer", description="loader this run reports (headline)")
    compare: list[Arm] = Field(
        default_factory=lambda: ["hec", "mps"],
        description="loaders also run on the same targets and budgets (table, pass rule)",
    )
    n_qubits: int = Field(8, ge=2, le=14, description="qubits N (recipe: 10; scaled to 8)")
    gates: list[int] = Field(
        default_factory=lambda: list(DEFAULT_GATES),
        description="two-qubit gate budgets G (recipe: 10, 20, 40, 80)",
    )
    headline_gates: int = Field(
        DEFAULT_HEADLINE_GATES, description="G the headline mean infidelity is read at"
    )
    budget_layers: list[int] = Field(
        default_factory=list,
        description="if set, gates = k x (one MPS layer's cost under gate_count) for each k "
        "and headline_gates = the largest (explicit gates / headline_gates must agree)",
    )
    gate_count: GateCount = Field(
        "two_qubit",
        description="gate counting: every two-qubit gate = 1, or CNOTs (RZZ = 2, SU(4) = 3)",
    )
    mps_chi: int = Field(2, ge=2, le=2, description="bond dimension per MPS layer (Ran 2020: 2)")
    targets: TargetsConfig = Field(default_factory=TargetsConfig)
    aqer: AqerSettings = Field(default_factory=AqerSettings)
    hec: HecSettings = Field(default_factory=HecSettings)
    scaling_qubits: list[int] = Field(
        default_factory=lambda: [10, 14, 20, 30, 50],
        description="TFIM (h = 1) sizes for the AQER scaling run (Steps I-II; state vector "
        "up to mps_above, MPS beyond)",
    )
    scaling_blocks_per_qubit: int = Field(
        2, ge=1, description="scaling run: Step I blocks T = this x N"
    )
    mps_above: int = Field(
        14, ge=4, le=16, description="scaling sizes N > this use the MPS path (TFIM by TEBD)"
    )
    mps_max_bond: int = Field(
        32, ge=2, description="MPS path: bond dimension cap (TEBD target and AQER blocks)"
    )
    mps_cutoff: float = Field(
        1e-12, ge=0, description="MPS path: drop singular values of relative weight below this"
    )
    mps_pair_range: int | None = Field(
        4,
        ge=1,
        description="MPS path: Step I candidate pairs |j - k| <= this (None = all C(N,2); "
        "reconstructed CPU restriction)",
    )

    @model_validator(mode="before")
    @classmethod
    def _budgets_from_layers(cls, data: Any) -> Any:
        """Derive `gates` / `headline_gates` from `budget_layers`; a disagreeing explicit value
        is an error (the class defaults count as unset, since layers merge onto them)."""
        if not isinstance(data, dict) or not data.get("budget_layers"):
            return data
        n, count = data.get("n_qubits", 8), data.get("gate_count", "two_qubit")
        if count not in GATE_COST or not isinstance(n, int):
            return data  # field validation reports the bad value
        gates = layer_budgets(n, count, list(data["budget_layers"]))
        given = data.get("gates", DEFAULT_GATES)
        if given not in (DEFAULT_GATES, gates):
            raise ValueError(
                f"gates={given} disagrees with budget_layers={data['budget_layers']} "
                f"(= gates {gates} at N={n}, gate_count={count!r}); set only one of them"
            )
        head = data.get("headline_gates", DEFAULT_HEADLINE_GATES)
        if head != DEFAULT_HEADLINE_GATES and head not in gates:
            raise ValueError(
                f"headline_gates={head} is not one of the budgets {gates} that "
                f"budget_layers={data['budget_layers']} gives"
            )
        head = head if head in gates else max(gates)
        return {**data, "gates": gates, "headline_gates": head}

    @model_validator(mode="after")
    def _consistent(self) -> AqerConfig:
        if not self.gates or any(g < 1 for g in self.gates):
            raise ValueError(f"gates={self.gates} must be a non-empty list of positive integers")
        if self.headline_gates not in self.gates:
            raise ValueError(
                f"headline_gates={self.headline_gates} is not one of gates={self.gates}"
            )
        per_block = block_cost(self.gate_count)
        bad = [g for g in self.gates if g % per_block]
        if bad:
            raise ValueError(
                f"gates={self.gates}: {bad} are not multiples of {per_block}, the cost of one "
                f"AQER block under gate_count={self.gate_count!r}"
            )
        if self.arm in self.compare or len(set(self.compare)) != len(self.compare):
            raise ValueError(f"compare={self.compare} repeats an arm or arm={self.arm!r}")
        if not self.targets.families:
            raise ValueError("targets.families must name at least one family")
        if "digits" in self.targets.families and self.n_qubits < 2:
            raise ValueError(f"n_qubits={self.n_qubits}: digits need at least 2 qubits")
        if any(not 4 <= n <= 100 for n in self.scaling_qubits):
            raise ValueError(
                f"scaling_qubits={self.scaling_qubits}: sizes must lie in 4..100 "
                f"(state vector up to mps_above={self.mps_above}, MPS beyond)"
            )
        return self
