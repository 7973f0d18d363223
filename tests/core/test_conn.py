"""The native client core against a scripted server: framing, timing, classification, reuse."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import select
import socket
import ssl
import time
from typing import Any

import numpy as np
import pytest
import uvloop

from support.core_runs import col, drive
from support.scripted import (
    CHUNKED_END,
    STREAM_HEAD,
    ScriptedServer,
    chat_chunk,
    chunked,
    completion_chunk,
    sse,
    stream_script,
)
from support.timing import until_a_round_passes
from fastbench._core import COLUMN_ORDER, ArrivalTimer, Recorder, RunState, now_ns
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError
from fastbench.load import pacer
from fastbench.load.connections import Connections
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
from fastbench.results.figures import summarize
from fastbench.results.records import COL, COLUMNS, ErrorClass, RunData, TimestampSource, UsageSource, new_histogram


def _stream_handler(steps: list[Any], on_head: Any = None) -> Any:
    """An asyncio server's connection handler: reads each request (head, then Content-Length body)
    and answers it with ``steps`` (bytes to write, seconds to wait). ``on_head(head, writer)``, when
    given, sees each head before the body is read and returns True to take the connection over."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if on_head is not None and await on_head(head, writer):
                    return
                await reader.readexactly(int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]))
                for step in steps:
                    if isinstance(step, bytes):
                        writer.write(step)
                        await writer.drain()
                    elif step:
                        await asyncio.sleep(step)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            writer.close()

    return handle


def test_column_order_matches_records() -> None:
    assert COLUMN_ORDER == COLUMNS


@pytest.mark.timing
def test_usage_per_chunk_timing_and_tokens(loop_factory: Any) -> None:
    counts = [1, 3, 2, 4, 1]
    # The scripted server shares this loop: a host stall of 40 ms puts one TTFT past its bound and
    # fails a round; a client that stamps or counts wrongly fails every round.
    until_a_round_passes(lambda: _usage_per_chunk_timing_and_tokens(loop_factory, counts))


def _usage_per_chunk_timing_and_tokens(loop_factory: Any, counts: list[int]) -> None:
    data, server = drive(loop_factory, lambda n, body: stream_script(counts, ttft_s=0.05, gap_s=0.02), n=4,
                         concurrency=2)
    assert list(col(data, "error")) == [0, 0, 0, 0]
    assert list(col(data, "output_tokens")) == [11] * 4
    assert list(col(data, "prompt_tokens")) == [7] * 4
    assert list(col(data, "chunks")) == [5] * 4
    assert list(col(data, "max_chunk_tokens")) == [4] * 4
    assert list(col(data, "usage_source")) == [UsageSource.PER_CHUNK] * 4
    assert list(col(data, "http_status")) == [200] * 4
    ttft_ms = (col(data, "first_token_ns") - col(data, "sent_ns")) / 1e6
    assert np.all((ttft_ms > 49) & (ttft_ms < 90)), ttft_ms
    # Two connections for four requests at concurrency 2: kept alive and reused.
    assert server.connections == 2 and data.connections_opened == 2
    chunk = data.histograms["itl_chunk"]
    token = data.histograms["itl_token"]
    assert chunk.get_total_count() == 4 * 4
    # Per token, a chunk of k tokens counts k times: the gaps after the first chunk carry 3+2+4+1 tokens.
    assert token.get_total_count() == 4 * 10
    assert 19e6 < chunk.get_value_at_percentile(50) < 40e6
    assert token.get_value_at_percentile(50) < chunk.get_value_at_percentile(50)
    assert data.timestamp_source in (TimestampSource.KERNEL, TimestampSource.USER)


def test_usage_that_cannot_be_right_is_not_trusted(loop_factory: Any) -> None:
    """Usage beyond the request's max_tokens, usage that counts no token while text arrives, and
    token counts that are not integers are INCONSISTENT: the output tokens fall back to the chunks
    with text, and so do the per-token gaps (one token per chunk)."""
    def script(n: int, body: bytes) -> list[Any]:
        if n == 0:
            return stream_script([1, 2, 3000])  # 3,003 tokens for max_tokens 8
        if n in (1, 2):  # text in every chunk; completion_tokens 0 throughout, or a string
            chunk = completion_chunk("w", 0)
            if n == 2:
                chunk["usage"]["completion_tokens"] = "1"
            return [STREAM_HEAD, *(chunked(sse(chunk)) for _ in range(3)), chunked(sse("[DONE]")) + CHUNKED_END]
        return stream_script([1, 2, 3])  # 6 of 8: trusted
    data, _ = drive(loop_factory, script, n=4, expected_output_tokens=[8] * 4)
    assert list(col(data, "error")) == [0] * 4
    assert list(col(data, "usage_source")) == [UsageSource.INCONSISTENT] * 3 + [UsageSource.PER_CHUNK]
    assert list(col(data, "output_tokens")) == [3, 3, 3, 6]
    # 2 gaps each for the untrusted requests, 2 + 3 tokens after the first chunk for the trusted one
    assert data.histograms["itl_token"].get_total_count() == 2 + 2 + 2 + 5


def test_usage_is_trusted_when_max_tokens_is_unknown(loop_factory: Any) -> None:
    data, _ = drive(loop_factory, lambda n, b: stream_script([1, 2, 3000]))
    assert col(data, "usage_source")[0] == UsageSource.PER_CHUNK
    assert col(data, "output_tokens")[0] == 3003


