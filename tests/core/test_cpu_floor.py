"""bench/floor_client.c, the CPU floor yardstick: it must count what fastbench counts."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from support.bench import load_bench_module
from support.timing import until_a_round_passes
from fastbench import BenchConfig, SyntheticServer, run

cpu_floor = load_bench_module("cpu_floor")

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")


@pytest.mark.timing
@pytest.mark.parametrize("coalesce_us", [0, 4000])
def test_floor_client_counts_chunks_and_keeps_streams_open(tmp_path: Path, coalesce_us: int) -> None:
    exe, _ = cpu_floor.build_floor_client(tmp_path)

    def one_round() -> None:
        with SyntheticServer(ttft_ms=5, itl_ms=5) as server:
            r = cpu_floor.run_floor(exe, server.port, 4, 1.0, "epoll", coalesce_us, 64, None)
            chunks_sent = server.stats()["chunks_sent"]
        # 4 streams, a chunk every 5 ms each: ~800 chunks/s; each 64-chunk response is ~0.33 s, so
        # the closed loop sent ~4 x 6 requests over warm-up and window.
        assert 600 < r["chunks_per_s"] < 850
        assert r["chunks"] <= chunks_sent
        assert r["requests"] >= 4 * 4
        assert r["kernel_stamped_reads"] == r["reads"] > 0  # every read carried its kernel stamp
        assert r["cpu_us_per_chunk"] > 0
        if coalesce_us:
            # 4 ms windows gather ~800 / 250 = 3.2 reads from the 4 streams (2 ms windows gave 1.6-2.0,
            # too near the bound on a busy host)
            assert r["reads_per_wakeup"] > 2

    # A host stall of the server or the floor (a quarter of the 1 s window) costs chunks in one round;
    # a floor that counts reads or tokens instead of chunks, or leaves streams idle, fails every round.
    until_a_round_passes(one_round)


@pytest.mark.timing
def test_uring_floor_reads_every_ready_socket_per_wake_up(tmp_path: Path) -> None:
    """One io_uring wait runs at most ~20 queued receives; the floor must run the rest before it
    sleeps again, or data piles up in the sockets and several chunks share one read (and stamp).
    128 streams, a chunk every 10 ms each, a 4 ms sleep between waits: ~50 sockets ready per
    wake-up, each read holding one chunk (before the fix: 20 reads per wake-up, 2.6 chunks each)."""
    exe, has_uring = cpu_floor.build_floor_client(tmp_path)
    if not has_uring:
        pytest.skip("built without liburing")

    def one_round() -> None:
        with SyntheticServer(ttft_ms=5, itl_ms=10) as server:
            r = cpu_floor.run_floor(exe, server.port, 128, 1.0, "uring", 4000, 32, None)
        assert 9_000 < r["chunks_per_s"] < 13_500
        assert r["reads"] >= 0.9 * r["chunks"]

    # A stall of the floor lets chunks pile up in its sockets too, and one of the server costs
    # chunks: a round may be run again; a floor that leaves ready sockets unread fails every round.
    until_a_round_passes(one_round)


@pytest.mark.timing
def test_wake_costs_are_measured_per_wake_up(tmp_path: Path) -> None:
    """Both probes wake on a 2 ms timerfd for 0.2 s: up to 100 wake-ups each, each with some CPU.
    A busy host runs fewer (ticks missed while the probe waits for a CPU are counted by one read):
    77 with the CPUs half taken by other work under ASan, 31 with four busy processes on two CPUs. The
    floor, 15, still fails a probe that does not wake on the tick (one that waits 20 ms wakes 10 times)."""
    exe, _ = cpu_floor.build_floor_client(tmp_path)

    def one_round() -> None:
        c_loop, core = cpu_floor.wake_costs(exe, 0.2, 2000, None)
        for w in (c_loop, core):
            assert 15 <= w["wakeups"] <= 101
            assert 0 < w["cpu_us_per_wakeup"] < 10_000

    # A probe kept off the CPUs for over 0.1 s of its 0.2 s loses ticks in one round; a probe that
    # does not wake on each tick fails every round.
    until_a_round_passes(one_round)


@pytest.mark.timing
@pytest.mark.parametrize("tokens_per_chunk,output_len", [("1", 16), ("1-4", 64)])
def test_request_seconds_is_how_long_a_request_streams(tokens_per_chunk: str, output_len: int) -> None:
    """run_fastbench sizes its runs with request_seconds: it must be how long a request really
    streams, send to end, against the server cpu_floor starts (TTFT 50 ms, 20 ms between chunks).
    1-4 tokens per chunk draws each chunk's size, so 32 requests: their median comes 2-4 % over
    (the last chunk is cut to fit, so a request holds a little more than one chunk per mean size);
    a formula without the TTFT is 13 % off, one that took the largest size for the mean 35 %."""
    expected_s = cpu_floor.request_seconds(tokens_per_chunk, output_len)
    with SyntheticServer(ttft_ms=50, itl_ms=20, tokens_per_chunk=tokens_per_chunk) as server:
        config = BenchConfig(base_url=server.base_url, concurrency=32, num_prompts=32, random_input_len=8,
                             random_output_len=output_len, ignore_eos=True)

        def one_round() -> None:
            result = run(config)
            assert result.counts.completed == 32 and result.total_output_tokens == 32 * output_len
            streamed = result.distributions["e2el"]  # closed loop: from each send to its end stamp
            assert streamed.median / 1e3 == pytest.approx(expected_s, rel=0.1)

        # The ends are kernel stamps, but a stall of the server past its schedule makes the last
        # chunks late: a round may be run again; a formula that is wrong fails every round.
        until_a_round_passes(one_round)


def test_wake_accounting_splits_the_gap_to_the_floor() -> None:
    """12,800 chunks/s, wake-ups at 32 us: 400 ends/s over the floor's 120 ticks/s cost 280 x 32 /
    12,800 = 0.7 us; fastbench's 600 wake-ups/s are 200 more than its ends (0.5 us); the rest is
    what is left of 5.4 - 4.0."""
    fastbench = {"cpu_us_per_chunk": 5.4, "chunks_per_s": 12_800.0, "wakeups_per_s": 600.0, "requests_per_s": 400.0}
    floor = {"cpu_us_per_chunk": 4.0, "chunks_per_s": 12_800.0, "wakeups_per_s": 120.0}
    acc = cpu_floor.wake_accounting(fastbench, floor, 32.0)
    assert acc["one_wakeup_per_end"] == pytest.approx(0.7)
    assert acc["bound_keeping_streams_open"] == pytest.approx(4.7)
    assert acc["wakeups_beyond_ends"] == pytest.approx(0.5)
    assert acc["rest"] == pytest.approx(0.2)
    # Fewer ends than the floor's ticks: ends cost nothing extra, every wake-up over the ticks is extra.
    few = cpu_floor.wake_accounting({**fastbench, "requests_per_s": 100.0}, floor, 32.0)
    assert few["one_wakeup_per_end"] == 0.0
    assert few["wakeups_beyond_ends"] == pytest.approx(480 * 32 / 12_800)


def test_floor_run_reports_wakeups_per_second(tmp_path: Path) -> None:
    """The floor's wake-ups per second of its measured window, bounded by what it does, whatever
    the host's load: it sleeps 2 ms before each wait, so at most 500 a second (+1 over the 0.5 s);
    each wake-up reads each of its 4 sockets at most once, so at least a quarter of its reads a
    second. (Counted over the warm-up second too, the figure falls to a third, under that bound.)"""
    exe, _ = cpu_floor.build_floor_client(tmp_path)
    with SyntheticServer(ttft_ms=5, itl_ms=5) as server:
        r = cpu_floor.run_floor(exe, server.port, 4, 0.5, "epoll", 2000, 64, None)
    assert r["reads"] > 0 and r["seconds"] > 0
    assert r["reads"] / 4 / r["seconds"] <= r["wakeups_per_s"] <= 500 + 1 / r["seconds"]


def test_a_base_build_given_as_a_venv_runs_beside_this_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--base with a venv's path: that venv's python runs validate and the wake-up probe, each rep's
    base run sits next to this build's (base first, then this first in the next rep), and the output
    and the JSON give each rep's paired ratio this/base and the load average at start and end. The
    base here is this venv behind a python that logs its arguments, so its runs can be told apart."""
    log = tmp_path / "base-calls.log"
    base_python = tmp_path / "base" / "bin" / "python"
    base_python.parent.mkdir(parents=True)
    base_python.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {sys.executable} "$@"\n')
    base_python.chmod(0o755)
    out = tmp_path / "runs.json"
    assert cpu_floor.main(["--reps", "2", "--seconds", "0.5", "--streams", "4", "--output-len", "4",
                           "--base", str(tmp_path / "base"), "--json", str(out)]) == 0
    calls = log.read_text().splitlines()
    # two fastbench clients (every arrival, 1 ms) a rep, then one probe
    assert sum("-m fastbench validate" in c for c in calls) == 4
    assert sum("--wake-probe" in c for c in calls) == 1

    text = capsys.readouterr().out
    fastbench_lines = [line.split(" coalesce ")[0].split(maxsplit=2)[2].strip() for line in text.splitlines()
                       if line.startswith("  rep ") and " fastbench" in line]
    assert fastbench_lines == ["fastbench (base)", "fastbench"] * 2 + ["fastbench", "fastbench (base)"] * 2
    assert "| fastbench (base) | 0.0 ms |" in text and "| fastbench | 0.0 ms |" in text
    assert "this/base per rep" in text and "load average at start" in text and "at the end" in text

    doc = json.loads(out.read_text())
    assert doc["builds"]["base"]["python"] == str(base_python)
    assert len(doc["wake_cost"]) == 3  # the C loop, this build's path, the base's
    for key in ("fastbench coalesce_us=0", "fastbench coalesce_us=1000"):
        this, base = doc[key], doc[key.replace("fastbench", "fastbench (base)")]
        assert doc["paired_ratios_this_over_base"][key] == pytest.approx(
            [t["cpu_us_per_chunk"] / b["cpu_us_per_chunk"] for t, b in zip(this, base)])
    assert len(doc["load_average"]["start"]) == len(doc["load_average"]["end"]) == 3


