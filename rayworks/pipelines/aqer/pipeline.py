"""`rayworks run aqer` / `rayworks bench aqer`: approximate quantum loaders at gate budgets G.

AQER (arXiv 2602.02165; no official code, block gate list, bounds and G convention
reconstructed): greedy entanglement reduction, closed-form product layer, Adam
fine-tuning (`aqer.py`). Baselines at matched two-qubit gate budgets: a hardware-efficient
circuit and an MPS-layer loader (`baselines.py`). Targets: amplitude-encoded digits, TFIM
ground states, random brickwork states (`targets.py`).

One run builds every target, runs `arm` and each of `compare` at every G as independent
pieces on Ray (`pieces.py`, two stages: Step I and the MPS loader first, then Steps II-III
per (target, G) and HEC), logs one record per finished piece, and writes `table.jsonl`,
`table.md`, `infidelity_vs_g.png`, `bounds.png` (Theorem 3.1 check on every AQER point)
and, for the method, a TFIM scaling table and `scaling.png` over `scaling_qubits` (Steps
I-II; state vector up to `mps_above`, MPS path of `mps.py` / `aqer_mps.py` beyond).

The baselines are declared in-run: the method run loads every target with HEC and MPS at
the same G for its cell-by-cell win rate and pass rule, so bench reads their rows from its
summary (`hec_` / `mps_` keys, headline `<arm>_infidelity`) instead of loading them twice.
"""

from __future__ import annotations

from typing import Any

from rayworks.pipelines.aqer.config import AqerConfig, block_cost, mps_layer_cost
from rayworks.pipelines.aqer.pieces import run_piece
from rayworks.pipelines.aqer.report import summarise, write_plots, write_table
from rayworks.platform.context import RunContext
from rayworks.platform.fanout import fan_out
from rayworks.platform.registry import Arm, InRun, pipeline

REPORT = ("bound_violations", "win_rate", "infidelity_step2")
IN_RUN = "loaded in the method run on the same targets and budgets for its win rate"


def target_specs(cfg: AqerConfig) -> list[dict[str, Any]]:
    t = cfg.targets
    counts = {"digits": t.n_digits, "tfim": len(t.tfim_fields), "brickwork": t.n_brickwork}
    specs = []
    for family in t.families:
        for index in range(counts[family]):
            label = f"h={t.tfim_fields[index]}" if family == "tfim" else str(index)
            specs.append(
                {
                    "family": family,
                    "index": index,
                    "name": f"{family}/{label}",
                    "n_qubits": cfg.n_qubits,
                    "tfim_fields": t.tfim_fields,
                    "depth": t.brickwork_depth,
                    "seed": cfg.seed,
                }
            )
    return specs


