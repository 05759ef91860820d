"""The pieces of a `rae` run, each a module-level function that `fan_out` sends to a Ray
task and that caches its result under the bench's cache (so every arm of one bench trains
the encoder, conv AE, classifier, decoders and identical DiTs once):

stage 1 `encoder_piece` (ViT by CE + contrastive or MAE, + linear probe), `convae_piece` (+ probe),
`classifier_piece`; stage 2 `decoder_piece` (τ), `dit_piece` (flow matching + Euler
samples at the curve points) and `width_piece` (E1 single-image overfit vs the bound).
Arguments are plain dicts (config dumps) and tensors; every random draw is seeded.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rayworks.data.digits import DigitsConfig, augment, load_digits_splits
from rayworks.models.vit import ViT, ViTSpec
from rayworks.pipelines.rae.autoencoders import (
    ConvAE,
    RAEDecoder,
    SupConHeads,
    TokenDecoder,
    encode_tokens,
    mae_loss,
    noise_augment,
    reconstruction_loss,
    supcon_loss,
)
from rayworks.pipelines.rae.dit import DiT, DiTSpec, forward_flops
from rayworks.pipelines.rae.evaluator import DigitClassifier, linear_probe
from rayworks.pipelines.rae.flow import (
    euler_sample,
    flow_matching_loss,
    shift_alpha,
    velocity_residual_covariance,
    width_bound,
)
from rayworks.pipelines.rae.training import cached, fit

AUG = DigitsConfig(noise_std=0.0, max_shift=1)  # stage-1 augmentation: ±1 pixel shifts
CLF_AUG = DigitsConfig(noise_std=3.0, max_shift=1)


def load_images(max_train: int | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(train x, train y, test x, test y); x in [0, 1] at 16 x 16, train = train + val."""
    d = load_digits_splits(DigitsConfig(eval_noise_std=0.0))
    x, y = torch.cat([d.train.x, d.val.x]), torch.cat([d.train.y, d.val.y])
    if max_train is not None and max_train < len(y):
        keep = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))[:max_train]
        x, y = x[keep], y[keep]
    return x, y, d.test.x, d.test.y


def to_signed(x: Tensor) -> Tensor:
    return 2 * x - 1


def _batch(n: int, size: int, gen: torch.Generator) -> Tensor:
    return torch.randint(0, n, (size,), generator=gen)


def _root(ckpt_dir: str | None, name: str) -> Path | None:
    return Path(ckpt_dir) / name if ckpt_dir else None


def _done(root: Path | None) -> None:
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def encoder_spec(enc: dict[str, Any]) -> ViTSpec:
    return ViTSpec(
        d_model=enc["width"], n_layer=enc["depth"], n_head=enc["heads"], ffn_dim=4 * enc["width"]
    )


def load_encoder(tree: dict[str, Any], enc: dict[str, Any]) -> ViT:
    vit = ViT(encoder_spec(enc))
    vit.load_state_dict(tree["model"])
    return vit.eval().requires_grad_(False)


@torch.no_grad()
def tokens_of(vit: ViT, x01: Tensor) -> Tensor:
    return torch.cat([encode_tokens(vit, to_signed(c)) for c in x01.split(512)])


def encoder_piece(cfg: dict, seed: int, cache: str, ckpt_dir: str | None) -> dict[str, Any]:
    """Train the ViT encoder with `encoder.objective` (then frozen): supervised CE +
    contrastive on two augmented views (`supcon_loss`), or MAE (`mae_loss`); linear probes
    on its flattened latent (the protocol of the conv AE) and on its mean-pooled tokens."""
    enc, data = cfg["encoder"], cfg["data"]

    def build() -> dict[str, Any]:
        torch.manual_seed(seed)
        x, y, tx, ty = load_images(data["max_train"])
        vit = ViT(encoder_spec(enc))
        if enc["objective"] == "supcon":
            heads: torch.nn.Module = SupConHeads(enc["width"], enc["proj_dim"])

            def loss_at(_step: int, gen: torch.Generator) -> Tensor:
                idx = _batch(len(y), enc["batch"], gen)
                views = (
                    to_signed(augment(x[idx], CLF_AUG, gen)),
                    to_signed(augment(x[idx], CLF_AUG, gen)),
                )
                return supcon_loss(
                    vit, heads, views, y[idx], enc["contrastive_weight"], enc["temperature"]
                )

        else:
            heads = TokenDecoder(
                enc["width"],
                enc["mae_decoder_width"],
                enc["mae_decoder_depth"],
                4,
                vit.spec.n_patches,
                vit.spec.patch_size,
            )

            def loss_at(_step: int, gen: torch.Generator) -> Tensor:
                batch = to_signed(augment(x[_batch(len(y), enc["batch"], gen)], AUG, gen))
                return mae_loss(vit, heads, batch, enc["mask_ratio"], gen)

        root = _root(ckpt_dir, "encoder")
        losses = fit({"vit": vit, "dec": heads}, loss_at, enc["steps"], enc["lr"], seed, root)
        _done(root)
        vit.eval()
        z, tz = tokens_of(vit, x), tokens_of(vit, tx)
        return {
            "model": vit.state_dict(),
            "probe_acc": linear_probe(z, y, tz, ty),
            "probe_acc_pooled": linear_probe(z.mean(1), y, tz.mean(1), ty),
            "losses": losses,
        }

    return cached(Path(cache), "encoder", {"encoder": enc, "data": data, "seed": seed}, build)