def test_a_bare_done_and_a_compressed_stream_are_protocol_errors(loop_factory: Any) -> None:
    """Only [DONE] (no text, usage or finish_reason) is no answer; a gzip-coded body is not the SSE
    it claims to be. Each gets its own reason, not "ended without [DONE]"; a coding header on a
    body that reads as SSE is no error."""
    gzip_head = STREAM_HEAD.replace(b"\r\n\r\n", b"\r\ncontent-encoding: gzip\r\n\r\n", 1)

    def script(n: int, body: bytes) -> list[Any]:
        if n == 0:
            return [STREAM_HEAD, chunked(sse("[DONE]")) + CHUNKED_END]
        if n == 1:
            return [gzip_head, chunked(b"\x1f\x8b\x08\x00 not text") + CHUNKED_END]
        if n == 2:  # "Content-Encoding: none" (set to keep proxies from buffering) on plain SSE: fine
            return [gzip_head.replace(b"gzip", b"none"), *stream_script([1, 2])[1:]]
        # EOS at once: an answer, with usage (vLLM: its one token is the first token) or without
        usage = 1 if n == 3 else None
        return [STREAM_HEAD, chunked(sse(completion_chunk("", usage, finish="stop"))),
                chunked(sse("[DONE]")) + CHUNKED_END]
    data, _ = drive(loop_factory, script, n=5)
    assert list(col(data, "error")) == [ErrorClass.PROTOCOL, ErrorClass.PROTOCOL] + [ErrorClass.OK] * 3
    assert col(data, "first_token_ns")[3] > 0 and col(data, "output_tokens")[3] == 1
    assert col(data, "first_token_ns")[4] == 0
    assert "without output" in data.error_messages[0]
    assert "compressed" in data.error_messages[1]


def test_usage_at_the_start_and_the_end_only_adds_no_chunk(loop_factory: Any) -> None:
    """A role chunk with usage 0, text chunks without usage, then a usage-only total: the total is
    an end-of-stream count (FINAL), not one more output chunk of many tokens."""
    role = completion_chunk("", 0)
    total = completion_chunk("", 6)
    total["choices"] = []

    def script(n: int, body: bytes) -> list[Any]:
        return [STREAM_HEAD, chunked(sse(role)), *(chunked(sse(completion_chunk(w, None))) for w in "abc"),
                chunked(sse(total)), chunked(sse("[DONE]")) + CHUNKED_END]
    data, _ = drive(loop_factory, script)
    assert col(data, "chunks")[0] == 3 and col(data, "output_tokens")[0] == 6
    assert col(data, "usage_source")[0] == UsageSource.FINAL


def test_kernel_timestamps_used_on_loopback(loop_factory: Any) -> None:
    data, _ = drive(loop_factory, lambda n, body: stream_script([1, 1, 1]))
    assert data.reads > 0
    assert data.kernel_stamped_reads == data.reads
    assert data.timestamp_source == TimestampSource.KERNEL


def test_user_timestamps_when_kernel_ones_are_off(loop_factory: Any) -> None:
    data, _ = drive(loop_factory, lambda n, body: stream_script([1, 1, 1]), kernel_timestamps=False)
    assert data.kernel_stamped_reads == 0
    assert data.timestamp_source == TimestampSource.USER
    assert col(data, "error")[0] == 0


def test_a_negative_coalescing_window_is_refused() -> None:
    with pytest.raises(ConfigError, match="--coalesce-ms must be >= 0, got -1"):
        LoadGenerator(Target.parse("http://127.0.0.1:1", "/v1/completions"),
                      LoadPlan(bodies=[b"{}"], warmup_bodies=[], concurrency=1, coalesce_s=-0.001))


def test_coalesced_wake_ups_share_one_fd() -> None:
    """The tick lives in the ends set: the loop watches one fd, so a tick and a stream's end that
    are due together make one wake-up. With nothing to read, each tick is one drain."""
    async def ticks() -> tuple[int, int]:
        state = RunState(np.zeros((1, len(COLUMNS)), dtype=np.int64),
                         *(Recorder(new_histogram()) for _ in range(3)))
        fd = state.coalesce(2_000_000)
        asyncio.get_running_loop().add_reader(fd, state.drain)
        await asyncio.sleep(0.1)
        asyncio.get_running_loop().remove_reader(fd)
        return fd, state.counters["wakeups"]
    fd, wakeups = uvloop.run(ticks())
    # 2 ms ticks for 0.1 s, re-armed from each wake-up: a stalled process loses ticks (30 of 50
    # seen under ASan with the CPUs busy), never gains any
    assert fd >= 0 and 15 <= wakeups <= 51


def test_arrival_timer_deadline() -> None:
    timer = ArrivalTimer()
    due = now_ns() + 5_000_000
    timer.arm(due)
    assert timer.clear() == 0  # not yet
    select.select([timer.fileno()], [], [], 1.0)
    assert now_ns() >= due and timer.clear() == 1


def test_random_splits_give_the_same_record(loop_factory: Any) -> None:
    """The same stream cut into random pieces, written with pauses so that reads split it."""
    whole = b"".join(s for s in stream_script([2, 1, 3]) if isinstance(s, bytes))
    rng = random.Random(7)

    def script(n: int, body: bytes) -> list[Any]:
        cuts = sorted(rng.sample(range(1, len(whole)), 12))
        pieces = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)])]
        steps: list[Any] = []
        for piece in pieces:
            steps += [piece, 0.002]
        return steps

    data, _ = drive(loop_factory, script, n=6)
    assert list(col(data, "error")) == [0] * 6
    assert list(col(data, "output_tokens")) == [6] * 6
    assert list(col(data, "chunks")) == [3] * 6
    assert list(col(data, "events")) == [5] * 6  # 3 output + usage-only + [DONE]


