"""--workers: one schedule over several processes, merged into what one process would report.

Against the synthetic server: exact counts, merged figures equal to those recomputed from the merged
per-request rows, the closed loop's requests claimed from one shared table (--concurrency held with
uneven requests, as one process holds it), the open loop's merged arrivals tested against the
asked-for distribution (Kolmogorov-Smirnov, written here: scipy is not a dependency), a worker killed
mid-run, a stop (as Ctrl-C asks it) and a worker that cannot start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import math
import mmap
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import uvloop

from support.pools import guarded, run_and_then
from fastbench import api
from fastbench._core import Recorder, RowClaims, RunState
from fastbench.cli.argtypes import workers_count
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError, WorkerError
from fastbench.load import pacer
from fastbench.load import workers as workers_module
from fastbench.load.drive import drive
from fastbench.load.driver import LoadGenerator
from fastbench.load.generators import make_generator
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.worker import WorkerOutcome, WorkerSpec, claim_layout, claim_views
from fastbench.load.workers import WorkerPool, choose_workers, split_schedule
from fastbench.results import notes as notes_module
from fastbench.results.records import COL, NCOLS, ErrorClass, new_histogram
from fastbench.results.workersection import chosen_because, worded_section
from fastbench.synthetic import SyntheticServer

ENDPOINT = "/v1/completions"


def _body(tokens: int) -> bytes:
    return json.dumps({"model": "synthetic", "prompt": "hi", "max_tokens": tokens, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True,
                                                          "continuous_usage_stats": True}}).encode()


def _run(coro: object) -> object:
    return uvloop.run(coro)  # type: ignore[arg-type]


class DealtPool(WorkerPool):
    """Local workers that deal the closed loop's requests up front, as --ray's (no shared memory) do."""

    SHARED_MEMORY = False


# -- the schedule ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "concurrency", "workers"), [(1000, 256, 2), (7, 3, 2), (10, 64, 3), (5, 2, 8)])
def test_the_closed_loop_is_dealt_by_slots_without_repeats(n: int, concurrency: int, workers: int) -> None:
    shares = split_schedule(n, concurrency, None, 5, workers)
    assert len(shares) == min(workers, concurrency, n)
    assert sorted(np.concatenate([s.rows for s in shares]).tolist()) == list(range(n))  # each request once
    assert sum(s.slots for s in shares) == concurrency
    assert sorted(sum((s.warmups for s in shares), [])) == list(range(5))
    for w, share in enumerate(shares):  # request i goes to the worker of slot i mod concurrency
        assert all((i % concurrency) % len(shares) == w for i in share.rows.tolist())
    claimed = split_schedule(n, concurrency, None, 5, workers, claimed=True)  # one table, claimed as slots free
    assert [s.slots for s in claimed] == [s.slots for s in shares]
    assert all(s.rows.tolist() == list(range(n)) for s in claimed)
    assert sorted(sum((s.warmups for s in claimed), [])) == list(range(5))
    # the open loop under a cap: every arrival held by every worker, the cap the run's (tests/load/test_shared_cap.py)
    shared = split_schedule(n, concurrency, np.zeros(n, dtype=np.int64), 0, workers, claimed=True)
    assert [s.slots for s in shared] == [concurrency] * len(shares)


def test_open_loop_arrivals_are_drawn_once_and_partitioned() -> None:
    offsets = pacer.arrival_offsets_ns(1001, 50.0, 1.0, seed=3)
    shares = split_schedule(1001, 1001, offsets, 0, 3)
    merged = np.sort(np.concatenate([s.offsets for s in shares if s.offsets is not None]))
    assert np.array_equal(merged, offsets)  # the aggregate is the drawn process itself
    for share in shares:
        assert np.array_equal(share.offsets, offsets[share.rows])


def test_auto_picks_from_cores_and_streams_and_says_why() -> None:
    assert choose_workers(256, 1000, 8, False)[0] == 1
    assert choose_workers(4096, 10_000, 8, False)[0] == 8
    count, why = choose_workers(4096, 10_000, 2, True)
    assert count == 1 and why["cores"] == 2 and why["server_here"] and why["streams"] == 4096
    assert "one left to the server" in chosen_because(why) and "4096 streams" in chosen_because(why)
    assert choose_workers(None, 600, 4, False)[0] == 3  # open loop without a cap: the requests bound it


def test_workers_is_checked_with_the_other_options() -> None:
    for bad in (0, -1, "two", 1.5):
        with pytest.raises(ConfigError, match="workers"):
            api.validate(BenchConfig(workers=bad))  # type: ignore[arg-type]
    api.validate(BenchConfig(workers="auto"))


# -- runs against the synthetic server -------------------------------------------------------------------


def test_two_workers_count_exactly_and_merge_to_the_rows_figures(tmp_path: Path) -> None:
    config = BenchConfig(concurrency=16, num_prompts=96, random_input_len=8, random_output_len=12, workers=2,
                         synthetic_args=("--ttft-ms", "5", "--itl-ms", "2"), result_json=tmp_path / "r.json",
                         save_detailed=tmp_path / "r.jsonl", progress=False)
    result = api.run(config)
    assert result.counts.completed == 96 and result.counts.failed == 0
    section = result.workers
    assert section is not None and section["count"] == 2 and section["lost"] == []
    assert sum(w["completed"] for w in section["per_worker"]) == 96
    assert sum(w["requests"] for w in section["per_worker"]) == 96
    # Merged per-request figures are the ones recomputed from the merged records.
    ttfts = np.array(result.per_request.ttfts) * 1e3
    assert sorted(result.per_request.index) == list(range(96))
    assert result.distributions["ttft"].p99 == pytest.approx(float(np.percentile(ttfts, 99)), rel=1e-12)
    assert result.distributions["ttft"].median == pytest.approx(float(np.median(ttfts)), rel=1e-12)
    assert result.total_output_tokens == sum(result.per_request.output_lens) == 96 * 12
    # Chunk histograms added: every gap between two chunks of a completed request is in ITL.
    assert result.histograms["itl"].get_total_count() == result.distributions["itl"].count == 96 * 11
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["fastbench"]["workers"]["count"] == 2
    assert doc["completed"] == 96
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 96


def test_one_worker_is_the_single_process_path() -> None:
    plan = LoadPlan(bodies=[b"{}"], warmup_bodies=[], concurrency=1)
    target = Target.parse("http://127.0.0.1:1", ENDPOINT)
    for workers in (None, 1):
        generator, chosen = make_generator(target, plan, workers=workers, server_here=True)
        assert type(generator) is LoadGenerator and chosen is None
    generator, chosen = make_generator(target, plan, workers=2, server_here=True)
    assert isinstance(generator, WorkerPool) and chosen is None
    generator, chosen = make_generator(target, plan, workers="auto", server_here=True, concurrency_cap=1)
    assert type(generator) is LoadGenerator and chosen is not None and chosen["requested"] == "auto"


def _ks_statistic(samples: np.ndarray, cdf: object) -> float:
    x = np.sort(samples)
    f = np.asarray(cdf(x))  # type: ignore[operator]
    n = len(x)
    return float(max((np.arange(1, n + 1) / n - f).max(), (f - np.arange(n) / n).max()))


def _erlang_cdf(shape: int, rate: float) -> object:
    """CDF of gamma gaps with a whole shape and mean 1/rate (scale 1/(rate*shape))."""
    lam = rate * shape

    def cdf(x: np.ndarray) -> np.ndarray:
        terms = sum(np.exp(-lam * x) * (lam * x) ** k / math.factorial(k) for k in range(shape))
        return np.asarray(1.0 - terms)

    return cdf


@pytest.mark.parametrize("burstiness", [1.0, 2.0])
def test_open_loop_merged_arrivals_fit_the_asked_distribution(burstiness: float) -> None:
    n, rate = 600, 300.0
    with SyntheticServer(ttft_ms=1, itl_ms=1) as server:
        plan = LoadPlan(bodies=[_body(3)] * n, warmup_bodies=[], concurrency=n, request_rate=rate,
                        burstiness=burstiness, seed=11)
        pool = WorkerPool(Target.parse(server.base_url, ENDPOINT), plan, workers=3)
        data = _run(pool.run())
    rows = data.rows  # type: ignore[attr-defined]
    assert int((rows[:, COL["error"]] == 0).sum()) == n
    # Each worker sent its share only.
    each = data.extra["workers"]["per_worker"]  # type: ignore[attr-defined]
    assert {w["requests"] for w in each} == {200}
    # The arrival timer's lead (what validate reports): the largest worker's, and the waits summed.
    assert data.extra["arrival_lead_ns"] == pytest.approx(max(w["arrival_lead_us"] for w in each) * 1e3)  # type: ignore[attr-defined]
    assert data.extra["lead_wait_ns"] >= 0  # type: ignore[attr-defined]  (summed; absent before)
    scheduled = np.sort(rows[:, COL["scheduled_ns"]])
    expected = pacer.arrival_offsets_ns(n, rate, burstiness, 11)
    assert np.array_equal(scheduled - scheduled[0], expected)  # the drawn schedule, exactly
    # The arrivals the workers kept, merged, pass KS against the asked-for gaps (the sends add the
    # host's own lateness, judged by validate, not here).
    gaps_s = np.diff(scheduled) / 1e9
    d = _ks_statistic(gaps_s, _erlang_cdf(int(burstiness), rate))
    assert d < 1.95 / math.sqrt(len(gaps_s)), d  # alpha = 0.001


def test_the_error_rate_is_judged_over_all_workers() -> None:
    """Every request fails (a path the server does not serve gives HTTP 404): one stop for all."""
    with SyntheticServer(ttft_ms=1, itl_ms=1) as server:
        plan = LoadPlan(bodies=[_body(2)] * 4000, warmup_bodies=[], concurrency=4, max_error_rate=0.5)
        data = _run(WorkerPool(Target.parse(server.base_url, "/v1/nowhere"), plan, workers=2).run())
    assert data.stopped_reason == "max error rate"  # type: ignore[attr-defined]
    assert 20 <= int((data.rows[:, COL["error"]] != 0).sum()) < 4000  # type: ignore[attr-defined]


def test_a_killed_worker_is_reported_and_its_in_flight_requests_fail_as_lost() -> None:
    with SyntheticServer(ttft_ms=5, itl_ms=10) as server:
        plan = LoadPlan(bodies=[_body(30)] * 400, warmup_bodies=[], concurrency=8)
        pool = WorkerPool(Target.parse(server.base_url, ENDPOINT), plan, workers=2)

        def kill(p: WorkerPool) -> None:
            assert p._workers[1].process is not None
            os.kill(p._workers[1].process.pid, signal.SIGKILL)

        data = _run(run_and_then(pool, kill, 8))
    rows = data.rows  # type: ignore[attr-defined]
    section = data.extra["workers"]  # type: ignore[attr-defined]
    assert data.stopped_reason == "worker lost"  # type: ignore[attr-defined]
    assert section["lost"] == [1]
    lost = section["per_worker"][1]["lost"]
    assert lost is not None and "SIGKILL" in lost["how"] and lost["at_s"] > 0
    error = rows[:, COL["error"]]
    mine = pool.rows_by_worker[1]  # the rows it claimed
    assert int((error[mine] == int(ErrorClass.WORKER_LOST)).sum()) >= 1  # its in-flight ones
    assert int((error == int(ErrorClass.WORKER_LOST)).sum()) == int((error[mine] == int(ErrorClass.WORKER_LOST)).sum())
    assert all("worker 1" in data.error_messages[int(i)]  # type: ignore[attr-defined]
               for i in np.flatnonzero(error == int(ErrorClass.WORKER_LOST)))
    assert int(((error == 0) & (rows[:, COL["end_ns"]] > 0))[pool.rows_by_worker[0]].sum()) > 0
    assert all(w.process is not None and w.process.returncode is not None for w in pool._workers)


def test_a_stop_ends_every_worker_and_keeps_what_was_measured() -> None:
    stop: list[asyncio.Event] = []

    async def main() -> object:
        stop.append(asyncio.Event())
        with SyntheticServer(ttft_ms=5, itl_ms=10) as server:
            plan = LoadPlan(bodies=[_body(30)] * 400, warmup_bodies=[], concurrency=8, stop_event=stop[0])
            pool = WorkerPool(Target.parse(server.base_url, ENDPOINT), plan, workers=2)
            data = await run_and_then(pool, lambda p: stop[0].set(), 8)
            assert all(w.process is not None and w.process.returncode == 0 for w in pool._workers)
            return data

    data = uvloop.run(main())
    assert data.stopped_reason == "interrupted"  # type: ignore[attr-defined]
    error = data.rows[:, COL["error"]]  # type: ignore[attr-defined]
    assert int((error == int(ErrorClass.CANCELLED)).sum()) > 0
    assert int((error != 0).sum()) == int((error == int(ErrorClass.CANCELLED)).sum())  # cancelled, not failed
    # Each worker's messages (keyed by the rows it claimed from the shared table) land on their rows.
    cancelled = np.flatnonzero(error == int(ErrorClass.CANCELLED)).tolist()
    assert sorted(data.error_messages) == cancelled  # type: ignore[attr-defined]
    assert all("in flight when the run stopped" in data.error_messages[i] for i in cancelled)  # type: ignore[attr-defined]


def _open_fds_and_worker_maps() -> tuple[int, int]:
    maps = Path("/proc/self/maps").read_text()
    return len(os.listdir("/proc/self/fd")), maps.count("fastbench-worker")


def test_a_worker_that_cannot_start_fails_the_run_with_its_own_error() -> None:
    gc.collect()
    gc.disable()  # what the run leaves must be let go by the run, not found later by the collector
    try:
        left = []
        for _ in range(3):
            plan = LoadPlan(bodies=[_body(2)] * 4, warmup_bodies=[], concurrency=2, coalesce_s=-1.0)
            pool = WorkerPool(Target.parse("http://127.0.0.1:9", ENDPOINT), plan, workers=2)
            with pytest.raises(WorkerError, match=r"worker \d .*could not start: .*--coalesce-ms must be >= 0"):
                _run(pool.run())
            assert all(w.process is not None and w.process.returncode is not None for w in pool._workers)
            left.append(_open_fds_and_worker_maps())
        # Sockets and shared memory let go by each run (the first leaves the event loop's own for good).
        assert left[1] == left[2] == left[0] and left[0][1] == 0
    finally:
        gc.enable()


def test_what_the_pool_cannot_honour_is_refused_and_a_smaller_pool_says_why() -> None:
    target = Target.parse("http://127.0.0.1:9", ENDPOINT)

    async def start() -> int:
        return 0

    with pytest.raises(ConfigError, match="start instant"):
        WorkerPool(target, LoadPlan(bodies=[b"{}"], warmup_bodies=[], concurrency=1, start_at=start), workers=2)
    pool = WorkerPool(target, LoadPlan(bodies=[b"{}"] * 10, warmup_bodies=[], concurrency=2), workers=4)
    pool._workers = [workers_module.WorkerLink(share, i) for i, share in enumerate(split_schedule(10, 2, None, 0, 4))]
    assert pool._chosen() == {"how": "fewer", "requested": 4, "count": 2, "concurrency": 2, "requests": 10}
    assert chosen_because(pool._chosen()) == ("4 asked for, 2 used: each worker needs a slot and a request of its "
                                              "own (--concurrency 2, 10 requests)")


def test_workers_flag_names_auto_in_its_error() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="'auto'"):
        workers_count("x")
    assert workers_count("AUTO") == "auto" and workers_count("3") == 3


def test_ctrl_c_at_the_terminal_writes_the_merged_partial_result(tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal sends it: the workers ignore it, the parent
    stops them all and writes the merged result; exit status 130."""
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastbench", "--workers", "2", "--concurrency", "8", "--num-prompts", "2000",
         "--random-input-len", "8", "--random-output-len", "200", "--synthetic-args=--itl-ms 10 --ttft-ms 5",
         "--result-json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = 60.0
        while deadline > 0 and not _window_open(proc.pid):
            deadline -= 0.1
            asyncio.run(asyncio.sleep(0.1))
        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["fastbench"]["run"]["stopped_reason"] == "interrupted"
    assert doc["fastbench"]["workers"]["count"] == 2 and doc["fastbench"]["workers"]["lost"] == []
    assert doc["fastbench"]["counts"]["failed"] == 0 and doc["fastbench"]["counts"]["cancelled"] > 0


