"""What each option may hold, stated once: the checks on a run's options and on ``fastbench validate``'s.

Where the values enter:

* :class:`~fastbench.config.BenchConfig` (with its :class:`~fastbench.config.LaunchConfig`) is checked
  when a run starts (:func:`fastbench.api.validate` calls :func:`check_config` first), not when it is
  built: an embedder builds a config, ``replace()``\\ s fields, and gets the ConfigError from ``run()``.
  The command line and ``--config`` files build a BenchConfig too, so they meet the same checks:
  their argument types only turn text into values (cli/argtypes.py).
* ``fastbench validate`` checks its own settings (:func:`fastbench.api.validation.checked_settings`), the
  ones it shares with a run (concurrency, request rate, max seconds, coalescing) by :func:`check_value`.

Each field's type is read from the dataclass's own annotations (:data:`FIELD_KINDS`), so a new field
is checked as it is declared; an annotation this module cannot check fails at import. Messages name
the command-line flag, the name users know from --help, the README and config files.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, Literal, NamedTuple

from fastbench import datasetoptions
from fastbench.config import (
    BACKEND_ENDPOINTS,
    GOODPUT_METRICS,
    PERCENTILE_METRICS,
    POOLING_ENDPOINTS,
    TRACE_DATASETS,
    BenchConfig,
    LaunchConfig,
)
from fastbench.datasetoptions import (
    MAX_PROMPTS,
    OPTION_CLASSES,
    AgenticOptions,
    DatasetOptions,
    MultiTurnOptions,
    PrefixRepetitionOptions,
    RandomMMOptions,
    RandomOptions,
    SharedPrefixOptions,
)
from fastbench.exceptions import ConfigError

__all__ = ("FIELD_KINDS", "GENERATED_DATASETS", "MAX_PROMPTS", "RANGES", "check_config", "check_port",
           "check_prefix_fits", "check_value", "flag", "shortest_prompt")

MAX_SPAN_S = 1e7  # about four months of arrivals
MAX_WORKERS = 256  # client processes on one machine (--workers)
# The datasets fastbench makes itself: no file to read.
GENERATED_DATASETS = ("random", "prefix_repetition", "generated-shared-prefix", "random-mm", "random-rerank")
MAX_BATCH = 100_000  # inputs in one embeddings or rerank request

# Fields whose flag is not "--" + the name with dashes; a LaunchConfig field is "launch.NAME", a dataset
# options field its flat name (``random_input_len``).
_FLAGS = {
    "request_timeout_s": "--request-timeout", "metrics_interval_s": "--metrics-interval",
    "memory_interval_s": "--memory-interval", "config_file": "--config", "card_rows": "--card-row",
    "card_notes": "--card-note", "launch.engine": "--launch", "launch.model": "--launch-model",
    "launch.env": "--server-env", "launch.host": "--server-host", "launch.port": "--server-port",
    "launch.ready_timeout_s": "--ready-timeout", "launch.log_path": "--server-log",
    "launch.stop_grace_s": "--server-stop-grace",
    "save_detailed": "--requests-jsonl", "per_request_arrays": "--save-detailed", "headers": "--header",
    "ready_check_timeout_s": "--ready-check-timeout-sec", "think_time_s": "--think-time",
}


def flag(name: str) -> str:
    """The command-line flag of a BenchConfig field (``"seed"``), or of a LaunchConfig field
    written ``"launch.NAME"``."""
    return _FLAGS.get(name) or "--" + name.rpartition(".")[2].replace("_", "-")


# Each number's range: a test written as what must hold (so that NaN fails it), and what the message
# says. A None that the field allows is not checked. The dataset options' ranges are stated with their
# fields (fastbench.datasetoptions), by flat name.
RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "concurrency": (lambda v: v >= 1, "must be at least 1"),
    "request_rate": (lambda v: v > 0, "must be a positive number of requests/s"),
    "burstiness": (lambda v: 0 < v < math.inf, "must be > 0"),
    "num_prompts": (lambda v: 1 <= v <= MAX_PROMPTS, f"must be between 1 and {MAX_PROMPTS:,}"),
    "max_seconds": (lambda v: v > 0, "must be > 0"),
    "num_warmups": (lambda v: v >= 0, "must be >= 0"),
    "seed": (lambda v: v >= 0, "must be >= 0"),
    "request_timeout_s": (lambda v: 0 < v < math.inf, "must be > 0"),
    "max_error_rate": (lambda v: 0 <= v <= 1, "must be between 0 and 1"),
    "coalesce_ms": (lambda v: v == "auto" or 0 <= v <= 1000, "must be 'auto' or between 0 and 1000"),
    "workers": (lambda v: v == "auto" or 1 <= v <= MAX_WORKERS, f"must be 'auto' or between 1 and {MAX_WORKERS}"),
    "workers_per_node": (lambda v: 1 <= v <= MAX_WORKERS, f"must be between 1 and {MAX_WORKERS}"),
    "max_tokens": (lambda v: v >= 1, "must be >= 1"),
    "random_batch_size": (lambda v: 1 <= v <= MAX_BATCH, f"must be between 1 and {MAX_BATCH:,}"),
    "max_model_len": (lambda v: v >= 1, "must be >= 1"),
    "metrics_interval_s": (lambda v: 0 <= v <= 3600, "must be between 0 and 3600 s"),
    "memory_interval_s": (lambda v: 0 <= v <= 3600, "must be between 0 and 3600 s"),
    "launch.port": (lambda v: 1 <= v <= 65535, "must be between 1 and 65535"),
    # sampling parameters: what every OpenAI-compatible server accepts
    "temperature": (lambda v: 0 <= v < math.inf, "must be >= 0"),
    "top_p": (lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "top_k": (lambda v: v >= -1, "must be -1 (off) or more"),
    "min_p": (lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    "frequency_penalty": (lambda v: -2 <= v <= 2, "must be between -2 and 2"),
    "presence_penalty": (lambda v: -2 <= v <= 2, "must be between -2 and 2"),
    "repetition_penalty": (lambda v: 0 < v < math.inf, "must be > 0"),
    "logprobs": (lambda v: v >= 0, "must be >= 0"),
    "ramp_up_start_rps": (lambda v: 0 <= v < math.inf, "must be >= 0"),
    "ramp_up_end_rps": (lambda v: 0 < v < math.inf, "must be > 0"),
    **dict.fromkeys(("ready_check_timeout_s", "server_gone_s"), (lambda v: 0 <= v < math.inf, "must be >= 0")),
    "launch.ready_timeout_s": (lambda v: v > 0, "must be > 0"),
    "launch.stop_grace_s": (lambda v: 0 <= v < math.inf, "must be >= 0"),
    **datasetoptions.rules(),
}


def check_port(flag: str, port: int) -> None:
    """A port the command line names a server by (``--port``, vllm bench serve's, with --host)."""
    if not 1 <= port <= 65535:
        raise ConfigError(f"{flag} must be between 1 and 65535, got {port}")


def check_value(name: str, value: Any) -> None:
    """Refuse a number outside the range :data:`RANGES` gives ``name``; None passes."""
    holds, rule = RANGES[name]
    if value is not None and not holds(value):
        raise ConfigError(f"{flag(name)} {rule}, got {value}")


# --------------------------------------------------------------------------------------------------
# Types, read from the annotations


Kind = Literal["whole", "whole_or_auto", "number", "number_or_auto", "bool", "text", "strings", "numbers", "dict",
               "launch", "dataset_options", "buckets"]


class FieldKind(NamedTuple):
    kind: Kind
    optional: bool  # None allowed
    choices: tuple[str, ...] = ()  # a Literal's values


def _is_whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_strings(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and all(isinstance(item, str) for item in value)


# What each kind of field must hold, and how a message names it.
_KINDS: dict[Kind, tuple[Callable[[Any], bool], str]] = {
    "whole": (_is_whole, "a whole number"),
    "whole_or_auto": (lambda value: _is_whole(value) or value == "auto", "a whole number or 'auto'"),
    "number": (_is_number, "a number"),
    "number_or_auto": (lambda value: _is_number(value) or value == "auto", "a number or 'auto'"),
    "bool": (lambda value: isinstance(value, bool), "True or False"),
    "text": (lambda value: isinstance(value, str), "a string"),
    "strings": (_is_strings, "a tuple of strings, e.g. ('--itl-ms', '5')"),
    "numbers": (lambda value: isinstance(value, (tuple, list)) and all(_is_number(item) for item in value),
                "a tuple of numbers, e.g. (50, 99)"),
    "dict": (lambda value: isinstance(value, dict), "a dict"),
    "launch": (lambda value: isinstance(value, LaunchConfig), "a LaunchConfig"),
    "buckets": (lambda value: isinstance(value, (tuple, list)) and all(isinstance(b, (tuple, list)) and len(b) == 4
                                                                      for b in value),
                "a tuple of (height, width, frames, probability)"),
    "dataset_options": (lambda value: isinstance(value, tuple) and all(type(item) in OPTION_CLASSES for item in value),
                        f"a tuple of dataset options ({', '.join(cls.__name__ for cls in OPTION_CLASSES)})"),
}
_SIMPLE: dict[Any, Kind] = {bool: "bool", int: "whole", float: "number", str: "text", LaunchConfig: "launch"}


def _field_kind(annotation: Any) -> FieldKind:
    members = (typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType)
               else (annotation,))
    optional = type(None) in members
    members = tuple(m for m in members if m is not type(None))
    if len(members) == 2 and members[0] is int and typing.get_args(members[1]) == ("auto",):
        return FieldKind("whole_or_auto", optional)  # e.g. workers: int | Literal["auto"]
    if len(members) == 2 and members[0] is float and typing.get_args(members[1]) == ("auto",):
        return FieldKind("number_or_auto", optional)  # e.g. coalesce_ms: float | Literal["auto"]
    if str in members and all(m is str or typing.get_origin(m) is os.PathLike for m in members):
        return FieldKind("text", optional)  # a path: a PathLike given is stored as its str
    if len(members) == 1:
        (kind,) = members
        origin = typing.get_origin(kind)
        if origin is Literal:
            return FieldKind("text", optional, typing.get_args(kind))
        if origin is tuple and typing.get_args(kind) == (str, ...):
            return FieldKind("strings", optional)
        if origin is tuple and typing.get_args(kind) == (float, ...):
            return FieldKind("numbers", optional)
        if origin is tuple and typing.get_args(kind) == (tuple[int, int, int, float], ...):
            return FieldKind("buckets", optional)  # random-mm's bucket_config (its values: _check_images_and_adapters)
        if origin is tuple and typing.get_args(kind) == (DatasetOptions, ...):
            return FieldKind("dataset_options", optional)
        if origin is dict:
            return FieldKind("dict", optional)
        if kind in _SIMPLE:
            return FieldKind(_SIMPLE[kind], optional)
    raise TypeError(f"fastbench.checks has no check for a field of type {annotation}")


def _field_kinds(cls: type) -> dict[str, FieldKind]:
    hints = typing.get_type_hints(cls)
    return {field.name: _field_kind(hints[field.name]) for field in dataclasses.fields(cls)}


# field -> its kind, from the annotations: checked before the values, so that a wrong type gets a
# message naming the field instead of a TypeError from deep inside the run.
FIELD_KINDS: dict[type, dict[str, FieldKind]] = {cls: _field_kinds(cls)
                                                 for cls in (BenchConfig, LaunchConfig, *OPTION_CLASSES)}
Checked = BenchConfig | LaunchConfig | DatasetOptions


def _check_types(obj: Checked) -> None:
    owner = type(obj).__name__
    for name, (kind, optional, _) in FIELD_KINDS[type(obj)].items():
        value = getattr(obj, name)
        if value is None and optional:
            continue
        accepts, what = _KINDS[kind]
        if not accepts(value):
            if isinstance(value, str) and kind == "strings":
                what += ", not one string"
            shown = "" if name == "api_key" else f"{value!r} "  # the key itself is never shown
            raise ConfigError(f"{owner}.{name} must be {what}{' or None' if optional else ''}, "
                              f"got {shown}({type(value).__name__})")


def _names(obj: Checked) -> Iterator[tuple[str, str]]:
    """Each field of ``obj``: its name there, and the name RANGES and flag() know it by."""
    for field in dataclasses.fields(obj):
        if isinstance(obj, DatasetOptions):
            yield field.name, datasetoptions.flat_name(type(obj), field)
        else:
            yield field.name, ("launch." if isinstance(obj, LaunchConfig) else "") + field.name


def _check_choices_and_ranges(obj: Checked) -> None:
    kinds = FIELD_KINDS[type(obj)]
    for name, known_as in _names(obj):
        _, optional, choices = kinds[name]
        value = getattr(obj, name)
        if choices and value not in choices and not (optional and value is None):
            raise ConfigError(f"{flag(known_as)} must be one of {', '.join(choices)}, got {value!r}")
        if known_as in RANGES:
            check_value(known_as, value)


def _parts(config: BenchConfig) -> list[Checked]:
    """The config and the objects it holds: its launch, its dataset options."""
    return [config, *([config.launch] if config.launch is not None else []), *config.dataset_options]


# --------------------------------------------------------------------------------------------------
# The whole config


# The endpoints whose events name themselves (fastbench.load.protocols: Responses, Messages)
TYPED_EVENT_ENDPOINTS = ("/v1/responses", "/v1/messages")


def check_config(config: BenchConfig) -> None:
    """Refuse options that cannot work, from their values alone: types, choices, ranges, and options
    that the others make idle or need. One line that says what to fix (:class:`ConfigError`)."""
    if not isinstance(config, BenchConfig):
        raise ConfigError(f"expected a BenchConfig, got {type(config).__name__}")
    _check_types(config)
    if config.launch is not None:
        _check_types(config.launch)
    held = [type(options) for options in config.dataset_options]
    twice = sorted({kind.__name__ for kind in held if held.count(kind) > 1})
    if twice:
        raise ConfigError(f"BenchConfig.dataset_options holds {' and '.join(twice)} more than once: give one of each")
    for options in config.dataset_options:
        _check_types(options)
    for part in _parts(config):
        _check_choices_and_ranges(part)
    if config.request_rate is not None and config.num_prompts / config.request_rate > MAX_SPAN_S:
        raise ConfigError(f"--request-rate {config.request_rate:g} spreads {config.num_prompts} arrivals over "
                          f"{config.num_prompts / config.request_rate / 86400:,.0f} days; give a higher rate")
    for key, value in config.goodput.items():
        if key not in GOODPUT_METRICS:
            raise ConfigError(f"--goodput takes ttft, tpot and e2el, got {key!r}")
        if not _is_number(value) or not value > 0:
            raise ConfigError(f"--goodput {key} must be a number of milliseconds > 0, got {value!r}")
    # fastbench streams every request, and its token counts come from the usage it asks for
    fixed = [key for key in ("stream", "stream_options") if key in config.extra_body]
    if fixed:
        raise ConfigError(f"--extra-body cannot set {' or '.join(fixed)}: fastbench always streams, with "
                          "stream_options {include_usage, continuous_usage_stats} (its token counts come from them)")
    for option, text in _texts(config):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # the value is not repeated: it may hold a secret (--server-env)
            raise ConfigError(f"{option}: not valid UTF-8 text; result files are UTF-8") from None
    for row in config.card_rows:
        label, equals, _ = row.partition("=")
        if not equals or not label.strip():
            raise ConfigError(f"--card-row takes LABEL=VALUE, got {row!r}")
    _check_headers(config.headers)
    _check_percentiles(config)
    for meta_key, meta_value in config.metadata.items():
        if not isinstance(meta_key, str) or not meta_key.strip() or not isinstance(meta_value, str):
            raise ConfigError(f"--metadata takes KEY=VALUE text, got {meta_key!r}={meta_value!r}")
        if meta_key == "fastbench":
            raise ConfigError("--metadata cannot set the key 'fastbench': the result keeps its own fields there")
    _check_ramp_up(config)
    _check_idle_and_needed(config)


# Headers that frame the request: fastbench writes them itself, from the body it sends.
_FRAMING_HEADERS = ("content-length", "transfer-encoding", "connection")
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _check_headers(headers: dict[str, Any]) -> None:
    for name, value in headers.items():
        if not isinstance(name, str) or not name or not set(name) <= _TOKEN_CHARS:
            raise ConfigError(f"--header: {name!r} is not an HTTP header name (letters, digits and -)")
        if name.lower() in _FRAMING_HEADERS:
            raise ConfigError(f"--header cannot set {name}: fastbench frames each request itself")
        # printable ASCII or tab only: a line break would end the header (a header of its own, smuggled)
        if not isinstance(value, str) or not all(c == "\t" or " " <= c <= "~" for c in value):
            raise ConfigError(f"--header {name}: the value must be printable ASCII text on one line")


def _check_percentiles(config: BenchConfig) -> None:
    if config.percentile_metrics is not None:
        unknown = [m for m in config.percentile_metrics if m not in PERCENTILE_METRICS]
        if unknown or not config.percentile_metrics:
            raise ConfigError(f"--percentile-metrics takes {', '.join(PERCENTILE_METRICS)}, got "
                              f"{','.join(config.percentile_metrics)!r}")
    if config.metric_percentiles is not None:
        if not config.metric_percentiles or not all(0 <= p <= 100 for p in config.metric_percentiles):
            raise ConfigError("--metric-percentiles takes percentiles between 0 and 100, e.g. 50,90,99; got "
                              f"{','.join(f'{p:g}' for p in config.metric_percentiles)!r}")


def _check_ramp_up(config: BenchConfig) -> None:
    """As vllm bench serve: a ramp-up replaces --request-rate, needs both ends, and rises."""
    start, end = config.ramp_up_start_rps, config.ramp_up_end_rps
    if config.ramp_up_strategy is None:
        if start is not None or end is not None:
            raise ConfigError("--ramp-up-start-rps and --ramp-up-end-rps need --ramp-up-strategy linear or exponential")
        return
    if config.request_rate is not None:
        raise ConfigError("--ramp-up-strategy sets the request rate itself: leave out --request-rate")
    if start is None or end is None:
        raise ConfigError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
    if start > end:
        raise ConfigError(f"--ramp-up-start-rps ({start:g}) must not exceed --ramp-up-end-rps ({end:g})")
    if config.ramp_up_strategy == "exponential" and start == 0:
        raise ConfigError("--ramp-up-strategy exponential cannot start at 0 requests/s: give --ramp-up-start-rps > 0")


def _texts(config: BenchConfig) -> Iterator[tuple[str, str]]:
    """Every text option (its flag, its value), those of the launch included; the command line that
    holds them all last, so that a message names the option."""
    for obj in _parts(config):
        for name, known_as in _names(obj):
            if name in ("command_line", "dataset_options"):
                continue
            value = getattr(obj, name)
            for text in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(text, str):
                    yield flag(known_as), text
    for text in config.command_line:
        if isinstance(text, str):
            yield "the command line", text


def shortest_prompt(config: BenchConfig) -> tuple[int, str] | None:
    """The fewest prompt tokens a generated dataset's request can have, and the flags that set them;
    None for a dataset read from a file."""
    if config.dataset_name in ("random", "random-mm"):
        random = config.options(RandomOptions)
        low = max(1, math.floor(random.input_len * (1 - random.range_ratio)))
        return random.prefix_len + low, "--random-prefix-len + --random-input-len"
    if config.dataset_name == "prefix_repetition":
        repetition = config.options(PrefixRepetitionOptions)
        return (repetition.prefix_len + repetition.suffix_len,
                "--prefix-repetition-prefix-len + --prefix-repetition-suffix-len")
    if config.dataset_name == "generated-shared-prefix":
        gsp = config.options(SharedPrefixOptions)
        return gsp.system_prompt_len + gsp.question_len, "--gsp-system-prompt-len + --gsp-question-len"
    return None


def check_prefix_fits(config: BenchConfig, max_model_len: int | None, origin: str) -> None:
    """Refuse a generated dataset whose shortest prompt cannot fit ``max_model_len`` with one output
    token (``origin`` says where the context length came from)."""
    shortest = shortest_prompt(config)
    if max_model_len is None or shortest is None:
        return
    tokens, flags = shortest
    if tokens >= max_model_len:
        raise ConfigError(f"{flags} make prompts of at least {tokens:,} tokens, which leave no room for output in "
                          f"the context of {max_model_len:,} tokens ({origin}); shorten the prefix or the prompt")


def _check_prefix_fits(config: BenchConfig) -> None:
    check_prefix_fits(config, config.max_model_len, "--max-model-len")


def _check_multi_turn(config: BenchConfig) -> None:
    """Multi-turn sessions read conversations; their options mean nothing without them."""
    sessions = config.options(MultiTurnOptions)
    if not config.multi_turn:
        default = MultiTurnOptions()
        for field in dataclasses.fields(sessions):
            if getattr(sessions, field.name) != getattr(default, field.name):
                raise ConfigError(f"{flag(datasetoptions.flat_name(MultiTurnOptions, field))} is for multi-turn "
                                  "sessions: give --multi-turn")
        return
    if config.endpoint in TYPED_EVENT_ENDPOINTS:
        raise ConfigError(f"--multi-turn builds its turns for /v1/completions and /v1/chat/completions, not "
                          f"{config.endpoint}")
    if config.dataset_name not in ("sharegpt", "jsonl"):
        raise ConfigError(f"--multi-turn replays conversations: give --dataset-name sharegpt or jsonl, not "
                          f"{config.dataset_name}")
    if config.ramp_up_strategy is not None:
        raise ConfigError("--ramp-up-strategy is not available with --multi-turn (sessions arrive at --request-rate)")
    if config.request_id_prefix is not None:
        raise ConfigError("--request-id-prefix is not available with --multi-turn (turns are built during the run)")
    if config.workers not in (1, "auto"):
        raise ConfigError("--workers is not available with --multi-turn (turns are built during the run, in "
                          "one process)")
    if sessions.chat_template and config.endpoint == "/v1/chat/completions":
        raise ConfigError("--chat-template renders the history for /v1/completions; the chat endpoint applies "
                          "the server's own template")


def _check_agentic(config: BenchConfig) -> None:
    """Agent trees (--dataset-name weka) are built whole before the run and paced by their own dependencies."""
    if config.dataset_name != "weka" and config.options(AgenticOptions) != AgenticOptions():
        raise ConfigError("the --agentic-* options are for agent-tree replay: give --dataset-name weka")
    idle = {"--multi-turn": config.multi_turn, "--ramp-up-strategy": config.ramp_up_strategy is not None,
            "--workers": config.workers not in (1, "auto"), "--ray": config.ray, "--num-warmups": config.num_warmups,
            "--lora-modules": config.lora_modules}
    for option in (option for option, given in idle.items() if given and config.dataset_name == "weka"):
        raise ConfigError(f"{option} is not available with --dataset-name weka (its calls wait on each other in one "
                          "process, trees arrive at --request-rate, the staggered start sends its own warm-ups)")


def _check_trace_timing(config: BenchConfig) -> None:
    """A trace's times pace the run, or --no-self-timed hands it to the load options (vLLM's flag)."""
    if config.self_timed is not None and config.dataset_name not in TRACE_DATASETS:
        raise ConfigError(f"--self-timed/--no-self-timed is for the trace datasets ({', '.join(TRACE_DATASETS)}), "
                          f"not {config.dataset_name}")
    if config.trace_timed and (config.request_rate is not None or config.ramp_up_strategy is not None):
        what = "--request-rate" if config.request_rate is not None else "--ramp-up-strategy"
        raise ConfigError(f"{what} and the trace's times both pace the run: give --no-self-timed to send the "
                          f"trace's prompts by {what}, or leave it out")


def _check_ray(config: BenchConfig) -> None:
    """--ray's options: the placement is given one way, and only with --ray."""
    if config.ray is None:
        if config.workers_per_node is not None:
            raise ConfigError("--workers-per-node places workers on the nodes of a Ray cluster: give --ray")
        return
    if not config.ray.strip():
        raise ConfigError("--ray must be 'auto' or a Ray cluster's address (host:port or ray://host:port)")
    if config.workers_per_node is not None and config.workers not in (1, "auto"):
        raise ConfigError("--ray: give --workers N (N workers spread over the nodes) or --workers-per-node K "
                          "(K on each node), not both")
    if config.multi_turn:
        raise ConfigError("--ray is not available with --multi-turn (turns are built during the run, in one process)")


def _check_idle_and_needed(config: BenchConfig) -> None:
    """No option is given that the others make idle, and none is missing that another needs: found
    out before a launched server spends minutes loading."""
    if config.save_outputs and not (config.save_detailed or config.per_request_arrays):
        raise ConfigError("--save-outputs keeps the response texts in --requests-jsonl's file or, with "
                          "--save-detailed, in the result's generated_texts: give one of them")
    saving = config.save_result or config.append_result
    if config.per_request_arrays and not (saving or config.result_json):
        raise ConfigError("--save-detailed puts per-request arrays in the result file: give --save-result "
                          "(or --result-json)")
    for option, name in (("--result-dir", config.result_dir), ("--result-filename", config.result_filename)):
        if name is not None and not saving:
            raise ConfigError(f"{option} names the file --save-result (or --append-result) writes: give one of them")
    if config.request_id_prefix is not None and "request_id" in config.extra_body:
        raise ConfigError("--request-id-prefix and --extra-body's request_id both set the request id: give one")
    if config.synthetic_args and (config.base_url is not None or config.launch is not None):
        raise ConfigError("--synthetic-args configures the built-in server, which --base-url and --launch replace")
    if config.dataset_name in GENERATED_DATASETS:
        for option, idle in (("--dataset-path", config.dataset_path),
                             ("--dataset-order file", config.dataset_order == "file")):
            if idle:
                raise ConfigError(f"{option} is for --dataset-name sharegpt or jsonl; the dataset is "
                                  f"{config.dataset_name}, made by fastbench (vllm bench serve's default once "
                                  "was sharegpt: give --dataset-name)")
    elif not config.dataset_path:
        raise ConfigError(f"--dataset-name {config.dataset_name} needs --dataset-path (the file to read)")
    _check_pooling(config)
    _check_multi_turn(config)
    _check_agentic(config)
    if config.logprobs is not None and config.endpoint in TYPED_EVENT_ENDPOINTS:
        raise ConfigError(f"--logprobs asks /v1/completions and /v1/chat/completions for logprobs; {config.endpoint} "
                          "is not offered them")
    _check_trace_timing(config)
    _check_ray(config)
    if config.options(RandomOptions).prefix_len and config.dataset_name not in ("random", "random-mm"):
        raise ConfigError(f"--random-prefix-len is for --dataset-name random, not {config.dataset_name} "
                          "(prefix_repetition and generated-shared-prefix have their own prefix lengths)")
    num_prefixes = config.options(PrefixRepetitionOptions).num_prefixes
    if config.dataset_name == "prefix_repetition" and config.num_prompts < num_prefixes:
        raise ConfigError(f"--num-prompts {config.num_prompts} is fewer than --prefix-repetition-num-prefixes "
                          f"{num_prefixes}: some prefixes would never be sent")
    gsp = config.options(SharedPrefixOptions)
    if gsp.num_groups * gsp.prompts_per_group > MAX_PROMPTS:
        raise ConfigError(f"--gsp-num-groups x --gsp-prompts-per-group must be at most {MAX_PROMPTS:,}, got "
                          f"{gsp.num_groups * gsp.prompts_per_group:,}")
    _check_prefix_fits(config)
    _check_images_and_adapters(config)
    if config.launch is not None:
        if config.base_url is not None:
            raise ConfigError("--base-url attaches to a running server and --launch starts one: give one of them")
        if not config.launch.model:
            raise ConfigError("--launch needs --launch-model MODEL")


def _check_images_and_adapters(config: BenchConfig) -> None:
    """random-mm's options (vllm bench serve's rules), images on the chat endpoint only, and --lora-modules."""
    opts = config.options(RandomMMOptions)
    if config.dataset_name in ("random-mm", "custom_image") and config.endpoint != "/v1/chat/completions":
        raise ConfigError(f"--dataset-name {config.dataset_name} sends images in chat messages: give --endpoint "
                          "/v1/chat/completions (--backend openai-chat), as vllm bench serve requires")
    if opts != RandomMMOptions() and config.dataset_name != "random-mm":
        raise ConfigError(f"--random-mm-* options are for --dataset-name random-mm, not {config.dataset_name}")
    if not (_is_whole(opts.base_items_per_request) and opts.base_items_per_request >= 0):
        raise ConfigError(f"--random-mm-base-items-per-request must be a whole number >= 0, got "
                          f"{opts.base_items_per_request!r}")
    if not (_is_number(opts.num_mm_items_range_ratio) and 0 <= opts.num_mm_items_range_ratio <= 1):
        raise ConfigError(f"--random-mm-num-mm-items-range-ratio must be in [0, 1], got "
                          f"{opts.num_mm_items_range_ratio!r}")
    limits = opts.limit_mm_per_prompt
    if not (isinstance(limits, dict) and limits and all(k in ("image", "video") and _is_whole(v) and v >= 0
                                                        for k, v in limits.items())):
        raise ConfigError("--random-mm-limit-mm-per-prompt takes a JSON object of whole numbers >= 0 by modality, "
                          f"e.g. '{{\"image\": 3, \"video\": 0}}'; got {limits!r}")
    buckets = opts.bucket_config
    if not (isinstance(buckets, (tuple, list)) and buckets and all(
            isinstance(b, (tuple, list)) and len(b) == 4 and all(_is_whole(x) and x >= 1 for x in b[:3])
            and _is_number(b[3]) and b[3] >= 0 for b in buckets)):
        raise ConfigError("--random-mm-bucket-config takes {(HEIGHT, WIDTH, FRAMES): PROBABILITY, ...} with whole "
                          f"numbers >= 1 and probabilities >= 0; got {buckets!r}")
    if not any(b[3] > 0 for b in buckets):
        raise ConfigError("--random-mm-bucket-config: every probability is 0; give one above 0")
    if any(b[2] > 1 and b[3] > 0 for b in buckets):
        raise ConfigError("--random-mm-bucket-config: fastbench makes images only (FRAMES 1); vLLM makes its videos "
                          "with OpenCV as MP4 files: give the video buckets probability 0")
    if any(b[3] > 0 and "image" not in limits for b in buckets):
        raise ConfigError("--random-mm-limit-mm-per-prompt has no 'image' limit for the image buckets")
    if config.lora_modules:
        if not all(isinstance(name, str) and name.strip() for name in config.lora_modules):
            raise ConfigError("--lora-modules takes adapter names (as the server serves them), e.g. --lora-modules "
                              "sql-lora math-lora")
        if config.multi_turn:
            raise ConfigError("--lora-modules is not available with --multi-turn (a session's turns are built during "
                              "the run)")
        if "model" in config.extra_body:
            raise ConfigError("--lora-modules and --extra-body's model both set the model: give one")
    elif config.lora_assignment != "random":
        raise ConfigError("--lora-assignment chooses among --lora-modules: give --lora-modules")


def _check_pooling(config: BenchConfig) -> None:
    """The APIs answered whole (embeddings, pooling, score, rerank): the backend matches the endpoint, and what
    streams or generates has no place in them."""
    backends = POOLING_ENDPOINTS.get(config.endpoint)
    if config.backend is not None and BACKEND_ENDPOINTS[config.backend] != config.endpoint and (
            backends is None or config.backend not in backends):  # vllm-rerank also calls /v1/rerank and /score
        raise ConfigError(f"--backend {config.backend} calls {BACKEND_ENDPOINTS[config.backend]}, --endpoint says "
                          f"{config.endpoint}: give one of them")
    rerank = config.api == "vllm-rerank"
    if (config.dataset_name == "random-rerank") != rerank:
        raise ConfigError("--dataset-name random-rerank draws a query and documents for --backend vllm-rerank "
                          "(/rerank, /v1/rerank, /score), which takes no other dataset")
    if config.random_batch_size != 1 and backends is None:
        raise ConfigError("--random-batch-size sets the inputs of one embeddings, pooling or rerank request; "
                          f"{config.endpoint} takes one prompt a request")
    if config.no_reranker and (not rerank or config.random_batch_size < 2):
        raise ConfigError("--no-reranker is for --backend vllm-rerank with --random-batch-size >= 2 (one of each "
                          "batch is the query)")
    if backends is not None and config.multi_turn:
        raise ConfigError(f"--multi-turn holds conversations; {config.endpoint} answers single requests")