def test_several_events_in_one_read_share_its_stamp(loop_factory: Any) -> None:
    burst = b"".join(chunked(sse(completion_chunk("w", i + 1))) for i in range(3))
    final = chunked(sse("[DONE]")) + CHUNKED_END
    data, _ = drive(loop_factory, lambda n, body: [STREAM_HEAD, 0.01, burst, 0.02, final])
    assert col(data, "chunks")[0] == 3
    assert data.multi_event_reads == 1
    assert data.output_events == 3
    # The two gaps inside the burst are 0: arrival time is what was measured, not parse time.
    assert data.histograms["itl_chunk"].get_value_at_percentile(100) < 1000


def test_reasoning_then_answer(loop_factory: Any) -> None:
    events = [
        chat_chunk({"role": "assistant", "content": ""}, 0),
        chat_chunk({"reasoning": "hmm"}, 1),
        chat_chunk({"reasoning_content": "so"}, 2),
        chat_chunk({"content": "Yes"}, 3, finish="stop"),
    ]

    def script(n: int, body: bytes) -> list[Any]:
        steps: list[Any] = [STREAM_HEAD]
        for ev in events:
            steps += [chunked(sse(ev)), 0.02]
        return steps + [chunked(sse("[DONE]")) + CHUNKED_END]

    data, _ = drive(loop_factory, script)
    row = data.rows[0]
    assert row[COL["error"]] == 0
    assert row[COL["output_tokens"]] == 3
    assert row[COL["chunks"]] == 3  # the role-only first chunk carries no output
    gap_ms = (row[COL["first_answer_ns"]] - row[COL["first_token_ns"]]) / 1e6
    assert 30 < gap_ms < 100, gap_ms


@pytest.mark.parametrize("usage,source,tokens,max_k", [
    ("final", UsageSource.FINAL, 6, 1),
    ("none", UsageSource.NONE, 3, 1),
])
def test_usage_fallbacks(loop_factory: Any, usage: str, source: UsageSource, tokens: int, max_k: int) -> None:
    data, _ = drive(loop_factory, lambda n, body: stream_script([1, 2, 3], usage=usage))
    assert col(data, "usage_source")[0] == source
    assert col(data, "output_tokens")[0] == tokens
    assert col(data, "max_chunk_tokens")[0] == max_k
    # Without per-chunk usage each chunk counts as one token in the per-token series.
    assert data.histograms["itl_token"].get_total_count() == 2


def _fail_script(kind: str) -> Any:
    def script(n: int, body: bytes) -> list[Any]:
        if kind == "http-500":
            msg = b'{"error":{"message":"boom","type":"InternalServerError","code":500}}'
            return [b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(msg), msg)]
        if kind == "context":
            msg = (b'{"object":"error","message":"This model\'s maximum context length is 2048 tokens. '
                   b'However, you requested 4000 tokens","type":"BadRequestError","code":400}')
            return [b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(msg), msg)]
        if kind == "not-sse":
            msg = b'{"choices":[{"text":"hi"}]}'
            return [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(msg), msg)]
        if kind == "error-event":
            err = {"error": {"object": "error", "message": "engine died", "type": "InternalServerError"}}
            return [STREAM_HEAD, chunked(sse(completion_chunk("a", 1))), chunked(sse(err)),
                    chunked(sse("[DONE]")) + CHUNKED_END]
        if kind == "malformed":
            return [STREAM_HEAD, chunked(b"data: {not json\n\n"), chunked(sse("[DONE]")) + CHUNKED_END]
        if kind == "reset-mid-stream":
            return [STREAM_HEAD, chunked(sse(completion_chunk("a", 1))), 0.01, "reset"]
        if kind == "close-mid-stream":
            return [STREAM_HEAD, chunked(sse(completion_chunk("a", 1))), 0.01, "close"]
        if kind == "no-done":
            return [STREAM_HEAD, chunked(sse(completion_chunk("a", 1))), CHUNKED_END]
        if kind == "bad-chunking":
            return [STREAM_HEAD, b"zz\r\n", 0.01, "close"]
        raise AssertionError(kind)

    return script


@pytest.mark.parametrize("kind,error,words", [
    ("http-500", ErrorClass.HTTP_STATUS, "boom"),
    ("context", ErrorClass.CONTEXT_LENGTH, "maximum context length"),
    ("not-sse", ErrorClass.PROTOCOL, "not an event stream"),
    ("error-event", ErrorClass.SERVER_ERROR, "engine died"),
    ("malformed", ErrorClass.PROTOCOL, "not a JSON object"),
    ("reset-mid-stream", ErrorClass.PROTOCOL, "connection"),
    ("close-mid-stream", ErrorClass.PROTOCOL, "mid-response"),
    ("no-done", ErrorClass.PROTOCOL, "without data: [DONE]"),
    ("bad-chunking", ErrorClass.PROTOCOL, "chunked"),
])
def test_failures_are_classified(loop_factory: Any, kind: str, error: ErrorClass, words: str) -> None:
    data, _ = drive(loop_factory, _fail_script(kind), n=3)
    assert list(col(data, "error")) == [error] * 3
    assert set(data.error_messages) == {0, 1, 2}
    assert words in data.error_messages[0], data.error_messages[0]
    # Failed requests leave nothing in the latency series.
    assert data.histograms["itl_chunk"].get_total_count() == 0


def test_failures_do_not_disturb_other_requests(loop_factory: Any) -> None:
    good = stream_script([1, 1, 1], ttft_s=0.01, gap_s=0.01)
    data, _ = drive(loop_factory, lambda n, body: _fail_script("http-500")(n, body) if n % 2 else good,
                    n=8, concurrency=2)
    errors = list(col(data, "error"))
    assert errors.count(ErrorClass.HTTP_STATUS) == 4 and errors.count(ErrorClass.OK) == 4
    assert data.histograms["itl_chunk"].get_total_count() == 4 * 2


