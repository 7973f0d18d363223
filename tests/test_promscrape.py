"""promscrape.Metrics over values a misbehaving server may send: counters that are no counts are told
apart, gauges that are no numbers are left out of sums and means. (The parser's own tests are in
test_specdecode.py.)"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from fastbench import promscrape
from fastbench.promscrape import MAX_COUNT, Metrics, MetricsScraper, counter_problem


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
