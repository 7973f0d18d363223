"""Automatic coalescing (--coalesce-ms auto): the reading tick the core chooses from the chunk gaps,
and when it backs off. Each choice is judged against the run's own stamps (its chunk gaps, its
turnovers), never against a wall-clock interval."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import orjson
import pytest
import uvloop

from support.timing import judges_client_speed, until_a_round_passes
from fastbench.api import validation as fv
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
from fastbench.results.figures import client_lateness_ns
from fastbench.results.records import COL, RunData
from fastbench.synthetic import SyntheticServer

GAP_SHARE = 0.4  # coalesce.pyx's COALESCE_GAP_SHARE


def _body(tokens: int, itl_ms: float | None = None, ignore_eos: bool = True) -> bytes:
    body: dict[str, Any] = {"model": fv.MODEL, "prompt": "hello world", "max_tokens": tokens,
                            "ignore_eos": ignore_eos, "stream": True,
                            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    if itl_ms is not None:
        body["fb_itl_ms"] = itl_ms  # the synthetic server's per-request gap
    return orjson.dumps(body)


def _run(server: SyntheticServer, bodies: list[bytes], streams: int, tokens: int | None,
         during: Any = None, **plan: Any) -> tuple[RunData, dict[str, Any]]:
    """A closed loop with --coalesce-ms auto; ``during(generator)``, a coroutine run beside it."""
    load = LoadPlan(bodies=bodies, warmup_bodies=[], concurrency=streams, coalesce_s="auto",
                    expected_output_tokens=[tokens] * len(bodies) if tokens else None, keep_chunk_stamps=True,
                    **plan)
    generator = LoadGenerator(Target.parse(server.base_url, fv.ENDPOINT), load)

    async def main() -> RunData:
        side = asyncio.ensure_future(during(generator)) if during is not None else None
        try:
            return await generator.run()
        finally:
            if side is not None:
                side.cancel()

    data = uvloop.run(main())
    assert (data.rows[:, COL["error"]] == 0).all()
    return data, data.extra["coalescing"]


def _gaps_ns(data: RunData, rows: Any = None) -> np.ndarray:
    """Chunk gaps of the given rows (default all), from the run's own receive stamps."""
    stamps = data.extra["chunk_stamps"]
    keys = stamps.keys() if rows is None else [r for r in rows if r in stamps]
    return np.concatenate([np.diff(np.frombuffer(stamps[r], dtype=np.int64)) for r in keys])


def _abs_ns(data: RunData, change: dict[str, Any]) -> int:
    return data.start_ns + round(change["at_s"] * 1e9)


def _assert_each_tick_under_half_the_short_gaps(data: RunData, c: dict[str, Any]) -> None:
    """Each tick the core chose from the gaps is at most half the 1 % quantile of the chunk gaps that
    arrived in the second before it (from the run's own stamps; the core takes 0.4 of their 0.1 %
    quantile). Two chunks of one read, and a back-off (halving), are judged by their own tests."""
    stamps = [np.frombuffer(s, dtype=np.int64) for s in data.extra["chunk_stamps"].values()]
    gaps = np.concatenate([np.diff(s) for s in stamps])
    ends = np.concatenate([s[1:] for s in stamps])  # each gap's later stamp
    for change in c["changes"]:
        if change["tick_ms"] > 0 and change["why"] in ("gaps", "max"):
            at = _abs_ns(data, change)
            # as the core counts them: chunks of one read (gap 0) are multi-event reads, judged apart
            before = gaps[(ends <= at) & (ends > at - 1_000_000_000) & (gaps > 0)]
            assert before.size >= 100, change
            assert change["tick_ms"] * 1e6 <= 0.5 * float(np.quantile(before, 0.01)), (change, c["changes"])


def _ticking(data: RunData, c: dict[str, Any]) -> list[tuple[int, int, float]]:
    """The spans (from, to, tick_ms) in which the tick ran, on the run's clock."""
    spans, changes = [], c["changes"]
    for i, change in enumerate(changes):
        if change["tick_ms"] > 0:
            until = _abs_ns(data, changes[i + 1]) if i + 1 < len(changes) else data.end_ns
            spans.append((_abs_ns(data, change), until, change["tick_ms"]))
    return spans