def test_connection_refused_is_a_connect_error(loop_factory: Any) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    data, _ = drive(loop_factory, lambda n, b: [], n=2, base_url=f"http://127.0.0.1:{port}")
    assert list(col(data, "error")) == [ErrorClass.CONNECT] * 2
    assert "refused" in data.error_messages[0].lower()


def test_timeout(loop_factory: Any) -> None:
    data, _ = drive(loop_factory, lambda n, b: [STREAM_HEAD, 5.0], n=2, concurrency=2, request_timeout_s=0.2)
    assert list(col(data, "error")) == [ErrorClass.TIMEOUT] * 2
    assert "request-timeout" in data.error_messages[0]
    elapsed = (col(data, "end_ns") - col(data, "sent_ns")) / 1e9
    assert np.all((elapsed > 0.19) & (elapsed < 1.0))


def test_time_cap_cancels_in_flight_and_ends_window(loop_factory: Any) -> None:
    data, _ = drive(loop_factory, lambda n, b: stream_script([1] * 50, gap_s=0.02), n=10, concurrency=2,
                    max_seconds=0.5)
    assert data.cap_hit and data.stopped_reason == "time cap"
    started = col(data, "sent_ns") > 0
    assert list(col(data, "error")[started]) == [ErrorClass.CANCELLED] * 2
    for row in np.flatnonzero(started).tolist():
        assert data.error_messages[row] == "in flight when the run stopped (time cap)"
    assert not np.any(data.rows[~started])  # rows of requests never sent stay zero
    assert (data.end_ns - data.start_ns) / 1e9 == pytest.approx(0.5, abs=0.05)
    assert started.sum() == 2  # nothing new after the cap
    # Both stay in flight until the cap: the mean is 2 less the sends' lag after the window opened
    # (~1 ms each; 25 ms under ASan on a loaded machine, which made "2.0 +- 0.1" fail once).
    lag_ns = col(data, "sent_ns")[started] - data.start_ns
    assert np.all(lag_ns < 0.1e9)
    assert data.mean_in_flight == pytest.approx(2.0 - lag_ns.sum() / (data.end_ns - data.start_ns), abs=0.02)



def test_no_request_begins_after_the_time_cap(loop_factory: Any) -> None:
    """Closed loop, short responses refilling their slots every few ms: the loop's timer for the cap
    fires up to a millisecond late, yet no request is sent at or after the cap's instant (the core's
    refill and Python's slots both look at it)."""
    data, _ = drive(loop_factory, lambda n, b: stream_script([1, 1], gap_s=0.001, ttft_s=0.001), n=4000,
                    concurrency=16, max_seconds=0.3)
    assert data.cap_hit and data.stopped_reason == "time cap"
    sent = col(data, "sent_ns")
    assert (sent > 0).sum() > 50  # the slots kept refilling up to the cap
    assert sent.max() < min(data.end_ns, data.start_ns + 300_000_000)  # the window ends at the cap

def test_time_cap_in_open_loop_cancels_arrivals_waiting_for_a_slot(loop_factory: Any) -> None:
    """20 arrivals/s, 2 slots, responses of ~1 s, cap 0.5 s: ~10 arrivals are due before the cap,
    2 are sent, the rest wait for a slot. Those waited (the load's doing): cancelled, not "not
    started", each with its arrival time."""
    data, _ = drive(loop_factory, lambda n, b: stream_script([1] * 50, gap_s=0.02), n=40, concurrency=2,
                    request_rate=20.0, max_seconds=0.5)
    assert data.cap_hit
    error, scheduled, sent = col(data, "error"), col(data, "scheduled_ns"), col(data, "sent_ns")
    arrived = scheduled > 0
    assert 6 <= arrived.sum() <= 14
    assert (sent > 0).sum() == 2
    assert np.all(error[arrived] == ErrorClass.CANCELLED)
    queued = np.flatnonzero(arrived & (sent == 0))
    assert len(queued) == arrived.sum() - 2
    assert np.all(scheduled[queued] <= col(data, "end_ns")[queued])  # arrived before the stop
    assert list(col(data, "index")[queued]) == list(queued)
    assert "waiting for one of the 2 slots" in data.error_messages[int(queued[0])]
    assert not np.any(data.rows[~arrived])  # arrivals after the cap stay never started


