"""The stage-1 models of RAE at digits scale (RAE §3; CPU recipe reconstructed):

- the frozen representation encoder: the tiny ViT of `rayworks.models.vit` (patch 4 on
  16 x 16 → 16 tokens of width n = 64), trained with objective (a) of our recipe by
  default, supervised cross-entropy plus a SimCLR-style contrastive term between two
  augmented views (`supcon_loss`), so that its latent is a semantic representation as the
  paper's DINOv2 / SigLIP encoders are; objective (b), MAE with 75% masking (`mae_loss`),
  is kept as `encoder.objective=mae`. `encode_tokens` returns its normalised patch tokens
  [B, 16, 64];
- `RAEDecoder`: a ViT decoder (blocks of `rayworks.models.vit`, hidden size = latent dim)
  from tokens to 4 x 4 pixel patches, trained with L1 + 0.1 MSE (no LPIPS / GAN) and the
  paper's noise augmentation z ← z + sigma n, sigma ~ U(0, τ) per sample (τ = 0.8);
- `ConvAE`: the "legacy VAE" baseline, a reconstruction-only conv autoencoder with a
  4 x 4 x 4 latent (the SD-VAE analogue; deterministic, no KL).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rayworks.models.vit import Block as ViTBlock
from rayworks.models.vit import ViT, ViTSpec


def patchify(images: Tensor, p: int) -> Tensor:
    """[B, 1, H, W] → [B, (H/p)(W/p), p²], row-major over the patch grid."""
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // p) * (w // p), c * p * p)


def unpatchify(patches: Tensor, p: int) -> Tensor:
    """Inverse of `patchify` for one channel: [B, T, p²] → [B, 1, H, W]."""
    b, t, _ = patches.shape
    g = round(t**0.5)
    x = patches.reshape(b, g, g, 1, p, p).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, 1, g * p, g * p)


def encode_tokens(vit: ViT, images: Tensor, keep: Tensor | None = None) -> Tensor:
    """The encoder's final-LayerNorm patch tokens [B, T', d] (class token dropped); `keep`
    [B, T'] selects visible patches (MAE training), None keeps all 16."""
    return vit.encode(images, keep)[:, 1:]


def _blocks(width: int, depth: int, heads: int) -> nn.ModuleList:
    spec = ViTSpec(d_model=width, n_layer=depth, n_head=heads, ffn_dim=4 * width)
    return nn.ModuleList(ViTBlock(spec, i) for i in range(depth))


class TokenDecoder(nn.Module):
    """Tokens [B, T, n] → pixels per token [B, T, p²]: linear → +pos → ViT blocks → LN → linear.
    Optional `mask_token` fills masked positions (the MAE decoder)."""

    def __init__(self, n: int, width: int, depth: int, heads: int, tokens: int, p: int) -> None:
        super().__init__()
        self.embed = nn.Linear(n, width)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, width))
        self.pos = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.blocks = _blocks(width, depth, heads)
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, p * p)

    def forward(self, z: Tensor, keep: Tensor | None = None) -> Tensor:
        h = self.embed(z)
        if keep is not None:  # scatter visible tokens into a full grid of mask tokens
            full = self.mask_token.expand(h.shape[0], self.pos.shape[1], -1).clone()
            h = full.scatter(1, keep[..., None].expand(-1, -1, h.shape[-1]), h)
        h = h + self.pos
        for block in self.blocks:
            h = block(h)
        return self.out(self.norm(h))


def mae_loss(
    vit: ViT, decoder: TokenDecoder, images: Tensor, mask_ratio: float, gen: torch.Generator
) -> Tensor:
    """MAE: encode a random (1 - mask_ratio) share of patches, predict the masked patches'
    pixels; MSE on masked patches only."""
    target = patchify(images, vit.spec.patch_size)
    b, t, _ = target.shape
    n_keep = max(1, round(t * (1 - mask_ratio)))
    order = torch.rand(b, t, generator=gen).argsort(1)
    keep = order[:, :n_keep]
    pred = decoder(encode_tokens(vit, images, keep), keep)
    masked = torch.ones(b, t, dtype=torch.bool)
    masked[torch.arange(b)[:, None], keep] = False
    return ((pred - target) ** 2)[masked].mean()