def _window_open(pid: int) -> bool:
    """Both workers of the fastbench process ``pid`` hold their 4 streams open: a socket each, beside
    the 3 a worker holds before its window (its control socket, its event loop's own pair) and the
    kernel-stamp guard."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return False
    workers = [int(c) for c in children if "fastbench.load.worker" in _cmdline(int(c))]
    return len(workers) == 2 and all(_sockets(w) >= 3 + 1 + 4 for w in workers)


def _sockets(pid: int) -> int:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    count = 0
    for fd in fds:
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


# -- faults the parent must hold the deadline on ---------------------------------------------------------


@pytest.mark.parametrize("then_stop", [False, True])
def test_a_stalled_worker_is_killed_as_lost_and_the_merged_result_is_returned(
        monkeypatch: pytest.MonkeyPatch, then_stop: bool) -> None:
    """SIGSTOP: the worker neither reports nor exits; the parent kills it once it has been silent
    for SILENCE_LIMIT_S, with or without a stop (Ctrl-C) asked meanwhile."""
    monkeypatch.setattr(workers_module, "SILENCE_LIMIT_S", 1.0)
    stop = asyncio.Event() if then_stop else None
    with SyntheticServer(ttft_ms=5, itl_ms=10) as server:
        plan = LoadPlan(bodies=[_body(30)] * 400, warmup_bodies=[], concurrency=8, max_seconds=600.0,
                        stop_event=stop)
        pool = WorkerPool(Target.parse(server.base_url, ENDPOINT), plan, workers=2)

        def freeze(p: WorkerPool) -> None:
            assert p._workers[1].process is not None
            os.kill(p._workers[1].process.pid, signal.SIGSTOP)
            if stop is not None:
                stop.set()

        data = guarded(run_and_then(pool, freeze, 8), pool)
    section = data.extra["workers"]  # type: ignore[attr-defined]
    assert section["lost"] == [1]
    assert "said nothing" in section["per_worker"][1]["lost"]["how"]
    assert data.stopped_reason == ("interrupted" if then_stop else "worker lost")  # type: ignore[attr-defined]
    error = data.rows[:, COL["error"]]  # type: ignore[attr-defined]
    assert int((error[pool.rows_by_worker[1]] == int(ErrorClass.WORKER_LOST)).sum()) == 4  # its 4 slots
    assert pool._workers[1].process is not None and pool._workers[1].process.returncode == -signal.SIGKILL
    assert pool._workers[0].process is not None and pool._workers[0].process.returncode == 0


def test_workers_that_handed_in_their_result_are_reaped_together_and_killed_if_they_linger(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that sent "done" and does not exit holds the run EXIT_GRACE_S at most, whatever the
    stop grace (here an hour), and lingering workers are waited for together, not in turn."""
    monkeypatch.setattr(workers_module, "STOP_GRACE_S", 3600.0)
    plan = LoadPlan(bodies=[_body(2)] * 4, warmup_bodies=[], concurrency=2)
    pool = WorkerPool(Target.parse("http://127.0.0.1:9", ENDPOINT), plan, workers=2)

    async def main() -> list[int | None]:
        for index in range(2):
            worker = workers_module.WorkerLink(split_schedule(4, 2, None, 0, 2)[index], index)
            worker.process = await asyncio.create_subprocess_exec("sleep", "3600")
            pool._workers.append(worker)
        await pool._reap()
        return [w.process.returncode for w in pool._workers if w.process is not None]

    assert guarded(main(), pool) == [-signal.SIGKILL, -signal.SIGKILL]