def convae_piece(cfg: dict, seed: int, cache: str, ckpt_dir: str | None) -> dict[str, Any]:
    """Reconstruction-only conv AE (L1 + 0.1 MSE); linear probe on its flattened latent."""
    ae_cfg, data, w = cfg["convae"], cfg["data"], cfg["decoder"]["mse_weight"]

    def build() -> dict[str, Any]:
        torch.manual_seed(seed)
        x, y, tx, ty = load_images(data["max_train"])
        ae = ConvAE(ae_cfg["latent_channels"], ae_cfg["hidden"])

        def loss_at(_step: int, gen: torch.Generator) -> Tensor:
            batch = to_signed(augment(x[_batch(len(y), ae_cfg["batch"], gen)], AUG, gen))
            return reconstruction_loss(ae(batch), batch, w)

        root = _root(ckpt_dir, "convae")
        losses = fit({"ae": ae}, loss_at, ae_cfg["steps"], ae_cfg["lr"], seed, root)
        _done(root)
        with torch.no_grad():
            probe = linear_probe(ae.encode(to_signed(x)), y, ae.encode(to_signed(tx)), ty)
        return {"model": ae.state_dict(), "probe_acc": probe, "losses": losses}

    key = {"convae": ae_cfg, "mse_weight": w, "data": data, "seed": seed}
    return cached(Path(cache), "convae", key, build)


def classifier_piece(cfg: dict, seed: int, cache: str, ckpt_dir: str | None) -> dict[str, Any]:
    """The independent evaluation CNN (noise + shift augmentation); its test accuracy."""
    c, data = cfg["classifier"], cfg["data"]

    def build() -> dict[str, Any]:
        torch.manual_seed(seed + 7)
        x, y, tx, ty = load_images(data["max_train"])
        clf = DigitClassifier(feature_dim=c["feature_dim"])

        def loss_at(_step: int, gen: torch.Generator) -> Tensor:
            idx = _batch(len(y), c["batch"], gen)
            logits = clf(to_signed(augment(x[idx], CLF_AUG, gen)))
            return torch.nn.functional.cross_entropy(logits, y[idx])

        root = _root(ckpt_dir, "classifier")
        losses = fit({"clf": clf}, loss_at, c["steps"], c["lr"], seed + 7, root)
        _done(root)
        with torch.no_grad():
            acc = float((clf(to_signed(tx)).argmax(1) == ty).float().mean())
        return {"model": clf.state_dict(), "test_acc": acc, "losses": losses}

    return cached(Path(cache), "classifier", {"classifier": c, "data": data, "seed": seed}, build)


def make_decoder(cfg: dict) -> RAEDecoder:
    enc, dec = cfg["encoder"], cfg["decoder"]
    return RAEDecoder(enc["width"], dec["depth"], dec["heads"], 16, 4)


def decoder_piece(
    cfg: dict, seed: int, cache: str, ckpt_dir: str | None, encoder: dict[str, Any]
) -> dict[str, Any]:
    """RAE decoder on frozen encoder tokens with noise augmentation z + sigman, sigma ~ U(0, τ)."""
    dec_cfg, data = cfg["decoder"], cfg["data"]

    def build() -> dict[str, Any]:
        torch.manual_seed(seed + 3)
        x, y, _, _ = load_images(data["max_train"])
        vit = load_encoder(encoder, cfg["encoder"])
        dec = make_decoder(cfg)

        def loss_at(_step: int, gen: torch.Generator) -> Tensor:
            batch = to_signed(augment(x[_batch(len(y), dec_cfg["batch"], gen)], AUG, gen))
            with torch.no_grad():
                z = encode_tokens(vit, batch)
            return reconstruction_loss(
                dec(noise_augment(z, dec_cfg["tau"], gen)), batch, dec_cfg["mse_weight"]
            )

        root = _root(ckpt_dir, f"decoder_tau{dec_cfg['tau']:g}")
        losses = fit({"dec": dec}, loss_at, dec_cfg["steps"], dec_cfg["lr"], seed + 3, root)
        _done(root)
        return {"model": dec.state_dict(), "losses": losses}

    key = {"decoder": dec_cfg, "encoder": cfg["encoder"], "data": data, "seed": seed}
    return cached(Path(cache), "decoder", key, build)


