"""Pickle-free checkpoints: exact round trips, optimizer state, RNG state, atomic folders."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from rayworks.core.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_tree,
    prune,
    rng_state,
    save_tree,
    set_rng_state,
    step_dir,
    writing,
)

PICKLE_MAGIC = b"\x80"  # every pickle protocol >= 2 starts with PROTO (0x80)


def round_trip(tmp_path: Path, tree: object, name: str = "state") -> object:
    save_tree(tmp_path, name, tree)
    return load_tree(tmp_path, name)


def assert_same(a: object, b: object) -> None:
    """Exact structural equality, including container types and tensor dtypes."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


# ------------------------------------------------------------------ trees


def test_nested_tree_round_trips_exactly(tmp_path: Path) -> None:
    tree = {
        "weights": {"w": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int64)},
        "half": torch.randn(2, 2).to(torch.bfloat16),
        "mask": torch.tensor([True, False]),
        "scalar_tensor": torch.tensor(1.5),
        "array": np.arange(6, dtype=np.float32).reshape(2, 3),
        "int_array": np.array([1, 2, 3], dtype=np.int16),
        "by_int": {0: "zero", 7: torch.ones(2), -1: None},
        "mixed_keys": {1: "one", "1": "string one"},
        "tuple": (1, "two", 3.0, (None, True)),
        "list": [1, [2, torch.zeros(1)], {"k": False}],
        "none": None,
        "flag": True,
        "off": False,
        "float": 0.1,
        "int": 12345678901234,
        "str": "héllo\nworld",
        "empty_dict": {},
        "empty_list": [],
        "empty_tuple": (),
    }
    loaded = round_trip(tmp_path, tree)
    assert_same(tree, loaded)


def test_root_may_be_a_tensor_or_a_list(tmp_path: Path) -> None:
    tensor = torch.randn(4)
    assert_same(round_trip(tmp_path, tensor, "t"), tensor)
    items = [torch.ones(1), 2, "x"]
    assert_same(round_trip(tmp_path, items, "l"), items)


def test_numpy_scalars_become_python_numbers(tmp_path: Path) -> None:
    loaded = round_trip(tmp_path, {"f": np.float32(0.5), "i": np.int64(3)})
    assert loaded == {"f": 0.5, "i": 3}
    assert type(loaded["i"]) is int


def test_dict_with_reserved_key_names_round_trips(tmp_path: Path) -> None:
    tree = {"__tensor__": "not a path", "__dict__": 1, "__tuple__": [1], "__items__": None}
    assert_same(round_trip(tmp_path, tree), tree)


def test_tensors_on_grad_are_detached(tmp_path: Path) -> None:
    param = torch.nn.Parameter(torch.randn(3))
    loaded = round_trip(tmp_path, {"p": param})
    assert not loaded["p"].requires_grad
    assert torch.equal(loaded["p"], param.detach())


