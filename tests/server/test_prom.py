"""promscrape.Metrics over values a misbehaving server may send: counters that are no counts are told
apart, gauges that are no numbers are left out of sums and means. (The parser's own tests are in
test_specdecode.py.)"""

from __future__ import annotations

import asyncio
import itertools
import time
import tracemalloc
import zlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from aiohttp import web

from fastbench.server import prom as promscrape
from fastbench.server import specdecode
from fastbench.server.prom import MAX_COUNT, Metrics, MetricsScraper, counter_problem

T = TypeVar("T")


@pytest.mark.parametrize(("value", "problem"), [
    (float("nan"), "NaN"),
    (float("inf"), "+Inf"),
    (float("-inf"), "-Inf"),
    (-1.0, "negative"),
    (2 * MAX_COUNT, "above 2^53"),
    (0.0, None),
    (12345.0, None),
    (MAX_COUNT, None),
])
def test_counter_problem_of_one_value(value: float, problem: str | None) -> None:
    assert counter_problem(value) == problem


def test_counter_problem_names_the_first_bad_series() -> None:
    m = Metrics.parse('c_total{engine="0"} 10\nc_total{engine="1"} +Inf\nc_total{engine="2"} -3\nok_total 4\n')
    assert m.counter_problem("c_total") == "+Inf"
    assert m.counter_problem("ok_total") is None
    assert m.counter_problem("absent_total") is None


def test_sums_means_and_labels_leave_infinities_out() -> None:
    m = Metrics.parse(
        'g{engine="0"} 0.5\ng{engine="1"} +Inf\ng{engine="2"} NaN\n'
        'r{engine="0"} 3\nr{engine="1"} -Inf\n'
        'p{position="0"} 2\np{position="0"} +Inf\np{position="1"} NaN\n'
        "all_inf +Inf\n"
    )
    assert m.mean("g") == 0.5 and m.total("r") == 3
    assert m.by_label("p", "position") == {"0": 2.0}
    assert m.mean("all_inf") is None and m.total("all_inf") == 0.0


