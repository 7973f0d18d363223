"""A hostile or broken server (support.hostile): whatever it sends, the time cap and --request-timeout
hold within CAP_BOUND_NS, the connections are read fairly, a request's memory is bounded, every request
is classified and accounted for, and a connection is reused only when nothing is left unread on it."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import orjson
import pytest
import uvloop

from support.hostile import HostileServer
from support.timing import until_a_round_passes
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
from fastbench.results.records import COL, ErrorClass, RunData

BODY = orjson.dumps({"model": "m", "prompt": "hello", "max_tokens": 8, "stream": True})
# The bound the stop and the timeout hold, whatever the server sends: a drain reads at most 1 MiB (a few
# ms of parsing here), and --request-timeout's sweep runs every 20 ms.
CAP_BOUND_NS = 50_000_000
TIMER_GRAIN_NS = 1_000_000
EVENT_CAP = 1_048_576  # output events stamped per request (rows.pxd MAX_REQUEST_EVENTS)
# Modes that never finish a response; those that send output events, for fairness.
ENDLESS = ["flood", "huge-lines", "endless", "slow-loris", "silent"]
WITH_EVENTS = {"flood", "endless"}


def drive(server: HostileServer, n: int, concurrency: int, events_cap: int | None = None, **plan: Any) -> RunData:
    gen = LoadGenerator(Target.parse(server.base_url, "/v1/completions"),
                        LoadPlan(bodies=[BODY] * n, warmup_bodies=[], concurrency=concurrency, **plan))
    if events_cap is not None:
        gen.state.max_request_events = events_cap
    return uvloop.run(gen.run())


def column(data: RunData, name: str) -> np.ndarray:
    return data.rows[:, COL[name]]


def test_the_event_cap_is_the_stated_one() -> None:
    gen = LoadGenerator(Target.parse("http://127.0.0.1:1", "/v1/completions"),
                        LoadPlan(bodies=[BODY], warmup_bodies=[], concurrency=1))
    assert gen.state.max_request_events == EVENT_CAP


@pytest.mark.timing
@pytest.mark.parametrize("mode", ENDLESS)
def test_the_time_cap_holds_whatever_the_server_sends(mode: str) -> None:
    with HostileServer(mode) as server:
        def one_round() -> None:
            data = drive(server, n=4, concurrency=4, max_seconds=0.5)
            cap_ns = data.start_ns + 500_000_000
            assert data.stopped_reason == "time cap" and data.end_ns == cap_ns
            assert list(column(data, "error")) == [ErrorClass.CANCELLED] * 4
            assert all("time cap" in data.error_messages[i] for i in range(4))
            # each request ended (its connection aborted) within the bound of the cap's instant; the loop's
            # timer, of a millisecond's grain, may fire up to one early (RunStop)
            late = column(data, "end_ns") - cap_ns
            assert np.all(late >= -TIMER_GRAIN_NS) and np.all(late <= CAP_BOUND_NS), late / 1e6
            # every event is in some request's row, and none twice
            assert int(column(data, "chunks").sum()) == data.output_events
            if mode in WITH_EVENTS:  # reads are shared: no connection starves beside a flooding one
                chunks = column(data, "chunks")
                assert chunks.min() > 0 and chunks.min() * 4 >= chunks.max(), chunks
        until_a_round_passes(one_round)


@pytest.mark.timing
@pytest.mark.parametrize("mode", ENDLESS)
def test_the_request_timeout_holds_whatever_the_server_sends(mode: str) -> None:
    with HostileServer(mode) as server:
        def one_round() -> None:
            data = drive(server, n=8, concurrency=4, request_timeout_s=0.3)
            assert data.stopped_reason == "completed"
            assert list(column(data, "error")) == [ErrorClass.TIMEOUT] * 8, data.error_messages
            assert all("request-timeout" in data.error_messages[i] for i in range(8))
            late = column(data, "end_ns") - column(data, "sent_ns") - 300_000_000
            assert np.all(late >= 0) and np.all(late <= CAP_BOUND_NS), late / 1e6
            assert int(column(data, "chunks").sum()) == data.output_events
            first_byte = column(data, "first_byte_ns")
            if mode == "silent":
                assert np.all(first_byte == 0)
            else:  # what came, came after the request went out
                assert np.all(first_byte > column(data, "sent_ns"))
        until_a_round_passes(one_round)


def test_a_stream_without_end_stops_at_the_event_cap() -> None:
    with HostileServer("flood") as server:
        data = drive(server, n=2, concurrency=2)
    assert list(column(data, "error")) == [ErrorClass.PROTOCOL] * 2
    assert list(column(data, "chunks")) == [EVENT_CAP] * 2
    assert data.output_events == 2 * EVENT_CAP
    for i in range(2):
        assert f"more output events than the per-request cap of {EVENT_CAP}" in data.error_messages[i]
    assert data.connections_opened == 2  # each failed request closed its connection


# In a process of its own, so that its peak RSS is the run's: the growth past what the imports took.
RSS_CHILD = """
import resource, sys
import orjson, uvloop
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
body = orjson.dumps({"model": "m", "prompt": "x", "max_tokens": 8, "stream": True})
gen = LoadGenerator(Target.parse(sys.argv[1], "/v1/completions"),
                    LoadPlan(bodies=[body] * 4, warmup_bodies=[], concurrency=4, max_seconds=20))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
