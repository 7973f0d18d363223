"""validate's account of the host: what other processes, the run queue and the hypervisor took from the
client over the window, and whose a FAIL is."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time

import pytest

from support.timing import until_a_round_passes
from fastbench.api import validation as fv
from fastbench.api import validation_figures as vf
from fastbench.load import hostload
from fastbench.load.hostload import HostLoad, HostSnapshot

QUIET = HostLoad(cpus=2, others_cpus=0.02, client_run_queue_wait_ms=1.0, client_run_queue_wait_share=0.001,
                 steal_share=0.0)
BUSY = HostLoad(cpus=2, others_cpus=1.4, client_run_queue_wait_ms=300.0, client_run_queue_wait_share=0.12,
                steal_share=0.0)


def test_the_window_figures_from_two_snapshots() -> None:
    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    start = HostSnapshot(t_ns=0, busy_ticks=1000, steal_ticks=10, total_ticks=5000, own_cpu_s=1.0,
                         run_queue_wait_ns=5_000_000)
    # 2 s: 300 busy ticks more, 10 of 400 ticks stolen; the client used 0.5 s of CPU, the server 0.25 s
    end = HostSnapshot(t_ns=2_000_000_000, busy_ticks=1300, steal_ticks=20, total_ticks=5400, own_cpu_s=1.5,
                       run_queue_wait_ns=45_000_000)
    load = hostload.between(start, end, server_cpu_s=0.25)
    assert load.others_cpus == pytest.approx((300 * tick_s - 0.5 - 0.25) / 2)
    assert load.steal_share == pytest.approx(10 / 400)
    assert (load.client_run_queue_wait_ms, load.client_run_queue_wait_share) == (40.0, pytest.approx(0.02))
    # without /proc nothing is judged
    bare = HostSnapshot(t_ns=0, busy_ticks=None, steal_ticks=None, total_ticks=None, own_cpu_s=0.0,
                        run_queue_wait_ns=None)
    nothing = hostload.between(bare, bare)
    assert (nothing.others_cpus, nothing.client_run_queue_wait_ms, nothing.steal_share) == (None, None, None)
    assert hostload.starved_because(nothing) is None and hostload.starved_because(None) is None


def test_each_busy_figure_is_named_past_its_threshold() -> None:
    assert hostload.starved_because(QUIET) is None
    assert hostload.starved_because(BUSY) == ("the client waited 300 ms for a CPU (12.0 % of the window); "
                                              "other processes kept 1.40 of 2 CPUs busy")
    stolen = HostLoad(cpus=4, others_cpus=0.0, client_run_queue_wait_ms=0.0, client_run_queue_wait_share=0.0,
                      steal_share=0.25)
    assert hostload.starved_because(stolen) == "the hypervisor took 25.0 % of CPU time (steal)"
    # what a quiet 2-vCPU VM showed at 64 streams: the client shares the CPUs with the synthetic server
    quiet_vm = HostLoad(cpus=2, others_cpus=0.04, client_run_queue_wait_ms=162.0, client_run_queue_wait_share=0.041,
                        steal_share=0.085)
    assert hostload.starved_because(quiet_vm) is None


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _spin_on(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    _spin(30)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_a_process_spinning_on_the_clients_cpu_shows_as_wait_and_other_load() -> None:
    """Pinned to one CPU beside a spinning process, a busy client is runnable all the time and runs about
    half of it: the other half is run-queue wait, and the spinner is other processes' CPU. Judged against
    the snapshots' own span, whatever else the host does."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    spinner = multiprocessing.get_context("fork").Process(target=_spin_on, args=(cpu,), daemon=True)
    spinner.start()
    try:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.1)  # the spinner is running
        start = hostload.snapshot()
        _spin(0.6)
        load = hostload.between(start, hostload.snapshot())
    finally:
        os.sched_setaffinity(0, before)
        spinner.kill()
        spinner.join()
    assert load.client_run_queue_wait_share is not None and load.client_run_queue_wait_share > 0.2
    assert load.others_cpus is not None and load.others_cpus > 0.2
    assert hostload.starved_because(load) is not None


@pytest.mark.parametrize(("host", "cause", "words"), [
    (BUSY, "busy host", "this FAIL is the busy host's, not the client's: the client waited 300 ms"),
    (QUIET, "client", None),
])
@pytest.mark.timing
def test_a_fail_says_whose_it_is(monkeypatch: pytest.MonkeyPatch, host: HostLoad, cause: str,
                                 words: str | None) -> None:
    """At a tolerance of 1 ns the timing checks fail: on a busy host the verdict blames the host and
    names its figures; on a quiet one it is the client's. (20 ms between chunks: a server that misses
    half of that is the server's FAIL, test_the_server_missing_its_schedule_is_the_servers_fail; a host
    busy enough to make the synthetic server itself miss it fails a round honestly, hence the rounds.)"""
    monkeypatch.setattr(hostload, "between", lambda *args: host)

    def one_round() -> None:
        report = fv.validate_client(2, num_requests=4, output_len=4, itl_ms=20, ttft_ms=5, tolerance_ms=1e-6)
        assert (report.verdict, report.verdict_cause) == ("FAIL", cause)
        assert report.host == host.to_dict()
        text = report.render()
        assert text.endswith(f"verdict: FAIL (cause: {cause})")
        assert (words is None) == (not any("busy host" in note for note in report.notes))
        if words is not None:  # the whole note in the report; the console shows its opening
            assert any(words in note for note in report.notes), report.notes
            assert "this FAIL is the busy host's" in text
        assert "  host: other processes" in text

    until_a_round_passes(one_round)


def test_a_pass_on_a_busy_host_still_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostload, "between", lambda *args: BUSY)
    # one request per stream: no turnover, so "streams kept open" (not loosened by the tolerance) is not judged
    report = fv.validate_client(2, num_requests=2, output_len=4, itl_ms=20, ttft_ms=5, tolerance_ms=1000.0)
    assert (report.verdict, report.verdict_cause) == ("PASS", None)
    assert any(note.startswith("the host was busy during the window: ") for note in report.notes)


def test_the_server_missing_its_schedule_is_the_servers_fail_and_a_failed_run_is_the_runs() -> None:
    notes: list[str] = []
    assert vf._verdict_cause(["skew p99 (ms)"], True, BUSY, notes) == "server"
    assert notes == ["the host was busy during the window: " + str(hostload.starved_because(BUSY))]
    # requests that failed, or stamps from another clock, are not the host's doing
    assert vf._verdict_cause(["skew p99 (ms)", "chunks with negative skew"], False, BUSY, []) == "run"
    assert vf._verdict_cause(["failed requests"], False, QUIET, []) == "run"
    assert vf._verdict_cause([], False, QUIET, []) is None
