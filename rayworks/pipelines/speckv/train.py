"""Train the target, the draft and the weak draft once, cached by config hash.

Both models are tiny HF `LlamaForCausalLM`s trained from scratch on the synthetic task mix
with next-token cross-entropy on the answer tokens only (reconstructed: the context tokens
are random, so a loss on them teaches nothing but slows training on 2 CPUs), and each
training context carries up to `n_queries` queries (see `tasks.training_tokens`). The weak draft
is the draft's checkpoint at `weak_fraction` of its steps (methods file: 20%). Everything
lands in `cache_root/speckv_models/<hash>/{target,draft,draft_weak}` as HF folders
(safetensors + the task tokenizer), so every bench arm shares the same models and
`load_causal_lm` / `load_tokenizer` (and the completion endpoint) load them.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from pydantic import Field
from transformers import LlamaForCausalLM

from rayworks.core.build_cache import digest, locked_build
from rayworks.core.config import Config
from rayworks.models import DecoderSpec
from rayworks.models.decoder import llama_config, load_causal_lm
from rayworks.pipelines.speckv.tasks import (
    FORMAT,
    Example,
    TaskConfig,
    encode,
    make_examples,
    make_tokenizer,
    training_tokens,
)

LogFn = Callable[[int, dict[str, float]], None]


class TrainConfig(Config):
    """Optimisation of one model (AdamW, linear warm-up then cosine decay)."""

    steps: int = Field(1500, ge=1, description="optimizer steps")
    batch_size: int = Field(16, ge=1, description="examples per step (methods file: 16)")
    lr: float = Field(3e-3, gt=0, description="peak learning rate")
    warmup: int = Field(50, ge=0, description="linear warm-up steps")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay")
    log_every: int = Field(50, ge=1, description="steps between loss records")
    init_std: float | None = Field(
        None, gt=0, description="std of the initial weights (None: d_model^-1/2; HF uses 0.02)"
    )
    n_queries: int = Field(
        8,
        ge=1,
        description="queries per training context (reconstructed: multi-query "
        "supervision; evaluation always asks one)",
    )
    warm_context: int | None = Field(
        None,
        ge=8,
        description="context length of the first `warm_steps` steps (reconstructed "
        "curriculum: retrieval forms on short contexts within a CPU budget, then transfers)",
    )
    warm_steps: int = Field(0, ge=0, description="steps at `warm_context`")
    min_context_frac: float = Field(
        0.1,
        gt=0,
        le=1,
        description="each batch's context length is drawn from "
        "[frac, 1] x tasks.context_len (reconstructed: short contexts first teach retrieval)",
    )


def batch_tensors(
    tokenizer, examples: list[Example], tasks: TaskConfig, n_queries: int, rng: random.Random
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids [B, T], attention mask [B, T], labels [B, T] with -100 outside the answers)."""
    rows = [training_tokens(e, tasks, n_queries, rng) for e in examples]
    width = max(len(t) for t, _ in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (tokens, answer) in enumerate(rows):
        seq = torch.tensor(encode(tokenizer, tokens))
        ids[i, : len(seq)] = seq
        labels[i, : len(seq)] = seq.masked_fill(~torch.tensor(answer), -100)
        mask[i, : len(seq)] = 1
    return ids, mask, labels


def answer_loss(model, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


def init_decoder(spec: DecoderSpec, tokenizer, init_std: float | None) -> LlamaForCausalLM:
    """A fresh decoder of `spec` with weights drawn at std `init_std` (None: d_model^-1/2).

    Reconstructed: with HF Llama's fixed std 0.02 our d 64-96 models never left the "any
    value token" plateau within the CPU budget (the context moved the logits by < 0.01
    after 400 steps); at std d^-1/2 a 32-token probe left it after ~300 steps."""
    config = llama_config(
        spec,
        len(tokenizer),
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    config.initializer_range = init_std or spec.d_model**-0.5
    return LlamaForCausalLM(config)


def train_model(
    spec: DecoderSpec,
    tasks: TaskConfig,
    train: TrainConfig,
    seed: int,
    out: Path,
    snapshot: tuple[int, Path] | None = None,
    log: LogFn | None = None,
) -> list[dict[str, float]]:
    """Train a model of `spec` into HF folder `out`; `snapshot` = (step, folder) saves an
    early checkpoint too (the weak draft). Returns the loss records."""
    tokenizer = make_tokenizer()
    torch.manual_seed(seed)
    model = init_decoder(spec, tokenizer, train.init_std)
    opt = torch.optim.AdamW(model.parameters(), lr=train.lr, weight_decay=train.weight_decay)

    def lr_at(step: int) -> float:
        if step < train.warmup:
            return (step + 1) / train.warmup
        frac = (step - train.warmup) / max(1, train.steps - train.warmup)
        return 0.05 + 0.95 * 0.5 * (1 + torch.cos(torch.tensor(frac * torch.pi)).item())

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    rng = random.Random(seed)
    records, running, start = [], 0.0, time.perf_counter()
    model.train()
    for step in range(train.steps):
        length = rng.randint(round(train.min_context_frac * tasks.context_len), tasks.context_len)
        if train.warm_context is not None and step < train.warm_steps:
            length = train.warm_context
        sized = tasks.model_copy(update={"context_len": max(32, length)})
        batch = make_examples(sized, train.batch_size, rng.randrange(2**31))
        loss = answer_loss(model, *batch_tensors(tokenizer, batch, tasks, train.n_queries, rng))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        running += loss.item()
        if (step + 1) % train.log_every == 0 or step + 1 == train.steps:
            n = (step % train.log_every) + 1
            rec = {"step": step + 1, "loss": running / n, "seconds": time.perf_counter() - start}
            records.append(rec)
            running = 0.0
            if log is not None:
                log(step + 1, rec)
        if snapshot is not None and step + 1 == snapshot[0]:
            _save(model, tokenizer, snapshot[1])
    _save(model, tokenizer, out)
    (out / "train_log.json").write_text(json.dumps(records))
    return records


def _save(model, tokenizer, folder: Path) -> None:
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def cached_models(
    target: DecoderSpec,
    draft: DecoderSpec,
    tasks: TaskConfig,
    target_train: TrainConfig,
    draft_train: TrainConfig,
    weak_fraction: float,
    seed: int,
    cache_root: Path,
    log: LogFn | None = None,
) -> dict[str, Path]:
    """Folders of `target`, `draft` and `draft_weak`, trained once per config hash."""
    blob = json.dumps(
        [x.model_dump(mode="json") for x in (target, draft, tasks, target_train, draft_train)]
        + [weak_fraction, seed, FORMAT],
        sort_keys=True,
    )
    root = cache_root / "speckv_models" / digest(blob)
    dirs = {name: root / name for name in ("target", "draft", "draft_weak")}

    def build() -> None:
        n = target_train.steps

        def log_draft(s: int, r: dict[str, float]) -> None:
            if log is not None:
                log(n + s, {"draft_" + k: v for k, v in r.items() if k != "step"})

        def log_target(s: int, r: dict[str, float]) -> None:
            if log is not None:
                log(s, {"target_" + k: v for k, v in r.items() if k != "step"})

        train_model(target, tasks, target_train, seed, dirs["target"], log=log_target)
        weak = (max(1, round(weak_fraction * draft_train.steps)), dirs["draft_weak"])
        train_model(draft, tasks, draft_train, seed + 1, dirs["draft"], weak, log_draft)
        (root / "done").write_text(blob)

    locked_build(root, root / "done", build)
    return dirs


def load_models(dirs: dict[str, Path]) -> dict[str, torch.nn.Module]:
    """The cached models in eval mode."""
    return {name: load_causal_lm(path).eval() for name, path in dirs.items()}