def test_a_revision_built_before_is_reused_and_a_bad_one_refused(tmp_path: Path) -> None:
    """A revision whose build the cache holds, finished, is that build's python: nothing is built
    again. A name that is neither a path nor a revision is refused before anything runs."""
    other_build = load_bench_module("other_build")
    commit = other_build.commit_of("HEAD")
    python = tmp_path / commit / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (python.parents[1] / other_build.BUILT).touch()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    build = other_build.resolve("HEAD", cache=tmp_path)
    assert build.python == str(python) and build.label == f"HEAD ({commit[:7]})"
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted([*before, f"{commit}.lock"])
    with pytest.raises(ValueError, match="neither a python, a venv nor a git revision"):
        other_build.resolve(str(tmp_path / "no-such-venv"), cache=tmp_path)


def test_a_build_whose_wake_probe_fails_loses_only_its_probe(tmp_path: Path) -> None:
    """The probe runs this script on each build's core; a build it does not fit (here a python that
    exits 1) leaves its entry without a figure and the error, after minutes of runs that still stand."""
    exe, _ = cpu_floor.build_floor_client(tmp_path)
    c_loop, this, failed = cpu_floor.wake_costs(exe, 0.1, 2000, None, (sys.executable, "/bin/false"))
    assert c_loop["wakeups"] > 0 and this["cpu_us_per_wakeup"] > 0
    assert failed["cpu_us_per_wakeup"] is None and failed["error"]
