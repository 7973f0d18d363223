"""Each dataset's own options: one frozen object per dataset, held in ``BenchConfig.dataset_options``.

A dataset module of ``fastbench.load.sources`` reads its own (``config.options(RandomOptions)``: the one
given, or the defaults), so that adding a dataset adds its name and options class here (to
:data:`DatasetName` and :data:`OPTION_CLASSES`) and nothing to BenchConfig; its module, its row in
``fastbench.load.datasets.DATASETS`` and its flags (each flag's dest its field's flat name:
``fastbench.cli.datasetflags``) are the rest.
Each field states its range next to its default (``fastbench.checks`` reads it, and words the message
with the field's flag); the field's flat name (``random_input_len``: the flag's name with underscores)
is the BenchConfig keyword of the options that were flat fields once, and the key the result file's
``fastbench.config`` section records it under.

This module is a leaf: ``fastbench.config`` and ``fastbench.load`` both import it, and it imports
neither.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, Literal, TypeVar

# The datasets, by --dataset-name (each a module of fastbench.load.sources, listed in fastbench.load.datasets)
DatasetName = Literal["random", "sharegpt", "jsonl", "prefix_repetition", "generated-shared-prefix", "timed_trace",
                      "mooncake", "burstgpt", "custom", "spec_bench", "random-mm", "custom_image",
                      "random-rerank", "weka"]
MultiTurnHistory = Literal["server", "dataset"]
ThinkTimeDistribution = Literal["constant", "uniform", "exponential"]
AgenticStart = Literal["staggered", "beginning"]

# One row of int64s per request is kept in memory (1.6 GB at this many); arrival times are int64 ns.
MAX_PROMPTS = 10_000_000
# Tokens of one generated prompt part: past any model's context (the largest are ~10M), so a typo.
MAX_PROMPT_TOKENS = 16_000_000

Rule = tuple[Callable[[Any], bool], str]  # what must hold (written so that NaN fails it), what the message says


def _option(default: Any, rule: Rule | None = None, *, flat: str | None = None) -> Any:
    """A field with its range (``rule``) and, where it is not the class's prefix + its name, its flat name."""
    metadata: dict[str, Any] = {}
    if rule is not None:
        metadata["rule"] = rule
    if flat is not None:
        metadata["flat"] = flat
    return dataclasses.field(default=default, metadata=metadata)


