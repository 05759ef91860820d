"""Critic actors: each holds one value model and its optimizer, and trains on its own rows.

PPO runs one; AsyPPO runs M of them in parallel, each on its disjoint share of every
batch (the split is computed by the method, `algo.split_responses`). A critic:
- `values(batch)`: V(s_t) at each response token's state, (B, T), no gradient;
- `update(batch, returns, rows, step)`: `epochs` x `minibatches` steps of (V - R)^2 / 2
  on `rows`, then writes its state to its own folder;
- `save(folder)` / `restore(folder)`: its part of the learner's checkpoint.

Fault tolerance: the actor is created with `max_restarts` and `max_task_retries`, so when
it dies Ray restarts it and re-sends the call it was running. On restart it reloads the
state it wrote after its last completed update; `update` is idempotent per step (a step
it already applied returns the recorded stats), so a retried call never trains twice.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

from rayworks.core import checkpoint as ckpt
from rayworks.models.value import ValueModel
from rayworks.pipelines.rl.algo import masked_mean, value_loss
from rayworks.pipelines.rl.batch import RolloutBatch
from rayworks.pipelines.rl.config import CriticConfig

NAMESPACE = "rayworks"


class Critic:
    def __init__(
        self, index: int, backbone: str, state_root: str, cfg: dict[str, Any], seed: int
    ) -> None:
        import ray

        self.cfg = CriticConfig.model_validate(cfg)
        torch.set_num_threads(self.cfg.threads)
        self.index = index
        self.state_dir = Path(state_root) / f"critic_{index}"
        self.model = ValueModel.from_pretrained(backbone)
        # A distinct small random head per critic (as OpenRLHF inits value heads): with
        # identical zero heads every critic would start with sigma = 0 on every token.
        gen = torch.Generator().manual_seed(seed * 1000 + index)
        hidden = self.model.head.in_features
        self.model.head.weight.data = torch.randn(1, hidden, generator=gen) / (hidden + 1)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.cfg.lr)
        self.gen = torch.Generator().manual_seed(seed * 1000 + 500 + index)
        self.step, self.last_stats, self.restarts = 0, {}, 0
        with warnings.catch_warnings():  # Ray 2.60 warns about its own internal actor_id use
            warnings.simplefilter("ignore", DeprecationWarning)
            reconstructed = ray.get_runtime_context().was_current_actor_reconstructed
        if reconstructed:
            self.restarts = self._read_restarts() + 1
            if (self.state_dir / "state.json").is_file():
                self._load(self.state_dir)
            self._write_restarts()

    # ---------------------------------------------------------------- compute
    @torch.no_grad()
    def values(self, batch: RolloutBatch) -> torch.Tensor:
        self.model.eval()
        out = self.model(batch.input_ids, batch.attention_mask, batch.position_ids)
        return batch.response_slice(out) * batch.response_mask

    def update(
        self,
        batch: RolloutBatch,
        returns: torch.Tensor,
        rows: list[int],
        step: int,
        old_values: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """Regress V on `returns` over `rows`; `step` makes a retried call a no-op."""
        if step <= self.step:
            return self.last_stats
        self.model.train()
        rows_t = torch.as_tensor(rows, dtype=torch.long)
        losses, errs = [], []
        for _ in range(self.cfg.epochs):
            order = rows_t[torch.randperm(len(rows_t), generator=self.gen)]
            for chunk in order.chunk(self.cfg.minibatches):
                sub = batch.rows(chunk)
                out = self.model(sub.input_ids, sub.attention_mask, sub.position_ids)
                v = sub.response_slice(out)
                old = None if old_values is None else old_values[chunk]
                loss = value_loss(v, returns[chunk], sub.response_mask, old, self.cfg.value_clip)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                self.optimizer.step()
                losses.append(float(loss.detach()))
                errs.append(
                    float(masked_mean((v.detach() - returns[chunk]).abs(), sub.response_mask))
                )
        self.step = step
        self.last_stats = {
            "critic_loss": sum(losses) / len(losses),
            "critic_abs_err": sum(errs) / len(errs),
            "critic_rows": float(len(rows)),
        }
        self._save(self.state_dir)
        return self.last_stats

    # ---------------------------------------------------------------- state
    def save(self, folder: str) -> None:
        """Write this critic's state into a learner checkpoint `folder`."""
        self._save(Path(folder) / f"critic_{self.index}")

    def restore(self, folder: str) -> int:
        """Load this critic's state from a learner checkpoint; returns its step."""
        self._load(Path(folder) / f"critic_{self.index}")
        self._save(self.state_dir)
        return self.step

    def info(self) -> dict[str, float]:
        n = sum(p.numel() for p in self.model.parameters())
        return {"index": self.index, "step": self.step, "restarts": self.restarts, "params": n}

    def _save(self, folder: Path) -> None:
        tmp = folder.with_name(f".tmp-{folder.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.model.save_pretrained(tmp)
        ckpt.save_tree(tmp, "optimizer", self.optimizer.state_dict())
        ckpt.save_tree(tmp, "generator", {"state": self.gen.get_state()})
        state = {"step": self.step, "last_stats": self.last_stats}
        (tmp / "state.json").write_text(json.dumps(state))
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)

    def _load(self, folder: Path) -> None:
        loaded = ValueModel.from_pretrained(folder)
        self.model.load_state_dict(loaded.state_dict())
        self.optimizer.load_state_dict(ckpt.load_tree(folder, "optimizer"))
        self.gen.set_state(ckpt.load_tree(folder, "generator")["state"])
        state = json.loads((folder / "state.json").read_text())
        self.step, self.last_stats = int(state["step"]), dict(state["last_stats"])

    def _read_restarts(self) -> int:
        path = self.state_dir.parent / f"critic_{self.index}.restarts"
        return int(path.read_text()) if path.is_file() else 0

    def _write_restarts(self) -> None:
        path = self.state_dir.parent / f"critic_{self.index}.restarts"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(self.restarts))


def actor_name(run_id: str, index: int) -> str:
    """Critic actors are named (in namespace `rayworks`) so operators and tests can find them."""
    return f"critic-{run_id}-{index}"


def make_critics(
    cfg: CriticConfig, backbone: Path, state_root: Path, run_id: str, seed: int
) -> list[Any]:
    import ray

    res = dict(cfg.resources)
    options = {
        "num_cpus": res.pop("CPU", 0),
        "num_gpus": res.pop("GPU", 0),
        "resources": res,
        "max_restarts": cfg.max_restarts,
        "max_task_retries": cfg.max_restarts,
        "namespace": NAMESPACE,
        "scheduling_strategy": "DEFAULT",  # not in a Tune trial's group
    }
    actor = ray.remote(Critic)
    return [
        actor.options(name=actor_name(run_id, m), **options).remote(
            m, str(backbone), str(state_root), cfg.model_dump(mode="json"), seed
        )
        for m in range(cfg.n_critics)
    ]