@pytest.mark.parametrize("pool_class", [WorkerPool, DealtPool])
def test_a_killed_worker_counts_exactly_what_it_had_claimed(pool_class: type[WorkerPool]) -> None:
    """Short requests, several claimed between two progress reports: what the core writes in the shared
    memory on every claim (its mark at each row it claimed from the shared table; dealt, its count of
    claims) says exactly which were in flight (its 4 slots), whenever the kill lands; no row is run
    twice or skipped."""
    with SyntheticServer(ttft_ms=2, itl_ms=2) as server:
        for round_ in range(3):
            plan = LoadPlan(bodies=[_body(5)] * 20_000, warmup_bodies=[], concurrency=8)
            pool = pool_class(Target.parse(server.base_url, ENDPOINT), plan, workers=2)

            def kill(p: WorkerPool) -> None:
                assert p._workers[1].process is not None
                os.kill(p._workers[1].process.pid, signal.SIGKILL)

            data = guarded(run_and_then(pool, kill, 100 + 37 * round_), pool)
            rows = data.rows  # type: ignore[attr-defined]
            error = rows[:, COL["error"]]
            others, mine = pool.rows_by_worker  # worker 1 is the one killed
            assert not np.intersect1d(mine, others).size  # no row in two workers
            lost = np.flatnonzero(error == int(ErrorClass.WORKER_LOST))
            assert len(lost) == 4 and np.isin(lost, mine).all(), (round_, lost.tolist())  # its slots' rows
            assert all("worker 1" in data.error_messages[int(i)] for i in lost)  # type: ignore[attr-defined]
            started = np.flatnonzero(rows.any(axis=1))
            if pool_class is WorkerPool:  # one table claimed in order: rows 0..k-1, each once
                assert rows[mine].any(axis=1).all()  # each row it claimed finished there, or is lost
                assert started.tolist() == list(range(len(started)))
                assert sorted(np.concatenate([mine, others]).tolist()) == started.tolist()
                assert len(mine) > 10 and len(others) > 10  # both took their part of the one table
            else:  # dealt: each worker's own rows, claimed in its order
                position = np.flatnonzero(rows[mine].any(axis=1))
                assert position.tolist() == list(range(len(position)))