class SupConHeads(nn.Module):
    """Heads of the supervised objective on the encoder's mean-pooled tokens: a linear
    classifier (cross-entropy) and SimCLR's 2-layer projection (the contrastive term).
    Both are dropped after training; only the encoder is kept and frozen."""

    def __init__(self, n: int, proj_dim: int, classes: int = 10) -> None:
        super().__init__()
        self.cls = nn.Linear(n, classes)
        self.proj = nn.Sequential(nn.Linear(n, n), nn.ReLU(), nn.Linear(n, proj_dim))


def nt_xent(a: Tensor, b: Tensor, temperature: float) -> Tensor:
    """SimCLR's NT-Xent over the 2B views [B, D] x 2: each view's positive is the other view
    of its image, the remaining 2B - 2 views are its negatives (cosine similarity / t)."""
    z = nn.functional.normalize(torch.cat([a, b]), dim=1)
    sim = (z @ z.T) / temperature
    sim = sim.masked_fill(torch.eye(len(z), dtype=torch.bool), float("-inf"))
    n = a.shape[0]
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return nn.functional.cross_entropy(sim, target)


def supcon_loss(
    vit: ViT,
    heads: SupConHeads,
    views: tuple[Tensor, Tensor],
    labels: Tensor,
    weight: float,
    temperature: float,
) -> Tensor:
    """Objective (a): mean over both views of CE(classifier(pool(tokens)), label) plus
    `weight` x NT-Xent between the views' projections (pool = mean over patch tokens)."""
    pooled = [encode_tokens(vit, v).mean(1) for v in views]
    ce = sum(nn.functional.cross_entropy(heads.cls(p), labels) for p in pooled) / 2
    return ce + weight * nt_xent(heads.proj(pooled[0]), heads.proj(pooled[1]), temperature)


def reconstruction_loss(recon: Tensor, images: Tensor, mse_weight: float) -> Tensor:
    """L1 + w · MSE (the paper's L1 + LPIPS + GAN without the last two)."""
    diff = recon - images
    return diff.abs().mean() + mse_weight * (diff**2).mean()


class RAEDecoder(nn.Module):
    """Representation tokens [B, T, n] → images [B, 1, H, W]."""

    def __init__(self, n: int, depth: int, heads: int, tokens: int, p: int) -> None:
        super().__init__()
        self.p = p
        self.net = TokenDecoder(n, n, depth, heads, tokens, p)  # hidden size = latent dim

    def forward(self, z: Tensor) -> Tensor:
        return unpatchify(self.net(z), self.p)


def noise_augment(z: Tensor, tau: float, gen: torch.Generator) -> Tensor:
    """z + sigma n with sigma ~ U(0, τ) per sample and n ~ N(0, I) (RAE §3.3); identity for τ = 0."""
    if tau == 0:
        return z
    sigma = tau * torch.rand(z.shape[0], *([1] * (z.dim() - 1)), generator=gen)
    return z + sigma * torch.randn(z.shape, generator=gen)


class ConvAE(nn.Module):
    """Images [B, 1, 16, 16] ↔ latent tokens [B, 16, c] (a c x 4 x 4 grid, c = 4)."""

    def __init__(self, latent_channels: int, hidden: int) -> None:
        super().__init__()
        h = hidden
        self.enc = nn.Sequential(
            nn.Conv2d(1, h, 3, 2, 1),
            nn.SiLU(),
            nn.Conv2d(h, 2 * h, 3, 2, 1),
            nn.SiLU(),
            nn.Conv2d(2 * h, latent_channels, 1),
        )
        self.dec = nn.Sequential(
            nn.Conv2d(latent_channels, 2 * h, 1),
            nn.SiLU(),
            nn.ConvTranspose2d(2 * h, h, 4, 2, 1),
            nn.SiLU(),
            nn.ConvTranspose2d(h, h, 4, 2, 1),
            nn.SiLU(),
            nn.Conv2d(h, 1, 3, 1, 1),
        )

    def encode(self, images: Tensor) -> Tensor:
        z = self.enc(images)  # [B, c, 4, 4]
        return z.flatten(2).transpose(1, 2)

    def decode(self, tokens: Tensor) -> Tensor:
        b, t, c = tokens.shape
        g = round(t**0.5)
        return self.dec(tokens.transpose(1, 2).reshape(b, c, g, g))

    def forward(self, images: Tensor) -> Tensor:
        return self.decode(self.encode(images))
