"""PFT, personalised feature translation (Sharafi et al., ICLR 2026; `docs/pft.md`), the
whole algorithm top to bottom, as we reconstructed it from the abstract and official code:

1. Source model F, B, C trained with CE, then frozen (`model.train_source`).
2. Pairs (`cosine_pairs`, as the official `Cosine_pairs.py`): for each source frame x_a of
   subject s_a, the most cosine-similar frame x_b of a *different subject* with a *different
   label*. (Reconstructed: the embedding is the source F instead of an ImageNet ResNet-18.)
3. Translator pre-training on the pairs (`pretrain_translator`):
   L_src = λ_expr·L_expr(C(B(T(x_b))), C(B(F(x_b)))) + λ_style·L_style(x_a, x_b)
           + w_ce·CE(C(B(T(x_b))), y_b),
   L_style = Σ_l MSE(G(φ_l(x_a)), G(φ^T_l(x_b))), G = Gram normalised by C·H·W (the code's
   form, `style_norm="chw"`). With that normalisation L_style is about 5e-4 and leaves T
   where the other terms put it, so our default divides each layer's squared Gram error by
   the squared Frobenius norm of the anchor's Gram (`style_norm="relative"`, reconstructed):
   the term is O(0.1) at the start and λ_style (chosen on validation subjects) sets its
   weight. λ_expr = 1 and the CE term are reconstructed.
4. Target adaptation on the target's unlabelled neutral frames only, T alone updated
   (`adapt_translator`, as `train_target.py`):
   L_tgt = CE(C(B(T(x_t))), neutral) + λ_expr·L_expr(C(B(T(x_t))), C(B(F(x_t)))).
5. Inference: ŷ = argmax C(B(T(x))) (`pft_logits`).

T, three forms (`Translator.kind`; each starts at exactly the identity, C(B(T(x))) =
C(B(F(x))), because its last layer W₂, b₂ is zero):

- `mlp` (default; our CPU recipe's 64-64-64 MLP in feature space): the residual MLP
  m ↦ m + W₂ ReLU(W₁ m + b₁) + b₂ applied at every position of F's last block map
  (1x1 convolutions; F frozen), then average-pooled. Its output map is φ^T_2, so the Gram
  loss of step 3 acts on the last block (reconstructed: the official T acts on the pooled
  vector, which has no maps for a Gram loss).
- `pooled_mlp`: the same MLP on the pooled F(x) (the official T's place); no Gram loss
  possible (λ_style must be 0).
- `conv_copy`: a trainable copy of F's conv layers (BN statistics frozen at the source
  values; as the official `T_full`, which holds its own ResNet) + the residual MLP on its
  pooled output: about 32k free parameters, which collapse to "all neutral" under step 4.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as fn

from rayworks.pipelines.pft.model import FeatureExtractor, SourceModel, batches

TRANSLATORS = ("mlp", "pooled_mlp", "conv_copy")


class Translator(nn.Module):
    """T: a residual MLP in feature space (per position of F's last map, or on the pooled
    feature), optionally behind its own copy of F's conv layers (`conv_copy`)."""

    def __init__(self, F: FeatureExtractor, hidden: int, kind: str = "mlp") -> None:
        super().__init__()
        if kind not in TRANSLATORS:
            raise ValueError(f"translator kind {kind!r} is not one of {TRANSLATORS}")
        self.kind = kind
        self.backbone = copy.deepcopy(F).requires_grad_(True) if kind == "conv_copy" else None
        if kind == "mlp":  # the same 64-64-64 MLP, shared by every position (1x1 convs)
            self.fc1: nn.Module = nn.Conv2d(F.dim, hidden, 1)
            self.fc2: nn.Module = nn.Conv2d(hidden, F.dim, 1)
        else:
            self.fc1, self.fc2 = nn.Linear(F.dim, hidden), nn.Linear(hidden, F.dim)
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def train(self, mode: bool = True) -> Translator:
        """Train the weights, but keep the backbone's BN on its frozen source statistics."""
        super().train(mode)
        if self.backbone is not None:
            self.backbone.eval()
        return self

    def _residual(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.fc2(fn.relu(self.fc1(h)))

    def forward(self, x: torch.Tensor, F: FeatureExtractor) -> tuple[torch.Tensor, list]:
        """x [N, 1, H, W] -> (f̂ [N, D], the block maps the Gram loss compares: φ^T_l for
        `conv_copy`; F's frozen maps of blocks 0, 1 and T's output map for `mlp`; none for
        `pooled_mlp`)."""
        if self.kind == "pooled_mlp":
            with torch.no_grad():
                f = F(x)
            return self._residual(f), []
        if self.kind == "conv_copy":
            f, maps = self.backbone(x, maps=True)
            return self._residual(f), maps
        with torch.no_grad():
            _, maps = F(x, maps=True)
        out = self._residual(maps[-1])
        return out.mean(dim=(2, 3)), [*maps[:-1], out]


def gram(maps: torch.Tensor) -> torch.Tensor:
    """Per-sample Gram matrix [N, C, C] of maps [N, C, H, W], normalised by C·H·W."""
    n, c, h, w = maps.shape
    flat = maps.reshape(n, c, h * w)
    return flat @ flat.transpose(1, 2) / (c * h * w)


def style_loss(
    maps_a: list[torch.Tensor], maps_b: list[torch.Tensor], layers: list[int], norm: str = "chw"
) -> Any:
    """L_style = Σ_{l ∈ layers} MSE(G(φ_l(x_a)), G(φ^T_l(x_b))) (step 3, `norm="chw"`), or
    with `norm="relative"` each layer's Σ‖G_b - G_a‖²_F / Σ‖G_a‖²_F over the batch (scale-free:
    0 when the Grams match, 1 when T's Gram is zero)."""
    total: Any = 0.0
    for i in layers:
        g_b, g_a = gram(maps_b[i]), gram(maps_a[i])
        if norm == "relative":
            total = total + (g_b - g_a).pow(2).sum() / g_a.pow(2).sum().clamp_min(1e-12)
        else:
            total = total + fn.mse_loss(g_b, g_a)
    return total


def expr_loss(logits: torch.Tensor, ref_logits: torch.Tensor, kind: str) -> torch.Tensor:
    """L_expr: keep the translated prediction consistent with the source one (ref detached):
    CE to its argmax (code default), KL(ref ‖ translated) or MSE of probabilities."""
    ref = ref_logits.detach()
    if kind == "ce":
        return fn.cross_entropy(logits, ref.argmax(1))
    if kind == "kl":
        return fn.kl_div(
            fn.log_softmax(logits, 1),
            fn.log_softmax(ref, 1),
            log_target=True,
            reduction="batchmean",
        )
    return fn.mse_loss(logits.softmax(1), ref.softmax(1))


def cosine_pairs(feats: torch.Tensor, subject: torch.Tensor, labels: torch.Tensor) -> Any:
    """Step 2: for each row a, argmax_b cos(f_a, f_b) over b with another subject and another
    label. feats [N, D], subject [N], labels [N] -> partner index [N]."""
    z = fn.normalize(feats, dim=1)
    sim = z @ z.T
    allowed = (subject[:, None] != subject[None]) & (labels[:, None] != labels[None])
    return sim.masked_fill(~allowed, -torch.inf).argmax(1)


def pft_logits(model: SourceModel, T: Translator, x: torch.Tensor) -> torch.Tensor:
    """Step 5: C(B(T(x)))."""
    return model.head(T(x, model.F)[0])


def _frozen(model: SourceModel) -> SourceModel:
    return model.eval().requires_grad_(False)


def pretrain_translator(
    model: SourceModel,
    x: np.ndarray,
    y: np.ndarray,
    subject: np.ndarray,
    cfg: dict[str, Any],
    batch_size: int,
    seed: int,
) -> tuple[Translator, list[dict[str, float]]]:
    """Step 3 on the labelled source frames; returns T and per-epoch mean loss terms."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    _frozen(model)
    T = Translator(model.F, cfg["hidden"], cfg["translator"]).train()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    with torch.no_grad():
        feats = model.F(xt)
        src_logits = model.head(feats)
    partner = cosine_pairs(feats, torch.from_numpy(subject), yt)
    opt = torch.optim.Adam([p for p in T.parameters() if p.requires_grad], lr=cfg["pretrain_lr"])
    history = []
    for _ in range(cfg["pretrain_epochs"]):
        sums = np.zeros(3)
        for a in batches(len(yt), batch_size, gen):
            b = partner[a]
            f_hat, maps_b = T(xt[b], model.F)
            logits = model.head(f_hat)
            terms = [
                expr_loss(logits, src_logits[b], cfg["expr_loss"]),
                fn.cross_entropy(logits, yt[b]),
                torch.zeros(()),
            ]
            if cfg["lambda_style"] > 0:
                with torch.no_grad():
                    maps_a = model.F(xt[a], maps=True)[1]
                terms[2] = style_loss(maps_a, maps_b, cfg["style_layers"], cfg["style_norm"])
            loss = (
                cfg["lambda_expr"] * terms[0]
                + cfg["pretrain_ce"] * terms[1]
                + cfg["lambda_style"] * terms[2]
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sums += np.array([float(t.detach()) for t in terms]) * len(a)
        history.append(dict(zip(("expr", "ce", "style"), (sums / len(yt)).tolist(), strict=True)))
    return T.eval(), history


def adapt_translator(
    model: SourceModel,
    T: Translator,
    x: np.ndarray,
    cfg: dict[str, Any],
    adapt: dict[str, Any],
    seed: int,
) -> Translator:
    """Step 4: fit T alone on the target's neutral frames x [N, 1, H, W] (no labels used
    beyond "these are neutral", class 0)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    _frozen(model)
    T = copy.deepcopy(T).train()
    xt = torch.from_numpy(x)
    with torch.no_grad():
        src_logits = model(xt)
    opt = torch.optim.Adam([p for p in T.parameters() if p.requires_grad], lr=adapt["lr"])
    for _ in range(adapt["epochs"]):
        for idx in batches(len(xt), adapt["batch_size"], gen):
            logits = pft_logits(model, T, xt[idx])
            neutral = torch.zeros(len(idx), dtype=torch.long)
            loss = fn.cross_entropy(logits, neutral) + cfg["lambda_expr"] * expr_loss(
                logits, src_logits[idx], cfg["expr_loss"]
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return T.eval()


def translator_state(T: Translator) -> dict[str, torch.Tensor]:
    """T's tensors for the safetensors cache."""
    return {k: v.contiguous() for k, v in T.state_dict().items()}


def load_translator(
    model: SourceModel, state: dict[str, torch.Tensor], cfg: dict[str, Any]
) -> Translator:
    T = Translator(model.F, cfg["hidden"], cfg["translator"])
    T.load_state_dict(state)
    return T.eval()
