"""What a sweep's cell starts from: the seed that draws its prompts, and whether the server's prefix
cache is emptied before it (docs/sweep.md, "A cell is an independent sample").

A server's prefix cache is state a cell must not inherit: two cells sending the same prompts make the
second one measure the cache (vLLM V1 caches prefixes by default). So with ``prompt_reuse = "fresh"``
(the default) each grid point and repeat draws its own prompts, from a seed derived from the sweep's
seed, the point's values and the repeat by SHA-256 (stable across runs and machines, unlike Python's
``hash()``). The variant is left out: cells of two variants at one point and repeat send the same
prompts, a paired comparison, since each variant is its own server with its own cache. Variants
attached to one server share its cache, so there the variant enters the seed too. ``"shared"`` keeps
the older behaviour: every cell the sweep's seed. The sweep's warm-ups draw from a seed no cell gets.

A cell seed is below 2**62 and the warm-up seed at or above it, so the two never meet (a sweep seed
given at or above 2**62 in shared mode is stepped around).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from fastbench.study.grid import canonical

__all__ = ("PROMPT_REUSE", "SHARED_CACHE", "cell_seed", "reset_rule", "warmup_seed")

PROMPT_REUSE = ("fresh", "shared")
_CELL_SEEDS = 1 << 62  # cell seeds are below it, the warm-up seed at or above it


def _digest(value: Any) -> int:
    return int.from_bytes(hashlib.sha256(canonical(value).encode()).digest()[:8], "big")


def cell_seed(sweep_seed: int, values: Mapping[str, Any], repeat: int, *, variant: str | None = None) -> int:
    """The seed of a fresh cell's prompts (and arrivals): from the sweep's seed, the point's crossed
    values and the repeat; ``variant`` only for variants whose cells share one server's cache."""
    key: dict[str, Any] = {"sweep_seed": sweep_seed, "values": dict(values), "repeat": repeat}
    if variant is not None:
        key["variant"] = variant
    return _digest(key) % _CELL_SEEDS


def warmup_seed(sweep_seed: int, cell_seeds: Sequence[int] = (), sweep_name: str = "") -> int:
    """The seed of the sweep's warm-up requests: at or above every fresh cell's, and none of
    ``cell_seeds`` (a shared sweep's seed may be anything). The sweep's name enters it: two sweeps
    against one server must not warm it with the same prompts (the second one's warm-up was all cached)."""
    seed = _CELL_SEEDS + _digest({"sweep_seed": sweep_seed, "warmup": True, "sweep": sweep_name}) % _CELL_SEEDS
    taken = set(cell_seeds)
    while seed in taken:
        seed = _CELL_SEEDS + (seed + 1) % _CELL_SEEDS
    return seed


SHARED_CACHE = "prompts are shared, so every cell after the first on this server measures its prefix cache"


def reset_rule(kind: str, engine: str | None, asked: bool | None, prompt_reuse: str = "fresh") -> tuple[bool, str]:
    """Whether a variant's cells ask the server to empty its prefix cache before each cell, and why,
    in words a result keeps. ``kind``: "launch", "attach" or "synthetic"; ``asked``: ``[sweep]
    reset_prefix_cache`` (None: not given, the default by kind); ``prompt_reuse``: with "shared", a
    server whose cache is kept serves every later cell's prompts from it, and the words say so."""
    reset, why = _reset_rule(kind, engine, asked)
    if not reset and kind != "synthetic":
        why += f"; {SHARED_CACHE}" if prompt_reuse == "shared" else "; fresh prompts keep cells apart"
    return reset, why


def _reset_rule(kind: str, engine: str | None, asked: bool | None) -> tuple[bool, str]:
    if asked is not None:
        return asked, f"{'on' if asked else 'off'}: [sweep] reset_prefix_cache = {str(asked).lower()}"
    if kind == "launch" and engine in ("vllm", "sglang"):
        need = " (fastbench sets VLLM_SERVER_DEV_MODE=1 for it)" if engine == "vllm" else ""
        return True, f"on: a launched {'vLLM' if engine == 'vllm' else 'SGLang'} server{need}"
    if kind == "launch":
        return False, f"off: a launched {engine} server has no prefix-cache reset"
    if kind == "attach":
        return False, ("off: an attached server's cache is emptied only when asked "
                       "([sweep] reset_prefix_cache = true)")
    return False, "off: the built-in synthetic server is started by each run, its cache empty"
