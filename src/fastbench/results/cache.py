"""The server's prefix cache as the run saw it, and whether it saw more than the workload explains.

Three figures side by side (definitions in ``definitions.DEFINITIONS``): the server's /metrics hit rate over the
window (``prefix_cache_hit_rate``, from ``server.prefixcache``); per request, the cached tokens its usage reported
(``cached_tokens``) and the run's share of them (``cached_tokens_share``); and the share the workload's own
sharing predicts (``expected_prefix_share``): what a prefix cache could serve if it held only what this run
sent before each request. Where the cache served far more than that (:data:`WARN_MARGIN`), the prompts were in
it before the run, most often because the same prompts (the same seed) were sent before, and the run's TTFT
measures the cache: ``prefix_cache_warning`` says so in one line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from fastbench.config import BenchConfig
from fastbench.datasetoptions import MultiTurnOptions
from fastbench.results.distribution import Distribution
from fastbench.results.records import COL

# The observed share is warned of when it passes the expected one by more than this (a share of prompt tokens).
WARN_MARGIN = 0.2
# What the notes, the console and the reports put before the warning (its own text has no label).
LABEL = "prefix cache: "
# The card names the seed where the server's cache served at least this share beyond the expected one.
SEED_NOTE_MARGIN = 0.05

FLAT_KEYS = ("prefix_cache_hit_rate", "cached_tokens_share", "mean_cached_tokens", "median_cached_tokens",
             "p99_cached_tokens", "expected_prefix_share", "prefix_cache_warning")


@dataclasses.dataclass(frozen=True)
class PrefixCacheSummary:
    """What the run saw of the server's prefix cache, and what its workload predicts."""

    hit_rate: float | None  # the server's /metrics hit rate over the window; None without its counters
    cached_tokens: Distribution  # per completed request counted in cached_tokens_share, in tokens
    cached_tokens_share: float | None  # None where no request's usage carried cached_tokens
    requests_reporting: int  # completed requests whose usage carried cached_tokens
    requests_counted: int  # completed requests in cached_tokens_share (reporting, or with usage that left it out)
    expected_prefix_share: float | None  # None where the workload's sharing is unknown
    expected_from: str  # how the expected share was found, or why it is unknown
    observed_from: str | None  # which figure the warning judged: "cached_tokens_share", "prefix_cache_hit_rate"
    warning: str | None

    @property
    def observed(self) -> float | None:
        return self.cached_tokens_share if self.observed_from == "cached_tokens_share" else self.hit_rate

    def flat(self) -> dict[str, Any]:
        """The flat keys beside vllm's at the result file's top level (:data:`FLAT_KEYS`)."""
        dist = self.cached_tokens
        return {"prefix_cache_hit_rate": self.hit_rate, "cached_tokens_share": self.cached_tokens_share,
                "mean_cached_tokens": dist.mean, "median_cached_tokens": dist.median,
                "p99_cached_tokens": dist.p99, "expected_prefix_share": self.expected_prefix_share,
                "prefix_cache_warning": self.warning}

    def seed_note(self, config: BenchConfig, workload_info: Mapping[str, Any] | None = None) -> str | None:
        """The card's note where the server's cache served prompts beyond the workload's own sharing: which
        seed drew them, and that a run repeated with it on a caching server measures the cache
        (``workload_info["prompt_seed"]``, where the workload says what the seed chose, else --seed)."""
        observed = self.observed
        if observed is None or observed < SEED_NOTE_MARGIN:
            return None
        expected = self.expected_prefix_share
        if expected is not None and observed - expected < SEED_NOTE_MARGIN:
            return None
        seed, varies = _prompt_seed(config, workload_info or {})
        served = f"the server's prefix cache served {100 * observed:.0f} % of their tokens"
        if not varies:
            return (f"these prompts are the same whatever the seed (a file read in order) and {served}: a run "
                    "repeated on a caching server measures the cache, not prefill (use --reset-prefix-cache, or "
                    "--dataset-order random with another --seed)")
        return (f"the prompts were drawn with seed {seed} (--seed) and {served}: a run repeated with the same seed "
                "on a caching server measures the cache, not prefill (use another --seed, or --reset-prefix-cache)")


