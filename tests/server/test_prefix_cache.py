"""Prefix caching end to end: the synthetic server's model of vLLM's prefix cache, the hit rate a run reads
from its /metrics counters, the TTFT effect, the cache reset, and the card's and console's rows."""

from __future__ import annotations

import asyncio
import itertools
import urllib.error
import urllib.request
from typing import Any

import aiohttp
import aiohttp.web
import pytest

from support.timing import until_a_round_passes
from fastbench import BenchConfig, run
from fastbench.results.card import render_card
from fastbench.results.result import Result
from fastbench.results.writers import render_console
from fastbench.server.prefixcache import PrefixCounters, reset_prefix_cache, summarize
from fastbench.server.prom import Metrics
from fastbench.synthetic import SyntheticServer
from fastbench.synthetic.prefixcache import PrefixCache

BLOCK = 16


def test_the_synthetic_cache_counts_as_vllm_does() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=100)
    assert cache.admit(list(range(10))) == 0  # cold: 10 queried, none cached; blocks [0-3] [4-7] cached
    assert cache.admit(list(range(10))) == 8  # the two full blocks
    assert cache.admit(list(range(8))) == 4  # the last token is always computed: at most (8 - 1) // 4 blocks
    assert cache.admit([0, 1, 2, 9, 4, 5, 6, 7, 8]) == 0  # a block hits only when all before it match
    assert (cache.queries, cache.hits) == (37, 12)
    cache.reset()
    assert cache.admit(list(range(10))) == 0 and cache.blocks == 2 and cache.resets == 1
    small = PrefixCache(block_size=2, capacity_blocks=2)
    small.admit([1, 2, 3, 4, 5, 6])  # three blocks, the least recently used evicted
    assert small.blocks == 2 and small.admit([1, 2, 3, 4, 5]) == 0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def _post(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_the_synthetic_server_exports_vllms_counters_and_reset() -> None:
    with SyntheticServer(enable_prefix_caching=True, ttft_ms=1, itl_ms=1) as server:
        metrics = Metrics.parse(_get(server.base_url + "/metrics"))
        assert PrefixCounters.read(metrics) == (PrefixCounters(0.0, 0.0), None)
        assert _post(server.base_url + "/reset_prefix_cache") == (200, '{"success":true}')
        assert server.stats()["prefix_cache"]["resets"] == 1
    with SyntheticServer("--no-reset-prefix-cache", ttft_ms=1, itl_ms=1) as server:
        assert _post(server.base_url + "/reset_prefix_cache")[0] == 404  # as vLLM without VLLM_SERVER_DEV_MODE=1
        assert "prefix_cache" not in _get(server.base_url + "/metrics")  # caching off: no counters


def _shared(base_url: str, **changes: object) -> Result:
    """20 prompts of 200 shared + 40 own tokens (token ids, so the server counts them exactly)."""
    config = BenchConfig(base_url=base_url, num_prompts=20, concurrency=4, random_prefix_len=200,
                         random_input_len=40, random_output_len=2, metrics_interval_s=0.2)
    return run(config.replace(**changes))


def test_a_shared_prefix_run_reports_the_servers_hit_rate_exactly() -> None:
    with SyntheticServer(enable_prefix_caching=True, block_size=BLOCK, ttft_ms=1, itl_ms=1) as server:
        result = _shared(server.base_url)
        stats = result.server_info["prefix_cache_stats"]
        counted = server.stats()["prefix_cache"]
    # what the server counted is what the run reports ...
    assert (stats["queries"], stats["hits"]) == (counted["queries"], counted["hits"])
    # ... and what vLLM's rules give: the first request misses, each later one finds the prefix's 12 full blocks
    assert stats["queries"] == 20 * 240 and stats["hits"] == 19 * (200 // BLOCK) * BLOCK
    assert stats["hit_rate"] == stats["hits"] / stats["queries"] and stats["notes"] == []
    assert stats["counters_first"] == {"queries": 0.0, "hits": 0.0}
    # beside TTFT on the card and in the console
    card = render_card(result, BenchConfig(random_prefix_len=200))
    ttft_line = next(i for i, line in enumerate(card.splitlines()) if line.startswith("| TTFT (ms)"))
    assert card.splitlines()[ttft_line + 1].startswith(f"| Prefix cache hit rate | {100 * stats['hit_rate']:.2f} %")
    console = render_console(result).splitlines()
    p99 = next(i for i, line in enumerate(console) if line.startswith("P99 TTFT (ms):"))
    assert console[p99 + 1].startswith("Prefix cache hit rate (%):")
    assert console[p99 + 1].rstrip().endswith(f"{100 * stats['hit_rate']:.2f}")


@pytest.mark.timing
def test_sharing_a_prefix_lowers_ttft_against_the_same_lengths_unshared() -> None:
    # 512 prompt tokens at 20,000 tok/s: 25.6 ms of prefill; with 480 of them cached (30 blocks), 1.6 ms
    with SyntheticServer(enable_prefix_caching=True, block_size=BLOCK, prefill_tok_s=20000, itl_ms=1) as server:
        seeds = itertools.count(1)  # new prompts each round: none found cached from the round before

        def one_round() -> None:
            shared = _shared(server.base_url, random_prefix_len=480, random_input_len=32, num_prompts=12,
                             concurrency=2, seed=next(seeds))
            unshared = _shared(server.base_url, random_prefix_len=0, random_input_len=512, num_prompts=12,
                               concurrency=2, seed=next(seeds))
            assert unshared.server_info["prefix_cache_stats"]["hits"] == 0  # random prompts share nothing
            assert shared.server_info["prefix_cache_stats"]["hit_rate"] > 0.8
            fast, slow = shared.distributions["ttft"].median, unshared.distributions["ttft"].median
            assert fast is not None and slow is not None
            assert fast + 15 < slow, (fast, slow)

        until_a_round_passes(one_round)


def test_reset_prefix_cache_empties_the_cache_before_the_run() -> None:
    with SyntheticServer(enable_prefix_caching=True, block_size=BLOCK, ttft_ms=1, itl_ms=1) as server:
        _shared(server.base_url)
        # the same prompts again: the cache is warm, each finds all its full blocks but the last token's
        again = _shared(server.base_url)
        assert again.server_info["prefix_cache_stats"]["hits"] == 20 * (239 // BLOCK) * BLOCK
        reset = _shared(server.base_url, reset_prefix_cache=True)  # emptied: as on a fresh server
        assert reset.server_info["prefix_cache_stats"]["hits"] == 19 * 192
        assert reset.server_info["prefix_cache_reset"] == {"asked": True, "done": True, "why_not": None, "tries": 1}
        assert again.server_info["prefix_cache_reset"] == {"asked": False, "done": False, "tries": 0,
                                                           "why_not": "not asked (--reset-prefix-cache)"}
        assert server.stats()["prefix_cache"]["resets"] == 1
    with SyntheticServer("--no-reset-prefix-cache", enable_prefix_caching=True, ttft_ms=1, itl_ms=1) as server:
        refused = _shared(server.base_url, reset_prefix_cache=True, num_prompts=2)  # the run goes on
        record = refused.server_info["prefix_cache_reset"]
        assert record["asked"] and not record["done"] and record["tries"] == 1  # a 404 is not asked again
        assert "POST /reset_prefix_cache (vLLM's) answered 404" in record["why_not"]
        assert "VLLM_SERVER_DEV_MODE=1" in record["why_not"]
        assert any(n.startswith("prefix cache not reset (--reset-prefix-cache)") for n in refused.server_info["notes"])


class _BusyVllm:
    """A server whose POST /reset_prefix_cache answers as vLLM's does while requests hold cache blocks
    (``{"success": false}``) ``refusals`` times, then empties it."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.calls = 0

    async def reset(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        self.calls += 1
        return aiohttp.web.json_response({"success": self.calls > self.refusals})


async def _reset_against(refusals: int, retry_s: float) -> tuple[dict[str, Any], int]:
    busy = _BusyVllm(refusals)
    app = aiohttp.web.Application()
    app.router.add_post("/reset_prefix_cache", busy.reset)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        return await reset_prefix_cache(f"http://127.0.0.1:{port}", None, retry_s=retry_s), busy.calls
    finally:
        await runner.cleanup()


def test_a_reset_refused_while_blocks_are_held_is_asked_again() -> None:
    record, calls = asyncio.run(_reset_against(refusals=2, retry_s=5.0))
    assert record == {"asked": True, "done": True, "why_not": None, "tries": 3} and calls == 3
    # still refused when the retries run out: recorded with how often it was asked
    record, calls = asyncio.run(_reset_against(refusals=1000, retry_s=0.6))
    assert not record["done"] and record["tries"] == calls >= 2
    assert record["why_not"] == (f"POST /reset_prefix_cache answered success false (vLLM refuses while requests "
                                 f"hold cache blocks) {calls} times over 0.6 s")


def _metrics(queries: float, hits: float) -> Metrics:
    return Metrics.parse(f'vllm:prefix_cache_queries_total{{engine="0"}} {queries}\n'
                         f'vllm:prefix_cache_hits_total{{engine="0"}} {hits}\n')


@pytest.mark.parametrize(("reads", "rate", "note"), [
    ([(0, 0), (100, 40), (300, 90)], 0.3, None),
    ([(10, 5), (10, 5)], None, "no prefix-cache queries in the window"),
    ([(100, 50), (50, 10)], None, "went down during the window"),
    ([(0, 0), (10, 20)], None, "more prefix-cache hits (20 tokens) than queries (10)"),
    ([(0, 0), (float("nan"), 0), (10, 4)], 0.4, "1 of 3 /metrics reads: vllm:prefix_cache_queries_total is NaN"),
    ([(0, 0)], None, "fewer than 2 reads"),
])
def test_counters_are_recorded_never_trusted_blindly(reads: list[tuple[float, float]], rate: float | None,
                                                     note: str | None) -> None:
    stats = summarize([PrefixCounters.read(_metrics(q, h)) for q, h in reads])
    assert stats is not None and stats["hit_rate"] == rate
    assert (note is None and stats["notes"] == []) or any(note in n for n in stats["notes"] if note)
    assert summarize([PrefixCounters.read(Metrics.parse("vllm:num_requests_running 1\n"))]) is None