def dit_spec(arch: dict[str, Any], channels: int, class_dropout: float) -> DiTSpec:
    return DiTSpec(
        channels=channels,
        class_dropout=class_dropout,
        **{
            k: arch[k]
            for k in (
                "width",
                "depth",
                "heads",
                "head_width",
                "head_depth",
                "head_heads",
                "mlp_ratio",
            )
        },
    )


def dit_piece(
    cfg: dict,
    seed: int,
    cache: str,
    ckpt_dir: str | None,
    name: str,
    arch: dict[str, Any],
    shift: bool,
    latents: Tensor,
    labels: Tensor,
    source: dict[str, Any],
) -> dict[str, Any]:
    """Flow-matching DiT on normalised latents [N, T, n]; Euler samples at the curve points.

    alpha = √(T·n / n_base) when `shift`, else 1 (also on the sampling grid). Samples are
    class-balanced (label i mod 10), from fixed noise, in the normalised latent space.
    """
    diff = cfg["diffusion"]
    m = latents.shape[1] * latents.shape[2]
    alpha = shift_alpha(m, diff["n_base"]) if shift else 1.0

    def build() -> dict[str, Any]:
        torch.manual_seed(seed + 11)
        model = DiT(dit_spec(arch, latents.shape[2], diff["class_dropout"]))
        points = sorted({max(1, round(f * diff["steps"])) for f in diff["curve_at"]})
        samples: dict[str, Tensor] = {}

        def draw(n: int, step: int) -> None:
            gen = torch.Generator().manual_seed(seed + 99)
            noise = torch.randn((n, *latents.shape[1:]), generator=gen)
            y = torch.arange(n) % 10
            samples[str(step)] = euler_sample(model, noise, y, diff["sample_steps"], alpha)

        def loss_at(step: int, gen: torch.Generator) -> Tensor:
            if step in points:  # convergence curve: sample before this step's update
                model.eval()
                draw(diff["curve_samples"], step)
                model.train()
            idx = _batch(len(labels), diff["batch"], gen)
            y = model.drop_labels(labels[idx], gen)
            return flow_matching_loss(model, latents[idx], y, alpha, gen)

        root = _root(ckpt_dir, f"dit_{name}")
        losses = fit(
            {"dit": model},
            loss_at,
            diff["steps"],
            diff["lr"],
            seed + 11,
            root,
            diff["checkpoint_every"],
        )
        _done(root)
        draw(diff["n_samples"], diff["steps"])
        return {
            "model": model.state_dict(),
            "samples": samples,
            "losses": losses,
            "alpha": alpha,
            "flops": forward_flops(model),
        }

    key = {"arch": arch, "shift": shift, "diffusion": diff, "source": source, "seed": seed}
    return {"name": name, **cached(Path(cache), "dit", key, build)}


def width_piece(cfg: dict, seed: int, width: int, z: Tensor, alpha: float) -> dict[str, Any]:
    """E1: overfit a plain DiT of `width` to one normalised latent z [T, n]; final loss on
    `eval_draws` fresh draws vs the bound (1/n) Σ_{i>d} λ_i(Cov(ε - z))."""
    w = cfg["width"]
    torch.manual_seed(seed + width)
    spec = DiTSpec(
        tokens=z.shape[0],
        channels=z.shape[1],
        width=width,
        depth=w["depth"],
        heads=4,
        class_dropout=0.0,
    )
    model = DiT(spec)
    zb, yb = z.expand(w["batch"], -1, -1), torch.zeros(w["batch"], dtype=torch.long)

    def loss_at(_step: int, gen: torch.Generator) -> Tensor:
        return flow_matching_loss(model, zb, yb, alpha, gen)

    losses = fit({"dit": model}, loss_at, w["steps"], w["lr"], seed + width)
    gen = torch.Generator().manual_seed(seed + 12345)
    n = w["eval_draws"]
    with torch.no_grad():
        final = float(
            flow_matching_loss(
                model, z.expand(n, -1, -1), torch.zeros(n, dtype=torch.long), alpha, gen
            )
        )
    cov = velocity_residual_covariance(z, 256, torch.Generator().manual_seed(seed))
    return {"width": width, "loss": final, "bound": width_bound(cov, width), "losses": losses}


PIECES = {
    "encoder": encoder_piece,
    "convae": convae_piece,
    "classifier": classifier_piece,
    "decoder": decoder_piece,
    "dit": dit_piece,
    "width": width_piece,
}


def run_piece(kind: str, **kwargs: Any) -> dict[str, Any]:
    """One `fan_out` entry point for every piece kind; tags the result with its kind."""
    return {"kind": kind, **PIECES[kind](**kwargs)}
