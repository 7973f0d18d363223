"""bench/floor_client.c, the CPU floor yardstick: it must count what fastbench counts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from _bench import load_bench_module
from fastbench.synthetic import SyntheticServer

cpu_floor = load_bench_module("cpu_floor")

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler")


@pytest.mark.parametrize("coalesce_us", [0, 2000])
def test_floor_client_counts_chunks_and_keeps_streams_open(tmp_path: Path, coalesce_us: int) -> None:
    exe, _ = cpu_floor.build_floor_client(tmp_path)
    with SyntheticServer(ttft_ms=5, itl_ms=5) as server:
        r = cpu_floor.run_floor(exe, server.port, 4, 1.0, "epoll", coalesce_us, None)
        chunks_sent = server.stats()["chunks_sent"]
    # 4 streams, a chunk every 5 ms each: ~800 chunks/s; each 64-chunk response is ~0.33 s, so
    # the closed loop sent ~4 x 6 requests over warm-up and window.
    assert 600 < r["chunks_per_s"] < 850
    assert r["chunks"] <= chunks_sent
    assert r["requests"] >= 4 * 4
    assert r["kernel_stamped_reads"] == r["reads"] > 0  # every read carried its kernel stamp
    assert r["cpu_us_per_chunk"] > 0
    if coalesce_us:
        assert r["reads_per_wakeup"] > 1.5  # 2 ms windows gather reads from the 4 streams


def test_wake_costs_are_measured_per_wake_up(tmp_path: Path) -> None:
    """Both probes wake on a 2 ms timerfd for 0.2 s: ~100 wake-ups each, each with some CPU."""
    exe, _ = cpu_floor.build_floor_client(tmp_path)
    c_loop, core = cpu_floor.wake_costs(exe, 0.2, 2000, None)
    for w in (c_loop, core):
        assert 80 <= w["wakeups"] <= 101
        assert 0 < w["cpu_us_per_wakeup"] < 10_000


def test_request_seconds_follow_tokens_per_chunk() -> None:
    assert cpu_floor.request_seconds("1") == pytest.approx(0.05 + 63 * 0.02)
    assert cpu_floor.request_seconds("1-4") == pytest.approx(0.05 + 63 / 2.5 * 0.02)
