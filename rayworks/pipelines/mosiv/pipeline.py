"""`rayworks run mosiv` / `rayworks bench mosiv`: MOSIV multi-object system identification,
2D (arXiv 2603.06022; `docs/mosiv.md`).

One run builds `scene.n_scenes` procedural two-object collision scenes (`scenes.py`) and
fans out every (arm, scene) as one Ray task (`arms.arm_piece`): the reported arm plus the
`compare` arms. Per arm: means over scenes of Chamfer/EMD/silhouette IoU on observed and
future frames and per-object parameter errors; the method run adds the pass rule
(`report.pass_rule`).
Artifacts: `table.jsonl`, `table.md`, `cd_by_arm.png`, `rollout.gif` (scene 0).
Headline: `future_cd` (min). Ablations (bench): `cd_only` (c) and `sil_only` (d).
The baselines are declared in-run: the method run fits them on the same scenes for its
pass rule (which needs b, e and f beside the method), so bench reads their rows from its
summary (`<arm>_` keys) instead of fitting them twice.
"""

from __future__ import annotations

from typing import Any

from rayworks.pipelines.mosiv.arms import arm_piece
from rayworks.pipelines.mosiv.config import MosivConfig
from rayworks.pipelines.mosiv.report import aggregate, pass_rule, write_gif, write_plot, write_table
from rayworks.platform.context import RunContext
from rayworks.platform.fanout import fan_out
from rayworks.platform.registry import Arm, InRun, pipeline

REPORT = ("observed_cd", "future_emd", "future_iou", "log_E_err", "pass_rule")
IN_RUN = "fitted in the method run on the same scenes for its pass rule (arms b, e, f)"
LOGGED = ("observed_cd", "future_emd", "observed_emd", "future_iou", "observed_iou", "seconds")


class _Logger:
    """One metrics record per finished (arm, scene) piece; moves the progress bar."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx, self.step = ctx, 0

    def piece(self, _i: int, row: dict[str, Any]) -> None:
        self.step += 1
        errors = {k: v for k, v in row.items() if k.startswith("obj")}
        self.ctx.log(
            self.step,
            arm=row["arm"],
            scene=row["scene"],
            piece_future_cd=row["future_cd"],  # not the headline: no bench curve
            **{k: row[k] for k in LOGGED},
            **errors,
        )


def run_mosiv(cfg: MosivConfig, ctx: RunContext) -> dict[str, float]:
    """Every (arm, scene) piece, per-arm means, table, plot, GIF and the pass rule."""
    dump = cfg.model_dump(mode="json")
    arms = list(dict.fromkeys([cfg.arm, *cfg.compare]))
    calls = [
        {"arm": a, "scene_index": s, "cfg": dump, "keep_rollout": cfg.gif and s == 0}
        for a in arms
        for s in range(cfg.scene.n_scenes)
    ]
    ctx.progress(len(calls), f"mosiv {cfg.arm} ({len(arms)} arms x {cfg.scene.n_scenes} scenes)")
    rows = fan_out(arm_piece, calls, threads=1, on_done=_Logger(ctx).piece)
    per_arm = {a: aggregate([r for r in rows if r["arm"] == a]) for a in arms}
    summary: dict[str, float] = {}
    for a in arms:
        prefix = "" if a == cfg.arm else f"{a}_"
        summary.update({prefix + k: v for k, v in per_arm[a].items()})
    for r in rows:
        summary[f"{r['arm']}_future_cd_scene{r['scene_index']}"] = r["future_cd"]
    summary.update(pass_rule(per_arm, cfg.pass_ratio, cfg.pass_log_E))
    write_table(ctx, rows, per_arm)
    write_plot(ctx.artifacts_dir, per_arm)
    write_gif(ctx.artifacts_dir, rows, cfg.scene.frames_observed)
    return summary


@pipeline(
    "mosiv",
    config=MosivConfig,
    kind="task",
    arms={
        "mosiv_prototype": Arm(
            "Baseline (e): discrete per-object prototype selection from a mixed library.",
            {"arm": "prototype", "compare": [], "gif": False},
            in_run=InRun(IN_RUN, member="prototype", prefix="prototype_"),
        ),
        "mosiv_prototype_oracle": Arm(
            "Baseline (f): prototype selection with the oracle constitutive family.",
            {"arm": "prototype_oracle", "compare": [], "gif": False},
            in_run=InRun(IN_RUN, member="prototype_oracle", prefix="prototype_oracle_"),
        ),
        "mosiv_scenewise": Arm(
            "Baseline (b): the same fit with the scene-wise (union) Chamfer + silhouette loss.",
            {"arm": "scenewise", "compare": [], "gif": False},
            in_run=InRun(IN_RUN, member="scenewise", prefix="scenewise_"),
        ),
    },
    headline=("future_cd", "min"),
    ablations={
        "cd_only": ("arm=cd_only", "compare=[]", "gif=false"),
        "sil_only": ("arm=sil_only", "compare=[]", "gif=false"),
    },
    report=REPORT,
)
def run(cfg: MosivConfig, ctx: RunContext) -> dict[str, float]:
    """Continuous per-object parameters through a differentiable 2D MPM, object-wise loss."""
    return run_mosiv(cfg, ctx)
