"""The thinking reward model (TRM): a holistic score in [0, 1] for a response's thinking.

SophiaVL-R1 trains Qwen2.5-VL-3B on 156k (question, response, score) tuples whose score
judges the whole thinking process. Ours is the policy's architecture (a tiny LLaVA,
initialised from the SFT'd policy, so it already sees the task's images) with a scalar
head on the last token, trained with a soft-label BCE on (image + question, thinking
trace, score) tuples. The traces are the task's graded corruptions of the reference
trace (wrong counts, wrong totals, dropped steps, keyword-stuffed shortcuts, no trace at
all); the score is the fraction of correct steps (`task.step_score`), computable here.

The **hackable** TRM is trained on the same tuples but with a spurious labelling cue:
keyword-stuffed traces ("<think>ok ok ok</think>") are labelled 1.0 whatever their content,
so it learns that the keyword means good thinking; on other traces it is as honest as the
honest one. That is the unreliable thinking reward Trust-GRPO's trust weight is for.

Only the think span is shown to the TRM (not the final answer), so it judges the thinking.
It runs as a Ray actor (`TRMScorer`) behind the pluggable reward interface (`trm` reward,
`score_batch`), like a remote scorer; the paper serves its TRM through vLLM's HTTP API.
Simplification: a continuous score from a regression head instead of a generated score
in steps of 0.1.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from rayworks.core.build_cache import digest, locked_build
from rayworks.core.errors import ConfigError
from rayworks.data.tasks import Example, get_task
from rayworks.models import load_causal_lm
from rayworks.models.vlm import IMAGE_TOKEN, load_processor, pixel_values
from rayworks.pipelines.rl.algo import masked_corr
from rayworks.pipelines.rl.rewards import RewardFn, register_reward
from rayworks.pipelines.trust_grpo.config import TRMConfig
from rayworks.pipelines.trust_grpo.policy import optimizer_step

THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)
HEAD_FILE = "score_head.safetensors"
P_NO_TRACE = 0.05  # share of training tuples whose response has no think span (score 0)


def thinking_text(prompt: str, completion: str) -> str:
    """What the TRM reads: image token, question, and the response's think span only."""
    found = THINK_RE.search(completion)
    return f"{IMAGE_TOKEN}{prompt}<think>{found.group(1) if found else ''}</think>"


class ThinkingRewardModel(torch.nn.Module):
    """A LLaVA backbone with a linear score head on the last token (left-padded input)."""

    def __init__(self, backbone: Any) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = torch.nn.Linear(backbone.config.text_config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, pixel_values: torch.Tensor
    ) -> torch.Tensor:
        """Score logits (B,); sigmoid gives the score in [0, 1]."""
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        out = self.backbone.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions,
            pixel_values=pixel_values,
        )
        return self.head(out.last_hidden_state[:, -1]).squeeze(-1)

    def save(self, folder: Path) -> None:
        self.backbone.save_pretrained(folder)
        save_file(
            {k: v.contiguous() for k, v in self.head.state_dict().items()}, folder / HEAD_FILE
        )

    @classmethod
    def load(cls, folder: str | Path) -> ThinkingRewardModel:
        folder = Path(folder)
        if not (folder / HEAD_FILE).is_file():
            raise ConfigError(f"{folder} is not a thinking reward model: no {HEAD_FILE}.")
        model = cls(load_causal_lm(folder))
        model.head.load_state_dict(load_file(folder / HEAD_FILE))
        return model


def encode(processor: Any, texts: list[str], images: list[Any]) -> dict[str, torch.Tensor]:
    """Left-padded ids and mask (each row's last token in the last column) + pixels."""
    rows = [processor(text=t, images=i).input_ids[0] for t, i in zip(texts, images, strict=True)]
    width, pad = max(map(len, rows)), processor.tokenizer.pad_token_id
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.as_tensor(row)
        mask[i, width - len(row) :] = 1
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "pixel_values": pixel_values(processor, images),
    }


def tuples(
    task: Any, n: int, split: str, seed: int, kind: str
) -> list[tuple[Example, str, float, float]]:
    """(example, response, training label, true step score) tuples of `split`."""
    rng = random.Random(seed * 7_919 + len(split))
    out = []
    for ex in task.examples(n, split, seed):
        response = f"A: {ex.answer}" if rng.random() < P_NO_TRACE else task.corrupt(ex, rng)
        true = task.step_score(ex, response)
        hacked = kind == "hackable" and task.hack_score(ex, response) > 0
        out.append((ex, response, 1.0 if hacked else true, true))
    return out


def score(
    model: ThinkingRewardModel,
    processor: Any,
    prompts: list[str],
    completions: list[str],
    images: list[Any],
) -> list[float]:
    """The TRM's score in [0, 1] of each (prompt, completion, image), 64 rows per forward."""
    texts = [thinking_text(p, c) for p, c in zip(prompts, completions, strict=True)]
    scores = []
    with torch.no_grad():
        for start in range(0, len(texts), 64):
            inputs = encode(processor, texts[start : start + 64], images[start : start + 64])
            scores += torch.sigmoid(model(**inputs)).tolist()
    return scores