def test_the_error_rate_rule_stops_each_worker_at_once() -> None:
    """Every connect is refused: each worker applies the rule to its own counts (and the others' as
    last told), so none goes on failing while the parent hears of it; one process fails ~25 here."""
    plan = LoadPlan(bodies=[_body(2)] * 200_000, warmup_bodies=[], concurrency=4, max_error_rate=0.5)
    pool = WorkerPool(Target.parse("http://127.0.0.1:9", ENDPOINT), plan, workers=2)
    data = guarded(pool.run(), pool)
    assert data.stopped_reason == "max error rate"  # type: ignore[attr-defined]
    failed = int((data.rows[:, COL["error"]] != 0).sum())  # type: ignore[attr-defined]
    # Each worker stops by its 20th failure of its own; after it, at most a few more, as one process
    # has (its slots' connects already under way when the stop lands).
    assert 20 <= failed <= 2 * (20 + 4), failed


def test_a_closed_loop_dealt_unevenly_says_so_and_flags_the_idle_slots() -> None:
    """Workers that share no memory (--ray's) deal requests up front. Long and short requests alternate:
    dealt by slot, one worker gets every long one and the other runs out early. The result says how the
    work was dealt and a note flags the shortfall."""
    lengths = [100 if i % 2 == 0 else 2 for i in range(40)]
    with SyntheticServer(ttft_ms=1, itl_ms=2) as server:
        plan = LoadPlan(bodies=[_body(n) for n in lengths], warmup_bodies=[], concurrency=4)
        pool = DealtPool(Target.parse(server.base_url, ENDPOINT), plan, workers=2)
        data = guarded(pool.run(), pool)
    assert data.extra["workers"]["dealing"]["how"] == "dealt closed"  # type: ignore[attr-defined]
    section = worded_section(data.extra["workers"])  # type: ignore[attr-defined]
    assert section is not None
    assert section["dealt"].startswith("closed loop") and "up front" in section["dealt"]
    assert "share no memory" in section["dealt"]
    assert section["mean_in_flight"] == pytest.approx(data.mean_in_flight, rel=1e-9)  # type: ignore[attr-defined]
    dry = section["per_worker"][1]
    assert dry["ran_out_s"] > section["per_worker"][0]["ran_out_s"]  # the short requests' worker
    # Each worker's 2 slots stood idle from when its share ran out: their share of the window's slot time.
    window_s = (data.end_ns - data.start_ns) / 1e9  # type: ignore[attr-defined]
    idle_s = sum(w["ran_out_s"] * 2 for w in section["per_worker"])
    assert section["idle_slot_share"] == pytest.approx(idle_s / (4 * window_s), rel=1e-6) and idle_s > window_s / 2
    note = notes_module._workers_note(section)
    assert "SHORTFALL" in note and "worker 1 ran out" in note and "of --concurrency 4" in note