def plan_stages(cfg: AqerConfig, specs: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Stage A: Step I per target, MPS per target, scaling sizes. Stage B: per (target, G)."""
    arms = [cfg.arm, *cfg.compare]
    per_block = block_cost(cfg.gate_count)
    layer_cost = mps_layer_cost(cfg.n_qubits, cfg.gate_count)
    max_blocks = max(cfg.gates) // per_block
    first: list[dict] = []
    if "aqer" in arms:
        first += [
            {
                "kind": "step_one",
                "spec": s,
                "n_blocks": max_blocks,
                "settings": cfg.aqer.model_dump(),
            }
            for s in specs
        ]
    if "mps" in arms:
        first += [
            {
                "kind": "mps",
                "spec": s,
                "max_layers": max(cfg.gates) // layer_cost,
                "chi": cfg.mps_chi,
            }
            for s in specs
        ]
    if cfg.arm == "aqer":
        mps_settings = {
            "max_bond": cfg.mps_max_bond,
            "cutoff": cfg.mps_cutoff,
            "pair_range": cfg.mps_pair_range,
        }
        first += [
            {
                "kind": "scaling",
                "n_qubits": n,
                "n_blocks": cfg.scaling_blocks_per_qubit * n,
                "settings": cfg.aqer.model_dump(),
                "mps": mps_settings if n > cfg.mps_above else None,
            }
            for n in cfg.scaling_qubits
        ]
    second = []
    for s in specs:
        for g in cfg.gates:
            if "aqer" in arms:
                second.append(
                    {
                        "kind": "aqer",
                        "spec": s,
                        "n_blocks": g // per_block,
                        "settings": cfg.aqer.model_dump(),
                    }
                )
            if "hec" in arms:
                second.append(
                    {
                        "kind": "hec",
                        "spec": s,
                        "n_rzz": g // per_block,
                        "settings": cfg.hec.model_dump(),
                    }
                )
    return first, second


def rows_of(cfg: AqerConfig, call: dict, result: dict) -> list[dict[str, Any]]:
    """Table rows (one per arm, target, G) of a finished piece."""
    kind = result["kind"]
    if kind in ("step_one", "scaling"):
        return []
    spec = call["spec"]
    base = {"family": spec["family"], "target": spec["name"]}
    if kind == "mps":
        layer_cost = mps_layer_cost(cfg.n_qubits, cfg.gate_count)
        rows = []
        for g in cfg.gates:
            layers = g // layer_cost
            inf = result["curve"][layers - 1] if layers else 1.0
            rows.append(
                {
                    "arm": "mps",
                    **base,
                    "g": g,
                    "g_used": layers * layer_cost,
                    "infidelity": inf,
                    "seconds": result["seconds"],
                }
            )
        return rows
    used = (call["n_blocks"] if kind == "aqer" else call["n_rzz"]) * block_cost(cfg.gate_count)
    keep = {k: v for k, v in result.items() if k not in ("kind", "g_used")}
    return [{"arm": kind, **base, "g": used, "g_used": used, **keep}]


def run_loaders(cfg: AqerConfig, ctx: RunContext) -> dict[str, float]:
    """Every target x G x arm as Ray pieces; table, plots and summary."""
    specs = target_specs(cfg)
    first, second = plan_stages(cfg, specs)
    ctx.progress(len(first) + len(second), f"aqer {cfg.arm} ({len(specs)} targets)")
    table: list[dict[str, Any]] = []
    scaling: list[dict[str, Any]] = []
    step_ones: dict[str, dict] = {}
    done = [0]

    def finished(calls: list[dict]):
        def on_done(i: int, result: dict) -> None:
            done[0] += 1
            call = calls[i]
            if result["kind"] == "step_one":
                step_ones[call["spec"]["name"]] = result
                ctx.log(
                    done[0],
                    piece="step_one",
                    target=call["spec"]["name"],
                    entropy_target=result["entropy"][0],
                    entropy_step1=result["entropy"][-1],
                    seconds=result["seconds"],
                )
            elif result["kind"] == "scaling":
                row = {k: v for k, v in result.items() if k != "kind"}
                scaling.append(row)
                ctx.log(done[0], piece="scaling", **row)
            rows = rows_of(cfg, call, result)
            table.extend(rows)
            for row in rows:
                ctx.log(done[0], piece=row["arm"], **{k: v for k, v in row.items() if k != "arm"})

        return on_done

    fan_out(run_piece, first, threads=1, on_done=finished(first))
    for call in second:
        if call["kind"] == "aqer":
            call["one"] = step_ones[call["spec"]["name"]]
    fan_out(run_piece, second, threads=1, on_done=finished(second))
    summary = summarise(cfg, table, scaling)
    write_table(ctx, cfg, table, scaling)
    write_plots(ctx, cfg, table)
    return summary


@pipeline(
    "aqer",
    config=AqerConfig,
    kind="task",
    arms={
        "aqer_hec": Arm(
            "Hardware-efficient variational circuit (RY·RZ + RZZ ladder, Adam) at matched G.",
            {"arm": "hec", "compare": [], "scaling_qubits": []},
            in_run=InRun(IN_RUN, member="hec", prefix="hec_"),
        ),
        "aqer_mps": Arm(
            "MPS-layer loader (Ran 2020 style: χ = 2 layers of N-1 two-qubit gates) at matched G.",
            {"arm": "mps", "compare": [], "scaling_qubits": []},
            in_run=InRun(IN_RUN, member="mps", prefix="mps_"),
        ),
    },
    headline=("infidelity", "min"),
    ablations={
        "random_pairs": ("aqer.pair_order=random", "compare=[]", "scaling_qubits=[]"),
    },
    report=REPORT,
)
def run(cfg: AqerConfig, ctx: RunContext) -> dict[str, float]:
    """AQER (reconstructed): greedy entanglement reduction + product layer + Adam, vs HEC/MPS."""
    return run_loaders(cfg, ctx)
