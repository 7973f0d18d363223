"""A result under the flat key names ``vllm bench serve`` saves, with its meaning and units.

``fastbench.metrics.to_vllm_keys`` is the documented public name of :func:`to_vllm_keys`.
"""

from __future__ import annotations

import datetime
from typing import Any

from fastbench.config import BenchConfig
from fastbench.results.result import Distribution, Result


def _vllm_backend(config: BenchConfig) -> str:
    """vllm bench serve's backend name for the endpoint the run called."""
    return "openai-chat" if config.endpoint == "/v1/chat/completions" else "openai"


def to_vllm_keys(result: Result) -> dict[str, Any]:
    """The flat keys ``vllm bench serve`` saves, with its meaning and units (ms, s, per second).

    Differences: in open loop TTFT / E2EL count from the scheduled arrival time
    (coordinated-omission-correct; in closed loop from the send, as vllm); ITL percentiles and means
    come from HDR histograms (within 0.1 %); the per-request ``itls`` and ``generated_texts`` arrays are not kept, and
    ``max_output_tokens_per_s`` (needs per-token times) is absent.
    """
    cfg = result.config
    backend = _vllm_backend(cfg)
    model = cfg.model if cfg.model is not None else result.server_info.get("model")
    keys: dict[str, Any] = {
        "date": datetime.datetime.fromisoformat(result.created_at).strftime("%Y%m%d-%H%M%S"),
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
    for metric in ("ttft", "tpot", "itl", "e2el"):
        dist = result.distributions.get(metric) or Distribution.empty("ms")
        # vllm writes 0 for a metric without samples (numpy over an empty list, "or 0")
        keys[f"mean_{metric}_ms"] = dist.mean or 0.0
        keys[f"median_{metric}_ms"] = dist.median or 0.0
        keys[f"std_{metric}_ms"] = dist.std or 0.0
        for name, value in dist.percentiles().items():
            keys[f"{name}_{metric}_ms"] = value or 0.0
    keys["input_lens"] = list(result.per_request.input_lens)
    keys["output_lens"] = list(result.per_request.output_lens)
    keys["ttfts"] = list(result.per_request.ttfts)
    keys["errors"] = list(result.per_request.errors)
    return keys
