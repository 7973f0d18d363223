"""The live figures' arithmetic: the HDR layout in numpy against the hdrh package's own, the running
per-request histograms against the result's definitions (however the rows arrive), and a snapshot read
back from its JSON form."""

from __future__ import annotations

import time

import numpy as np
import orjson
import pytest

from support.timing import until_a_round_passes
from fastbench.results.live import BOUNDS_S, Buckets, HdrLayout, LiveSnapshot, Quantiles, RunningFigures
from fastbench.results.records import COL, NCOLS, ErrorClass, new_histogram

pytestmark = pytest.mark.pure_python


@pytest.fixture(scope="module")
def layout() -> HdrLayout:
    return HdrLayout()


def test_index_and_quantiles_are_hdrhs(layout: HdrLayout) -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.integers(1, 3_600_000_000_000, 5000), np.arange(0, 3000),
                             2 ** np.arange(42), 2 ** np.arange(1, 42) - 1, [3_600_000_000_000]])
    reference = new_histogram()
    assert list(layout.index(values)) == [reference._counts_index_for(int(v)) for v in values]
    counts = np.zeros(layout.counts_len, dtype=np.int64)
    sample = rng.lognormal(17, 1.5, 3000).astype(np.int64)  # ~20 ms, spread over decades
    np.add.at(counts, layout.index(sample), 1)
    for v in sample:
        reference.record_value(int(v))
    for q in (0.001, 0.5, 0.9, 0.99, 0.999, 1.0):
        assert layout.quantile_ns(counts, q) == reference.get_value_at_percentile(q * 100), q
    few, small = np.zeros(layout.counts_len, dtype=np.int64), new_histogram()  # hdrh rounds its target count
    for v in range(1, 61):
        few[layout.index(np.array([v * 1_000_000]))] += 1
        small.record_value(v * 1_000_000)
    assert [layout.quantile_ns(few, q) for q in (0.5, 0.99)] == [small.get_value_at_percentile(p) for p in (50, 99)]
    assert layout.quantile_ns(np.zeros(layout.counts_len, dtype=np.int64), 0.5) is None


def test_buckets_count_the_values_whose_hdr_bucket_starts_at_or_below_each_bound(layout: HdrLayout) -> None:
    values = np.array([400_000, 1_000_000, 1_000_001, 30_000_000, 2_000_000_000, 5_000_000_000_000])
    counts = np.zeros(layout.counts_len, dtype=np.int64)
    np.add.at(counts, layout.index(values), 1)
    b = Buckets.of(layout, counts, float(values.sum()))
    assert b.count == 6 and b.sum_s == pytest.approx(values.sum() / 1e9)
    by_bound = dict(zip(BOUNDS_S, b.cumulative))
    # 1 ms exactly is in the bucket that starts at 1,000,000 ns - and so is 1,000,001 ns (within 0.1%)
    assert by_bound[0.0005] == 1 and by_bound[0.001] == 3 and by_bound[0.05] == 4 and by_bound[2.5] == 5
    assert by_bound[1000.0] == 5  # past the top bound (clamped to the HDR's hour): only +Inf holds it


def _table(n: int, rng: np.random.Generator) -> np.ndarray:
    rows = np.zeros((n, NCOLS), dtype=np.int64)
    sent = 1_000_000_000 + np.arange(n) * 3_000_000
    rows[:, COL["scheduled_ns"]] = sent - rng.integers(0, 2_000_000, n)
    rows[:, COL["sent_ns"]] = sent
    rows[:, COL["first_token_ns"]] = sent + rng.integers(5_000_000, 90_000_000, n)
    rows[:, COL["output_tokens"]] = rng.integers(1, 200, n)
    rows[:, COL["end_ns"]] = rows[:, COL["first_token_ns"]] + rows[:, COL["output_tokens"]] * 7_000_000
    rows[::17, COL["error"]] = int(ErrorClass.TIMEOUT)
    rows[::29, COL["error"]] = int(ErrorClass.CANCELLED)
    rows[5::31, COL["first_token_ns"]] = 0  # completed without an output event
    return rows


