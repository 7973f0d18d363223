"""Each dataset's options: one object of its own (fastbench.datasetoptions), not fields of BenchConfig; the
flat keywords the README and vllm's flags spell still build them, and the result file's config section
records them under those flat names, as when they were fields."""

from __future__ import annotations

import dataclasses
import pathlib
import typing
from typing import Any

import pytest

from fastbench import BenchConfig, ConfigError, api
from fastbench import config as config_module
from fastbench.datasetoptions import (
    FLAT_NAMES,
    OPTION_CLASSES,
    DatasetOptions,
    MultiTurnOptions,
    RandomOptions,
    SharedPrefixOptions,
    flat_name,
    folded,
)
from fastbench.results.writers import config_to_dict

pytestmark = pytest.mark.pure_python


def _other_value(kind: Any, value: Any) -> Any:
    """A value of the field's type other than its default ``value``, within any range it has."""
    if typing.get_origin(kind) is typing.Literal:
        return next(choice for choice in typing.get_args(kind) if choice != value)
    members = [m for m in typing.get_args(kind) or (kind,) if m is not type(None)]
    if value is None:
        return 3 if int in members else "other"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 3
    if isinstance(value, float):
        return value / 2 if value else 0.25
    if isinstance(value, dict):
        return {key: count + 1 for key, count in value.items()}
    if isinstance(value, tuple):
        return value[:1]
    return value + "-other"


def _changed(cls: type[DatasetOptions]) -> DatasetOptions:
    """An object of ``cls`` with every field off its default."""
    hints = typing.get_type_hints(cls)
    default = cls()
    return cls(**{f.name: _other_value(hints[f.name], getattr(default, f.name)) for f in dataclasses.fields(cls)})


def test_benchconfig_has_no_field_of_a_dataset_option() -> None:
    fields = {f.name for f in dataclasses.fields(BenchConfig)}
    assert fields.isdisjoint(FLAT_NAMES)
    # what BenchConfig holds of the datasets: which one, its file and order, every dataset's options in one
    # field, the multi-turn switch and the trace's pacing; a new dataset's options add nothing here
    assert {f for f in fields if f.startswith(("dataset", "multi_turn"))} == {
        "dataset_name", "dataset_path", "dataset_order", "dataset_options", "multi_turn"}
    # 70, the LoRA traffic split (lora_modules, lora_assignment), and the APIs answered whole: the backend and
    # how many inputs a request carries (random_batch_size, no_reranker), whatever the dataset, and the
    # server-went-away rule (server_gone_s)
    assert len(fields) == 76


@pytest.mark.parametrize("cls", OPTION_CLASSES, ids=lambda cls: cls.__name__)
def test_each_options_class_round_trips_through_the_config_dict(cls: type[DatasetOptions]) -> None:
    options = _changed(cls)
    assert options != cls()
    config = BenchConfig(dataset_options=(options,))
    written = config_to_dict(config)
    assert "dataset_options" not in written
    flat = {flat_name(cls, f): written[flat_name(cls, f)] for f in dataclasses.fields(cls)}
    assert flat == {flat_name(cls, f): getattr(options, f.name) for f in dataclasses.fields(cls)}
    # a result file's config section (an old one too: the same keys) gives the same options back
    again = BenchConfig(dataset_options=folded((), flat))
    assert again == config and again.options(cls) == options
    assert all(getattr(again, name) == value for name, value in flat.items())  # the flat names read back


def test_the_flat_keywords_are_those_of_the_options_that_were_fields() -> None:
    """BenchConfig(random_input_len=64) as the README writes it: every option that was a field of BenchConfig
    keeps its keyword (a dataset added since gives its options as its object)."""
    assert set(config_module._FLAT_KEYWORDS) <= set(FLAT_NAMES)
    assert len(config_module._FLAT_KEYWORDS) == 28
    for cls in OPTION_CLASSES:
        options = _changed(cls)
        flat = {flat_name(cls, f): getattr(options, f.name) for f in dataclasses.fields(cls)}
        if set(flat) <= set(config_module._FLAT_KEYWORDS):
            assert BenchConfig(**flat).options(cls) == options


def test_the_config_dict_keeps_every_flat_key_with_the_defaults() -> None:
    written = config_to_dict(BenchConfig(random_input_len=64))
    assert set(FLAT_NAMES) <= set(written)
    assert (written["random_input_len"], written["random_output_len"], written["gsp_num_groups"],
            written["multi_turn_history"], written["spec_bench_category"]) == (64, 128, 64, "server", None)