@pytest.mark.timing
def test_regular_gaps_switch_the_tick_on_and_the_choice_is_recorded() -> None:
    """32 streams, a chunk every 20 ms: reads on every arrival until the gaps are known, then a tick
    under half the short gaps seen; streams stay open (every end watched for)."""
    streams, tokens, n = 32, 40, 128

    def one_round() -> None:
        with SyntheticServer(ttft_ms=10, itl_ms=20) as server:
            data, c = _run(server, [_body(tokens)] * n, streams, tokens)
        first = c["changes"][0]
        assert first["tick_ms"] == 0 and first["why"] == "learning"
        ticks = [ch for ch in c["changes"] if ch["tick_ms"] > 0]
        assert ticks and ticks[0]["why"] in ("gaps", "max"), c["changes"]
        assert ticks[0]["tick_ms"] <= GAP_SHARE * ticks[0]["short_gap_ms"]
        _assert_each_tick_under_half_the_short_gaps(data, c)
        assert c["reads_on_tick"] > 0
        # Every stream's end was watched for on every arrival: a freed slot's next request went out
        # long before a tick would have read the end.
        assert c["ends_unwatched"] == 0
        turnover = client_lateness_ns(data.rows, streams, open_loop=False)
        if judges_client_speed():
            assert np.median(turnover) < ticks[0]["tick_ms"] * 1e6 / 4

    # One host stall can back the tick off (and fail the turnover's median); a core that never
    # ticks, or ticks past its gaps, fails every round.
    until_a_round_passes(one_round)


@pytest.mark.timing
def test_gaps_that_shrink_take_the_tick_back() -> None:
    """The server speeds up mid-run (40 ms between chunks, then 4 ms): two chunks of one stream
    would share a tick's read, so the core goes to a tick under the new gaps, or to every arrival."""
    streams, tokens, slow = 32, 40, 64
    bodies = [_body(tokens)] * slow + [_body(tokens, itl_ms=4)] * (3 * streams)

    def one_round() -> None:
        with SyntheticServer(ttft_ms=10, itl_ms=40) as server:
            data, c = _run(server, bodies, streams, tokens)
        changes = c["changes"]
        fast_rows = list(range(slow, len(bodies)))
        fast_start = int(data.rows[fast_rows, COL["sent_ns"]].min())
        fast_gaps = _gaps_ns(data, fast_rows)
        fast_gaps = fast_gaps[fast_gaps > 0]  # a late server's bursts, one read each: not gaps the core counts
        before = [ch for ch in changes if _abs_ns(data, ch) < fast_start]
        later = [ch for ch in changes if _abs_ns(data, ch) >= fast_start]
        # on a tick the new gaps could not stand by the time they came
        assert before[-1]["tick_ms"] > 0.5 * float(np.quantile(fast_gaps, 0.01)) / 1e6, changes
        assert later and later[-1]["tick_ms"] < before[-1]["tick_ms"], changes
        assert later[0]["why"] in ("gaps", "shared reads"), later
        _assert_each_tick_under_half_the_short_gaps(data, c)

    until_a_round_passes(one_round)


@pytest.mark.timing
def test_reads_that_carry_several_events_of_a_stream_back_the_tick_off() -> None:
    """A stall of the client's loop (3 chunk gaps long) while the tick runs lets chunks of every
    stream queue for one read: beyond the share seen on every arrival, so the tick is halved at
    once and held from growing back for a while."""
    streams, tokens = 32, 40

    async def stall_once_on_tick(generator: LoadGenerator) -> None:
        while (generator.state.coalescing or {}).get("tick_ns", 0) == 0:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.1)
        time.sleep(0.06)  # the loop itself stalls: nothing reads the sockets

    def one_round() -> None:
        with SyntheticServer(ttft_ms=10, itl_ms=20) as server:
            _, c = _run(server, [_body(tokens)] * (5 * streams), streams, tokens, during=stall_once_on_tick)
        changes = c["changes"]
        assert c["multi_event_reads_on_tick"] > 0
        backed = [i for i, ch in enumerate(changes) if ch["why"] == "shared reads"]
        assert backed, changes
        i = backed[0]
        assert changes[i]["tick_ms"] < changes[i - 1]["tick_ms"]
        # held: no longer tick within the hold (1 s) after the back-off
        held = [ch for ch in changes[i + 1:] if ch["at_s"] - changes[i]["at_s"] < 1.0]
        assert all(ch["tick_ms"] <= changes[i]["tick_ms"] for ch in held), changes

    until_a_round_passes(one_round)  # a host stall of its own can back the tick off before the test's


