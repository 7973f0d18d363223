"""What ``arun(on_live=...)`` hands a harness: snapshots a few times a second while the run runs, counters
that only grow, a last one (``final``) holding the result's own figures, and the result's timeline; a
listener that raises is dropped and the run goes on; with --workers the parent shows
the workers' merged running figures."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
import pytest

from fastbench import api
from fastbench.api.live import LiveSampler
from fastbench.config import BenchConfig
from fastbench.results.live import LiveSnapshot
from fastbench.results.records import COL, NCOLS, RunData


def test_snapshots_while_running_end_on_the_results_figures(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[LiveSnapshot] = []

    def broken(snapshot: LiveSnapshot) -> None:
        raise RuntimeError("a view that breaks")

    config = BenchConfig(num_prompts=60, concurrency=6, random_input_len=16, random_output_len=40,
                         synthetic_args=("--itl-ms", "10"), label="a", variant="b")
    with caplog.at_level(logging.ERROR):
        result = api.run(config, on_live=[broken, seen.append])
    assert "dropped" in caplog.text  # said once, and the run went on
    running, final = seen[:-1], seen[-1]
    assert running and not any(s.final for s in running) and final.final
    # about four looks a second over the window (the run is ~3 s)
    assert len(running) >= 2 * result.duration_s
    for earlier, later in zip(running, running[1:]):
        assert later.completed >= earlier.completed and later.elapsed_s > earlier.elapsed_s
    assert final.completed == result.counts.completed == 60
    assert final.output_tokens == result.total_output_tokens and final.in_flight == 0
    assert final.labels == {"label": "a", "variant": "b"}
    for name, kept in (("ttft", "ttft"), ("tpot", "tpot"), ("e2e", "e2el")):  # the result's own HDR figures
        hdr = result.histograms[kept]
        assert final.latency[name].count == hdr.get_total_count() == result.distributions[kept].count
        assert final.latency[name].p50_ms == hdr.get_value_at_percentile(50) / 1e6
        assert final.latency[name].p99_ms == hdr.get_value_at_percentile(99) / 1e6
    assert final.latency["itl"].count == result.histograms["itl"].get_total_count()
    assert final.skew is not None and final.skew.count > 0  # the synthetic server stamps its chunks
    mid = running[len(running) // 2]
    assert 0 < mid.completed < 60 and mid.latency["itl"].count > 0 and mid.server.get("running") is not None
    columns = result.timeline["columns"] if result.timeline else {}
    assert columns["completed"][-1] == 60 and len(columns["t_s"]) >= int(result.duration_s)
    assert all(len(values) == len(columns["t_s"]) for values in columns.values())


def test_workers_parent_shows_the_merged_running_latencies() -> None:
    seen: list[LiveSnapshot] = []
    config = BenchConfig(num_prompts=120, concurrency=8, random_input_len=16, random_output_len=30, workers=2,
                         synthetic_args=("--itl-ms", "10"))
    result = api.run(config, on_live=seen.append)
    running, final = [s for s in seen if not s.final], seen[-1]
    mid = [s for s in running if 0 < s.completed < 120]
    assert mid, "no look while the workers ran"
    # while the workers run: the per-request latencies from the tables the parent shares with them, the
    # chunk gaps and the skew from the histograms each worker reports, merged
    late = mid[-1]
    for name in ("ttft", "tpot", "e2e"):
        # read from the tables as they are; ``completed`` is the workers' last report, which may lag them
        assert 0 < late.latency[name].count <= result.counts.completed, name
        assert late.latency[name].p50_ms is not None and late.latency[name].p50_ms > 0
    assert late.latency["itl"].count > 0 and 5 < (late.latency["itl"].p50_ms or 0) < 50  # 10 ms chunk gaps
    assert late.skew is not None and late.skew.count > 0
    for earlier, later in zip(mid, mid[1:]):
        assert later.latency["ttft"].count >= earlier.latency["ttft"].count
    assert final.completed == result.counts.completed == 120
    for name, kept in (("ttft", "ttft"), ("tpot", "tpot"), ("e2e", "e2el"), ("itl", "itl")):
        assert final.latency[name].count == result.histograms[kept].get_total_count(), name
    columns = result.timeline["columns"] if result.timeline else {}
    assert any(v is not None for v in columns["ttft_p50_ms"][:-1])  # the seconds' latencies, not only the end's


class _Tables:
    """A generator that is no class the sampler knows: only what load.drive.Generator offers."""

    def __init__(self, rows: np.ndarray, itl_counts: dict[int, int]) -> None:
        self.rows = rows
        self.itl_counts = itl_counts

    async def run(self) -> RunData:
        raise AssertionError("a look never runs the generator")

    def stop(self, reason: str) -> None:
        raise AssertionError("a look never stops the generator")

    def running_tables(self, started: int) -> list[tuple[np.ndarray, int]]:
        return [(self.rows, started)] if len(self.rows) else []

    def copy_chunk_counts(self, into: Mapping[str, np.ndarray]) -> bool:
        for counts in into.values():
            counts[:] = 0
        for index, count in self.itl_counts.items():
            into["itl"][index] = count
        return bool(self.itl_counts)


def _finished_rows(ttfts_ms: list[float]) -> np.ndarray:
    rows = np.zeros((len(ttfts_ms), NCOLS), dtype=np.int64)
    for i, ttft in enumerate(ttfts_ms):
        sent = 1_000_000_000 + i * 1_000_000
        rows[i, COL["index"]] = i
        rows[i, COL["sent_ns"]] = rows[i, COL["scheduled_ns"]] = sent
        rows[i, COL["first_token_ns"]] = sent + int(ttft * 1e6)
        rows[i, COL["end_ns"]] = sent + int(ttft * 1e6) + 50_000_000
        rows[i, COL["output_tokens"]] = 11
    return rows


def test_the_sampler_reads_any_generator_through_what_every_generator_offers() -> None:
    progress = {"elapsed_s": 1.0, "completed": 3, "failed": 0, "in_flight": 0, "output_tokens": 33, "total": 3}
    sampler = LiveSampler(_Tables(_finished_rows([10.0, 20.0, 30.0]), {100: 5}), open_loop=False)
    snapshot = sampler.look(progress)
    assert snapshot.latency["ttft"].count == 3 and snapshot.latency["e2e"].count == 3
    assert snapshot.latency["ttft"].p50_ms == pytest.approx(20.0, rel=0.01)
    assert snapshot.latency["itl"].count == 5  # the chunk histograms it copied
    # one with nothing readable yet: no per-request figures, no chunk gaps (not zeros)
    empty = LiveSampler(_Tables(np.zeros((0, NCOLS), dtype=np.int64), {}), open_loop=False).look(progress)
    assert empty.latency == {}
