"""Speculative-decoding acceptance and server gauges over the measured window, from /metrics scrapes.

Definitions (vLLM's, from counter deltas over the window, never the server's lifetime):

* mean acceptance length = 1 + accepted tokens / drafts (the 1 is the verifier's bonus token);
* draft acceptance rate = accepted tokens / draft tokens (``vllm bench serve`` writes it in percent);
* acceptance at draft position i = accepted tokens at position i / drafts.

Counters read (summed over their series, one per engine): ``vllm:spec_decode_num_drafts_total``,
``vllm:spec_decode_num_draft_tokens_total``, ``vllm:spec_decode_num_accepted_tokens_total``,
``vllm:spec_decode_num_accepted_tokens_per_pos_total{position}``, and llama.cpp's ``llamacpp:``
counters of the same names where present. The range ("2.08 (1.86-2.21)") is over the intervals between
consecutive scrapes during the window; an interval with fewer than ``MIN_INTERVAL_DRAFTS`` drafts is
merged into the next one (the last into the one before) so that a near-empty interval does not set the range.

A misbehaving server's counters are recorded, never trusted blindly: a read whose counters are no counts
(NaN, ±Inf, negative, above 2^53) is left out, position labels beyond ``MAX_DRAFT_POSITIONS`` are dropped, and
counters that contradict each other (more accepted than drafted) give no figures; ``notes`` says which.

Also here: KV-cache usage and running / waiting requests sampled over the window, and vLLM's KV-cache
settings (``vllm:cache_config_info``). vLLM's "SpecDecoding metrics:" log lines are read in
``serverlog``; the card's rows are worded in ``fastbench.results.serversections``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from fastbench.server import prefixcache
from fastbench.server.prom import MAX_COUNT, Metrics, Scrape

__all__ = (
    "SpecCounters",
    "SpecFigures",
    "analyze",
    "cache_config",
)

SPEC_PREFIXES = ("vllm:", "llamacpp:")
DRAFTS = "spec_decode_num_drafts_total"
DRAFT_TOKENS = "spec_decode_num_draft_tokens_total"
ACCEPTED = "spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "spec_decode_num_accepted_tokens_per_pos_total"
MIN_INTERVAL_DRAFTS = 10
# Speculative methods draft at most a few dozen tokens a step (EAGLE, MTP and n-gram configs use <= ~16);
# a position label beyond this is a broken server, and a list indexed by it could take all memory.
MAX_DRAFT_POSITIONS = 256
_POSITION = re.compile(r"[0-9]+")  # ASCII digits only: str.isdigit() accepts "²", which int() refuses
KV_CACHE_GAUGES = (
    "vllm:kv_cache_usage_perc",  # a fraction 0-1 despite its name
    "vllm:gpu_cache_usage_perc",  # its name before vLLM 0.10
    "llamacpp:kv_cache_usage_ratio",
    "sglang:token_usage",
)
GENERATED_COUNTERS = ("vllm:generation_tokens_total", "llamacpp:tokens_predicted_total")
# The engine a /metrics body is from, by its metrics' prefix (for a server fastbench attached to).
ENGINE_PREFIXES = (("vllm:", "vLLM"), ("sglang:", "SGLang"), ("llamacpp:", "llama.cpp"))
RUNNING_GAUGES = ("vllm:num_requests_running", "llamacpp:requests_processing", "sglang:num_running_reqs")
WAITING_GAUGES = ("vllm:num_requests_waiting", "llamacpp:requests_deferred", "sglang:num_queue_reqs")


@dataclasses.dataclass(frozen=True)
class SpecCounters:
    """The speculative-decoding counters of one scrape (or the difference of two)."""

    prefix: str  # "vllm:" or "llamacpp:"
    drafts: float | None
    draft_tokens: float | None
    accepted: float
    per_position: tuple[float, ...]

    @classmethod
    def from_metrics(cls, metrics: Metrics) -> SpecCounters | None:
        """The usable counters of one scrape, or None (see :meth:`read`, which also says what was wrong)."""
        return cls.read(metrics)[0]

    @classmethod
    def read(cls, metrics: Metrics) -> tuple[SpecCounters | None, list[str]]:
        """The counters of one scrape (None without them) and what was wrong with them. A counter with
        a sample that is no count (NaN, ±Inf, negative, above 2^53) makes the whole read unusable:
        summing around one engine's bad series would give a wrong total. Position labels at or beyond
        MAX_DRAFT_POSITIONS are dropped (and said)."""
        prefix = _prefix_of(metrics)
        if prefix is None:
            return None, []
        bad = [(name, problem) for name in (DRAFTS, DRAFT_TOKENS, ACCEPTED, ACCEPTED_PER_POSITION)
               if (problem := metrics.counter_problem(prefix + name)) is not None]
        if bad:
            name, problem = bad[0]
            return None, [f"{prefix}{name} is {problem}: the read's spec-decode counters were left out"]
        beyond_cap = False
        by_position: dict[int, float] = {}
        for label, value in metrics.by_label(prefix + ACCEPTED_PER_POSITION, "position").items():
            if _POSITION.fullmatch(label) is None:
                continue  # not a position number
            digits = label.lstrip("0") or "0"
            # the length first: int() of thousands of digits raises, and > 3 digits is beyond the cap anyway
            if len(digits) > 3 or int(digits) >= MAX_DRAFT_POSITIONS:
                beyond_cap = True
                continue
            index = int(digits)
            by_position[index] = by_position.get(index, 0.0) + value  # "07" and "7" are one position
        per_position = tuple(by_position.get(i, 0.0) for i in range(max(by_position, default=-1) + 1))
        counters = cls(prefix, metrics.total(prefix + DRAFTS), metrics.total(prefix + DRAFT_TOKENS),
                       metrics.total(prefix + ACCEPTED) or 0.0, per_position)
        # each sample was a count, but many series may still sum beyond what a float holds exactly
        if any(v is not None and v > MAX_COUNT for v in (counters.drafts, counters.draft_tokens, counters.accepted,
                                                         *per_position)):
            return None, [f"{prefix}spec_decode_* counters sum above 2^53: the read's spec-decode counters "
                          "were left out"]
        problems = [f"{prefix}{ACCEPTED_PER_POSITION} has position labels at or beyond {MAX_DRAFT_POSITIONS} "
                    "(no method drafts that far): they were left out"] if beyond_cap else []
        return counters, problems

    def since(self, earlier: SpecCounters) -> SpecCounters | None:
        """Counts between ``earlier`` and this scrape; None when a counter went down (a server restart)."""

        def diff(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a - b

        drafts = diff(self.drafts, earlier.drafts)
        draft_tokens = diff(self.draft_tokens, earlier.draft_tokens)
        accepted = self.accepted - earlier.accepted
        old = earlier.per_position + (0.0,) * max(0, len(self.per_position) - len(earlier.per_position))
        per_position = tuple(v - old[i] for i, v in enumerate(self.per_position))
        if any(x is not None and x < 0 for x in (drafts, draft_tokens, accepted, *per_position)):
            return None
        return SpecCounters(self.prefix, drafts, draft_tokens, accepted, per_position)


def _prefix_of(metrics: Metrics) -> str | None:
    """The prefix of the spec-decode counters ``metrics`` has (accepted, and drafts or draft tokens)."""
    for prefix in SPEC_PREFIXES:
        if prefix + ACCEPTED in metrics and (prefix + DRAFTS in metrics or prefix + DRAFT_TOKENS in metrics):
            return prefix
    return None


def _contradiction(delta: SpecCounters) -> str | None:
    """How counter deltas contradict each other (a rate above 100 % would follow), or None."""
    if delta.draft_tokens is not None and delta.accepted > delta.draft_tokens:
        return f"accepted {delta.accepted:,.0f} > drafted {delta.draft_tokens:,.0f} draft tokens"
    if delta.drafts is not None:
        for position, accepted in enumerate(delta.per_position):
            if accepted > delta.drafts:
                return f"accepted at position {position} {accepted:,.0f} > drafts {delta.drafts:,.0f}"
    return None


@dataclasses.dataclass(frozen=True)
class SpecFigures:
    """Acceptance figures of a span of time, derived from counter deltas (definitions above)."""

    drafts: float | None
    draft_tokens: float | None
    accepted: float
    acceptance_length: float | None
    acceptance_rate: float | None  # a fraction
    per_position: tuple[float, ...]
    inconsistent: str | None = None  # how the counters contradict each other; then no figures

    @classmethod
    def of(cls, delta: SpecCounters) -> SpecFigures:
        drafts, draft_tokens = delta.drafts, delta.draft_tokens
        contradiction = _contradiction(delta)
        if contradiction is not None:
            # which counter is wrong cannot be told, so none of the figures is a measurement
            return cls(drafts, draft_tokens, delta.accepted, None, None, (), contradiction)
        length = 1 + delta.accepted / drafts if drafts else None
        rate = delta.accepted / draft_tokens if draft_tokens else None
        per_position = tuple(v / drafts for v in delta.per_position) if drafts else ()
        return cls(drafts, draft_tokens, delta.accepted, length, rate, per_position)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"per_position": list(self.per_position)}


def _interval_figures(points: Sequence[tuple[float, SpecCounters]]) -> list[tuple[float, float, SpecFigures]]:
    """Figures of each interval between consecutive scrapes (``(t_start, t_end, figures)``), merging an
    interval with fewer than MIN_INTERVAL_DRAFTS drafts (or draft tokens, without a drafts counter)
    into the next; a last short one is merged into the one before it. The intervals then tie up the
    window, so the window's figure (a draft-weighted mean of theirs) lies inside their range."""
    out: list[tuple[float, float, SpecFigures]] = []
    starts: list[int] = []
    start = 0
    for end in range(1, len(points)):
        delta = points[end][1].since(points[start][1])
        if delta is None:  # counters went down: start again from here
            start = end
            continue
        amount = delta.drafts if delta.drafts is not None else (delta.draft_tokens or 0.0)
        if amount >= MIN_INTERVAL_DRAFTS:
            out.append((points[start][0], points[end][0], SpecFigures.of(delta)))
            starts.append(start)
            start = end
    last = len(points) - 1
    if out and start < last:
        merged = points[last][1].since(points[starts[-1]][1])
        if merged is not None:
            out[-1] = (points[starts[-1]][0], points[last][0], SpecFigures.of(merged))
    return out


