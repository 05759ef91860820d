"""A tiny masked diffusion LM (LLaDA-style) on an HF Llama's weights, and its SFT loss.

The model is a plain `transformers.LlamaForCausalLM` (RoPE, RMSNorm, SwiGLU) whose weights
are run **bidirectionally** through `rayworks.models.kv_forward.forward(mask="none")`: no
causal mask, one MASK token id, and logits at every position predict the clean token there.
`save_pretrained` writes `config.json` + `model.safetensors`; the config carries
`rayworks_kind = "masked_diffusion"` and `mask_token_id`, so a loader can refuse a causal LM
(whose weights would run, but mean nothing bidirectionally).

SFT loss (LLaDA, Nie et al. 2025, eq. for SFT): draw t ~ U(0, 1) per sample, mask every
*response* token independently with probability t (the prompt is never masked), and
    loss = (1 / B) sum_b  sum_{masked i} CE(x0_i | x_t) / (t_b * L_resp_b),
the 1/t weighting making it an upper bound on the negative log-likelihood. As in LLaDA's
code, t is floored at `eps` via p_mask = (1 - eps) * t + eps so 1/t stays finite; `t` in
the formula above is that p_mask.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import LlamaForCausalLM, PreTrainedModel

from rayworks.core.errors import CheckpointNotFoundError
from rayworks.models.decoder import DecoderSpec, llama_config, resolve_model_dir
from rayworks.models.kv_forward import KVCache, forward

KIND = "masked_diffusion"


def build_diffusion_lm(
    spec: DecoderSpec,
    vocab_size: int,
    mask_id: int,
    bos: int,
    eos: int,
    pad: int,
    init_std: float | None = None,
) -> PreTrainedModel:
    """A randomly initialised Llama used as a bidirectional masked diffusion LM.

    `init_std` sets the weights' initial std (None: HF Llama's 0.02); at d ~ 100 a larger
    one (d^-1/2) makes attention logits non-negligible from the start."""
    if not 0 <= mask_id < vocab_size:
        raise ValueError(f"mask_id={mask_id} is outside the vocabulary [0, {vocab_size})")
    config = llama_config(spec, vocab_size, bos, eos, pad)
    config.rayworks_kind = KIND
    config.mask_token_id = mask_id
    if init_std is not None:
        config.initializer_range = init_std
    return LlamaForCausalLM(config)


def load_diffusion_lm(path: str | Path) -> PreTrainedModel:
    """A saved masked diffusion LM (safetensors only); a causal LM folder is an error."""
    model_dir = resolve_model_dir(path)
    model = LlamaForCausalLM.from_pretrained(str(model_dir), use_safetensors=True)
    if getattr(model.config, "rayworks_kind", None) != KIND:
        raise CheckpointNotFoundError(
            f"{str(model_dir)!r} is not a masked diffusion LM: its config.json has "
            f"rayworks_kind={getattr(model.config, 'rayworks_kind', None)!r}, expected {KIND!r}."
        )
    return model.eval()


def mask_token_id(model: PreTrainedModel) -> int:
    return int(model.config.mask_token_id)


def diffusion_logits(
    model: PreTrainedModel,
    ids: Tensor,
    positions: Tensor | None = None,
    *,
    cache: KVCache | None = None,
    key_keep: Tensor | None = None,
    logits_rows: slice = slice(None),
) -> Tensor:
    """Bidirectional logits [B, rows, V] of `ids` [B, T] at original `positions` [B, T].

    Thin wrapper of `kv_forward.forward(mask="none")`: every query sees every key that
    `key_keep` ([B, cache + T] bool) keeps, cached or new.
    """
    return forward(
        model,
        ids,
        positions,
        cache=cache,
        mask="none",
        key_keep=key_keep,
        logits_rows=logits_rows,
    )


def sample_t(batch: int, generator: torch.Generator, stratified: bool = False) -> Tensor:
    """t ~ U(0, 1) per sample [B]; `stratified` (reconstructed, MDLM's low-discrepancy
    sampler) draws one t in each of B equal strata, shuffled: same marginal, less variance."""
    u = torch.rand(batch, generator=generator)
    if not stratified:
        return u
    return ((torch.arange(batch) + u) / batch)[torch.randperm(batch, generator=generator)]


def mask_response(
    x0: Tensor,
    response: Tensor,
    mask_id: int,
    generator: torch.Generator,
    eps: float = 1e-3,
    t: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The forward process on response tokens: (x_t [B, T], masked [B, T] bool, p_mask [B]).

    `response` [B, T] bool marks the response; prompt tokens are never masked. `t` [B]
    defaults to plain U(0, 1) draws.
    """
    t = sample_t(x0.shape[0], generator) if t is None else t
    p_mask = (1 - eps) * t + eps
    draw = torch.rand(x0.shape, generator=generator, device=x0.device)
    masked = response & (draw < p_mask[:, None])
    return torch.where(masked, torch.full_like(x0, mask_id), x0), masked, p_mask


def sft_loss_from_logits(
    logits: Tensor, x0: Tensor, masked: Tensor, p_mask: Tensor, resp_len: Tensor
) -> Tensor:
    """LLaDA SFT loss: mean over b of sum_{masked i} CE_bi / (p_mask_b * L_resp_b).

    logits [B, T, V], x0 [B, T], masked [B, T] bool, p_mask [B], resp_len [B].
    """
    ce = F.cross_entropy(logits.flatten(0, 1).float(), x0.flatten(), reduction="none")
    ce = ce.view(x0.shape) * masked
    return (ce.sum(1) / (p_mask * resp_len.clamp(min=1))).mean()


def diffusion_sft_loss(
    model: PreTrainedModel,
    x0: Tensor,
    response: Tensor,
    generator: torch.Generator,
    stratified: bool = False,
) -> Tensor:
    """One SFT loss draw for clean sequences `x0` [B, T] with response mask [B, T]."""
    t = sample_t(x0.shape[0], generator, stratified)
    xt, masked, p_mask = mask_response(x0, response, mask_token_id(model), generator, t=t)
    logits = diffusion_logits(model, xt)
    return sft_loss_from_logits(logits, x0, masked, p_mask, response.sum(1).float())
