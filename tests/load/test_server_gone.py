"""A server that goes away mid-run: the run stops once every connection attempt has failed for
--server-gone-s, nothing answering in between, says so, keeps what it measured, and does not hammer the
dead port meanwhile. Judged on the run's own stamps (the request table), never on the host's speed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from fastbench import BenchConfig, api
from fastbench.load import gone
from fastbench.results import writers
from fastbench.results.records import COL, ErrorClass
from fastbench.synthetic import SyntheticServer

GONE_S = 1.0
SLOTS = 8


def test_a_server_killed_mid_run_stops_the_run_and_keeps_what_was_measured(tmp_path: Path) -> None:
    server = SyntheticServer("--ttft-ms", "2", "--itl-ms", "1").start()
    completed_before = threading.Event()

    def kill_once_measuring(progress: dict[str, Any]) -> None:
        if progress["completed"] >= 20 and not completed_before.is_set():
            completed_before.set()
            assert server.process is not None
            server.process.kill()

    records = tmp_path / "requests.jsonl"
    try:
        config = BenchConfig(base_url=server.base_url, num_prompts=5000, concurrency=SLOTS,
                             random_input_len=8, random_output_len=4, server_gone_s=GONE_S,
                             save_detailed=str(records))
        result = api.run(config, on_progress=kill_once_measuring)
    finally:
        server.stop()
    assert completed_before.is_set()
    assert result.stopped_reason == "server went away"
    assert result.counts.completed >= 20 and result.counts.not_started > 0  # stopped, not run to the end
    table = [orjson.loads(line) for line in records.read_bytes().splitlines()]
    refused_ms = np.sort([r["end_ms"] for r in table if r["error"] == "CONNECT" and r["first_byte_ns"] is None])
    last_answer_ms = max(r["first_byte_ms"] or 0 for r in table)
    stopped_ms = result.duration_s * 1e3  # the window's end, on the records' clock (ms from its start)
    # the rule held on the run's own stamps: the first refusal came after the server's last answer, and the run
    # stopped no sooner than the stated time after it (the watch's own attempts filled it where no row failed)
    assert refused_ms[0] > last_answer_ms
    assert stopped_ms - refused_ms[0] >= GONE_S * 1e3, (refused_ms[0], stopped_ms)
    # not hammered: each slot waited 10 ms doubling to 0.5 s between attempts, so from the first refusal to the
    # stop at most this many could be made (the waits before reaching 0.5 s, then one per 0.5 s)
    span_s = (stopped_ms - refused_ms[0]) / 1e3
    ramp = sum(gone.refusal_wait(k) for k in range(1, 7))
    per_slot = 7 + max(0.0, span_s - ramp) / gone.LONGEST_WAIT_S + 1
    assert len(refused_ms) <= SLOTS * per_slot, (len(refused_ms), span_s)
    console = writers.render_console(result)
    assert console.splitlines()[1].startswith(f"SERVER WENT AWAY: every connection refused for {GONE_S:g} s")
    assert any(note.startswith("the server went away: every connection attempt for 1 s") for note in result.notes)


def test_the_rule_restarts_when_the_server_answers() -> None:
    rows = np.zeros((6, len(COL)), dtype=np.int64)
    watch = gone.ServerGoneWatch(rows, after_s=1.0)

    def refuse(row: int, at_s: float) -> None:
        rows[row, COL["error"]] = ErrorClass.CONNECT
        rows[row, COL["end_ns"]] = int(at_s * 1e9)

    refuse(0, 10.0)
    refuse(1, 10.6)
    assert not watch.look(reads=0, now_ns=int(10.7e9)) and watch.refused_for_s == pytest.approx(0.6)
    rows[2, COL["first_byte_ns"]] = int(10.8e9)  # an answer: the refusals before it no longer count
    rows[2, COL["end_ns"]] = int(10.9e9)
    refuse(3, 11.2)
    assert not watch.look(reads=0, now_ns=int(11.3e9)) and watch.refused_for_s == 0.0
    refuse(4, 11.9)
    assert not watch.look(reads=0, now_ns=int(12.0e9))
    refuse(5, 12.2)
    assert watch.look(reads=0, now_ns=int(12.3e9)) and watch.refused_for_s == pytest.approx(1.0)
    assert watch.mark == 6


def test_reads_on_a_stream_still_in_flight_are_the_server_answering() -> None:
    rows = np.zeros((3, len(COL)), dtype=np.int64)
    watch = gone.ServerGoneWatch(rows, after_s=1.0)
    for row, at_s in ((0, 1.0), (1, 2.5)):
        rows[row, COL["error"]] = ErrorClass.CONNECT
        rows[row, COL["end_ns"]] = int(at_s * 1e9)
    assert not watch.look(reads=5, now_ns=int(3e9))  # row 2 streams on: its reads are an answer at 3 s
    assert watch.refused_for_s == 0.0 and watch.mark == 2
    assert not watch.look(reads=5, now_ns=int(3.1e9))


def test_the_watchs_own_attempts_count_when_no_row_fails() -> None:
    """An open loop's arrivals wait for a pooled connection: only the watch's own attempts say refused."""
    rows = np.zeros((4, len(COL)), dtype=np.int64)
    watch = gone.ServerGoneWatch(rows, after_s=1.0)
    assert not watch.look(reads=3, now_ns=int(1e9))  # the last read at 1 s
    assert not watch.probe_due(int(1.4e9)) and watch.probe_due(int(1.5e9))  # silent half a second
    watch.probed(int(1.5e9), accepted=False)
    assert not watch.probe_due(int(1.9e9))
    watch.probed(int(2.0e9), accepted=False)
    assert not watch.look(reads=3, now_ns=int(2.0e9)) and watch.refused_for_s == pytest.approx(0.5)
    watch.probed(int(2.5e9), accepted=True)  # the port listens again: start again
    assert watch.refused_for_s == 0.0
    for at_s in (3.0, 3.5, 4.0):
        watch.probed(int(at_s * 1e9), accepted=False)
    assert watch.look(reads=3, now_ns=int(4.0e9)) and watch.refused_for_s == pytest.approx(1.0)


def test_an_open_loop_whose_server_was_killed_stops_too() -> None:
    server = SyntheticServer("--ttft-ms", "2", "--itl-ms", "1").start()
    killed = threading.Event()

    def kill_once_measuring(progress: dict[str, Any]) -> None:
        if progress["completed"] >= 10 and not killed.is_set():
            killed.set()
            assert server.process is not None
            server.process.kill()

    try:
        config = BenchConfig(base_url=server.base_url, num_prompts=5000, request_rate=50.0, random_input_len=8,
                             random_output_len=4, server_gone_s=GONE_S)
        result = api.run(config, on_progress=kill_once_measuring)
    finally:
        server.stop()
    assert killed.is_set() and result.stopped_reason == "server went away"
    assert result.counts.completed >= 10 and result.counts.not_started > 0


def test_refusal_waits_double_to_half_a_second() -> None:
    assert [gone.refusal_wait(k) for k in range(0, 9)] == [0.0, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.5, 0.5]
