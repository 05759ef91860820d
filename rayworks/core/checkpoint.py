"""Pickle-free checkpoints: nested state trees as one safetensors file plus one JSON file.

`save_tree(dir, name, tree)` writes every tensor leaf of `tree` (dicts, lists, tuples,
numbers, strings, tensors, numpy arrays) into `name.safetensors` and the structure into
`name.json`; `load_tree` rebuilds it. Dict keys keep their type (optimizer state is keyed
by int), tuples stay tuples. Anything else is a `TypeError` at save time, so a checkpoint
never needs `pickle` to load. Checkpoint folders are written under a temporary name and
renamed into place, so a killed run never leaves a half-written `step_*` folder behind.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

STEP_PREFIX = "step_"


def _encode(obj: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    if isinstance(obj, torch.Tensor):
        name = f"t{len(tensors)}"  # numbered, so keys containing dots never collide
        tensors[name] = obj.detach().cpu().contiguous()
        return {"__tensor__": name}
    if isinstance(obj, np.ndarray):
        name = f"t{len(tensors)}"
        tensors[name] = torch.from_numpy(np.ascontiguousarray(obj)).reshape(obj.shape)
        return {"__ndarray__": name}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and "__tensor__" not in obj:
            return {"__dict__": {k: _encode(v, tensors, f"{path}.{k}") for k, v in obj.items()}}
        return {
            "__items__": [
                [_encode(k, tensors, f"{path}.k{i}"), _encode(v, tensors, f"{path}.{i}")]
                for i, (k, v) in enumerate(obj.items())
            ]
        }
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, tensors, f"{path}.{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, tensors, f"{path}.{i}") for i, v in enumerate(obj)]
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    raise TypeError(f"cannot store {type(obj).__name__} at {path!r} without pickle")


def _decode(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, list):
        return [_decode(v, tensors) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__tensor__" in obj:
        return tensors[obj["__tensor__"]]
    if "__ndarray__" in obj:
        return tensors[obj["__ndarray__"]].numpy()
    if "__dict__" in obj:
        return {k: _decode(v, tensors) for k, v in obj["__dict__"].items()}
    if "__items__" in obj:
        return {_decode(k, tensors): _decode(v, tensors) for k, v in obj["__items__"]}
    if "__tuple__" in obj:
        return tuple(_decode(v, tensors) for v in obj["__tuple__"])
    raise ValueError(f"unrecognised checkpoint node with keys {sorted(obj)}")


def save_tree(directory: str | Path, name: str, tree: Any) -> None:
    directory = Path(directory)
    tensors: dict[str, torch.Tensor] = {}
    structure = _encode(tree, tensors, "root")
    # safetensors refuses tensors that share storage; clone those that do.
    seen: set[int] = set()
    for key, tensor in tensors.items():
        ptr = tensor.untyped_storage().data_ptr() if tensor.numel() else -1
        if ptr in seen:
            tensors[key] = tensor.clone()
        seen.add(ptr)
    save_file(tensors, str(directory / f"{name}.safetensors"))
    (directory / f"{name}.json").write_text(json.dumps(structure))


def load_tree(directory: str | Path, name: str) -> Any:
    directory = Path(directory)
    tensors = load_file(str(directory / f"{name}.safetensors"))
    structure = json.loads((directory / f"{name}.json").read_text())
    return _decode(structure, tensors)


def rng_state() -> dict[str, Any]:
    """Every RNG a training loop draws from (torch CPU, numpy, python)."""
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": (np_state[0], np_state[1], int(np_state[2]), int(np_state[3]), float(np_state[4])),
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"{STEP_PREFIX}{step:08d}"


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoint folders under `root`, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    done = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(STEP_PREFIX)]
    return sorted(p for p in done if p.name[len(STEP_PREFIX) :].isdigit())


def latest_checkpoint(root: str | Path) -> Path | None:
    found = list_checkpoints(root)
    return found[-1] if found else None


@contextmanager
def writing(final: Path) -> Iterator[Path]:
    """Yield a temporary folder that becomes `final` only once the block succeeds."""
    tmp = final.with_name(f".tmp-{final.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)


def prune(root: str | Path, keep: int) -> None:
    """Delete all but the newest `keep` checkpoints (keep <= 0 keeps all)."""
    if keep <= 0:
        return
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
