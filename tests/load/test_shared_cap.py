"""--workers' open loop under one --concurrency cap shared by every worker (RunState.share_arrivals).

In the core, two RunStates of this process stand for two workers sharing one header: a slot is never
taken past the cap, an arrival is never claimed before it is due, a slot that frees in one sends the
oldest due arrival held in the other, and a stop cancels each waiting arrival once. Over worker
processes against the synthetic server: the merged in-flight never passes the cap, every arrival is
sent exactly once, the sends' lateness is one process's for the same schedule, and arrivals that the
old per-worker caps kept waiting while another worker had free slots no longer wait.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import select
import signal
import socket

import numpy as np
import pytest
import uvloop

from support.pools import guarded, run_and_then
from support.scripted import CHUNKED_END, STREAM_HEAD, chunked, completion_chunk, sse
from support.timing import until_a_round_passes
from fastbench import api
from fastbench._core import Recorder, RunState, SharedDispatcher, StreamConnection, now_ns
from fastbench.config import BenchConfig
from fastbench.load import pacer
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.workers import WorkerPool, split_schedule
from fastbench.results import notes as notes_module
from fastbench.results.figures import client_lateness_ns
from fastbench.results.notes import SlotWaits
from fastbench.results.records import COL, NCOLS, ErrorClass, RunData, new_histogram
from fastbench.results.workersection import dealt
from fastbench.synthetic import SyntheticServer

ENDPOINT = "/v1/completions"
ANSWER = STREAM_HEAD + chunked(sse(completion_chunk("a", 1))) + chunked(b"data: [DONE]\n\n") + CHUNKED_END


class _Worker:
    """One worker's core: a RunState over the run's shared table and header, with idle connections over
    socket pairs whose server side the test writes itself."""

    def __init__(self, rows: np.ndarray, header: np.ndarray, claimers: np.ndarray, index: int, workers: int,
                 connections: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.state = RunState(rows, *(Recorder(new_histogram()) for _ in range(3)))
        self.state.kernel_timestamps = False
        self.state.set_requests(b"POST / HTTP/1.1\r\nContent-Length: ", [b"{}"] * len(rows))
        self.shared = (header, claimers, index + 1, workers)
        self.d: SharedDispatcher | None = None
        self.server_ends: list[socket.socket] = []
        self.conns = []
        for _ in range(connections):
            client, server = socket.socketpair()
            client.setblocking(False)
            self.server_ends.append(server)
            self.conns.append(StreamConnection(self.state, self.loop, client))

    def dispatch(self, offsets: np.ndarray, base: int, limit: int) -> SharedDispatcher:
        """The open loop starts: the core sends what is due under the run's cap."""
        self.d = self.state.share_arrivals(offsets, base, limit, *self.shared)
        return self.d

    def asked(self) -> list[socket.socket]:
        """The server ends with a request waiting, read off."""
        out = [sock for sock in self.server_ends if select.select([sock], [], [], 0)[0]]
        for sock in out:
            sock.recv(65536)
        return out

    def close(self) -> None:
        self.state.close_all("test over")
        for sock in self.server_ends:
            sock.close()
        self.loop.close()