def _prompt_seed(config: BenchConfig, workload_info: Mapping[str, Any]) -> tuple[Any, bool]:
    """The seed that drew the prompts and whether another would draw others: the workload's word
    (``prompt_seed``: ``seed``, ``varies_prompts``) where it gives one, else --seed."""
    stated = workload_info.get("prompt_seed")
    if isinstance(stated, Mapping):
        return stated.get("seed", config.seed), stated.get("varies_prompts") is not False
    return config.seed, True


def prefix_cache_summary(rows: np.ndarray, completed: np.ndarray, prompt: np.ndarray, config: BenchConfig,
                         workload_info: Mapping[str, Any], server_info: Mapping[str, Any]) -> PrefixCacheSummary:
    """The run's prefix-cache figures from the request table (``completed``: its completed rows; ``prompt``:
    per row the server's prompt tokens, else the workload's, -1 unknown)."""
    stats = server_info.get("prefix_cache_stats") or {}
    hit_rate = stats.get("hit_rate")
    done = rows[completed]
    done_prompt = prompt[completed]
    cached = done[:, COL["cached_tokens"]]
    reporting = cached >= 0
    # vLLM leaves prompt_tokens_details out when nothing was cached: where some request carried it, a request
    # whose usage came without it had 0 cached
    counted = (reporting | (done[:, COL["prompt_tokens"]] >= 0)) & (done_prompt > 0) if reporting.any() \
        else np.zeros(len(done), dtype=bool)
    values = np.where(reporting, cached, 0)[counted]
    prompt_sum = sum(done_prompt[counted].tolist())
    share = sum(values.tolist()) / prompt_sum if prompt_sum > 0 else None
    expected_tokens, expected_from = _expected(rows, prompt, config, workload_info)
    expected = None
    if expected_tokens is not None:
        known = completed & (prompt > 0)
        total = sum(prompt[known].tolist())
        expected = sum(expected_tokens[known].tolist()) / total if total > 0 else None
    observed_from = "cached_tokens_share" if share is not None else "prefix_cache_hit_rate" if hit_rate is not None \
        else None
    summary = PrefixCacheSummary(
        hit_rate=hit_rate, cached_tokens=Distribution.from_values(values, "tokens", scale=1.0),
        cached_tokens_share=share, requests_reporting=int(reporting.sum()), requests_counted=int(counted.sum()),
        expected_prefix_share=expected, expected_from=expected_from, observed_from=observed_from, warning=None)
    return dataclasses.replace(summary, warning=_warning(summary, config, workload_info, rows, completed,
                                                         expected_tokens))


def _expected(rows: np.ndarray, prompt: np.ndarray, config: BenchConfig,
              workload_info: Mapping[str, Any]) -> tuple[np.ndarray | None, str]:
    """Per row, the prompt tokens the workload's own sharing lets a cache serve, and how they were found."""
    n = len(rows)
    index = rows[:, COL["index"]]
    lens = workload_info.get("prompt_lens")
    if "session_of_row" in workload_info:
        replies = config.options(MultiTurnOptions).history == "server"
        shared = _history_tokens(rows, prompt, np.asarray(workload_info["session_of_row"]),
                                 np.asarray(workload_info["turn_of_row"]), replies)
        how = ("multi-turn history: each turn's previous turn's prompt"
               + (" and the server's reply" if replies else ""))
    elif workload_info.get("shared_prompt_tokens") is not None:
        per_request = workload_info["shared_prompt_tokens"]
        shared = np.asarray([per_request[i] if 0 <= i < len(per_request) else 0 for i in index.tolist()],
                            dtype=np.int64).reshape(n)
        how = f"the prompts' shared prefixes and repeats, in the order sent ({config.dataset_name})"
    else:
        return None, (f"unknown: what {config.dataset_name}'s prompts share is not known (read from a file), so "
                      "the server's hit rate is not checked against it")
    return with_template_tokens(rows, prompt, shared, lens), how