def test_the_shortfall_note_is_only_for_a_real_shortfall() -> None:
    section = {"count": 2, "idle_slot_share": 0.04, "mean_in_flight": 3.9, "concurrency": 4,
               "per_worker": [{"index": 0, "ran_out_s": 0.1}, {"index": 1, "ran_out_s": 0.0}]}
    assert "SHORTFALL" not in notes_module._workers_note(section)
    assert "SHORTFALL" in notes_module._workers_note({**section, "idle_slot_share": 0.3})


# -- the closed loop's requests claimed from one table every worker shares ------------------------------


def _claiming_state(header: np.ndarray, claimers: np.ndarray, rows: np.ndarray, who: int) -> RowClaims:
    state = RunState(rows, *(Recorder(new_histogram()) for _ in range(3)))
    state.set_requests(b"", [b"{}"] * len(rows))
    return state.claim_rows(header, claimers, who)


def test_cores_claim_each_row_of_the_shared_table_once_and_mark_it() -> None:
    n = 5
    header, claimers = np.zeros(8, dtype=np.int64), np.zeros(n, dtype=np.int32)
    rows = np.zeros((n, NCOLS), dtype=np.int64)
    first, second = (_claiming_state(header, claimers, rows, who) for who in (1, 2))
    assert [first.claim(), second.claim(), second.claim(), first.claim()] == [0, 1, 2, 3]
    assert second.claim() == 4 and first.claim() == -1 and second.claim() == -1
    assert claimers.tolist() == [1, 2, 2, 1, 2]
    assert header[0] == n  # an exhausted counter is read, not added to, by every slot that frees
    assert first.next_row == second.next_row == n
    state = RunState(rows, *(Recorder(new_histogram()) for _ in range(3)))
    state.set_requests(b"", [b"{}"] * n)
    with pytest.raises(ValueError, match="index \\+ 1"):
        state.claim_rows(header, claimers, 0)
    with pytest.raises(ValueError, match="5 int32 claimer marks"):
        state.claim_rows(header, claimers[:4], 1)
    assert state.claim_rows().claim() == 0 and header[0] == n  # without them: its own table