_AT_LEAST_1: Rule = (lambda v: v >= 1, "must be >= 1")
_TOKENS: Rule = (lambda v: 1 <= v <= MAX_PROMPT_TOKENS, f"must be between 1 and {MAX_PROMPT_TOKENS:,}")
_COUNT: Rule = (lambda v: 1 <= v <= MAX_PROMPTS, f"must be between 1 and {MAX_PROMPTS:,}")
_POSITIVE: Rule = (lambda v: 0 < v < math.inf, "must be > 0")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DatasetOptions:
    """What every dataset's options object has: the prefix of its fields' flat names (``random_``)."""

    PREFIX: ClassVar[str] = ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RandomOptions(DatasetOptions):
    """``random`` (vLLM's): random token ids, lengths drawn around ``input_len`` / ``output_len``."""

    PREFIX = "random_"
    input_len: int = _option(1024, _AT_LEAST_1)
    output_len: int = _option(128, _AT_LEAST_1)
    range_ratio: float = _option(0.0, (lambda v: 0 <= v < 1, "must be in [0, 1)"))
    # one fixed prefix of this many tokens before each prompt (vLLM's)
    prefix_len: int = _option(0, (lambda v: 0 <= v <= MAX_PROMPT_TOKENS,
                                  f"must be between 0 and {MAX_PROMPT_TOKENS:,}"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class RandomMMOptions(DatasetOptions):
    """``random-mm`` (vLLM's): the random dataset's text (RandomOptions) with images per request, its flags
    ``--random-mm-*`` and their defaults (``load/sources/random_mm.py``; fastbench.checks holds their rules).

    :param base_items_per_request: images per request, before the range ratio.
    :param num_mm_items_range_ratio: each request's count drawn uniformly from the whole numbers in
        ``[floor(n*(1-r)), ceil(n*(1+r))]``, the top clamped to the limits' sum (r in [0, 1]).
    :param limit_mm_per_prompt: most items per request of each modality (``{"image": N, "video": M}``).
    :param bucket_config: ``(height, width, num_frames, probability)`` per size an item is drawn from
        (vLLM's ``{(H, W, T): p}``); one frame is an image; the probabilities are normalised.
    """

    PREFIX = "random_mm_"
    base_items_per_request: int = 1
    num_mm_items_range_ratio: float = 0.0
    limit_mm_per_prompt: dict[str, int] = dataclasses.field(default_factory=lambda: {"image": 255, "video": 1})
    bucket_config: tuple[tuple[int, int, int, float], ...] = ((256, 256, 1, 0.5), (720, 1280, 1, 0.5),
                                                              (720, 1280, 16, 0.0))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrefixRepetitionOptions(DatasetOptions):
    """``prefix_repetition`` (vLLM's): ``num_prefixes`` prefixes, each prompt one of them plus its own suffix."""

    PREFIX = "prefix_repetition_"
    prefix_len: int = _option(256, _TOKENS)
    suffix_len: int = _option(256, _TOKENS)
    num_prefixes: int = _option(10, _COUNT)
    output_len: int = _option(128, _TOKENS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SharedPrefixOptions(DatasetOptions):
    """``generated-shared-prefix`` (SGLang's ``--gsp-*``): groups of prompts sharing a system prompt."""

    PREFIX = "gsp_"
    num_groups: int = _option(64, _COUNT)
    prompts_per_group: int = _option(16, _COUNT)
    system_prompt_len: int = _option(2048, _TOKENS)
    question_len: int = _option(128, _TOKENS)
    output_len: int = _option(256, _TOKENS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TimedTraceOptions(DatasetOptions):
    """``timed_trace`` (vLLM's ``--timed-trace-*``, load/sources/trace.py): the trace's fields and units."""

    PREFIX = "timed_trace_"
    chunk_hash_size: int = _option(16, _TOKENS)  # tokens per hash id
    sec_multiplier: float = _option(1.0, _POSITIVE)  # timestamp x this = seconds
    label_timestamp: str = _option("timestamp")
    label_input_length: str = _option("input_length")
    label_output_length: str = _option("output_length")
    label_hash_ids: str = _option("hash_ids")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MooncakeOptions(DatasetOptions):
    """``mooncake`` (SGLang's slowdown factor, load/sources/trace.py)."""

    PREFIX = "mooncake_"
    slowdown_factor: float = _option(1.0, _POSITIVE)  # 2: the trace's gaps doubled


@dataclasses.dataclass(frozen=True, kw_only=True)
class CustomOptions(DatasetOptions):
    """``custom`` (vLLM's, load/sources/custom.py): output tokens per request."""

    PREFIX = "custom_"
    # -1: each line's output_tokens
    output_len: int = _option(256, (lambda v: v == -1 or v >= 1, "must be -1 (each line's output_tokens) or >= 1"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpecBenchOptions(DatasetOptions):
    """``spec_bench`` (vLLM's, load/sources/custom.py)."""

    PREFIX = "spec_bench_"
    output_len: int = _option(256, _AT_LEAST_1)
    category: str | None = _option(None)  # only this category's questions


@dataclasses.dataclass(frozen=True, kw_only=True)
class MultiTurnOptions(DatasetOptions):
    """Multi-turn sessions over sharegpt or jsonl conversations (``BenchConfig.multi_turn``, see
    :mod:`fastbench.load.sessions`): each session sends one request per turn with the history so far."""

    history: MultiTurnHistory = _option("server", flat="multi_turn_history")  # whose replies the history carries
    # mean seconds between a reply and the session's next turn
    think_time_s: float = _option(0.0, (lambda v: 0 <= v <= 86400, "must be between 0 and 86400 s"))
    think_time_distribution: ThinkTimeDistribution = _option("constant")
    max_turns: int | None = _option(None, _AT_LEAST_1)  # most turns (user messages) a session sends
    # /v1/completions: how a history becomes one prompt (a JSON file); a pathlib.Path is stored as its str
    chat_template: str | os.PathLike[str] | None = _option(None)

    def __post_init__(self) -> None:
        if isinstance(self.chat_template, os.PathLike):  # one type for the rest of fastbench, as BenchConfig's paths
            object.__setattr__(self, "chat_template", os.fspath(self.chat_template))


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgenticOptions(DatasetOptions):
    """Agent-tree replay of Weka traces (``--dataset-name weka``, see :mod:`fastbench.load.agentic`)."""

    PREFIX = "agentic_"
    # the recorded gaps between a call's dependencies ending and the call, times this (0: back to back)
    time_scale: float = _option(1.0, (lambda v: 0 <= v < math.inf, "must be a number >= 0"))
    idle_gap_cap: float | None = _option(None, _POSITIVE)  # seconds: no gap waits longer (after the scale)
    # closed loop: the first trees start mid-trajectory, their cache filled by a warm-up (staggered), or all at
    # their first call (beginning)
    start: AgenticStart = _option("staggered")
    # a header each call carries, its value the call's agent ("TREE", "TREE::AGENT"), for a router to pin a
    # session to one backend (e.g. x-session-id); None: none
    session_header: str | None = _option(None, (lambda v: re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", v) is not None,
                                                "must be an HTTP header name (letters, digits, '-', ...)"))
    # chat: each call's prompt sent as the turns its history was (user, assistant, tool call, tool result),
    # with a tools list (load.toolturns); off: one user message of the trace's tokens
    tool_messages: bool = _option(False)


# Every options class, in the order the result file records their fields. A new dataset adds its own here.
OPTION_CLASSES: tuple[type[DatasetOptions], ...] = (
    RandomOptions, RandomMMOptions, PrefixRepetitionOptions, SharedPrefixOptions, MultiTurnOptions, TimedTraceOptions,
    MooncakeOptions, CustomOptions, SpecBenchOptions, AgenticOptions,
)

OptionsT = TypeVar("OptionsT", bound=DatasetOptions)


def flat_name(cls: type[DatasetOptions], field: dataclasses.Field[Any]) -> str:
    """The field's flat name: its BenchConfig keyword, the result file's key, the flag with underscores."""
    return str(field.metadata.get("flat", cls.PREFIX + field.name))


# flat name -> (its options class, the field's name there)
FLAT_NAMES: dict[str, tuple[type[DatasetOptions], str]] = {
    flat_name(cls, field): (cls, field.name) for cls in OPTION_CLASSES for field in dataclasses.fields(cls)
}


def rules() -> dict[str, Rule]:
    """Each ranged field's rule, by flat name (``fastbench.checks.RANGES`` takes them in)."""
    return {flat_name(cls, field): field.metadata["rule"] for cls in OPTION_CLASSES
            for field in dataclasses.fields(cls) if "rule" in field.metadata}


def find(held: Iterable[object], cls: type[OptionsT]) -> OptionsT:
    """The options of ``cls`` among ``held``, or its defaults."""
    for options in held:
        if type(options) is cls:
            return options
    return cls()


def normalised(held: object) -> tuple[Any, ...]:
    """``held`` (one options object or several) as BenchConfig keeps it: a tuple in the order of
    :data:`OPTION_CLASSES`, those equal to their defaults left out, so that two configs of the same
    options compare equal. What is no options object is kept, last, for the checks to name."""
    items = tuple(held) if isinstance(held, (tuple, list)) else (held,)
    order = {cls: i for i, cls in enumerate(OPTION_CLASSES)}
    kept = [item for item in items if not (type(item) in order and item == type(item)())]
    return tuple(sorted(kept, key=lambda item: order.get(type(item), len(order))))


def folded(held: tuple[Any, ...], flat: Mapping[str, Any]) -> tuple[Any, ...]:
    """``held`` with the flat keywords given (``random_input_len=64``) set in their classes' objects."""
    by_class: dict[type[DatasetOptions], dict[str, Any]] = {}
    for name, value in flat.items():
        cls, field = FLAT_NAMES[name]
        by_class.setdefault(cls, {})[field] = value
    rest = [item for item in held if type(item) not in by_class]
    return normalised((*rest, *(dataclasses.replace(find(held, cls), **fields) for cls, fields in by_class.items())))


def flattened(held: Iterable[object]) -> dict[str, Any]:
    """Every options class's fields by flat name, the defaults where ``held`` has none of that class:
    the keys the result file's config section has always had."""
    held = tuple(held)
    out: dict[str, Any] = {}
    for cls in OPTION_CLASSES:
        options = find(held, cls)
        out.update({flat_name(cls, field): getattr(options, field.name) for field in dataclasses.fields(cls)})
    return out