def _shared(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((n, NCOLS), dtype=np.int64), np.zeros(8, dtype=np.int64), np.zeros(n, dtype=np.int32)


def test_a_slot_freed_in_one_worker_sends_the_arrival_held_in_the_other() -> None:
    rows, header, claimers = _shared(5)
    a = _Worker(rows, header, claimers, 0, 2, 3)
    b = _Worker(rows, header, claimers, 1, 2, 3)
    try:
        for w in (a, b):
            for conn in w.conns:
                w.state.park(conn)
        base = now_ns()
        offsets = np.zeros(5, dtype=np.int64)  # all due now; a cap of 2 for the two workers together
        a.dispatch(offsets, base, 2)
        # The oldest due arrivals, whoever's timer they are on: 0 (its own) and 1 (b's).
        assert header[0] == 2 and header[1] == 2 and claimers[:2].tolist() == [1, 1]
        bd = b.dispatch(offsets, base, 2)
        assert header[0] == 2 and header[1] == 2 and b.state.in_flight == 0  # held: never past the cap
        assert b.asked() == []
        # A request of a's ends: its connection sends the oldest due arrival (2) itself, the slot passing on.
        first, second = a.asked()
        first.sendall(ANSWER)
        a.state.drain()
        assert header[0] == 3 and header[1] == 2 and claimers[2] == 1
        # b takes a slot for Python's send (a pool miss): none is free, nothing is claimed.
        assert bd.claim_due_with_slot(now_ns()) == -1 and header[0] == 3 and header[1] == 2
        # Both of a's end with nothing more sent on them... the third's end frees a slot: arrival 3 (b's) goes.
        second.sendall(ANSWER)
        a.state.drain()
        assert header[0] == 4 and claimers[3] == 1 and header[1] == 2
        # b's Python send (claim_due_with_slot) once a slot is free, and given back: b's dispatch sends 4 then.
        for sock in a.asked():
            sock.sendall(ANSWER)
        a.state.stopping = True  # a sends nothing more: its slots free, and one goes to b's Python
        a.state.drain()
        a.state.drain()
        assert header[1] == 0 and header[0] == 4
        row = bd.claim_due_with_slot(now_ns())
        assert row == 4 and claimers[4] == 2 and header[1] == 1 and header[0] == 5
        bd.give_slot()
        assert header[1] == 0
        assert rows[:4, COL["end_ns"]].all()  # each of the four a sent ended once, on its row
    finally:
        a.close()
        b.close()


def test_an_arrival_is_claimed_only_when_due_and_a_stop_cancels_each_once() -> None:
    rows, header, claimers = _shared(6)
    a = _Worker(rows, header, claimers, 0, 2, 2)
    b = _Worker(rows, header, claimers, 1, 2, 2)
    try:
        base = now_ns()
        offsets = np.array([0, 0, 0, 0, 10**12, 10**12], dtype=np.int64)
        ad, bd = (w.dispatch(offsets, base, 1) for w in (a, b))  # no connection in either pool: Python's sends
        row = ad.claim_due_with_slot(now_ns())
        assert row == 0 and header[1] == 1
        assert bd.claim_due_with_slot(now_ns()) == -1 and header[1] == 1  # the one slot is a's
        ad.give_slot()
        # At a stop, the due arrivals left are claimed without a slot, each by one worker only.
        a.state.stopping = b.state.stopping = True
        taken = [ad.claim_arrived(now_ns()), bd.claim_arrived(now_ns()), ad.claim_arrived(now_ns())]
        assert taken == [1, 2, 3] and claimers[1:4].tolist() == [1, 2, 1]
        assert bd.claim_arrived(now_ns()) == -1 and header[0] == 4  # 4 and 5 are not due: never claimed
        assert header[1] == 0
    finally:
        a.close()
        b.close()


def test_the_shared_cap_checks_its_marks_and_only_its_dispatcher_takes_the_run_s_slots() -> None:
    rows, header, claimers = _shared(4)
    state = RunState(rows, *(Recorder(new_histogram()) for _ in range(3)))
    state.set_requests(b"POST / HTTP/1.1\r\nContent-Length: ", [b"{}"] * 4)
    offsets = np.full(4, 10**12, dtype=np.int64)
    with pytest.raises(ValueError, match="index \\+ 1"):
        state.share_arrivals(offsets, now_ns(), 2, header, claimers, 3, 2)
    with pytest.raises(ValueError, match="claimer marks"):
        state.share_arrivals(offsets, now_ns(), 2, header, claimers[:2], 1, 2)
    # the dispatcher of a cap of its own has nothing of the run's to take a slot of
    own = state.dispatch_arrivals(offsets, now_ns(), 2)
    assert not isinstance(own, SharedDispatcher) and not hasattr(own, "claim_due_with_slot")
    state.end_schedule()
    shared = state.share_arrivals(offsets, now_ns(), 2, header, claimers, 1, 2)
    assert isinstance(shared, SharedDispatcher) and shared.claim_due_with_slot(now_ns()) == -1  # none due
    assert header[1] == 0


def test_open_loop_under_a_cap_is_shared_and_uncapped_is_dealt() -> None:
    offsets = np.arange(10, dtype=np.int64)
    shared = split_schedule(10, 4, offsets, 3, 2, claimed=True)
    assert [s.slots for s in shared] == [4, 4]  # each may hold the whole cap: it is the run's
    assert all(s.rows.tolist() == list(range(10)) and s.offsets is not None and np.array_equal(s.offsets, offsets)
               for s in shared)
    dealt = split_schedule(10, 10, offsets, 3, 2)
    assert [s.rows.tolist() for s in dealt] == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]


# -- over worker processes ----------------------------------------------------------------------------