def test_open_loop_schedule_is_drawn_before_the_window(loop_factory: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Drawing arrivals takes time (numpy's generator ~6 ms to start, 10M arrivals ~1 s): done inside
    the window, it made the first arrivals late by as much, and that lateness counted as latency."""
    draw = pacer.arrival_offsets_ns

    drawn_ns: list[int] = []

    def slow_draw(*args: Any) -> Any:
        time.sleep(0.05)
        offsets = draw(*args)
        drawn_ns.append(now_ns())  # the core's clock is CLOCK_MONOTONIC, as time.monotonic_ns()
        return offsets

    monkeypatch.setattr(pacer, "arrival_offsets_ns", slow_draw)
    data, _ = drive(loop_factory, lambda n, b: stream_script([1, 1]), n=2, concurrency=2, request_rate=1000.0)
    assert list(col(data, "error")) == [0, 0]
    # Judged by the run's own stamps, not by the first send's lag (which a host stall lengthens too):
    # the window, and so every arrival, starts after the draw ended (the draw used to start it).
    assert len(drawn_ns) == 1
    assert drawn_ns[0] <= data.start_ns <= col(data, "scheduled_ns").min()


@pytest.mark.timing
def test_open_loop_arrivals_waiting_for_a_slot_go_out_from_the_core(loop_factory: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrivals far faster than 2 slots serve: each one that waited goes out on the connection whose
    request ended first, sent by the core in that same read (no trip through Python), and is due
    from its arrival. Later arrivals that find a slot free are still never sent early."""
    def script(n: int, body: bytes) -> list[Any]:
        return stream_script([1, 1, 1], ttft_s=0.01, gap_s=0.01)

    sent_from_python = []
    send_one = Connections.send_one

    async def counting(self: Connections, request: bytes, row: int, *args: Any, **kwargs: Any) -> int:
        sent_from_python.append(row)
        return await send_one(self, request, row, *args, **kwargs)

    monkeypatch.setattr(Connections, "send_one", counting)

    def one_round() -> None:
        sent_from_python.clear()
        data, server = drive(loop_factory, script, n=12, concurrency=2, request_rate=200.0, seed=5)
        scheduled, sent, end = col(data, "scheduled_ns"), col(data, "sent_ns"), col(data, "end_ns")
        assert list(col(data, "error")) == [0] * 12
        assert list(scheduled - data.start_ns) == list(pacer.arrival_offsets_ns(12, 200.0, 1.0, 5))
        assert np.all(sent >= scheduled)  # never before its arrival
        assert server.connections == 2  # the chained requests reuse the freed connections
        queued = [r for r in range(2, 12) if sent[r] > scheduled[r] + 5_000_000]  # waited for a slot
        assert len(queued) >= 6
        for r in queued:
            freed = min((e for e in end[:r] if e <= sent[r]), key=lambda e: sent[r] - e)
            assert sent[r] - freed < 2_000_000, (r, (sent[r] - freed) / 1e6)
        assert not set(queued) & set(sent_from_python)

    # A host stall between the read that ends a request and the send it triggers breaks the 2 ms
    # bound in one round; a send that waits for a trip through Python breaks it in every round.
    until_a_round_passes(one_round)


def test_running_out_of_file_descriptors_is_said_to_be_the_clients() -> None:
    """EMFILE on connect is the client's limit, not the server refusing: the message says so and
    what to do."""
    gen = LoadGenerator(Target.parse("http://127.0.0.1:9", "/v1/completions"),
                        LoadPlan(bodies=[b"{}"], warmup_bodies=[], concurrency=1))
    gen.conns.record_connect_failure(0, 1, 2, OSError(errno.EMFILE, os.strerror(errno.EMFILE)))
    message = gen.state.error_messages[0]
    assert message.startswith("connect to 127.0.0.1:9 failed: Too many open files in the client")
    assert "--concurrency" in message and "ulimit -Hn" in message
    assert gen.rows[0, COL["error"]] == ErrorClass.CONNECT


def test_connection_close_after_each_response(loop_factory: Any) -> None:
    data, server = drive(loop_factory, lambda n, b: stream_script([1, 1]), n=4, close_after_each=True)
    assert list(col(data, "error")) == [0] * 4
    assert server.connections == 4


def test_stale_keep_alive_connection_is_retried(loop_factory: Any) -> None:
    """The server drops each connection 50 ms after answering, without saying so: the next
    request, already sent on it, fails before any response byte and goes out again on a new one."""
    data, server = drive(loop_factory, lambda n, b: stream_script([1, 1]) + [0.05, "close"], n=3)
    assert list(col(data, "error")) == [0, 0, 0]
    assert data.error_messages == {}
    assert server.connections == 3
    # requests 2 and 3 each went out on the dropped connection first: both re-sends are counted
    summary = summarize(data, BenchConfig(num_prompts=3, concurrency=1), workload_info={}, server_info={})
    assert summary.counts.resent == data.stale_retries == 2
    assert "2 requests were re-sent once on a new connection" in " ".join(summary.notes)
    # warm-ups are re-sent the same way, but the count is of measured requests (as `total` is)
    data, _ = drive(loop_factory, lambda n, b: stream_script([1, 1]) + [0.05, "close"], n=2,
                    warmup_bodies=[b'{"warm-up":1}'] * 3)
    assert list(col(data, "error")) == [0, 0] and data.stale_retries == 2  # before the fix: 4


def test_stream_cut_while_watched_as_ending(loop_factory: Any) -> None:
    """Coalesced reads with expected lengths: every other stream is cut by the server after its
    third of four chunks, when the core has just moved it to the set watched for ends. The cut is
    classified, the connection leaves that set, and the other streams run on normally."""
    def script(n: int, body: bytes) -> list[Any]:
        steps = stream_script([1, 1, 1, 1], gap_s=0.005)
        return steps[:7] + [0.005, "close"] if n % 2 else steps  # head, ttft, 3 chunks with gaps

    data, server = drive(loop_factory, script, n=8, concurrency=2, coalesce_s=0.002,
                         expected_output_tokens=[4] * 8)
    errors = list(col(data, "error"))
    assert errors.count(ErrorClass.PROTOCOL) == 4 and errors.count(0) == 4
    assert all("mid-response" in m for m in data.error_messages.values())
    assert list(col(data, "chunks")[col(data, "error") == 0]) == [4] * 4
    assert server.connections >= 5  # a new connection after each cut
    # Each stream, cut or not, was watched after its third chunk (bar a stall merging two chunks).
    assert 6 <= data.extra["ends_watched"] <= 8


def test_connection_closed_while_idle_is_not_reused(loop_factory: Any) -> None:
    """Open loop, 250 ms between arrivals: the server closes each connection 20 ms after its
    response, while the client holds it idle. The next request goes out on a new connection."""
    data, server = drive(loop_factory, lambda n, b: stream_script([1, 1]) + [0.02, "close"], n=3,
                         request_rate=4.0)
    assert list(col(data, "error")) == [0, 0, 0]
    assert (col(data, "sent_ns") > 0).all() and (col(data, "end_ns") > 0).all()
    assert server.connections == 3


def test_closed_loop_opens_every_stream_on_a_warm_connection(loop_factory: Any) -> None:
    """The opening burst sends each slot's first request on a connection the warm-up opened."""
    async def main() -> tuple[RunData, ScriptedServer]:
        async with ScriptedServer(lambda n, b: stream_script([1, 1, 1])) as server:
            target = Target.parse(server.base_url, "/v1/completions")
            load = LoadPlan(bodies=[b'{"n":%d}' % i for i in range(12)], warmup_bodies=[b'{"w":1}'] * 4,
                            concurrency=4)
            return await LoadGenerator(target, load).run(), server

    loop = loop_factory()
    try:
        data, server = loop.run_until_complete(main())
    finally:
        loop.close()
    assert list(col(data, "error")) == [0] * 12
    assert server.connections == 4
    first = np.sort(col(data, "sent_ns"))[:4]
    assert first[-1] - first[0] < np.sort(col(data, "end_ns"))[0] - first[0]  # all open before any ended


def test_api_key_sent_as_bearer(loop_factory: Any) -> None:
    data, server = drive(loop_factory, lambda n, b: stream_script([1]), api_key="sk-test-123")
    head = server.requests[0][0]
    assert b"Authorization: Bearer sk-test-123" in head
    assert b"POST /v1/completions HTTP/1.1" in head


def test_base_url_with_v1_suffix() -> None:
    assert Target.parse("http://h:9/v1", "/v1/completions").path == "/v1/completions"
    assert Target.parse("http://h:9/proxy/", "/v1/chat/completions").path == "/proxy/v1/chat/completions"


def test_tls_verified_untrusted_and_insecure(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))

    async def main(verify: bool) -> RunData:
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(server_ctx)

        server = await asyncio.start_server(_stream_handler(stream_script([1, 2], gap_s=0.01)), "127.0.0.1", 0,
                                            ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        target = Target.parse(f"https://localhost:{port}", "/v1/completions")
        gen = LoadGenerator(target, LoadPlan(bodies=[b"{}"] * 3, warmup_bodies=[], concurrency=1,
                                             verify_tls=verify))
        data = await gen.run()
        server.close()
        return data

    def run(verify: bool) -> RunData:
        loop = uvloop.new_event_loop()
        try:
            return loop.run_until_complete(main(verify))
        finally:
            loop.close()

    untrusted = run(verify=True)
    insecure = run(verify=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))  # how a user trusts a private CA
    trusted = run(verify=True)
    assert list(col(untrusted, "error")) == [ErrorClass.CONNECT] * 3
    assert "certificate" in untrusted.error_messages[0].lower()
    for data in (insecure, trusted):
        assert list(col(data, "error")) == [0, 0, 0]
        assert list(col(data, "output_tokens")) == [3, 3, 3]
        assert data.connections_opened == 1


def test_cached_tokens_read_from_the_final_usage_whatever_the_reads(loop_factory: Any) -> None:
    """usage.prompt_tokens_details.cached_tokens, as vLLM (--enable-prompt-tokens-details) sends it in the
    final usage chunk, read per request into the table even when the reads cut the event mid-key, and -1
    where the server gave none (no details, null details, or a cached count that is not a count)."""
    finals: dict[int, dict[str, Any]] = {
        0: {},
        1: {"prompt_tokens_details": {"cached_tokens": 16}},
        2: {"prompt_tokens_details": None},
        3: {"prompt_tokens_details": {"cached_tokens": "16"}},
        4: {"prompt_tokens_details": {"audio_tokens": None, "cached_tokens": 0}},
    }

    def script(n: int, body: bytes) -> list[Any]:
        final = completion_chunk("", 3)
        final["choices"] = []
        final["usage"].update(finals[n])
        event = chunked(sse(final))
        cut = event.find(b"cached") + 3 if b"cached" in event else len(event) // 2
        return [STREAM_HEAD, chunked(sse(completion_chunk("abc", 3, finish="length"))), 0.005,
                event[:cut], 0.01, event[cut:cut + 5], 0.01, event[cut + 5:], chunked(sse("[DONE]")) + CHUNKED_END]

    data, _ = drive(loop_factory, script, n=len(finals))
    assert list(col(data, "error")) == [0] * len(finals)
    assert list(col(data, "cached_tokens")) == [-1, 16, -1, -1, 0]
    # a cached count that is no count is no usage fault: the output's counts stand
    assert list(col(data, "usage_source")) == [UsageSource.PER_CHUNK] * len(finals)


def test_outputs_kept_only_when_asked(loop_factory: Any) -> None:
    events = [chat_chunk({"role": "assistant", "content": ""}, 0), chat_chunk({"reasoning": "hm"}, 1),
              chat_chunk({"content": "Hello"}, 2), chat_chunk({"content": " world"}, 3, finish="stop")]

    def script(n: int, body: bytes) -> list[Any]:
        return [STREAM_HEAD, *(chunked(sse(e)) for e in events), chunked(sse("[DONE]")) + CHUNKED_END]

    kept, _ = drive(loop_factory, script, n=2, save_outputs=True)
    assert kept.extra["outputs"] == {0: ("Hello world", "hm"), 1: ("Hello world", "hm")}
    default, _ = drive(loop_factory, script, n=2)
    assert "outputs" not in default.extra


def test_outputs_that_are_not_openai_chunks_are_null_not_fatal(loop_factory: Any) -> None:
    """The core counts a chunk's tokens from its usage without decoding its text; the texts kept
    for --save-outputs are decoded after the run, and an unreadable one (a lone surrogate escape,
    a delta that is not an object) must leave that row's texts null, not end the run."""
    usage = b'"usage":{"prompt_tokens":7,"total_tokens":8,"completion_tokens":1}'
    bad_events = {1: b'{"choices":[{"index":0,"delta":"zz"}],' + usage + b'}',
                  2: b'{"choices":[{"index":0,"text":"\\ud800"}],' + usage + b'}'}

    def script(n: int, body: bytes) -> list[Any]:
        event = bad_events.get(n, b'{"choices":[{"index":0,"text":"ok"}],' + usage + b'}')
        return [STREAM_HEAD, chunked(b"data: " + event + b"\n\n"), chunked(sse("[DONE]")) + CHUNKED_END]

    data, _ = drive(loop_factory, script, n=3, save_outputs=True)
    assert list(col(data, "error")) == [0, 0, 0]
    assert list(col(data, "output_tokens")) == [1, 1, 1]
    assert data.extra["outputs"] == {0: ("ok", ""), 1: (None, None), 2: (None, None)}
    assert data.extra["outputs_unreadable"] == 2


def test_a_stop_while_a_warm_up_connects_sends_nothing(loop_factory: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop that comes while a warm-up's connection is being made cuts that warm-up before its send
    (it used to be sent and run to its end: the check skipped warm-ups)."""
    stop = asyncio.Event()
    connect = Connections.connect

    async def connect_then_stop(self: Connections) -> Any:
        stop.set()
        return await connect(self)

    monkeypatch.setattr(Connections, "connect", connect_then_stop)

    async def main() -> tuple[RunData, ScriptedServer]:
        async with ScriptedServer(lambda n, b: stream_script([1] * 20, gap_s=0.1)) as server:
            plan = LoadPlan(bodies=[b"{}"] * 2, warmup_bodies=[b'{"w":1}'] * 2, concurrency=2, stop_event=stop)
            data = await LoadGenerator(Target.parse(server.base_url, "/v1/completions"), plan).run()
            return data, server

    loop = loop_factory()
    try:
        data, server = loop.run_until_complete(main())
    finally:
        loop.close()
    assert data.stopped_reason == "interrupted"
    assert server.requests == []


def test_a_stop_during_the_warm_ups_sends_no_measured_request(loop_factory: Any) -> None:
    """Warm-ups that would take 10 s; the stop comes after 0.2 s: the warm-ups in flight are cut,
    the window opens on nothing and no request of the workload goes out."""
    def script(n: int, body: bytes) -> list[Any]:
        return stream_script([1] * 50, gap_s=0.2)

    async def main() -> tuple[RunData, ScriptedServer, float]:
        async with ScriptedServer(script) as server:
            stop = asyncio.Event()
            plan = LoadPlan(bodies=[b'{"n":%d}' % i for i in range(4)], warmup_bodies=[b'{"w":1}'] * 4,
                            concurrency=2, stop_event=stop)
            asyncio.get_running_loop().call_later(0.2, stop.set)
            t0 = time.monotonic()
            data = await LoadGenerator(Target.parse(server.base_url, "/v1/completions"), plan).run()
            return data, server, time.monotonic() - t0

    loop = loop_factory()
    try:
        data, server, took = loop.run_until_complete(main())
    finally:
        loop.close()
    assert took < 3.0
    assert data.stopped_reason == "interrupted"
    assert list(col(data, "sent_ns")) == [0, 0, 0, 0]
    assert [body for _, body in server.requests if body.startswith(b"{\"n\"")] == []


def _client_sockets_to(port: int) -> int:
    """This process's TCP sockets connected to ``port``."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = os.dup(int(name))
        except OSError:  # the listing's own fd, gone by now
            continue
        try:
            sock = socket.socket(fileno=fd)
        except OSError:  # not a socket
            os.close(fd)
            continue
        try:
            count += sock.family == socket.AF_INET and sock.getpeername()[1] == port
        except OSError:
            pass
        finally:
            sock.close()
    return count


def test_a_cancelled_run_closes_its_connections(loop_factory: Any) -> None:
    """A run whose task is cancelled (asyncio's Ctrl-C under the Python API) unwinds without its
    own stop: the connections in flight must still be closed, not left streaming."""
    async def main() -> tuple[int, int]:
        async with ScriptedServer(lambda n, body: stream_script([1] * 100, gap_s=0.05)) as server:
            port = int(server.base_url.rsplit(":", 1)[1])
            gen = LoadGenerator(Target.parse(server.base_url, "/v1/completions"),
                                LoadPlan(bodies=[b"{}"] * 8, warmup_bodies=[], concurrency=8))
            task = asyncio.ensure_future(gen.run())
            # all 8 requests in flight (each streams for 5 s), however long a busy host took to send them
            deadline = time.monotonic() + 4
            while len(server.requests) < 8 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            during = _client_sockets_to(port)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return during, _client_sockets_to(port)

    loop = loop_factory()
    try:
        during, after = loop.run_until_complete(main())
    finally:
        loop.close()
    assert (during, after) == (8, 0)


BIG_BODY = b'{"prompt":"' + b"x" * 30_000_000 + b'"}'  # far more than a socket buffer takes


def _run_with_a_big_body(loop_factory: Any, on_big: Any, bodies: list[bytes],
                         **plan: Any) -> tuple[RunData, list[bytes]]:
    """Runs ``bodies`` against a server that streams a short answer to each request, except those
    with a body over 1 MB: ``on_big(writer)`` takes their connection, the body unread. Returns the
    run and the request lines the server read."""
    async def main() -> tuple[RunData, list[bytes]]:
        request_lines: list[bytes] = []

        async def on_head(head: bytes, writer: asyncio.StreamWriter) -> bool:
            request_lines.append(head.split(b"\r\n", 1)[0])
            if int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]) <= 1_000_000:
                return False
            await on_big(writer)
            return True

        server = await asyncio.start_server(_stream_handler(stream_script([1, 2]), on_head), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        gen = LoadGenerator(Target.parse(f"http://127.0.0.1:{port}", "/v1/completions"),
                            LoadPlan(bodies=bodies, warmup_bodies=[], concurrency=1, **plan))
        try:
            return await asyncio.wait_for(gen.run(), 10), request_lines
        finally:
            server.close()

    loop = loop_factory()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_request_cut_while_its_body_is_still_being_sent(loop_factory: Any) -> None:
    """A 30 MB body the server never reads: the loop is still writing it when the request times
    out. Closing the connection must end that write too, or (on asyncio's loop) the stale watch on
    the fd number stalls the next connection that gets it, and the run never ends."""
    async def stuck(writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(3)

    data, _ = _run_with_a_big_body(loop_factory, stuck, [BIG_BODY, b"{}", b"{}"], request_timeout_s=0.3)
    assert list(col(data, "error")) == [ErrorClass.TIMEOUT, 0, 0]


def test_an_answer_before_the_whole_request_was_sent_ends_the_connection(loop_factory: Any) -> None:
    """A server may answer (an early 413, say) before it read a large body; the rest of that body
    would read as the next request on the connection, so the next request takes a new one."""
    async def too_large(writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)
        writer.close()

    data, request_lines = _run_with_a_big_body(loop_factory, too_large, [BIG_BODY, b"{}"])
    assert list(col(data, "error")) == [ErrorClass.HTTP_STATUS, 0]
    assert list(col(data, "http_status")) == [413, 200]
    assert request_lines == [b"POST /v1/completions HTTP/1.1"] * 2  # no request made of the body's rest
    assert data.connections_opened == 2
    assert data.stale_retries == 0  # not sent on the answered connection first, then again


def test_a_close_delimited_stream_ends_at_its_last_data(loop_factory: Any) -> None:
    """A body delimited by the connection's close: the request ends with the read that carried
    [DONE], not when the client got round to the FIN (with --coalesce-ms, a tick later)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"

    def script(n: int, body: bytes) -> list[Any]:
        return [head, sse(completion_chunk("a", 1)), 0.03, sse(completion_chunk("b", 2, finish="length")),
                sse("[DONE]"), 0.2, "close"]

    data, _ = drive(loop_factory, script, n=3, close_after_each=True, coalesce_s=0.02)
    assert list(col(data, "error")) == [0, 0, 0]
    last_chunk_ms = (col(data, "end_ns") - col(data, "first_token_ns")) / 1e6
    # [DONE] left >= 30 ms after the first chunk (the scripted server shares this loop, so a busy
    # host makes it later), the FIN 200 ms after that: an end taken from the FIN is >= 230 ms
    assert all(29.0 < ms < 200.0 for ms in last_chunk_ms), last_chunk_ms


def test_run_state_that_fails_to_build_closes_no_fd_it_does_not_own() -> None:
    """A RunState that fails in its constructor is still deallocated: it must not close fd 0."""
    read_end, write_end = os.pipe()
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        with pytest.raises(ValueError):
            RunState(np.zeros((1, len(COLUMNS)), dtype=np.float64), *(Recorder(new_histogram()) for _ in range(3)))
        os.fstat(0)  # raises if fd 0 was closed
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)


def test_watching_ends_needs_the_expected_tokens() -> None:
    """The ends are watched with the tick they are kept apart from (coalesce's own option), and need
    the run's expected tokens, which come with the RunState."""
    state = RunState(np.zeros((1, len(COLUMNS)), dtype=np.int64), *(Recorder(new_histogram()) for _ in range(3)))
    with pytest.raises(ValueError, match="expected_tokens"):
        state.coalesce(1_000_000, watch_ends=True)
    state = RunState(np.zeros((1, len(COLUMNS)), dtype=np.int64), *(Recorder(new_histogram()) for _ in range(3)),
                     expected_tokens=np.array([4], dtype=np.int64))
    assert state.coalesce(1_000_000, watch_ends=True) == state.fileno()


def test_tls_records_of_one_read_are_one_multi_event_read(tmp_path: Any) -> None:
    """Three events in three TLS records 1 ms apart, read together under --coalesce-ms: one socket
    read carrying several events, as over plain TCP (each record used to count as its own read)."""
    trustme = pytest.importorskip("trustme")
    cert = trustme.CA().issue_cert("localhost")

    async def main(tls: bool) -> RunData:
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(server_ctx)

        server = await asyncio.start_server(_stream_handler(stream_script([1, 1, 1], ttft_s=0.05, gap_s=0.001)),
                                            "127.0.0.1", 0, ssl=server_ctx if tls else None)
        port = server.sockets[0].getsockname()[1]
        target = Target.parse(f"{'https' if tls else 'http'}://localhost:{port}", "/v1/completions")
        gen = LoadGenerator(target, LoadPlan(bodies=[b"{}"] * 2, warmup_bodies=[], concurrency=1,
                                             verify_tls=False, coalesce_s=0.03))
        data = await gen.run()
        server.close()
        return data

    loop = uvloop.new_event_loop()
    try:
        plain, tls = (loop.run_until_complete(main(flag)) for flag in (False, True))
    finally:
        loop.close()
    for data in (plain, tls):
        assert list(col(data, "error")) == [0, 0]
        assert list(col(data, "chunks")) == [3, 3]
    assert plain.multi_event_reads >= 1
    assert tls.multi_event_reads >= 1