def _range(values: Iterable[float | None]) -> tuple[float, float] | None:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return (min(present), max(present)) if present else None


def _gauge(metrics: Metrics, names: Sequence[str], *, mean: bool) -> float | None:
    for name in names:
        if name in metrics:
            return metrics.mean(name) if mean else metrics.total(name)  # both leave non-numbers out
    return None


def _stats(values: Sequence[float | None]) -> dict[str, float] | None:
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"mean": math.fsum(present) / len(present), "max": max(present), "min": min(present)}


@dataclasses.dataclass(frozen=True)
class _Reading:
    """What the analysis takes from one scrape. The parsed scrape is dropped at once: a vLLM body
    parses into ~1 MB of objects, and a window keeps hundreds of bodies."""

    t: float
    kv_cache_usage: float | None
    running: float | None
    waiting: float | None
    kv_names: frozenset[str]  # the KV_CACHE_GAUGES present
    engine: str | None  # the engine its metric names are from (ENGINE_PREFIXES), if any
    prefix: str | None  # of the spec-decode counters present
    counters: SpecCounters | None
    problems: tuple[str, ...]  # what was wrong with the counters
    generated: tuple[tuple[float | None, bool], ...]  # per GENERATED_COUNTERS: total, and "is no count"
    prefix_cache: tuple[prefixcache.PrefixCounters | None, str | None]  # its counters, what was wrong

    @classmethod
    def of(cls, scrape: Scrape) -> _Reading:
        m = scrape.metrics()
        counters, problems = SpecCounters.read(m)
        return cls(
            t=scrape.t,
            kv_cache_usage=_gauge(m, KV_CACHE_GAUGES, mean=True),
            running=_gauge(m, RUNNING_GAUGES, mean=False),
            waiting=_gauge(m, WAITING_GAUGES, mean=False),
            kv_names=frozenset(n for n in KV_CACHE_GAUGES if n in m),
            engine=next((engine for prefix, engine in ENGINE_PREFIXES
                         if any(name.startswith(prefix) for name in m.names())), None),
            prefix=_prefix_of(m),
            counters=counters,
            problems=tuple(problems),
            generated=tuple((m.total(n), m.counter_problem(n) is not None) for n in GENERATED_COUNTERS),
            prefix_cache=prefixcache.PrefixCounters.read(m),
        )