def _body(tokens: int) -> bytes:
    return json.dumps({"model": "synthetic", "prompt": "hi", "max_tokens": tokens, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True,
                                                          "continuous_usage_stats": True}}).encode()


class _DealtPool(WorkerPool):
    """The open loop as before the shared cap (and as --ray's workers still run it): arrivals dealt
    i mod N, the cap split."""

    SHARED_MEMORY = False


def _run(server: SyntheticServer, plan: LoadPlan, workers: int, pool_class: type[WorkerPool] = WorkerPool) -> RunData:
    target = Target.parse(server.base_url, ENDPOINT)
    runner = pool_class(target, plan, workers=workers) if workers > 1 else LoadGenerator(target, plan)

    async def main() -> RunData:
        return await asyncio.wait_for(runner.run(), 120)

    return uvloop.run(main())


def _most_in_flight(rows: np.ndarray) -> int:
    """The most requests in flight at once, from the rows' send and end stamps (an end before a send at
    the same instant: the slot passed on)."""
    sent = rows[rows[:, COL["sent_ns"]] > 0]
    events = sorted([(int(t), 1) for t in sent[:, COL["sent_ns"]]] + [(int(t), -1) for t in sent[:, COL["end_ns"]]])
    most = level = 0
    for _, step in events:
        level += step
        most = max(most, level)
    return most


def test_the_merged_in_flight_never_passes_the_cap_and_every_arrival_goes_once() -> None:
    """Poisson arrivals twice as fast as 6 slots serve them, over 3 workers: the cap binds all along.
    Requests of 10 to 30 tokens: of one length, the six chains of requests (a slot passes from a request
    to the next on its connection while arrivals wait) would keep in step, each taking every sixth
    arrival, and might never take another worker's."""
    n, cap = 300, 6
    tokens = np.random.default_rng(3).integers(10, 31, n)
    with SyntheticServer(ttft_ms=2, itl_ms=1) as server:
        plan = LoadPlan(bodies=[_body(int(t)) for t in tokens], warmup_bodies=[], concurrency=cap, request_rate=500.0,
                        arrival_offsets_ns=pacer.arrival_offsets_ns(n, 500.0, 1.0, seed=5))
        before = server.stats()["requests_total"]
        data = _run(server, plan, 3)
        stats = server.stats()
        stats["requests_total"] -= before + 1  # this run's: the stats requests count themselves
    rows = data.rows
    assert (rows[:, COL["error"]] == 0).all() and (rows[:, COL["sent_ns"]] > 0).all()
    assert stats["requests_total"] == n  # each arrival sent once, none twice
    assert _most_in_flight(rows) <= cap and stats["streams_max"] <= cap
    assert _most_in_flight(rows) == cap  # it did bind
    section = data.extra["workers"]
    assert sum(w["requests"] for w in section["per_worker"]) == n  # each row claimed by one worker
    assert section["dealing"]["how"] == "shared cap" and "shared by the 3 workers" in dealt(section["dealing"])
    assert sum(w["others_arrivals"] for w in section["per_worker"]) > 0  # freed slots sent the others'
    assert "slot_pools" not in data.extra  # one pool of slots, as in one process


@pytest.mark.timing
def test_the_sends_lateness_is_one_process_s_for_the_same_schedule() -> None:
    """The same drawn schedule and requests (2 or 30 tokens) under a binding cap of 4: one process, two
    workers sharing the cap, and two with the cap split as before (arrivals dealt i mod 2). How late the
    client sent each request past the moment a slot of the cap was free (figures.client_lateness_ns over
    one pool) is judged against each run's own stamps: a split cap makes an arrival wait for its own
    worker's request to end, so its lateness is of a long request's service time (p90 36-58 ms against
    a 32 ms service, measured beside four busy loops); one process and a shared cap only take their own
    wake-ups (p90 0.2-3.6 ms shared, 4-12 ms one process on that busy host, 0.06-0.08 idle): half a
    service time tells the two kinds apart. Each run is
    judged against its own service time, not against another run's figures: on a busy host two runs a
    second apart see different hosts (the mean wait for a slot went 14-200 ms in one process alone)."""
    n, cap, rate = 300, 4, 200.0
    tokens = np.random.default_rng(1).choice([2, 30], n)
    plan = LoadPlan(bodies=[_body(int(t)) for t in tokens], warmup_bodies=[], concurrency=cap, request_rate=rate,
                    arrival_offsets_ns=pacer.arrival_offsets_ns(n, rate, 1.0, seed=11))

    def late_in_services(data: RunData) -> float:
        """p90 of the client's lateness, in units of the run's own median service time of a 30-token request."""
        rows = data.rows
        assert (rows[:, COL["error"]] == 0).all()
        assert _most_in_flight(rows) <= cap
        service = np.median((rows[:, COL["end_ns"]] - rows[:, COL["sent_ns"]])[tokens == 30])
        return float(np.percentile(client_lateness_ns(rows, cap, True), 90)) / float(service)

    with SyntheticServer(ttft_ms=2, itl_ms=1) as server:
        def one_round() -> None:
            one, shared, split = (late_in_services(_run(server, plan, 1)), late_in_services(_run(server, plan, 2)),
                                  late_in_services(_run(server, plan, 2, _DealtPool)))
            # half a service time tells the two kinds apart: past it, a send waited for a request to end
            assert split > 0.5, (one, shared, split)  # the case is real: a split cap waits a request's service
            assert one < 0.5 and shared < 0.5, (one, shared, split)

        until_a_round_passes(one_round)


