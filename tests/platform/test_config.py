"""Typed configs: layering (defaults < preset < file < --set), overrides and every error path."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayworks.core.config import (
    build_config,
    deep_merge,
    flatten,
    load_yaml_file,
    nest,
    parse_override,
    preset_names,
    to_yaml,
    validate,
)
from rayworks.core.errors import ConfigError
from rayworks.pipelines.lm.config import LMConfig
from rayworks.platform.registry import all_pipelines


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ------------------------------------------------------------------ helpers


def test_deep_merge_merges_mappings_and_replaces_other_values() -> None:
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 4}
    update = {"a": {"c": [3], "e": 5}, "d": {"x": 1}}
    merged = deep_merge(base, update)
    assert merged == {"a": {"b": 1, "c": [3], "e": 5}, "d": {"x": 1}}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 4}  # inputs untouched


def test_deep_merge_copies_so_later_edits_do_not_leak() -> None:
    update = {"a": {"list": [1]}}
    merged = deep_merge({}, update)
    merged["a"]["list"].append(2)
    assert update == {"a": {"list": [1]}}


def test_nest_and_flatten_are_inverse() -> None:
    assert nest("a.b.c", 1) == {"a": {"b": {"c": 1}}}
    assert nest("x", [1, 2]) == {"x": [1, 2]}
    data = {"a": {"b": 1, "c": {"d": "x"}}, "e": [1, 2]}
    flat = flatten(data)
    assert flat == {"a.b": 1, "a.c.d": "x", "e": [1, 2]}
    rebuilt: dict = {}
    for key, value in flat.items():
        rebuilt = deep_merge(rebuilt, nest(key, value))
    assert rebuilt == data


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("train.lr=0.5", "train.lr", 0.5),
        ("train.max_steps=12", "train.max_steps", 12),
        ("train.use_gpu=true", "train.use_gpu", True),
        ("data.packing=False", "data.packing", False),
        ("data.files=[a.txt, b.txt]", "data.files", ["a.txt", "b.txt"]),
        ("model.init_from=null", "model.init_from", None),
        ("data.task=arithmetic", "data.task", "arithmetic"),
        (" seed = 3 ", "seed", 3),
        ("a.b=", "a.b", ""),
        ("a.b=x=y", "a.b", "x=y"),
        ("a.b=[1, 2", "a.b", "[1, 2"),  # not valid YAML: kept as the raw string
    ],
)
def test_parse_override_reads_values_as_yaml(text: str, key: str, value: object) -> None:
    assert parse_override(text) == (key, value)


def test_parse_override_exponent_without_dot_is_a_string_that_pydantic_turns_into_float() -> None:
    # PyYAML (YAML 1.1) reads "3e-3" as a string; the typed field must still get 0.003.
    assert parse_override("train.lr=3e-3") == ("train.lr", "3e-3")
    cfg = build_config(LMConfig, overrides=["train.lr=3e-3"])
    assert isinstance(cfg.train.lr, float)
    assert cfg.train.lr == pytest.approx(0.003)


@pytest.mark.parametrize("text", ["train.lr", "=3", "a..b=1", ".a=1", "a.=1", "   =1", ""])
def test_parse_override_rejects_bad_syntax(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_override(text)
    message = str(err.value)
    assert repr(text) in message
    assert "KEY=VALUE" in message


def test_bad_override_syntax_fails_build_config_too() -> None:
    with pytest.raises(ConfigError, match=r"bad override 'train\.lr'"):
        build_config(LMConfig, overrides=["train.lr"])


# ------------------------------------------------------------------ layering


def test_defaults_validate_and_match_field_defaults() -> None:
    cfg = build_config(LMConfig)
    assert cfg == LMConfig()
    assert cfg.seed == 0
    assert cfg.model.d_model == 128
    assert cfg.train.lr == pytest.approx(1e-3)
    assert cfg.data.source == "task"


def test_preset_layers_over_defaults() -> None:
    smoke = build_config(LMConfig, "smoke")
    assert smoke.model.d_model == 32
    assert smoke.model.n_layer == 2
    assert smoke.train.max_steps == 30
    assert smoke.train.lr == pytest.approx(3e-3)
    # keys the preset does not name keep their defaults
    assert smoke.model.max_seq_len == LMConfig().model.max_seq_len
    assert smoke.train.weight_decay == LMConfig().train.weight_decay


def test_precedence_defaults_preset_file_set(tmp_path: Path) -> None:
    first = write(tmp_path / "a.yaml", "train:\n  max_steps: 7\n  lr: 0.01\nseed: 5\n")
    second = write(tmp_path / "b.yaml", "train:\n  lr: 0.02\n")
    cfg = build_config(
        LMConfig,
        "smoke",
        files=[first, second],
        overrides=["seed=9", "model.n_layer=3"],
    )
    assert cfg.model.d_model == 32  # preset (no later layer names it)
    assert cfg.train.max_steps == 7  # file a beats preset (30)
    assert cfg.train.lr == pytest.approx(0.02)  # file b beats file a
    assert cfg.seed == 9  # --set beats file
    assert cfg.model.n_layer == 3  # --set beats preset
    assert cfg.train.batch_size == 16  # preset untouched by files
    assert cfg.train.grad_clip == 1.0  # default


def test_later_override_wins_and_base_is_the_lowest_layer() -> None:
    cfg = build_config(
        LMConfig,
        base={"seed": 1, "train": {"max_steps": 11}},
        overrides=["seed=2", "seed=3"],
    )
    assert cfg.seed == 3
    assert cfg.train.max_steps == 11


def test_empty_yaml_file_is_an_empty_layer(tmp_path: Path) -> None:
    empty = write(tmp_path / "empty.yaml", "# nothing here\n")
    assert load_yaml_file(empty) == {}
    assert build_config(LMConfig, "smoke", files=[empty]) == build_config(LMConfig, "smoke")


def test_to_yaml_round_trips_through_a_file(tmp_path: Path) -> None:
    cfg = build_config(LMConfig, "smoke", overrides=["seed=4", "data.files=[x.txt]"])
    saved = write(tmp_path / "config.yaml", to_yaml(cfg))
    assert build_config(LMConfig, files=[saved]) == cfg


def test_assignment_is_validated() -> None:
    cfg = LMConfig()
    with pytest.raises(ValueError, match="greater than 0"):
        cfg.train.lr = 0


# ------------------------------------------------------------------ error paths


def test_unknown_nested_key_names_dotted_key_and_lists_allowed_keys() -> None:
    with pytest.raises(ConfigError) as err:
        build_config(LMConfig, overrides=["train.learning_rate=0.1"])
    message = str(err.value)
    assert "unknown key 'train.learning_rate'" in message
    assert "allowed keys here:" in message
    for allowed in ("lr", "batch_size", "max_steps", "warmup_steps"):
        assert allowed in message
    assert "d_model" not in message  # only the keys of that section
    assert "--set train.learning_rate=0.1" in message  # where it came from


def test_unknown_top_level_key_lists_top_level_sections() -> None:
    with pytest.raises(ConfigError) as err:
        build_config(LMConfig, overrides=["optim.lr=1"])
    message = str(err.value)
    assert "unknown key 'optim'" in message
    assert "data, eval, model, seed, tokenizer, train" in message


def test_wrong_type_names_key_value_and_description() -> None:
    with pytest.raises(ConfigError) as err:
        build_config(LMConfig, overrides=["train.lr=fast"])
    message = str(err.value)
    assert "train.lr='fast' is invalid" in message
    assert "valid number" in message
    assert "peak learning rate (AdamW)" in message


def test_wrong_literal_lists_allowed_values() -> None:
    with pytest.raises(ConfigError) as err:
        build_config(LMConfig, overrides=["train.strategy=fsdp"])
    message = str(err.value)
    assert "train.strategy='fsdp'" in message
    assert "'ddp' or 'deepspeed'" in message


@pytest.mark.parametrize(
    ("override", "bound", "description"),
    [
        ("train.lr=0", "greater than 0", "peak learning rate"),
        ("train.lr=2", "less than or equal to 1", "peak learning rate"),
        ("train.num_workers=0", "greater than or equal to 1", "Ray Train workers"),
        ("data.val_fraction=1.0", "less than 1", "share of file documents held out"),
        ("seed=-1", "greater than or equal to 0", "seed of every random stream"),
    ],
)
def test_out_of_range_names_key_bound_and_description(
    override: str, bound: str, description: str
) -> None:
    key, value = override.split("=")
    with pytest.raises(ConfigError) as err:
        build_config(LMConfig, overrides=[override])
    message = str(err.value)
    assert f"{key}={value}" in message
    assert bound in message
    assert description in message


def test_several_errors_are_reported_together() -> None:
    with pytest.raises(ConfigError) as err:
        build_config(LMConfig, overrides=["train.lr=0", "model.bogus=1"])
    message = str(err.value)
    assert "train.lr=0" in message
    assert "unknown key 'model.bogus'" in message


def test_cross_field_error_is_one_short_sentence() -> None:
    with pytest.raises(ConfigError) as err:
        build_config(LMConfig, "smoke", overrides=["train.batch_size=7", "train.num_workers=2"])
    message = str(err.value)
    assert "train.batch_size=7 must be divisible by train.num_workers=2" in message
    assert "Value error" not in message
    # no dump of the whole config (pydantic's default message includes input_value=...)
    assert "input_value" not in message
    assert "d_model" not in message
    assert len(message) < 300


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (
            ["model.d_model=30", "model.n_head=4"],
            "model.d_model=30 must be divisible by model.n_head=4",
        ),
        (["data.source=files"], "data.source=files needs data.files"),
        (["data.seq_len=512"], "data.seq_len=512 exceeds model.max_seq_len=256"),
    ],
)
def test_other_cross_field_checks(overrides: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        build_config(LMConfig, overrides=overrides)


def test_unknown_preset_lists_available_presets() -> None:
    with pytest.raises(ConfigError) as err:
        build_config(LMConfig, "huge")
    message = str(err.value)
    assert "unknown preset 'huge'" in message
    assert "available presets: default, small, smoke" in message


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", "train:\n  lr: 0.1\n  max_steps: [1, 2\nseed: 1\n")
    with pytest.raises(ConfigError) as err:
        build_config(LMConfig, files=[bad])
    message = str(err.value)
    assert "YAML syntax error" in message
    assert str(bad) in message
    assert "at line 4" in message


def test_yaml_top_level_list_is_rejected(tmp_path: Path) -> None:
    listing = write(tmp_path / "list.yaml", "- train.lr=0.1\n- seed=2\n")
    with pytest.raises(ConfigError) as err:
        build_config(LMConfig, files=[listing])
    message = str(err.value)
    assert str(listing) in message
    assert "must hold a mapping" in message
    assert "found a list" in message


def test_missing_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="does not exist") as err:
        build_config(LMConfig, files=[missing])
    assert str(missing) in str(err.value)
    with pytest.raises(ConfigError, match="not a file"):
        load_yaml_file(tmp_path)  # a folder is not a config file


def test_error_from_a_file_names_the_file_as_origin(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", "train:\n  lr: -1\n")
    with pytest.raises(ConfigError) as err:
        build_config(LMConfig, "smoke", files=[bad])
    message = str(err.value)
    assert f"file {str(bad)!r}" in message
    assert "preset 'smoke'" in message


def test_validate_reports_origin_and_class() -> None:
    with pytest.raises(ConfigError, match=r"invalid LMConfig \(my origin\)"):
        validate(LMConfig, {"seed": "x"}, origin="my origin")


# ------------------------------------------------------------------ shipped presets


PIPELINES = all_pipelines()


def test_pipelines_are_registered() -> None:
    assert {"lm", "lm_plain"} <= {spec.name for spec in PIPELINES}


@pytest.mark.parametrize("spec", PIPELINES, ids=lambda s: s.name)
def test_every_pipeline_has_a_smoke_preset(spec) -> None:
    assert "smoke" in preset_names(spec.config)


@pytest.mark.parametrize(
    ("spec", "preset"),
    [(spec, name) for spec in PIPELINES for name in preset_names(spec.config)],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_every_shipped_preset_validates(spec, preset: str) -> None:
    cfg = build_config(spec.config, preset)
    assert isinstance(cfg, spec.config)
    # the preset actually applied: every key it names has the preset's value
    dumped = flatten(cfg.model_dump())
    for key, value in flatten(spec.config.presets.get(preset, {})).items():
        assert dumped[key] == value, key