CLAIMER = textwrap.dedent("""
    import mmap, sys
    import numpy as np
    from fastbench._core import Recorder, RowClaims, RunState
    from fastbench.load.worker import WorkerOutcome, WorkerSpec, claim_layout, claim_views
    from fastbench.results.records import new_histogram
    fd, n, who = map(int, sys.argv[1:])
    header, claimers, rows = claim_views(mmap.mmap(fd, claim_layout(n)[0]), n)
    state = RunState(rows, *(Recorder(new_histogram()) for _ in range(3)))
    state.set_requests(b"", [b"{}"] * n)
    claim, count = state.claim_rows(header, claimers, who).claim, 0
    print("ready", flush=True)
    sys.stdin.readline()
    while claim() >= 0:
        count += 1
    print(count, flush=True)
""")


def test_processes_claiming_at_once_never_take_a_row_twice() -> None:
    """Two processes claim from one counter as fast as they can, together: an add that is not atomic
    loses updates, and then two processes take one row (their counts add up to more than the rows,
    and a row's mark is only the last writer's)."""
    n = 2_000_000
    size = claim_layout(n)[0]
    fd = os.memfd_create("fastbench-test-claims", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        shared = mmap.mmap(fd, size)
        procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(fd), str(n), str(who)], pass_fds=(fd,),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for who in (1, 2)]
        try:
            for proc in procs:
                assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            for proc in procs:  # both go at once
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            counts = [int(proc.communicate(timeout=120)[0]) for proc in procs]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
        marks = np.bincount(claim_views(shared, n)[1], minlength=3).tolist()  # the views go at once
        shared.close()
    finally:
        os.close(fd)
    assert sum(counts) == n and marks == [0, *counts], (counts, marks)  # every row once, by who counted it
    assert min(counts) > 0