@pytest.mark.timing
def test_arrivals_no_longer_wait_for_their_own_worker_while_another_has_a_slot_free() -> None:
    """Long requests (i even, worker 0's timer) and short ones (i odd) 10 ms apart, a cap of 4 over two
    workers: split, worker 0 held two slots and its third long request waited ~160 ms for one while
    worker 1's stood free; shared, a request waits only when all 4 are busy (arrival 7), as in one process."""
    n, cap = 8, 4
    bodies = [_body(100) if i % 2 == 0 else _body(2) for i in range(n)]
    offsets = np.arange(n, dtype=np.int64) * 10_000_000
    plan = LoadPlan(bodies=bodies, warmup_bodies=[], concurrency=cap, request_rate=100.0, arrival_offsets_ns=offsets)
    with SyntheticServer(ttft_ms=1, itl_ms=2) as server:
        def one_round() -> None:
            split = _run(server, plan, 2, _DealtPool)
            shared = _run(server, plan, 2)
            for data in (split, shared):
                assert (data.rows[:, COL["error"]] == 0).all() and _most_in_flight(data.rows) <= cap
            # how late each went past its arrival and the first moment a slot of the whole cap was free
            split_late = client_lateness_ns(split.rows, cap, True) / 1e6
            shared_late = client_lateness_ns(shared.rows, cap, True) / 1e6
            assert split_late.max() > 100, split_late  # the case is real: split caps made it wait
            assert shared_late.max() < 20, shared_late
            waited = (shared.rows[:, COL["sent_ns"]] - shared.rows[:, COL["scheduled_ns"]]) / 1e6
            assert waited[:7].max() < 20 and waited[7] > 100, waited  # only the arrival that found 4 busy

        until_a_round_passes(one_round)


@pytest.mark.parametrize("stop", ["time cap", "interrupted"])
def test_a_stop_cancels_the_waiting_arrivals_once(stop: str) -> None:
    """A time cap, or a stop as Ctrl-C asks it (the parent tells each worker), with a backlog waiting for
    slots: the arrivals due and unsent at the stop are cancelled, each by one worker; none is sent twice,
    none is left unaccounted."""
    n, cap = 2000, 4
    offsets = pacer.arrival_offsets_ns(n, 400.0, 1.0, seed=2)
    event = asyncio.Event()

    def stop_soon() -> None:  # a second into the window
        asyncio.get_running_loop().call_later(1.0, event.set)

    plan = LoadPlan(bodies=[_body(20)] * n, warmup_bodies=[], concurrency=cap, request_rate=400.0,
                    arrival_offsets_ns=offsets, max_seconds=1.0 if stop == "time cap" else None,
                    stop_event=event if stop == "interrupted" else None,
                    on_window_start=stop_soon if stop == "interrupted" else None)
    with SyntheticServer(ttft_ms=2, itl_ms=2) as server:
        before = server.stats()["requests_total"]
        data = _run(server, plan, 2)
        stats = server.stats()
        stats["requests_total"] -= before + 1  # this run's: the stats requests count themselves
    rows = data.rows
    assert data.stopped_reason == stop
    error = rows[:, COL["error"]]
    sent = rows[:, COL["sent_ns"]] > 0
    assert stats["requests_total"] == int(sent.sum())  # every request the rows show sent, sent once
    waiting = (error == int(ErrorClass.CANCELLED)) & ~sent
    assert waiting.sum() > 10  # a backlog was waiting for the 4 slots at the stop
    assert all("waiting for one of the 4 slots" in data.error_messages[int(i)] for i in np.flatnonzero(waiting))
    # each worker stopped at its own instant (the time cap's is the same for all, give or take its loop):
    # every arrival due by the first and unsent was cancelled, none due well after the last was touched
    stops = rows[waiting, COL["end_ns"]]
    due = data.start_ns + offsets
    assert stops.max() - stops.min() < 100_000_000
    assert (error[(due <= stops.min()) & ~sent] == int(ErrorClass.CANCELLED)).all()
    assert not rows[(due > stops.max() + 100_000_000) & ~sent].any()
    if stop == "time cap":  # one instant for every worker: nothing due from it is sent
        assert not (sent & (due >= data.start_ns + 1_000_000_000)).any()
    # an interrupt reaches each worker at its own instant, and the first to stop may claim every waiting
    # arrival: a later one sends until its own stop, when it cancels its streams in flight
    last_stop = rows[error == int(ErrorClass.CANCELLED), COL["end_ns"]].max()
    assert not (sent & (rows[:, COL["sent_ns"]] > last_stop)).any()  # nothing sent after the last stop
    assert _most_in_flight(rows) <= cap