def _generated_delta(readings: Sequence[_Reading]) -> float | None:
    """Last minus first of the first of GENERATED_COUNTERS that both ends have (None if none, if it
    fell, or if either end is no count)."""
    for (a, a_bad), (b, b_bad) in zip(readings[0].generated, readings[-1].generated):
        if a is not None and b is not None:
            if a_bad or b_bad:
                return None
            return b - a if b >= a else None
    return None


def analyze(scrapes: Sequence[Scrape], *, interval_s: float) -> dict[str, Any]:
    """Everything the window's scrapes say: ``spec_decode`` (None without counters), ``prefix_cache``
    (``prefixcache.summarize``'s; None without counters) and ``gauges``.

    The result is plain JSON-ready data (it goes into the result file as it is).
    """
    readings = [_Reading.of(s) for s in scrapes]
    out: dict[str, Any] = {
        "scrapes": len(readings),
        "interval_s": interval_s,
        "span_s": readings[-1].t - readings[0].t if len(readings) > 1 else 0.0,
    }
    t0 = readings[0].t if readings else 0.0

    samples = [{"t_s": round(r.t - t0, 3), "kv_cache_usage": r.kv_cache_usage, "running": r.running,
                "waiting": r.waiting} for r in readings]
    kv_name = next((n for n in KV_CACHE_GAUGES if any(n in r.kv_names for r in readings)), None)
    # The first and last reads are taken at the window's edges, before the first request and after
    # the last: the figures over the window leave those two out (counting them, a run that kept 8
    # requests in flight read a mean of 6.7: a review, 2026-11-30), and are null without reads between.
    inside = samples[1:-1]
    out["gauges"] = {
        "kv_cache_metric": kv_name,
        "t0_monotonic_s": t0 if readings else None,  # the samples' t_s are from here (CLOCK_MONOTONIC)
        "kv_cache_usage": _stats([s["kv_cache_usage"] for s in inside]),
        "running": _stats([s["running"] for s in inside]),
        "waiting": _stats([s["waiting"] for s in inside]),
        "samples": samples,
    }

    out["engine"] = next((r.engine for r in readings if r.engine is not None), None)
    out["spec_decode"] = _spec_decode(readings, t0)
    out["prefix_cache"] = prefixcache.summarize([r.prefix_cache for r in readings])
    first = scrapes[0].metrics() if scrapes else None
    out["cache_config"] = cache_config(first) if first is not None else None
    out["cache_config_engines"] = len(first.series.get(CACHE_CONFIG_INFO, ())) if first is not None else 0
    return out


