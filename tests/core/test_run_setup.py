"""A run's set-up in the core: the parts RunState is made of need no calls in a given order. The table fixes
the number of requests, so a schedule's claims can be made before the bodies are given; coalescing begun
after the open loop's dispatcher exists takes the dispatcher's arrival timer into the set it watches."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fastbench._core import Recorder, RunState, now_ns
from fastbench.results.records import COLUMNS, new_histogram

HEAD = b"POST / HTTP/1.1\r\nContent-Length: "


def _state(n: int) -> RunState:
    return RunState(np.zeros((n, len(COLUMNS)), dtype=np.int64), *(Recorder(new_histogram()) for _ in range(3)))


def test_the_table_sets_the_requests_and_the_bodies_must_match_it() -> None:
    state = _state(3)
    claims = state.claim_rows()  # before the bodies: the table already says how many rows there are
    state.set_requests(HEAD, [b"{}"] * 3)
    assert [claims.claim() for _ in range(4)] == [0, 1, 2, -1]
    with pytest.raises(ValueError, match="2 request bodies for a table of 3 rows"):
        _state(3).set_requests(HEAD, [b"{}"] * 2)


def test_coalescing_begun_after_the_dispatcher_still_wakes_for_its_arrivals() -> None:
    """One arrival due 20 ms on, with no connection in the pool: the core asks Python for one when it is
    due. The loop watches coalescing's set, ticking every 10 s, so without the arrival timer in that set
    the ask would wait for the tick."""
    tick_ns = 10_000_000_000

    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[int] = loop.create_future()
        state = _state(1)
        state.set_requests(HEAD, [b"{}"])
        base = now_ns()
        state.dispatch_arrivals(np.array([20_000_000], dtype=np.int64), base, 1,
                                on_wake=lambda: woken.done() or woken.set_result(now_ns()))
        fd = state.coalesce(tick_ns)
        loop.add_reader(fd, state.drain)
        try:
            return await asyncio.wait_for(woken, timeout=tick_ns / 2e9), base
        finally:
            loop.remove_reader(fd)
            state.end_schedule()

    woke_ns, base = asyncio.run(main())
    assert base + 20_000_000 - 300_000 <= woke_ns < base + tick_ns // 2  # at the arrival's lead, not a tick
