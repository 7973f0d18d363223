"""How fast random-mm's image requests are built: the images alone and the whole workload.

Two rows per size mix: the images of N requests drawn and built (vLLM's count and size draw, each size's
JPEG and its pools of own rows encoded by Pillow, each image's picks, the bodies' runs over the pieces and
the shared middles), and the whole workload (``await build_workload(...)``: the random dataset's text, the
images, the bodies), with the random dataset's prompt length given (its random words dominate at vLLM's
default of 1024). Target: the images of 10,000 requests and more built per second. On a shared machine
wall time follows the others' load (printed first); CPU time is this build's own. Prints a Markdown table.

    .venv/bin/python bench/bench_images.py                    # 10,000 requests
    .venv/bin/python bench/bench_images.py --requests 50000 --input-len 1024
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fastbench.config import BenchConfig
from fastbench.datasetoptions import RandomMMOptions
from fastbench.load.datasets import build_workload
from fastbench.load.sources.random_mm import build_prompts, draw_items, item_rule

TARGET_PER_S = 10_000
MIXES = {
    "vLLM's default (1 image, 256x256 or 720x1280)": RandomMMOptions(),
    "2-4 images, 256x256 or 512x512": RandomMMOptions(base_items_per_request=3, num_mm_items_range_ratio=0.34,
                                                     bucket_config=((256, 256, 1, 0.5), (512, 512, 1, 0.5))),
}


def _timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def _images(options: RandomMMOptions, n: int) -> int:
    items = draw_items(item_rule(options), n, np.random.default_rng(0))
    prompts = build_prompts(["a prompt of a few words"] * n, items, np.random.default_rng(1))
    return len(prompts)


async def _workload(config: BenchConfig) -> int:
    work = await build_workload(config, "m", max_model_len=None)
    return len(work.requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--input-len", type=int, default=64, help="random-mm's text tokens per request")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.requests:,} requests, "
          f"text of {args.input_len} words\n")
    print("| mix | what is built | wall s | CPU s | requests/s (CPU) | target |")
    print("|---|---|---|---|---|---|")
    for name, options in MIXES.items():
        config = BenchConfig(endpoint="/v1/chat/completions", dataset_name="random-mm", num_prompts=args.requests,
                             random_input_len=args.input_len, dataset_options=options)
        for what, fn in (("images", lambda o=options: _images(o, args.requests)),
                         ("whole workload", lambda c=config: asyncio.run(_workload(c)))):
            n, wall, cpu = _timed(fn)
            rate = n / cpu if cpu > 0 else float("inf")
            verdict = "" if what != "images" else ("met" if rate >= TARGET_PER_S else "MISSED")
            print(f"| {name} | {what} | {wall:.2f} | {cpu:.2f} | {rate:,.0f} | {verdict} |")


if __name__ == "__main__":
    main()