def with_template_tokens(rows: np.ndarray, prompt: np.ndarray, shared: np.ndarray, lens: Any) -> np.ndarray:
    """Per row, the workload's shared tokens ``shared`` as a cache would find them: plus the tokens the server
    counts beyond the workload's own (``lens``, indexed by request index), at most the prompt."""
    n = len(rows)
    # the server's tokens beyond the workload's count (a chat template's, a BOS) are taken as shared: most of
    # them open every prompt the same way
    template = np.zeros(n, dtype=np.int64)
    if lens is not None:
        workload = np.asarray([lens[i] if 0 <= i < len(lens) and lens[i] is not None else -1
                               for i in rows[:, COL["index"]].tolist()], dtype=np.int64).reshape(n)
        server = rows[:, COL["prompt_tokens"]]
        template = np.where((workload >= 0) & (server >= 0), np.maximum(server - workload, 0), 0)
    return np.asarray(np.minimum(np.maximum(prompt, 0), shared + template))


def _history_tokens(rows: np.ndarray, prompt: np.ndarray, session_of_row: np.ndarray, turn_of_row: np.ndarray,
                    with_reply: bool) -> np.ndarray:
    """Per row of a multi-turn run, the tokens its history shares with the session's turn before: that
    turn's prompt, and its output where the history carries the server's own reply."""
    shared = np.zeros(len(rows), dtype=np.int64)
    before: dict[tuple[int, int], int] = {}
    for row, (session, turn) in enumerate(zip(session_of_row.tolist(), turn_of_row.tolist())):
        before[(session, turn)] = row
    output = rows[:, COL["output_tokens"]]
    for row, (session, turn) in enumerate(zip(session_of_row.tolist(), turn_of_row.tolist())):
        prev = before.get((session, turn - 1))
        if prev is not None and prompt[prev] > 0:
            shared[row] = prompt[prev] + (max(int(output[prev]), 0) if with_reply else 0)
    return shared


def _warning(summary: PrefixCacheSummary, config: BenchConfig, workload_info: Mapping[str, Any], rows: np.ndarray,
             completed: np.ndarray, expected_tokens: np.ndarray | None) -> str | None:
    observed, expected = summary.observed, summary.expected_prefix_share
    if observed is None or expected is None or observed <= expected + WARN_MARGIN:
        return None
    source = ("the per-request cached tokens in the server's usage" if summary.observed_from == "cached_tokens_share"
              else "the server's /metrics hit rate")
    # no "prefix cache:" opening: the key names it, and each place that shows it puts that label (LABEL) before it
    text = (f"{100 * observed:.0f} % of prompt tokens came from the server's cache, far above the "
            f"{100 * expected:.0f} % this workload's own sharing predicts ({source})")
    first = _first_cached(rows, completed, expected_tokens)
    if first is not None:
        text += f"; the first request sent already found {first[0]:,} of {first[1]:,} prompt tokens cached"
    seed, _ = _prompt_seed(config, workload_info)
    return (text + f": the cache held these prompts before the run (the same prompts sent before, e.g. a run "
            f"repeated with seed {seed}), so TTFT, prefill rate and E2E latency measure the cache")


def _first_cached(rows: np.ndarray, completed: np.ndarray,
                  expected_tokens: np.ndarray | None) -> tuple[int, int] | None:
    """The first-sent completed request's cached and prompt tokens, where its usage said it found more cached
    than the run had sent before it (a request without cached_tokens in a run whose others have them had 0)."""
    done = np.flatnonzero(completed)
    if not done.size or expected_tokens is None:
        return None
    first = int(done[np.argmin(rows[done, COL["sent_ns"]])])
    cached = max(int(rows[first, COL["cached_tokens"]]), 0)
    if cached <= expected_tokens[first]:
        return None
    return cached, int(rows[first, COL["prompt_tokens"]])


def summary_to_dict(summary: PrefixCacheSummary) -> dict[str, Any]:
    """The result file's ``fastbench.prefix_cache``."""
    dist = summary.cached_tokens
    return {
        "hit_rate": summary.hit_rate,
        "cached_tokens_share": summary.cached_tokens_share,
        "cached_tokens": {"count": dist.count, "mean": dist.mean, "median": dist.median, "p90": dist.p90,
                          "p99": dist.p99, "min": dist.min, "max": dist.max, "std": dist.std},
        "requests_reporting": summary.requests_reporting,
        "requests_counted": summary.requests_counted,
        "expected_prefix_share": summary.expected_prefix_share,
        "expected_from": summary.expected_from,
        "observed_from": summary.observed_from,
        "warn_margin": WARN_MARGIN,
        "warning": summary.warning,
    }
