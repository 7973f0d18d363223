"""The server's prefix cache over the measured window, from its /metrics counters; and its reset.

Hit rate = cached prompt tokens / prompt tokens looked up, from the deltas over the window (first to last
read) of vLLM's counters ``vllm:prefix_cache_hits_total`` and ``vllm:prefix_cache_queries_total``
(vLLM 0.32, ``vllm/v1/metrics/loggers.py``: both in tokens, summed over their series, one per engine).
vLLM counts a request when the scheduler first looks it up (a request preempted and looked up again is
not counted twice), and never counts its last prompt token as a hit (it must be computed for logits).
Its own log line "Prefix cache hit rate" is over its last 1,000 requests, not over fastbench's window.

A server's counters are recorded, never trusted blindly: a read whose counters are no counts is left
out, counters that went down (a restart) or say more hits than queries give no rate, and ``notes``
says which.

``reset_prefix_cache`` asks the server to empty its prefix cache before a run: vLLM's
``POST /reset_prefix_cache`` (served only with ``VLLM_SERVER_DEV_MODE=1``; it answers
``{"success": false}`` while requests hold blocks, so it is asked again for a few seconds), then SGLang's
``POST /flush_cache``. llama.cpp and OpenAI-compatible servers in general have no such endpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

import aiohttp
import orjson

from fastbench.server import control
from fastbench.server.prom import Metrics

__all__ = ("HITS", "QUERIES", "PrefixCounters", "not_asked", "reset_prefix_cache", "summarize")

QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"
RESET_TIMEOUT_S = 10.0
# vLLM answers {"success": false} while requests hold blocks: asked again this often, for this long.
RESET_RETRY_INTERVAL_S = 0.25
RESET_RETRY_S = 5.0
# Where each engine empties its prefix cache, tried in turn (a 404 moves on to the next).
RESET_ENDPOINTS = (("/reset_prefix_cache", "vLLM"), ("/flush_cache", "SGLang"))


@dataclasses.dataclass(frozen=True)
class PrefixCounters:
    """vLLM's two prefix-cache counters of one read (tokens)."""

    queries: float
    hits: float

    @classmethod
    def read(cls, metrics: Metrics) -> tuple[PrefixCounters | None, str | None]:
        """The counters of one read (None without them) and what was wrong with them, if anything."""
        if QUERIES not in metrics or HITS not in metrics:
            return None, None
        for name in (QUERIES, HITS):
            problem = metrics.counter_problem(name)
            if problem is not None:
                return None, f"{name} is {problem}: the read's prefix-cache counters were left out"
        return cls(metrics.total(QUERIES) or 0.0, metrics.total(HITS) or 0.0), None


def summarize(points: Sequence[tuple[PrefixCounters | None, str | None]]) -> dict[str, Any] | None:
    """The window's figures from each read's counters (in time order); None when no read had them."""
    usable = [c for c, _ in points if c is not None]
    problems = [p for _, p in points if p is not None]
    if not usable and not problems:
        return None
    notes = [f"{problems.count(p)} of {len(points)} /metrics reads: {p}" for p in dict.fromkeys(problems)]
    out: dict[str, Any] = {"source": f"{QUERIES}, {HITS}", "queries": None, "hits": None, "hit_rate": None,
                           "counters_first": None, "counters_last": None, "notes": notes}
    if len(usable) < 2:
        notes.append("fewer than 2 reads with usable prefix-cache counters: no hit rate over the window")
        return out
    first, last = usable[0], usable[-1]
    out["counters_first"], out["counters_last"] = dataclasses.asdict(first), dataclasses.asdict(last)
    queries, hits = last.queries - first.queries, last.hits - first.hits
    if queries < 0 or hits < 0:
        notes.append("the prefix-cache counters went down during the window (a server restart?): no hit rate")
        return out
    out["queries"], out["hits"] = queries, hits
    if hits > queries:
        notes.append(f"the server counted more prefix-cache hits ({hits:,.0f} tokens) than queries "
                     f"({queries:,.0f}): no hit rate")
    elif queries == 0:
        notes.append("the server counted no prefix-cache queries in the window (prefix caching off?): no hit rate")
    else:
        out["hit_rate"] = hits / queries
    return out


async def reset_prefix_cache(base_url: str, api_key: str | None, verify_tls: bool = True, *,
                             retry_s: float = RESET_RETRY_S) -> dict[str, Any]:
    """Empty the server's prefix cache. Returns ``{"asked": True, "done": bool, "why_not": one line or
    None, "tries": N}``. vLLM refuses (``{"success": false}``) while requests hold cache blocks, as the
    previous run's cancelled requests may for a moment: asked again every RESET_RETRY_INTERVAL_S for
    up to ``retry_s``."""
    tries = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_s
    async with control.http_session(verify_tls) as session:
        while True:
            tries += 1
            why_not, refused = await _reset_once(session, base_url, api_key)
            if not refused or loop.time() + RESET_RETRY_INTERVAL_S > deadline:
                break
            await asyncio.sleep(RESET_RETRY_INTERVAL_S)
    if refused:
        why_not = f"{why_not} {tries} times over {retry_s:g} s"
    return {"asked": True, "done": why_not is None, "why_not": why_not, "tries": tries}


async def _reset_once(session: aiohttp.ClientSession, base_url: str, api_key: str | None) -> tuple[str | None, bool]:
    """One try: (None, False) when the cache was emptied, else (why not, whether the server refused
    for now: vLLM's ``{"success": false}``, worth asking again)."""
    seen: list[str] = []
    for path, engine in RESET_ENDPOINTS:
        try:
            async with session.post(control.url(base_url, path), headers=control.auth_headers(api_key),
                                    timeout=aiohttp.ClientTimeout(total=RESET_TIMEOUT_S)) as resp:
                body = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            return f"POST {path} failed ({type(exc).__name__}: {exc})", False
        if status in (404, 405):
            seen.append(f"POST {path} ({engine}'s) answered {status}")
            continue
        if status != 200:
            return f"POST {path} answered HTTP {status}", False
        try:
            answer = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError:
            answer = {}
        if isinstance(answer, dict) and answer.get("success") is False:
            return f"POST {path} answered success false (vLLM refuses while requests hold cache blocks)", True
        return None, False
    return ("; ".join(seen) + ": the server has no prefix-cache reset (vLLM serves /reset_prefix_cache only "
            "with VLLM_SERVER_DEV_MODE=1; llama.cpp has none)"), False


def not_asked() -> dict[str, Any]:
    """The record of a run that did not ask for a reset."""
    return {"asked": False, "done": False, "why_not": "not asked (--reset-prefix-cache)", "tries": 0}