def test_flat_keywords_and_the_options_object_make_the_same_config() -> None:
    flat = BenchConfig(dataset_name="generated-shared-prefix", gsp_num_groups=4, gsp_question_len=10,
                       random_input_len=64)
    grouped = BenchConfig(dataset_name="generated-shared-prefix",
                          dataset_options=(SharedPrefixOptions(num_groups=4, question_len=10),
                                           RandomOptions(input_len=64)))
    assert flat == grouped
    assert flat.dataset_options == (RandomOptions(input_len=64), SharedPrefixOptions(num_groups=4, question_len=10))
    # one object alone needs no tuple, and an object of the defaults is no different from none
    assert BenchConfig(dataset_options=RandomOptions(input_len=64)) == BenchConfig(random_input_len=64)
    assert BenchConfig(dataset_options=(RandomOptions(),)) == BenchConfig()
    assert BenchConfig().options(RandomOptions) == RandomOptions()


def test_replace_takes_flat_keywords_and_keeps_a_replaced_object() -> None:
    config = BenchConfig(random_input_len=64, random_range_ratio=0.5)
    assert dataclasses.replace(config, seed=3).options(RandomOptions) == RandomOptions(input_len=64, range_ratio=0.5)
    assert config.replace(random_input_len=9).options(RandomOptions) == RandomOptions(input_len=9, range_ratio=0.5)
    replaced = dataclasses.replace(config, dataset_options=(RandomOptions(output_len=5),))
    assert replaced.options(RandomOptions) == RandomOptions(output_len=5)  # the old flat values are not carried over
    assert replaced.random_input_len == 1024 and replaced.random_output_len == 5
    with pytest.raises(AttributeError, match="no attribute 'random_input_lenn'"):
        _ = config.random_input_lenn


def test_a_path_given_for_the_chat_template_is_kept_as_its_text(tmp_path: pathlib.Path) -> None:
    template = tmp_path / "template.json"
    assert BenchConfig(chat_template=template).options(MultiTurnOptions).chat_template == str(template)
    assert MultiTurnOptions(chat_template=template).chat_template == str(template)


@pytest.mark.parametrize("cls", OPTION_CLASSES, ids=lambda cls: cls.__name__)
def test_every_options_field_is_type_checked(cls: type[DatasetOptions]) -> None:
    for field in dataclasses.fields(cls):
        config = BenchConfig(dataset_options=(cls(**{field.name: object()}),))
        with pytest.raises(ConfigError, match=rf"^{cls.__name__}\.{field.name} must be "):
            api.validate(config)


@pytest.mark.parametrize("changes,words", [
    ({"random_input_len": 0}, "--random-input-len must be >= 1, got 0"),
    ({"dataset_options": RandomOptions(range_ratio=1.0)}, "--random-range-ratio must be in [0, 1), got 1.0"),
    ({"gsp_num_groups": 0}, "--gsp-num-groups must be between 1 and 10,000,000, got 0"),
    ({"mooncake_slowdown_factor": 0.0}, "--mooncake-slowdown-factor must be > 0"),
    ({"custom_output_len": 0}, "--custom-output-len must be -1 (each line's output_tokens) or >= 1"),
    ({"multi_turn": True, "dataset_name": "sharegpt", "dataset_path": "x.json", "think_time_s": -1.0},
     "--think-time must be between 0 and 86400 s"),
    ({"dataset_options": MultiTurnOptions(think_time_distribution="zipf")},  # type: ignore[arg-type]
     "--think-time-distribution must be one of constant, uniform, exponential, got 'zipf'"),
    ({"max_turns": 2}, "--max-turns is for multi-turn sessions: give --multi-turn"),
    ({"dataset_name": "sharegpt", "dataset_path": "x.json", "random_prefix_len": 8},
     "--random-prefix-len is for --dataset-name random, not sharegpt"),
    ({"dataset_options": (RandomOptions(input_len=5), RandomOptions(input_len=6))},
     "BenchConfig.dataset_options holds RandomOptions more than once"),
    ({"dataset_options": ({"input_len": 5},)}, "BenchConfig.dataset_options must be a tuple of dataset options"),
    ({"timed_trace_label_timestamp": "t\udce9"}, "--timed-trace-label-timestamp: not valid UTF-8 text"),
])
def test_bad_options_are_refused_by_their_flags(changes: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as info:
        api.validate(BenchConfig(**changes))
    assert words in str(info.value) and "\n" not in str(info.value)
