"""A result under the flat key names ``vllm bench serve`` saves, with its meaning and units.

``fastbench.metrics.to_vllm_keys`` is the documented public name of :func:`to_vllm_keys`.
"""

from __future__ import annotations

import datetime
from typing import Any

from fastbench.config import BenchConfig
from fastbench.results.result import Distribution, Result


def vllm_backend(config: BenchConfig) -> str:
    """vllm bench serve's backend name for the endpoint the run called."""
    return _BACKENDS.get(config.endpoint, "openai")


# each endpoint's backend name (fastbench.load.protocols states them; a test holds the two alike)
_BACKENDS = {"/v1/chat/completions": "openai-chat", "/v1/responses": "openai-responses",
             "/v1/messages": "anthropic-messages"}


def to_vllm_keys(result: Result) -> dict[str, Any]:
    """The flat keys ``vllm bench serve`` saves, with its meaning and units (ms, s, per second).

    Differences: in open loop TTFT / E2EL count from the scheduled arrival time
    (coordinated-omission-correct; in closed loop from the send, as vllm); ITL percentiles and means
    come from HDR histograms (within 0.1 %); the per-request ``itls`` array is not kept (the core keeps no
    per-chunk times) and ``max_output_tokens_per_s`` (needs per-token times) is absent. The arrays
    ``input_lens``, ``output_lens``, ``ttfts`` and ``errors`` are always there; ``start_times``,
    ``latencies``, ``queue_times`` and ``generated_texts`` with ``--save-detailed``. Percentiles: p90, p99
    and p99.9 of ttft, tpot, itl and e2el, or what ``--percentile-metrics``/``--metric-percentiles``
    select. ``--metadata`` pairs are top-level keys, under the result's own.
    """
    cfg = result.config
    backend = vllm_backend(cfg)
    model = cfg.model if cfg.model is not None else result.server_info.get("model")
    keys: dict[str, Any] = dict(cfg.metadata)  # first: the result's own keys win, as in vllm bench serve
    keys |= {
        "date": result_date(result),
        "endpoint_type": backend,
        "backend": backend,
        "label": cfg.label if cfg.label is not None else backend,
        "model_id": model,
        "tokenizer_id": cfg.tokenizer if cfg.tokenizer is not None else model,
        "num_prompts": cfg.num_prompts,
        "request_rate": cfg.request_rate if cfg.request_rate is not None else "inf",
        "burstiness": cfg.burstiness,
        "max_concurrency": cfg.effective_concurrency,
        "duration": result.duration_s,
        "completed": result.counts.completed,
        "failed": result.counts.failed,
        "total_input_tokens": result.total_input_tokens,
        "total_output_tokens": result.total_output_tokens,
        "request_throughput": result.throughput.request_throughput,
        "request_goodput": result.throughput.request_goodput,
        "output_throughput": result.throughput.output_throughput,
        "total_token_throughput": result.throughput.total_token_throughput,
        "max_concurrent_requests": result.client.max_concurrent_requests,
    }
    if cfg.ramp_up_strategy is not None:  # as vllm bench serve, whose request_rate stays "inf"
        keys |= {"ramp_up_strategy": cfg.ramp_up_strategy, "ramp_up_start_rps": cfg.ramp_up_start_rps,
                 "ramp_up_end_rps": cfg.ramp_up_end_rps}
    chosen = selected_percentiles(cfg)
    for metric, source in _METRIC_SOURCES.items():
        if metric not in ("ttft", "tpot", "itl", "e2el") and (chosen is None or metric not in chosen[0]):
            continue  # vllm's queue metrics: only when selected
        if source == "e2el" and metric != "e2el" and not cfg.open_loop:
            continue  # as vllm: queue-inclusive E2EL only for an arrival schedule
        dist = result.distributions.get(source) or Distribution.empty("ms")
        # vllm writes 0 for a metric without samples (numpy over an empty list, "or 0")
        keys[f"mean_{metric}_ms"] = dist.mean or 0.0
        keys[f"median_{metric}_ms"] = dist.median or 0.0
        keys[f"std_{metric}_ms"] = dist.std or 0.0
        if chosen is None:
            for name, value in dist.percentiles().items():
                keys[f"{name}_{metric}_ms"] = value or 0.0
        elif metric in chosen[0]:
            for p in chosen[1]:
                keys[f"p{percentile_word(p)}_{metric}_ms"] = dist.selected.get(p) or 0.0
    per = result.per_request
    keys["input_lens"] = list(per.input_lens)
    keys["output_lens"] = list(per.output_lens)
    keys["ttfts"] = list(per.ttfts)
    keys["errors"] = list(per.errors)
    for name in ("start_times", "latencies", "queue_times", "generated_texts", "itls"):
        value = getattr(per, name)
        if value is not None:
            keys[name] = list(value)
    return keys


# vllm's metric names -> fastbench's distribution: its client queue time is the wait from the arrival to
# the send (fastbench's lateness), and its queue-inclusive E2EL is fastbench's open-loop E2EL.
_METRIC_SOURCES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2el",
                   "client_queue_time": "lateness", "e2el_including_client_queue": "e2el"}


def selected_percentiles(cfg: BenchConfig) -> tuple[tuple[str, ...], tuple[float, ...]] | None:
    """(metrics, percentiles) that --percentile-metrics/--metric-percentiles select, with vllm bench
    serve's defaults for the one not given (ttft,tpot,itl; 99); None when neither is given."""
    if cfg.percentile_metrics is None and cfg.metric_percentiles is None:
        return None
    return cfg.percentile_metrics or ("ttft", "tpot", "itl"), cfg.metric_percentiles or (99.0,)


def percentile_word(p: float) -> str:
    """How vllm writes a percentile in a key: 99 -> "99", 99.9 -> "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


def result_date(result: Result) -> str:
    """vllm's date: local time, %Y%m%d-%H%M%S (the result's date key and its file name)."""
    return datetime.datetime.fromisoformat(result.created_at).strftime("%Y%m%d-%H%M%S")