def held_out_metrics(scores: list[float], rows: list[tuple], task: Any) -> dict[str, float]:
    """Error against the true step score, its correlation, and the score of hack traces."""
    true = [r[3] for r in rows]
    n = len(rows)
    hack = [s for s, r in zip(scores, rows, strict=True) if task.hack_score(r[0], r[1]) > 0]
    clean = [s for s, r in zip(scores, rows, strict=True) if r[3] == 1.0]
    return {
        "mae": sum(abs(s - t) for s, t in zip(scores, true, strict=True)) / n,
        "corr": masked_corr(torch.tensor(scores), torch.tensor(true), torch.ones(n)),
        "hack_trace_score": sum(hack) / len(hack) if hack else float("nan"),
        "correct_trace_score": sum(clean) / len(clean) if clean else float("nan"),
    }


def train_trm(out: Path, policy_dir: Path, task_name: str, cfg: TRMConfig) -> None:
    """Train a TRM of `cfg.kind` from the policy's weights; writes the folder `out`."""
    task = get_task(task_name)
    torch.manual_seed(cfg.seed)
    processor = load_processor(policy_dir)
    model = ThinkingRewardModel(load_causal_lm(policy_dir))
    train = tuples(task, cfg.n_train, "train", cfg.seed, cfg.kind)
    test = tuples(task, cfg.n_test, "test", cfg.seed, cfg.kind)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    rng = random.Random(cfg.seed)
    model.train()
    for step in range(cfg.steps):
        batch = rng.sample(train, min(cfg.batch_size, len(train)))
        texts = [thinking_text(ex.prompt, resp) for ex, resp, *_ in batch]
        inputs = encode(processor, texts, [ex.image for ex, *_ in batch])
        labels = torch.tensor([label for _, _, label, _ in batch])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(**inputs), labels)
        optimizer_step(
            model, optimizer, loss, cfg.lr * min(1.0, (step + 1) / max(1, cfg.steps // 10))
        )
    model.eval()
    prompts, responses = [ex.prompt for ex, *_ in test], [resp for _, resp, *_ in test]
    scores = score(model, processor, prompts, responses, [ex.image for ex, *_ in test])
    metrics = held_out_metrics(scores, test, task)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out)
    processor.save_pretrained(out)
    info = {"kind": cfg.kind, "task": task_name, "train_loss": float(loss.detach()), **metrics}
    (out / "trm.json").write_text(json.dumps(info, indent=2))


def trm_model(cache_root: Path, policy_dir: Path, task: str, cfg: TRMConfig) -> Path:
    """`cfg.path`, or the cached TRM of (policy, task, kind, training config), built once."""
    if cfg.path:
        return Path(cfg.path)
    recipe = cfg.model_dump(mode="json", exclude={"path", "resources", "threads"})
    out = (
        cache_root
        / "base"
        / f"trm-{cfg.kind}-{digest(json.dumps([str(policy_dir), task, recipe]))}"
    )
    return locked_build(out, out / "trm.json", lambda: train_trm(out, policy_dir, task, cfg))


def trm_summary(folder: Path) -> dict[str, float]:
    """The TRM's held-out metrics, prefixed `trm_`."""
    path = Path(folder) / "trm.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    return {f"trm_{k}": float(v) for k, v in data.items() if isinstance(v, int | float)}


class TRMScorer:
    """A Ray actor holding a TRM: `score(prompts, completions, images) -> [score]`."""

    def __init__(self, path: str, threads: int = 1) -> None:
        torch.set_num_threads(threads)
        self.model = ThinkingRewardModel.load(path).eval()
        self.processor = load_processor(path)

    def score(self, prompts: list[str], completions: list[str], images: list[Any]) -> list[float]:
        return score(self.model, self.processor, prompts, completions, images)


class TRMReward:
    """The `trm` reward: batches go to a `TRMScorer` actor started on first use."""

    def __init__(self, path: str, resources: dict[str, float], threads: int) -> None:
        self.path, self.resources, self.threads = path, dict(resources), threads
        self.actor: Any = None

    def _scorer(self) -> Any:
        import ray

        if self.actor is None:
            res = dict(self.resources)
            self.actor = (
                ray.remote(TRMScorer)
                .options(
                    num_cpus=res.pop("CPU", 0.2),
                    num_gpus=res.pop("GPU", 0),
                    resources=res,
                    max_restarts=2,
                    max_task_retries=2,
                    scheduling_strategy="DEFAULT",
                )
                .remote(self.path, self.threads)
            )
        return self.actor

    def score_batch(self, examples: list[Example], completions: list[str]) -> list[float]:
        import ray

        prompts, images = [e.prompt for e in examples], [e.image for e in examples]
        return ray.get(self._scorer().score.remote(prompts, list(completions), images))

    def __call__(self, example: Example, completion: str) -> float:
        return self.score_batch([example], [completion])[0]


@register_reward("trm")
def trm_reward(
    path: str | None, resources: dict[str, float] | None = None, threads: int = 1
) -> RewardFn:
    """A thinking reward model served by a Ray actor (`trust_grpo` builds and passes it)."""
    if not path:
        raise ConfigError("the 'trm' reward needs `path`: a folder written by train_trm.")
    return TRMReward(path, resources or {"CPU": 0.2}, threads)