def test_files_are_json_and_safetensors_never_pickle(tmp_path: Path) -> None:
    save_tree(tmp_path, "state", {"a": torch.ones(2), 0: np.zeros(3), "t": (1, 2)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.safetensors"]
    for path in tmp_path.iterdir():
        assert not path.read_bytes().startswith(PICKLE_MAGIC), path
    structure = json.loads((tmp_path / "state.json").read_text())
    assert isinstance(structure, dict)
    tensors = load_file(str(tmp_path / "state.safetensors"))
    assert len(tensors) == 2
    assert all(isinstance(t, torch.Tensor) for t in tensors.values())


def test_shared_storage_saves_and_loads_as_independent_copies(tmp_path: Path) -> None:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    embedding = torch.nn.Embedding(5, 4)
    head = torch.nn.Linear(4, 5, bias=False)
    head.weight = embedding.weight  # tied weights: the same Parameter twice
    tree = {
        "base": base,
        "row": base[1],  # contiguous view of the same storage
        "col": base[:, 2],  # strided view
        "again": base,  # the very same tensor twice
        "embed": embedding.weight,
        "head": head.weight,
        "np": np.ones(3),
    }
    tree["np_again"] = tree["np"]
    loaded = round_trip(tmp_path, tree)
    assert torch.equal(loaded["row"], base[1])
    assert torch.equal(loaded["col"], base[:, 2])
    assert torch.equal(loaded["again"], base)
    assert torch.equal(loaded["embed"], loaded["head"])
    np.testing.assert_array_equal(loaded["np_again"], np.ones(3))
    # the original tensors were not modified by the clone-on-share
    assert torch.equal(base, torch.arange(12, dtype=torch.float32).reshape(3, 4))


def test_model_state_dict_with_tied_weights_round_trips(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.Linear(4, 7))
    model[1].weight = model[0].weight
    state = model.state_dict()
    loaded = round_trip(tmp_path, {"model": state})
    fresh = torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.Linear(4, 7))
    fresh.load_state_dict(loaded["model"])
    for key, value in state.items():
        assert torch.equal(fresh.state_dict()[key], value), key


@pytest.mark.parametrize(
    ("tree", "path"),
    [
        ({"a": {"b": {1, 2}}}, "root.a.b"),
        ({"opt": [1, object()]}, "root.opt.1"),
        ({"x": (1, b"bytes")}, "root.x.1"),
        ({"fn": len}, "root.fn"),
        ({0: {"c": 1 + 2j}}, "root.0.c"),
    ],
)
def test_unsupported_leaf_raises_type_error_naming_the_path(
    tmp_path: Path, tree: object, path: str
) -> None:
    with pytest.raises(TypeError) as err:
        save_tree(tmp_path, "bad", tree)
    message = str(err.value)
    assert repr(path) in message
    assert "without pickle" in message


def test_zero_dim_numpy_array_keeps_its_shape(tmp_path: Path) -> None:
    loaded = round_trip(tmp_path, {"a": np.array(3.0)})
    assert loaded["a"].shape == ()


def test_dotted_keys_do_not_collide_with_nested_keys(tmp_path: Path) -> None:
    tree = {"a.b": torch.ones(2), "a": {"b": torch.zeros(2)}}
    loaded = round_trip(tmp_path, tree)
    assert torch.equal(loaded["a.b"], torch.ones(2))
    assert torch.equal(loaded["a"]["b"], torch.zeros(2))


# ------------------------------------------------------------------ optimizer state


def make_model_and_opt(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    return model, opt


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    x = torch.randn(16, 4, generator=gen)
    y = torch.randn(16, 2, generator=gen)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def test_adamw_state_round_trips_and_resumes_identically(tmp_path: Path) -> None:
    model, opt = make_model_and_opt(0)
    for step in range(3):
        train_step(model, opt, step)
    save_tree(tmp_path, "ckpt", {"model": model.state_dict(), "optim": opt.state_dict()})
    loaded = load_tree(tmp_path, "ckpt")

    # int keys of `state` survive (AdamW indexes parameters by position)
    assert sorted(loaded["optim"]["state"]) == sorted(opt.state_dict()["state"])
    assert all(isinstance(k, int) for k in loaded["optim"]["state"])
    assert_same(loaded["optim"]["param_groups"], opt.state_dict()["param_groups"])

    fresh_model, fresh_opt = make_model_and_opt(seed=1)  # different init on purpose
    fresh_model.load_state_dict(loaded["model"])
    fresh_opt.load_state_dict(loaded["optim"])

    train_step(model, opt, 3)
    train_step(fresh_model, fresh_opt, 3)
    for original, resumed in zip(model.parameters(), fresh_model.parameters(), strict=True):
        assert torch.equal(original, resumed)


# ------------------------------------------------------------------ RNG state


def draw() -> tuple[list[float], list[float], list[float]]:
    return (
        torch.rand(3).tolist(),
        np.random.rand(3).tolist(),
        [random.random() for _ in range(3)],
    )


def test_rng_state_round_trips_through_a_checkpoint(tmp_path: Path) -> None:
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    np.random.randn()  # leave a cached gaussian in numpy's state
    random.gauss(0, 1)
    save_tree(tmp_path, "rng", rng_state())
    expected = draw()
    draw()  # move every stream on
    set_rng_state(load_tree(tmp_path, "rng"))
    assert draw() == expected


def test_rng_state_in_memory(tmp_path: Path) -> None:
    state = rng_state()
    expected = draw()
    set_rng_state(state)
    assert draw() == expected


# ------------------------------------------------------------------ folders


def test_writing_renames_into_place_on_success(tmp_path: Path) -> None:
    final = step_dir(tmp_path, 5)
    with writing(final) as tmp:
        assert tmp != final
        assert tmp.parent == final.parent
        assert not final.exists()
        save_tree(tmp, "state", {"x": torch.ones(1)})
    assert final.is_dir()
    assert not tmp.exists()
    assert torch.equal(load_tree(final, "state")["x"], torch.ones(1))
    assert [p.name for p in tmp_path.iterdir()] == [final.name]


def test_writing_replaces_an_existing_folder(tmp_path: Path) -> None:
    final = step_dir(tmp_path, 5)
    final.mkdir()
    (final / "stale.txt").write_text("old")
    with writing(final) as tmp:
        (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"]


def test_writing_leaves_nothing_on_exception(tmp_path: Path) -> None:
    final = step_dir(tmp_path, 7)
    with pytest.raises(RuntimeError, match="boom"), writing(final) as tmp:
        (tmp / "half.safetensors").write_bytes(b"partial")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_writing_cleans_up_on_keyboard_interrupt(tmp_path: Path) -> None:
    final = step_dir(tmp_path, 8)
    with pytest.raises(KeyboardInterrupt), writing(final):
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_list_checkpoints_ignores_temporary_and_foreign_folders(tmp_path: Path) -> None:
    for step in (30, 2, 100):
        step_dir(tmp_path, step).mkdir()
    (tmp_path / f".tmp-{step_dir(tmp_path, 200).name}-123").mkdir()
    (tmp_path / "step_latest").mkdir()
    (tmp_path / "step_").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "step_00000999").write_text("a file, not a folder")
    found = list_checkpoints(tmp_path)
    assert found == [step_dir(tmp_path, s) for s in (2, 30, 100)]
    assert latest_checkpoint(tmp_path) == step_dir(tmp_path, 100)


def test_list_checkpoints_of_missing_root_is_empty(tmp_path: Path) -> None:
    assert list_checkpoints(tmp_path / "absent") == []
    assert latest_checkpoint(tmp_path / "absent") is None


def test_step_dir_is_zero_padded_so_names_sort_by_step(tmp_path: Path) -> None:
    assert step_dir(tmp_path, 42).name == "step_00000042"
    assert step_dir("runs/x", 1) == Path("runs/x/step_00000001")


@pytest.mark.parametrize(
    ("keep", "left"),
    [(2, [40, 50]), (1, [50]), (10, [10, 20, 30, 40, 50]), (0, [10, 20, 30, 40, 50])],
)
def test_prune_keeps_the_newest(tmp_path: Path, keep: int, left: list[int]) -> None:
    for step in (50, 10, 40, 20, 30):
        step_dir(tmp_path, step).mkdir()
    tmp = tmp_path / ".tmp-step_00000060-1"
    tmp.mkdir()
    prune(tmp_path, keep)
    assert list_checkpoints(tmp_path) == [step_dir(tmp_path, s) for s in left]
    assert tmp.is_dir()  # an in-progress write is not pruned