data = uvloop.run(gen.run())
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, data.output_events)
"""


def test_memory_stays_bounded_against_a_flood() -> None:
    # Four requests flooded: each keeps at most EVENT_CAP stamps of 24 bytes (24 MiB), then fails.
    with HostileServer("flood") as server:
        out = subprocess.run([sys.executable, "-c", RSS_CHILD, server.base_url], capture_output=True, text=True,
                             timeout=120, check=True).stdout.split()
    grown_kib, events = int(out[0]), int(out[1])
    assert events == 4 * EVENT_CAP
    assert grown_kib < (4 * 24 + 64) * 1024, grown_kib / 1024  # the stamps and some room: not gigabytes


def test_the_event_cap_is_set_per_run() -> None:
    with HostileServer("flood") as server:
        data = drive(server, n=3, concurrency=1, events_cap=1000)
    assert list(column(data, "error")) == [ErrorClass.PROTOCOL] * 3
    assert list(column(data, "chunks")) == [1000] * 3
    assert "cap of 1000" in data.error_messages[0]
    assert data.connections_opened == 3


def test_kept_text_stops_at_its_cap() -> None:
    # --save-outputs keeps each event's JSON (~60 bytes here): 64 MiB passes before the event cap (raised)
    with HostileServer("flood") as server:
        data = drive(server, n=1, concurrency=1, events_cap=4 * EVENT_CAP, save_outputs=True)
    assert list(column(data, "error")) == [ErrorClass.PROTOCOL]
    assert "per-request cap of 64 MiB" in data.error_messages[0]
    assert EVENT_CAP < column(data, "chunks")[0] < 4 * EVENT_CAP


def test_a_normal_server_reuses_its_connections() -> None:
    # the control for the two below: nothing left unread, so two connections carry every request
    with HostileServer("normal") as server:
        data = drive(server, n=20, concurrency=2)
    assert list(column(data, "error")) == [ErrorClass.OK] * 20
    assert data.connections_opened == 2 and data.stale_retries == 0


@pytest.mark.parametrize("gap_ms", [0.0, 2.0])
def test_bytes_past_the_content_length_are_never_read_as_the_next_response(gap_ms: float) -> None:
    # gap 0: the stray bytes come with or just after the response (the connection is closed at its end);
    # gap 2 ms: they come after the next request went out (it is sent again on a new connection)
    with HostileServer("overrun", gap_ms=gap_ms) as server:
        data = drive(server, n=20, concurrency=2)
    assert list(column(data, "error")) == [ErrorClass.OK] * 20, data.error_messages
    assert list(column(data, "chunks")) == [8] * 20
    assert np.all(column(data, "first_byte_ns") > column(data, "sent_ns"))
    assert data.connections_opened == 20  # no connection answered two requests
    assert data.error_messages == {}  # a request sent again on a new connection keeps no failure


def test_bytes_past_the_content_length_never_reach_a_request_in_open_loop() -> None:
    # open loop at 100 requests/s: the stray bytes (2 ms after each response) find the connection idle in the
    # core's pool, which drops it, or find the next arrival sent on it at once, which is sent again
    with HostileServer("overrun", gap_ms=2.0) as server:
        data = drive(server, n=20, concurrency=4, request_rate=100.0)
    assert list(column(data, "error")) == [ErrorClass.OK] * 20, data.error_messages
    assert list(column(data, "chunks")) == [8] * 20
    assert np.all(column(data, "first_byte_ns") > column(data, "sent_ns"))
    assert data.error_messages == {}


def test_a_stale_keep_alive_is_sent_again_on_a_new_connection() -> None:
    # The server closes each connection 5 ms after its one response, without "Connection: close": a
    # request the core sent on it at once meets the close, and its retry must not take another idle one.
    with HostileServer("close-keepalive", gap_ms=5.0) as server:
        data = drive(server, n=30, concurrency=3)
    assert list(column(data, "error")) == [ErrorClass.OK] * 30, data.error_messages
    assert data.stale_retries > 0  # the retry path was taken
    # every request went out on a connection of its own, and measured its connect
    assert np.all(column(data, "connect_ns") > 0)
    assert data.connections_opened == 30  # one per request: none answered two
    assert data.error_messages == {}


def test_a_stale_keep_alive_in_open_loop_is_sent_again_on_a_new_connection() -> None:
    with HostileServer("close-keepalive", gap_ms=5.0) as server:
        data = drive(server, n=60, concurrency=3, request_rate=600.0)
    assert list(column(data, "error")) == [ErrorClass.OK] * 60, data.error_messages
