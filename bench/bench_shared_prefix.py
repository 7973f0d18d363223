"""How long building 100,000 shared-prefix requests takes, beside a naive build of the same bodies.

Each case builds the workload as a run does (``await build_workload(...)`` inside the run's event loop,
with a context length to screen against) and times it, in wall time and process CPU; beside it, in the
same run, the naive way: each prompt made as a Python list (the prefix's ids plus the suffix's) and the
whole body serialised per request. The target: under 2 s for 100,000 requests. On a shared
machine, wall time follows the load of others (printed first); CPU time is this build's own.
Prints a Markdown table.

    .venv/bin/python bench/bench_shared_prefix.py            # 100,000 requests per case
    .venv/bin/python bench/bench_shared_prefix.py --requests 20000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time
from typing import Any

import numpy as np
import orjson

from fastbench.config import BenchConfig
from fastbench.datasetoptions import SharedPrefixOptions
from fastbench.load.datasets import build_workload

TARGET_S = 2.0


def _cases(n: int) -> list[tuple[str, BenchConfig]]:
    return [
        ("generated-shared-prefix, 100 groups, 512 + 64 tokens, completions (token ids)",
         BenchConfig(dataset_name="generated-shared-prefix", num_prompts=n, gsp_num_groups=100,
                     gsp_prompts_per_group=n // 100, gsp_system_prompt_len=512, gsp_question_len=64)),
        ("prefix_repetition, 10 prefixes, 512 + 64 tokens, completions (token ids)",
         BenchConfig(dataset_name="prefix_repetition", num_prompts=n, prefix_repetition_prefix_len=512,
                     prefix_repetition_suffix_len=64)),
        ("random --random-prefix-len 512, input 64, completions (token ids)",
         BenchConfig(num_prompts=n, random_prefix_len=512, random_input_len=64)),
        ("generated-shared-prefix, 100 groups, 512 + 64 words, chat",
         BenchConfig(dataset_name="generated-shared-prefix", num_prompts=n, gsp_num_groups=100,
                     gsp_prompts_per_group=n // 100, gsp_system_prompt_len=512, gsp_question_len=64,
                     endpoint="/v1/chat/completions")),
        ("generated-shared-prefix, 64 groups, SGLang's defaults 2,048 + 128 tokens, completions",
         BenchConfig(dataset_name="generated-shared-prefix", num_prompts=n, gsp_num_groups=64,
                     gsp_prompts_per_group=-(-n // 64))),
    ]


def _timed(fn: Any) -> tuple[Any, float, float]:
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _build_in_a_loop(config: BenchConfig) -> Any:
    """The workload built inside a running loop, as a run builds it; ``asyncio.run(build_workload(...))``
    would also time asyncio.run's finishing of a task whose result holds every body (seconds at 100,000)."""
    async def build() -> tuple[Any, float, float]:
        gc.collect()
        wall, cpu = time.perf_counter(), time.process_time()
        work = await build_workload(config, "m", max_model_len=1 << 20)
        return work, time.perf_counter() - wall, time.process_time() - cpu

    return asyncio.run(build())


def _naive(n: int, prefix_len: int, suffix_len: int, groups: int) -> list[bytes]:
    """The same shape of bodies, each prompt a Python list and each body serialised whole."""
    rng = np.random.default_rng(0)
    prefixes = [rng.integers(1000, 30000, size=prefix_len).tolist() for _ in range(groups)]
    bodies = []
    for i in range(n):
        prompt = prefixes[i % groups] + rng.integers(1000, 30000, size=suffix_len).tolist()
        bodies.append(orjson.dumps({"model": "m", "prompt": prompt, "max_tokens": 256, "stream": True,
                                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}))
    return bodies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    n = parser.parse_args().requests
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {n:,} requests per case; "
          f"target under {TARGET_S:g} s\n")
    print("| case | wall s | CPU s | bodies MB | naive wall s | naive / fastbench |")
    print("|---|---|---|---|---|---|")
    for name, config in _cases(n):
        work, wall, cpu = _build_in_a_loop(config)
        assert len(work.requests) == n
        size = sum(len(r.body) for r in work.requests) / 1e6
        naive_text = ratio = "-"
        if config.endpoint == "/v1/completions" and config.dataset_name == "generated-shared-prefix":
            gsp = config.options(SharedPrefixOptions)
            _, naive_wall, _ = _timed(lambda g=gsp: _naive(n, g.system_prompt_len, g.question_len, g.num_groups))
            naive_text, ratio = f"{naive_wall:.2f}", f"{naive_wall / wall:.1f}x"
        verdict = "" if wall < TARGET_S else " (over target)"
        print(f"| {name} | {wall:.2f}{verdict} | {cpu:.2f} | {size:,.0f} | {naive_text} | {ratio} |")
        del work


if __name__ == "__main__":
    main()