def test_a_metrics_body_past_the_cap_is_a_failed_scrape(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every body of the window is kept, so an endless or huge /metrics must not be read whole."""
    body = b"vllm:num_requests_running 1\n" * 4000  # ~112 kB

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain")

    async def scrape_twice() -> tuple[bool, int, str | None, int]:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            scraper = MetricsScraper(f"http://127.0.0.1:{port}", interval_s=0)
            whole = await scraper.scrape()
            monkeypatch.setattr(promscrape, "MAX_BODY_BYTES", 64 << 10)
            capped = await scraper.scrape()
            await scraper.stop()
            return whole is not None and whole.body == body, scraper.failures, scraper.last_error, \
                int(capped is None)
        finally:
            await runner.cleanup()

    whole_ok, failures, last_error, capped_failed = asyncio.run(scrape_twice())
    assert whole_ok and capped_failed == 1 and failures == 1
    assert last_error == "BodyTooLargeError: a body over 65,536 bytes"


def test_readings_past_2_53_are_left_out_of_sums_not_overflowed() -> None:
    """Two engines at 1e308: math.fsum raised OverflowError and the run was lost."""
    m = Metrics.parse('vllm:num_requests_running{engine="0"} 1e308\nvllm:num_requests_running{engine="1"} 1e308\n'
                      'vllm:num_requests_running{engine="2"} 3\n')
    assert m.total("vllm:num_requests_running") == 3.0
    assert m.mean("vllm:num_requests_running") == 3.0
    assert m.by_label("vllm:num_requests_running", "engine") == {"2": 3.0}


def _vllm_like_body(reading: int) -> bytes:
    """A /metrics body shaped like vLLM's (~60 kB: histograms of many buckets), whose counters are
    ``reading``: one draft and one accepted token per reading."""
    lines = []
    for family in range(12):
        name = f"vllm:request_latency_{family}_seconds"
        lines.append(f"# HELP {name} a histogram\n# TYPE {name} histogram")
        for bucket in range(40):
            lines.append(f'{name}_bucket{{engine="0",le="{bucket * 0.25}",model_name="m"}} {reading * bucket}')
        lines.append(f'{name}_count{{engine="0",model_name="m"}} {reading}')
    lines += [f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {reading}',
              f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {3 * reading}',
              f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {reading}',
              f'vllm:num_requests_running{{engine="0",model_name="m"}} {reading % 7}']
    return ("\n".join(lines) + "\n").encode()


async def _serving_metrics(body_of: Callable[[int], bytes], work: Callable[[str], Awaitable[T]]) -> T:
    """Run ``work(base_url)`` against a server whose n-th /metrics answer is ``body_of(n)``."""
    served = 0

    async def metrics(request: web.Request) -> web.Response:
        nonlocal served
        served += 1
        return web.Response(body=body_of(served), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        return await work(f"http://127.0.0.1:{runner.addresses[0][1]}")
    finally:
        await runner.cleanup()


def test_a_long_window_keeps_a_bounded_evenly_spaced_set_of_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_KEPT_SCRAPES answers every other one is dropped and the interval doubles: the first
    answer stays, the kept ones stay evenly spaced, and what is kept reads back as it was served."""
    monkeypatch.setattr(promscrape, "MAX_KEPT_SCRAPES", 8)

    async def scrape_long(url: str) -> tuple[list[promscrape.Scrape], float]:
        scraper = MetricsScraper(url, interval_s=0.002)
        await scraper.start()
        while scraper.interval_s < 0.002 * 8:  # three thinnings
            await asyncio.sleep(0.01)
        return await scraper.stop(), scraper.interval_s

    scrapes, interval = asyncio.run(_serving_metrics(_vllm_like_body, scrape_long))
    readings = [int(Metrics.parse(s.body.decode()).total("vllm:spec_decode_num_drafts_total") or 0)
                for s in scrapes]
    assert interval == 0.016 and len(scrapes) <= 9 and readings == sorted(set(readings))
    # Answers 1-9 came 2 ms apart: the first thinning kept 1 3 5 7 9. 10-13 came 4 ms apart: the
    # second kept 1 5 9 11 13; 14-17 came 8 ms apart: the third kept 1 9 13 15 17, 16 ms apart.
    assert readings[:5] == [1, 9, 13, 15, 17]
    times = [s.t for s in scrapes[:5]]
    assert all(0.016 <= b - a < 0.5 for a, b in itertools.pairwise(times))
    assert len(scrapes[1].packed) < len(_vllm_like_body(readings[1])) / 5  # kept compressed


def test_the_analysis_of_a_window_holds_one_parsed_answer_at_a_time() -> None:
    """Parsed, a body takes ~10x its size in objects; the analysis must not hold every answer of the
    window parsed at once. Peak memory over 24 answers stays near that over 3."""
    def peak_kib(count: int) -> float:
        scrapes = [promscrape.Scrape(float(i), _vllm_like_body(i + 1)) for i in range(count)]
        tracemalloc.start()
        analysis = specdecode.analyze(scrapes, interval_s=1.0)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert analysis["scrapes"] == count
        assert analysis["spec_decode"]["window"]["drafts"] == count - 1
        return peak / 1024

    few, many = peak_kib(3), peak_kib(24)
    assert many < 1.5 * few, (few, many)


def test_a_new_window_forgets_the_warm_ups_reads_and_their_thinning(monkeypatch: pytest.MonkeyPatch) -> None:
    """restart_window (after the warm-ups) keeps no read taken before it, even one still being
    compressed when it was called, and goes back to the interval asked for; reads stay in time order."""
    monkeypatch.setattr(promscrape, "MAX_KEPT_SCRAPES", 4)
    compress = zlib.compress

    def slow_compress(data: bytes, level: int) -> bytes:
        time.sleep(0.01)  # a big body on a busy machine: reads overlap without the lock
        return compress(data, level)

    monkeypatch.setattr(promscrape.zlib, "compress", slow_compress)

    async def warm_then_window(url: str) -> tuple[float, float, list[float], float]:
        scraper = MetricsScraper(url, interval_s=0.002)
        await scraper.start()
        while scraper.interval_s == 0.002:  # thinned during the "warm-ups"
            await asyncio.sleep(0.005)
        thinned = scraper.interval_s
        window_start = time.monotonic()
        await scraper.restart_window()
        interval = scraper.interval_s
        await asyncio.sleep(0.05)
        return thinned, interval, [s.t for s in await scraper.stop()], window_start

    thinned, interval, times, window_start = asyncio.run(_serving_metrics(_vllm_like_body, warm_then_window))
    assert thinned > 0.002 and interval == 0.002
    assert times and times[0] >= window_start and times == sorted(times)