def test_ends_that_cannot_be_foreseen_keep_reads_on_every_arrival() -> None:
    """Requests that end at EOS, before max_tokens: their ends cannot be watched for, so a tick
    would leave each one's slot idle until it fired. The tick that keeps that loss under 0.05 % of
    the streams, by the run's own request times, is under the shortest worth having: the run reads
    on every arrival, and hardly any end comes while a tick runs."""
    streams, tokens = 32, 64
    with SyntheticServer(ttft_ms=10, itl_ms=20, eos_prob=0.03) as server:
        data, c = _run(server, [_body(tokens, ignore_eos=False)] * (4 * streams), streams, tokens)
    assert c["ends_unwatched"] > 0
    ends = data.rows[:, COL["end_ns"]]
    e2e = ends - data.rows[:, COL["sent_ns"]]
    # the tick the run's own figures allow: 2 * 0.0005 * mean request time / share of ends unwatched
    allowed_ns = 2 * 0.0005 * float(e2e.mean()) / (c["ends_unwatched"] / len(e2e))
    assert allowed_ns < 1e6  # under the shortest tick (1 ms): so none once ends are seen
    assert c["tick_ms"] == 0
    on_tick = sum(int(((ends >= lo) & (ends < hi)).sum()) for lo, hi, _ in _ticking(data, c))
    assert on_tick <= 0.1 * len(ends), c["changes"]


def test_ends_of_streams_without_per_chunk_usage_are_foreseen_from_their_events() -> None:
    """A Responses stream carries its usage only at its end, and with 1..4 tokens per event its events do
    not count its tokens. The core learns, from the streams that ended at their length, at how many
    events per token asked for such a stream ends, and watches the later streams from there: most of
    their ends come watched (taken as one token per event, as before anything ended, none would)."""
    streams, n = 64, 320
    report = fv.validate_client(streams, itl_ms=20, ttft_ms=10, num_requests=n, output_len=64,
                                tokens_per_chunk="1-4", endpoint="/v1/responses")
    assert report.completed == n and report.coalescing is not None
    # the first streams mostly end before any end was seen; of the later ones about 1 in 5 unwatched
    assert report.ends_watched >= 0.5 * n
    assert report.coalescing["ends_unwatched"] <= 0.5 * n


def test_reads_without_kernel_stamps_are_never_coalesced() -> None:
    """Stamped when read, a chunk read on a tick would carry the tick's time: every arrival, to the end."""
    streams, tokens = 32, 40
    with SyntheticServer(ttft_ms=10, itl_ms=10) as server:
        _, c = _run(server, [_body(tokens)] * (2 * streams), streams, tokens, kernel_timestamps=False)
    assert all(ch["tick_ms"] == 0 for ch in c["changes"]), c["changes"]
    assert c["changes"][-1]["why"] == "user stamps"
    assert c["reads_on_tick"] == 0


def test_validate_reports_what_auto_chose() -> None:
    """validate's default is auto: its report carries the choice, and its table says it."""
    report = fv.validate_client(32, itl_ms=10, ttft_ms=10, num_requests=96, output_len=40)
    assert report.settings["coalesce_ms"] == "auto"
    assert report.coalescing is not None and report.coalescing["changes"][0]["why"] == "learning"
    assert "reads coalesced automatically" in report.render()
    assert report.to_dict()["coalescing"] == report.coalescing


def test_open_loop_keeps_reads_on_every_arrival() -> None:
    """While the core sends open-loop arrivals, auto never ticks (arrivals on time first), and says so."""
    streams, tokens = 64, 40
    with SyntheticServer(ttft_ms=10, itl_ms=20) as server:
        _, c = _run(server, [_body(tokens)] * 160, streams, tokens, request_rate=200.0)
    assert all(ch["tick_ms"] == 0 for ch in c["changes"]), c["changes"]
    assert [ch["why"] for ch in c["changes"]][:2] == ["learning", "open loop"]
    assert c["reads_on_tick"] == 0