CACHE_CONFIG_INFO = "vllm:cache_config_info"


def cache_config(metrics: Metrics) -> dict[str, str] | None:
    """vLLM's KV-cache settings as its ``vllm:cache_config_info`` labels give them (engine 0's
    series: with data parallelism each engine has a cache of its own), verbatim; None without the
    series."""
    series = metrics.series.get(CACHE_CONFIG_INFO) or []
    if not series:
        return None
    first = min(series, key=lambda s: s.labels.get("engine", ""))
    return dict(first.labels)


def _spec_decode(readings: Sequence[_Reading], t0: float) -> dict[str, Any] | None:
    """:func:`analyze`'s ``spec_decode``: None without counters (or with one usable read and nothing to
    say); without a window figure, only ``source`` and ``notes`` (why there is none)."""
    points = [(r.t, r.counters) for r in readings if r.counters is not None]
    read_problems = Counter(problem for r in readings for problem in r.problems)
    notes = [f"{count} of {len(readings)} /metrics reads: {problem}" for problem, count in read_problems.items()]
    prefix = next((r.prefix for r in readings if r.prefix is not None), None)
    if prefix is None or (len(points) < 2 and not notes):
        return None
    unusable = {"source": f"{prefix}spec_decode_* counters", "notes": notes}
    if len(points) < 2:
        notes.append("fewer than 2 reads with usable counters: no figures over the window")
        return unusable
    first, last = points[0][1], points[-1][1]
    delta = last.since(first)
    if delta is None:
        notes.append("the counters went down between the window's first and last usable read "
                     "(a server restart?): no figures over the window")
        return unusable
    window = SpecFigures.of(delta)
    intervals = _interval_figures(points)
    if window.inconsistent is not None:
        notes.append(f"the server's counters contradict each other over the window ({window.inconsistent}): "
                     "no acceptance length or rates are given, only the raw counter deltas")
    else:
        contradicting = [f.inconsistent for _, _, f in intervals if f.inconsistent is not None]
        if contradicting:
            notes.append(f"the server's counters contradict each other in {len(contradicting)} of "
                         f"{len(intervals)} intervals (first: {contradicting[0]}): left out of the ranges")
    npos = len(window.per_position)
    generated = _generated_delta(readings)
    return {
        "source": f"{first.prefix}spec_decode_* counters",
        "window": window.to_dict(),
        "generated_tokens": generated,
        # every engine step emits 1 + the tokens it accepted: steps = generated - accepted
        "tokens_per_step": generated / (generated - window.accepted)
        if generated is not None and generated > window.accepted and window.inconsistent is None else None,
        "counters_first": dataclasses.asdict(first),
        "counters_last": dataclasses.asdict(last),
        "intervals": [
            {"t_start_s": round(a - t0, 3), "t_end_s": round(b - t0, 3), **f.to_dict()}
            for a, b, f in intervals
        ],
        "acceptance_length_range": _range(f.acceptance_length for _, _, f in intervals),
        "acceptance_rate_range": _range(f.acceptance_rate for _, _, f in intervals),
        "per_position_range": [
            _range(f.per_position[i] if i < len(f.per_position) else None for _, _, f in intervals)
            for i in range(npos)
        ],
        "vllm_keys": vllm_keys(window),
        "notes": notes,
    }


def vllm_keys(window: SpecFigures) -> dict[str, Any]:
    """The keys ``vllm bench serve`` writes (acceptance rate in percent, as it does); {} without drafts,
    or when the counters contradict each other (those keys would present impossible figures as measured)."""
    if not window.draft_tokens or window.inconsistent is not None:
        return {}
    return {
        "spec_decode_acceptance_rate": 100.0 * window.acceptance_rate if window.acceptance_rate is not None
        else None,
        # null without a drafts counter (a server may count only draft tokens): 0.0 would read as measured
        "spec_decode_acceptance_length": window.acceptance_length,
        "spec_decode_num_drafts": None if window.drafts is None else int(window.drafts),
        "spec_decode_draft_tokens": int(window.draft_tokens),
        "spec_decode_accepted_tokens": int(window.accepted),
        "spec_decode_per_position_acceptance_rates": list(window.per_position),
    }