def test_a_killed_worker_s_claimed_arrivals_fail_as_lost_and_the_rest_stand() -> None:
    """Worker 1 killed mid-run: the arrivals its mark is on and that it never finished (at most the cap)
    fail as WORKER_LOST; every other started row finished or was cancelled at the stop, once."""
    n, cap = 4000, 6
    offsets = pacer.arrival_offsets_ns(n, 600.0, 1.0, seed=4)
    plan = LoadPlan(bodies=[_body(10)] * n, warmup_bodies=[], concurrency=cap, request_rate=600.0,
                    arrival_offsets_ns=offsets)
    with SyntheticServer(ttft_ms=2, itl_ms=2) as server:
        pool = WorkerPool(Target.parse(server.base_url, ENDPOINT), plan, workers=2)

        def kill(p: WorkerPool) -> None:
            assert p._workers[1].process is not None
            os.kill(p._workers[1].process.pid, signal.SIGKILL)

        before = server.stats()["requests_total"]
        data = guarded(run_and_then(pool, kill, 200), pool)
        stats = server.stats()
        stats["requests_total"] -= before + 1  # this run's: the stats requests count themselves
    rows = data.rows  # type: ignore[attr-defined]
    error = rows[:, COL["error"]]
    assert data.stopped_reason == "worker lost"  # type: ignore[attr-defined]
    others, mine = pool.rows_by_worker
    assert not np.intersect1d(mine, others).size
    lost = np.flatnonzero(error == int(ErrorClass.WORKER_LOST))
    assert 0 < len(lost) <= cap and np.isin(lost, mine).all(), lost.tolist()
    started = np.flatnonzero(rows.any(axis=1))
    assert started.tolist() == list(range(len(started)))  # claimed in order, none skipped
    assert sorted(np.concatenate([mine, others]).tolist()) == started.tolist()
    sent = rows[:, COL["sent_ns"]] > 0
    assert stats["requests_total"] >= int(sent.sum())  # (a lost one may have reached the server unrecorded)
    assert set(error[started].tolist()) <= {0, int(ErrorClass.CANCELLED), int(ErrorClass.WORKER_LOST)}


def test_the_result_says_the_cap_was_shared_and_a_split_cap_s_waits_say_whose_slots() -> None:
    config = BenchConfig(concurrency=3, num_prompts=60, random_input_len=8, random_output_len=10, request_rate=300.0,
                         workers=2, synthetic_args=("--ttft-ms", "2", "--itl-ms", "2"), progress=False)
    result = api.run(config)
    assert result.counts.completed == 60 and result.workers is not None
    assert "shared by the 2 workers" in result.workers["dealt"]
    assert any("cap shared by every worker" in note for note in result.notes), result.notes
    waits = SlotWaits(cap=4, granted=10, waited_ms=np.array([3.0]), still_waiting_ms=np.array([]), pools=2)
    (note,) = notes_module._slot_wait_notes(waits)
    assert "all the slots of its worker busy (--concurrency 4 split over 2 workers" in note
    (note,) = notes_module._slot_wait_notes(dataclasses.replace(waits, pools=1))
    assert "with all 4 slots busy" in note
