"""`rayworks run rae` / `rayworks bench rae`: Diffusion Transformers with Representation
Autoencoders at digits scale (`docs/rae.md`; CPU recipe reconstructed).

One run: stage 1 fans out the representation encoder (supervised CE + contrastive, or
MAE; then frozen), the conv AE and the evaluation
classifier (each trained once per bench, cached); the latents are normalised elementwise
with training-set stats; stage 2 fans out the RAE decoder (noise τ), the run's DiT arm
(`rae`: DiT^DH on RAE latents; `dit`: plain DiT d = 96; `convae`: DiT^DH on conv-AE latents)
and, in the method run, the extras E2 (same DiT with the shift off) and E1 (single-image
overfit per width vs Theorem 1's bound). Samples are decoded and scored by the classifier:
gFD (headline, Fréchet distance of its penultimate features against the held-out test
images; `diffusion.fd_reference=train` for the training images), sample class accuracy,
rFD of the test images' reconstructions. Artifacts: `table.jsonl`, `table.md`,
`samples.png`, `loss_curves.png`, `width_overfit.png`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from rayworks.pipelines.rae.autoencoders import ConvAE
from rayworks.pipelines.rae.config import RAEConfig
from rayworks.pipelines.rae.dit import DiT, forward_flops
from rayworks.pipelines.rae.evaluator import DigitClassifier, classifier_scores
from rayworks.pipelines.rae.report import pass_rule, write_grid, write_plots, write_table
from rayworks.pipelines.rae.stages import (
    dit_spec,
    load_encoder,
    load_images,
    make_decoder,
    run_piece,
    to_signed,
    tokens_of,
)
from rayworks.platform.context import RunContext
from rayworks.platform.fanout import fan_out
from rayworks.platform.registry import Arm, pipeline

REPORT = ("gacc", "rfd", "flops_per_forward", "train_loss_final", "probe_acc_encoder", "pass_rule")
EPS = 1e-5  # calculate_stat.py: (z - μ) / √(sigma² + 1e-5)


class Normaliser:
    """Elementwise (per token, per channel) training-set mean and variance."""

    def __init__(self, z: Tensor) -> None:
        self.mean, self.std = z.mean(0), (z.var(0, unbiased=False) + EPS).sqrt()

    def __call__(self, z: Tensor) -> Tensor:
        return (z - self.mean) / self.std

    def inverse(self, z: Tensor) -> Tensor:
        return z * self.std + self.mean


class _Logger:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx, self.step = ctx, 0

    def piece(self, _i: int, r: dict[str, Any]) -> None:
        self.step += 1
        keys = ("probe_acc", "test_acc", "alpha", "flops", "width", "loss", "bound")
        extra = {k: r[k] for k in keys if k in r}
        if "losses" in r:
            extra["final_train_loss"] = float(np.mean(r["losses"][-50:]))
        self.ctx.log(self.step, piece=r["kind"], name=r.get("name", r["kind"]), **extra)


def _source(cfg: RAEConfig, latent: str) -> dict[str, Any]:
    d = cfg.model_dump(mode="json")
    if latent == "rae":
        return {"latent": "rae", "encoder": d["encoder"], "data": d["data"]}
    return {
        "latent": "convae",
        "convae": d["convae"],
        "data": d["data"],
        "mse_weight": d["decoder"]["mse_weight"],
    }


def run_rae(cfg: RAEConfig, ctx: RunContext) -> dict[str, float]:
    """Stage 1 (cached), stage 2 (decoder, DiT arm, extras), decode, score, report."""
    dump, seed = cfg.model_dump(mode="json"), cfg.seed
    common = {
        "cfg": dump,
        "seed": seed,
        "cache": str(ctx.cache_root / "rae"),
        "ckpt_dir": str(ctx.checkpoints_dir),
    }
    n_width = len(cfg.width.widths) if cfg.extras else 0
    total = 3 + (cfg.arm != "convae") + 1 + (cfg.extras and cfg.diffusion.shift) + n_width
    ctx.progress(total, f"rae {cfg.arm}")
    log = _Logger(ctx)
    enc_t, ae_t, clf_t = fan_out(
        run_piece,
        [{"kind": k, **common} for k in ("encoder", "convae", "classifier")],
        threads=1,
        on_done=log.piece,
    )

    x, y, tx, ty = load_images(cfg.data.max_train)
    vit = load_encoder(enc_t, dump["encoder"])
    ae = ConvAE(cfg.convae.latent_channels, cfg.convae.hidden)
    ae.load_state_dict(ae_t["model"])
    ae.eval()
    with torch.no_grad():
        raw = {
            "rae": (tokens_of(vit, x), tokens_of(vit, tx)),
            "convae": (ae.encode(to_signed(x)), ae.encode(to_signed(tx))),
        }
    norm = {k: Normaliser(v[0]) for k, v in raw.items()}
    latent = "convae" if cfg.arm == "convae" else "rae"
    arch = dump["dit_plain"] if cfg.arm == "dit" else dump["dit_dh"]

    def dit_call(name: str, shift: bool) -> dict[str, Any]:
        return {
            "kind": "dit",
            **common,
            "name": name,
            "arch": arch,
            "shift": shift,
            "latents": norm[latent](raw[latent][0]),
            "labels": y,
            "source": _source(cfg, latent),
        }

    calls = [dit_call(cfg.arm, cfg.diffusion.shift)]
    if cfg.arm != "convae":
        calls.append({"kind": "decoder", **common, "encoder": enc_t})
    if cfg.extras and cfg.diffusion.shift:
        calls.append(dit_call("rae_noshift", False))
    if cfg.extras:
        z0 = norm["rae"](raw["rae"][0][:1])[0]
        alpha = float(np.sqrt(z0.numel() / cfg.diffusion.n_base)) if cfg.diffusion.shift else 1.0
        calls += [
            {"kind": "width", "cfg": dump, "seed": seed, "width": w, "z": z0, "alpha": alpha}
            for w in cfg.width.widths
        ]
    out = fan_out(run_piece, calls, threads=1, on_done=log.piece)
    dits = [r for r in out if r["kind"] == "dit"]
    widths = [r for r in out if r["kind"] == "width"]

    clf = DigitClassifier(feature_dim=cfg.classifier.feature_dim)
    clf.load_state_dict(clf_t["model"])
    clf.eval()
    held_out = cfg.diffusion.fd_reference == "heldout"
    with torch.no_grad():  # the FD reference: images no model of the run was trained on
        reference = clf.features(to_signed(tx if held_out else x)).double().numpy()
    if latent == "rae":
        dec = make_decoder(dump)
        dec.load_state_dict(next(r for r in out if r["kind"] == "decoder")["model"])
        dec.eval()
        decode = dec
    else:
        decode = ae.decode

    def images_of(z_norm: Tensor) -> Tensor:
        with torch.no_grad():
            return decode(norm[latent].inverse(z_norm)).clamp(-1, 1)

    recon = classifier_scores(clf, images_of(norm[latent](raw[latent][1])), ty, reference)
    rows, gfd_curves, loss_curves = [], {}, {}
    for r in dits:
        pts = {}
        for step, z in sorted(r["samples"].items(), key=lambda kv: int(kv[0])):
            labels = torch.arange(z.shape[0]) % 10
            pts[int(step)] = classifier_scores(clf, images_of(z), labels, reference)
        final = pts[cfg.diffusion.steps]
        gfd_curves[r["name"]] = [(s, p["fd"]) for s, p in pts.items()]
        loss_curves[r["name"]] = r["losses"]
        rows.append(
            {
                "arm": r["name"],
                "latent": latent,
                "alpha": float(r["alpha"]),
                "steps": cfg.diffusion.steps,
                "flops": int(r["flops"]),
                "train_loss_final": float(np.mean(r["losses"][-50:])),
                "gfd": final["fd"],
                "gacc": final["acc"],
                "rfd": recon["fd"],
                "curve": gfd_curves[r["name"]],
            }
        )
    main = rows[0]
    for step, value in gfd_curves[cfg.arm]:
        ctx.log(step, gfd=value, curve_point=True)
    z_final = dits[0]["samples"][str(cfg.diffusion.steps)]
    write_grid(
        ctx.artifacts_dir / "samples.png", images_of(z_final), torch.arange(z_final.shape[0]) % 10
    )

    summary: dict[str, float] = {
        "gfd": main["gfd"],
        "gacc": main["gacc"],
        "rfd": recon["fd"],
        "racc": recon["acc"],
        "alpha": main["alpha"],
        "flops_per_forward": float(main["flops"]),
        "train_loss_final": main["train_loss_final"],
        "probe_acc_encoder": enc_t["probe_acc"],
        "probe_acc_encoder_pooled": enc_t["probe_acc_pooled"],
        "probe_acc_convae": ae_t["probe_acc"],
        "classifier_test_acc": clf_t["test_acc"],
        "fd_reference_images": float(len(reference)),
    }
    for s, v in gfd_curves[cfg.arm][:-1]:
        summary[f"gfd_step{s}"] = v
    if cfg.extras:
        plain = DiT(dit_spec(dump["dit_plain"], 64, 0.1))
        summary["flops_plain_dit"] = float(forward_flops(plain))
    noshift = next((r for r in rows if r["arm"] == "rae_noshift"), None)
    if noshift is not None:
        summary["e2_gfd_noshift"] = noshift["gfd"]
        summary["e2_gacc_noshift"] = noshift["gacc"]
    for w in widths:
        summary[f"e1_loss_d{w['width']}"] = w["loss"]
        summary[f"e1_bound_d{w['width']}"] = w["bound"]
    summary.update(
        pass_rule(
            widths,
            cfg.encoder.width,
            main["gfd"],
            noshift["gfd"] if noshift else float("nan"),
            cfg.width.margin,
            cfg.e2_ratio,
        )
    )
    stage1 = {
        "encoder probe acc (flat / pooled)": f"{enc_t['probe_acc']:.3f} / "
        f"{enc_t['probe_acc_pooled']:.3f}",
        "conv-AE probe acc": ae_t["probe_acc"],
        "classifier test acc": clf_t["test_acc"],
        "rFD": recon["fd"],
    }
    write_table(ctx, rows, widths, stage1)
    write_plots(ctx.artifacts_dir, loss_curves, widths, gfd_curves)
    return summary


@pipeline(
    "rae",
    config=RAEConfig,
    kind="task",
    arms={
        "rae_dit": Arm(
            "A wider plain DiT (d = 96) on the same RAE latents at matched steps (RAE E4).",
            {"arm": "dit", "extras": False},
        ),
        "rae_convae": Arm(
            "The same DiT^DH on a reconstruction-only conv AE's 4x4x4 latents (RAE E5).",
            {"arm": "convae", "extras": False},
        ),
    },
    headline=("gfd", "min"),
    ablations={
        "noshift": ("diffusion.shift=false", "extras=false"),
        "tau0": ("decoder.tau=0", "extras=false"),
    },
    report=REPORT,
)
def run(cfg: RAEConfig, ctx: RunContext) -> dict[str, float]:
    """DiT^DH on frozen-representation (ViT) latents with shift and noisy decoder (RAE)."""
    return run_rae(cfg, ctx)
