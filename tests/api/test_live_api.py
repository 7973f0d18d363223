"""What ``arun(on_live=...)`` hands a harness: snapshots a few times a second while the run runs, counters
that only grow, a last one (``final``) holding the result's own figures, and the result's timeline; a
listener that raises is dropped and the run goes on; with --workers the parent shows the merged counters."""

from __future__ import annotations

import logging

import pytest

from fastbench import api
from fastbench.config import BenchConfig
from fastbench.results.live import LiveSnapshot


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


def test_workers_parent_shows_the_merged_counters() -> None:
    seen: list[LiveSnapshot] = []
    config = BenchConfig(num_prompts=80, concurrency=8, random_input_len=16, random_output_len=30, workers=2,
                         synthetic_args=("--itl-ms", "10"))
    result = api.run(config, on_live=seen.append)
    running = [s for s in seen if not s.final]
    assert running and max(s.completed for s in running) > 0
    assert all(not s.latency for s in running)  # the parent holds no request table while the workers run
    assert seen[-1].completed == result.counts.completed and seen[-1].latency["ttft"].count == 80