@pytest.mark.parametrize("open_loop", [False, True])
def test_running_figures_as_the_result_defines_them_however_rows_finish(layout: HdrLayout, open_loop: bool) -> None:
    rng = np.random.default_rng(3)
    done = _table(3000, rng)
    whole = RunningFigures(layout, open_loop=open_loop)
    whole.update(done, len(done))
    # the same rows finishing out of order, looked at as they go, with a started count that lags
    live = RunningFigures(layout, open_loop=open_loop)
    table = np.zeros_like(done)
    order = rng.permutation(len(done))
    for step in range(0, len(done), 97):
        picked = order[step:step + 97]
        table[picked] = done[picked]
        live.update(table, int(picked.max()) + 1)
    live.update(table, len(table))
    ok = done[done[:, COL["error"]] == 0]
    origin = ok[:, COL["scheduled_ns"] if open_loop else COL["sent_ns"]]
    has_first = ok[:, COL["first_token_ns"]] > 0
    ttft = (ok[:, COL["first_token_ns"]] - origin)[has_first]
    for figures in (whole, live):
        assert figures.completed == len(ok)
        assert figures.failed_by_class == {"timeout": int((done[:, COL["error"]] == ErrorClass.TIMEOUT).sum()),
                                           "cancelled": int((done[:, COL["error"]] == ErrorClass.CANCELLED).sum())}
        assert figures.counts["ttft"].sum() == len(ttft) and figures.sums["ttft"] == int(ttft.sum())
        assert figures.counts["e2e"].sum() == len(ok)
        many = has_first & (ok[:, COL["output_tokens"]] >= 2)
        assert figures.counts["tpot"].sum() == int(many.sum())
        assert figures.counts["lateness"].sum() == (len(ok) if open_loop else 0)
        p50 = layout.quantile_ns(figures.counts["ttft"], 0.5)
        assert p50 is not None and p50 == pytest.approx(np.percentile(ttft, 50), rel=2e-3)
    assert all((whole.counts[k] == live.counts[k]).all() for k in whole.counts)


def test_running_figures_over_several_tables_add_up_to_the_whole(layout: HdrLayout) -> None:
    # a --workers parent's tables, one per worker (dealt: every other row), looked at as they fill
    rng = np.random.default_rng(5)
    done = _table(2000, rng)
    whole = RunningFigures(layout, open_loop=False)
    whole.update(done, len(done))
    parts = [done[0::2], done[1::2]]
    tables = [np.zeros_like(part) for part in parts]
    split = RunningFigures(layout, open_loop=False)
    for step in range(0, 1000, 111):
        for i, (part, table) in enumerate(zip(parts, tables)):
            table[step:step + 111] = part[step:step + 111]
            split.update(table, step + 111, i)
    for i, table in enumerate(tables):
        split.update(table, len(table), i)
    assert split.completed == whole.completed and split.failed_by_class == whole.failed_by_class
    assert all((whole.counts[k] == split.counts[k]).all() and whole.sums[k] == split.sums[k] for k in whole.counts)


@pytest.mark.timing
def test_a_buckets_sum_leaves_no_thread_spinning_beside_the_run(layout: HdrLayout) -> None:
    # a dot product this long goes to OpenBLAS, whose threads then spin ~0.1 s of CPU each time: a look
    # a second cost the client ~8 % of a core that way. The process's CPU (every thread) over a few looks:
    counts = np.zeros(layout.counts_len, dtype=np.int64)
    counts[1000:3000] = 7

    def one_round() -> None:
        cpu0 = time.process_time()
        for _ in range(4):
            Buckets.of(layout, counts)
            time.sleep(0.1)
        assert time.process_time() - cpu0 < 0.04

    until_a_round_passes(one_round)


def test_a_snapshot_reads_back_from_its_json(layout: HdrLayout) -> None:
    counts = np.zeros(layout.counts_len, dtype=np.int64)
    np.add.at(counts, layout.index(np.array([2_000_000, 3_000_000])), 1)
    snap = LiveSnapshot(
        elapsed_s=2.5, total=10, completed=2, failed=1, failed_by_class={"timeout": 1}, in_flight=3,
        output_tokens=40, requests_per_s_now=1.0, requests_per_s_run=0.8, tokens_per_s_now=20.0,
        tokens_per_s_run=16.0, latency={"ttft": Quantiles.of(layout, counts)}, skew=Quantiles(0.01, 0.05, 80),
        lateness=None, server={"running": 3.0}, memory={"server_rss": 2.0**30}, time_left_s=7.5, max_seconds=None,
        labels={"variant": "eagle3"}, histograms={"ttft": Buckets.of(layout, counts)})
    assert LiveSnapshot.from_dict(orjson.loads(orjson.dumps(snap.to_dict()))) == snap