def _alternating_dataset(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "uneven.jsonl"
    path.write_bytes(b"".join(orjson.dumps({"prompt": "hi", "output_tokens": 100 if i % 2 == 0 else 2}) + b"\n"
                              for i in range(n)))
    return path


def test_uneven_requests_over_two_workers_hold_the_concurrency_one_process_holds(tmp_path: Path) -> None:
    """Long (100 tokens) and short (2) requests alternate, --concurrency 4: dealt up front by slot, one
    worker got every long one and the mean in flight fell to ~2 of 4 (the review: 2.04 against 3.88);
    claimed from one table, a freed slot of either worker takes the next request, as one process's do."""
    n = 80
    base = BenchConfig(dataset_name="custom", dataset_path=_alternating_dataset(tmp_path, n), custom_output_len=-1,
                       dataset_order="file", num_prompts=n, concurrency=4, num_warmups=6, progress=False,
                       save_outputs=True,
                       per_request_arrays=True, result_json=tmp_path / "r.json",
                       synthetic_args=("--ttft-ms", "1", "--itl-ms", "2"))
    one = api.run(base)
    two = api.run(base.replace(workers=2))
    for result in (one, two):
        assert result.counts.completed == n and result.counts.failed == 0
        assert sorted(result.per_request.index) == list(range(n))  # every request once
        by_index = dict(zip(result.per_request.index, result.per_request.output_lens, strict=True))
        assert [by_index[i] for i in range(n)] == [100 if i % 2 == 0 else 2 for i in range(n)]  # its own body
        # What the workers' cores kept by row (chunk stamps, outputs) is put on the right request.
        assert result.per_request.itls is not None and result.per_request.generated_texts is not None
        assert [len(gaps) for gaps in result.per_request.itls] == [99 if i % 2 == 0 else 1 for i in range(n)]
        texts = result.per_request.generated_texts
        assert all(len(texts[i]) > len(texts[i + 1]) > 0 for i in range(0, n, 2))
        assert any("6 warm-up requests sent before the measured window" in note for note in result.notes)
    section = two.workers
    assert section is not None and section["count"] == 2 and section["lost"] == []
    assert "claims the next request" in section["dealt"]
    each = section["per_worker"]
    assert sum(w["requests"] for w in each) == sum(w["completed"] for w in each) == n
    assert all(w["requests"] > 0 and w["ran_out_s"] == 0.0 for w in each)
    assert section["idle_slot_share"] == 0.0 and not any("SHORTFALL" in note for note in two.notes)
    # --concurrency held as one process holds it (judged loosely against the one-process run just made:
    # dealt up front, the same run gave ~0.53 of it).
    assert two.client.mean_in_flight >= 0.85 * one.client.mean_in_flight, (two.client.mean_in_flight,
                                                                              one.client.mean_in_flight)
    # Merged per-request percentiles are the ones recomputed from the merged records.
    assert two.per_request.latencies is not None
    e2els = np.array(two.per_request.latencies) * 1e3
    ttfts = np.array(two.per_request.ttfts) * 1e3
    assert two.distributions["e2el"].p99 == pytest.approx(float(np.percentile(e2els, 99)), rel=1e-12)
    assert two.distributions["e2el"].median == pytest.approx(float(np.median(e2els)), rel=1e-12)
    assert two.distributions["ttft"].p99 == pytest.approx(float(np.percentile(ttfts, 99)), rel=1e-12)
    assert two.histograms["itl"].get_total_count() == (n // 2) * 99 + (n // 2) * 1


def test_a_row_handed_out_but_never_marked_is_lost_with_the_lost_worker() -> None:
    """The counter gave row 3 to a worker killed before its mark (an instruction later): only a lost
    worker can leave such a row, so it is counted in flight there; finished rows stay as they are."""
    plan = LoadPlan(bodies=[_body(2)] * 8, warmup_bodies=[], concurrency=4)
    pool = WorkerPool(Target.parse("http://127.0.0.1:9", ENDPOINT), plan, workers=2)
    pool._claiming = True
    pool._workers = [workers_module.WorkerLink(share, i)
                     for i, share in enumerate(split_schedule(8, 4, None, 0, 2, claimed=True))]
    pool._open_claim_table(8)
    try:
        assert pool._claim_next is not None and pool._claimers is not None and pool._claim_table is not None
        pool._claim_next[0] = 6
        pool._claimers[:6] = [1, 2, 1, 0, 2, 2]
        pool._claim_table[[0, 1, 2, 4], COL["end_ns"]] = 1  # finished; 5 (worker 2's) and 3 were in flight
        pool._workers[0].outcome = WorkerOutcome(index=0, data=None, pid=0, started_late_ns=0)  # type: ignore[arg-type]
        pool._workers[1].lost_ns, pool._workers[1].lost_how = 2, "was killed by SIGKILL"
        parts, claimed = pool._claimed_parts()
        assert [p.rows_index.tolist() for p in parts] == [[0, 2], [1, 3, 4, 5]] and claimed == [2, 4]
        pool._mark_lost(pool._workers[1], parts[1], claimed[1])
        error = parts[1].table[:, COL["error"]].tolist()
        assert error == [0, int(ErrorClass.WORKER_LOST), 0, int(ErrorClass.WORKER_LOST)]
        assert sorted(parts[1].error_messages) == [1, 3]  # by its row in the part: rows 3 and 5
    finally:
        pool._release()


# -- a worker's plan, and the one drive step ---------------------------------------------------------------

def test_a_workers_plan_carries_every_field_its_spec_and_the_plan_share() -> None:
    spec = WorkerSpec(
        index=2, target=Target.parse("http://127.0.0.1:9", "/v1/chat/completions"), api_key="k",
        headers={"X-A": "1"}, endpoint="/v1/chat/completions", rows=np.arange(3, dtype=np.int64),
        bodies=[b"a", b"b", b"c"], warmup_bodies=[b"w"], concurrency=7, request_rate=2.5,
        arrival_offsets_ns=np.array([0, 5, 9], dtype=np.int64), max_seconds=12.0, request_timeout_s=3.0,
        verify_tls=False, coalesce_s="auto", expected_output_tokens=[4, 5, 6], save_outputs=True,
        keep_chunk_stamps=True, report_interval_s=0.125, max_error_rate=0.25, kernel_timestamps=False,
        whole_answers=True)

    def report(progress: dict[str, object]) -> None:
        pass

    plan = spec.load_plan(on_progress=report)
    shared = {f.name for f in dataclasses.fields(WorkerSpec)} & {f.name for f in dataclasses.fields(LoadPlan)}
    assert len(shared) == 17
    for name in shared:
        assert getattr(plan, name) is getattr(spec, name), name
    assert plan.progress_interval_s == 0.125 and plan.on_progress is report
    # what a worker never takes from its parent's plan: its share's arrivals are drawn already, the
    # sessions, trees and ramps run in one process, and the callbacks are the worker's own
    assert {f.name for f in dataclasses.fields(LoadPlan)} - shared == {
        "burstiness", "seed", "ramp_up", "on_progress", "progress_interval_s", "on_window_start", "stop_event",
        "start_at", "sessions", "trees", "row_header"}


class _Runs:
    """A generator whose run takes a moment, then fails or hands back its ``data``."""

    def __init__(self, fails: bool) -> None:
        self.fails = fails
        self.data: Any = object()

    async def run(self) -> Any:
        await asyncio.sleep(0.01)
        if self.fails:
            raise RuntimeError("the run failed")
        return self.data

    def stop(self, reason: str) -> None:
        pass

    def running_tables(self, started: int) -> list[tuple[np.ndarray, int]]:
        return []

    def copy_chunk_counts(self, into: Mapping[str, np.ndarray]) -> bool:
        return False


@pytest.mark.parametrize("fails", [False, True])
def test_drive_ends_what_runs_alongside_and_leaves_its_watch_however_the_run_ends(fails: bool) -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def watch() -> AsyncIterator[None]:
        events.append("watch")
        try:
            yield
        finally:
            events.append("unwatch")

    async def alongside() -> None:
        events.append("alongside")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    generator = _Runs(fails)

    async def main() -> Any:
        try:
            data = await drive(generator, watch=watch(), alongside=[alongside()])
        except RuntimeError:
            data = None
        await asyncio.sleep(0)  # the cancellation is delivered at the task's next step
        return data

    data = asyncio.run(main())
    assert data is (None if fails else generator.data)
    assert events[:2] == ["watch", "alongside"] and sorted(events[2:]) == ["cancelled", "unwatch"]
