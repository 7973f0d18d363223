"""Steady-state figures (results.steady): the interval where the load held, and the figures over it.

First on hand-built request tables whose answer is worked out by hand, then against the synthetic
server, whose steady throughput is known from its schedule: at concurrency C a request of n tokens
streams its first token after the TTFT and then t tokens every g ms, so each of the C streams delivers
sum(n) / sum(TTFT + (chunks - 1) g) tokens a second while the load holds; the whole-window figure falls
below that when output lengths vary (the last round's streams end one by one).
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hdrh.histogram import HdrHistogram

import fastbench
from fastbench.config import BenchConfig
from fastbench.results.card import render_card
from fastbench.results.figures import summarize
from fastbench.results.records import COL, NCOLS, ErrorClass, RunData, TimestampSource, UsageSource
from fastbench.results.steady import CHUNK_STAMPS, EVEN_PACE, TREE_ARRIVALS, TREES_IN_FLIGHT, card_text, steady_state
from fastbench.results.writers import render_console, result_to_json_dict
from fastbench.study.runfile import flat_keys
from fastbench.study.sustained import STEADY_SHARE_KEY, SUSTAINED_KEY, fallback_line, with_sustained

T0 = 10**12  # an arbitrary CLOCK_MONOTONIC origin, ns
MS = 1_000_000


def table(reqs: Sequence[dict[str, Any]]) -> RunData:
    """A run from requests given in ms from T0: scheduled (default: sent), sent, first, end, tokens, error."""
    rows = np.zeros((len(reqs), NCOLS), dtype=np.int64)
    for i, r in enumerate(reqs):
        row = rows[i]
        row[COL["index"]] = i
        row[COL["scheduled_ns"]] = T0 + round(r.get("scheduled", r["sent"]) * MS)
        row[COL["sent_ns"]] = T0 + round(r["sent"] * MS)
        row[COL["first_byte_ns"]] = row[COL["first_token_ns"]] = row[COL["first_answer_ns"]] = (
            T0 + round(r["first"] * MS))
        row[COL["end_ns"]] = T0 + round(r["end"] * MS)
        row[COL["prompt_tokens"]] = 10
        row[COL["output_tokens"]] = r["tokens"]
        row[COL["chunks"]] = r["tokens"]
        row[COL["max_chunk_tokens"]] = 1
        row[COL["error"]] = r.get("error", ErrorClass.OK)
        row[COL["http_status"]] = 200
        row[COL["usage_source"]] = UsageSource.PER_CHUNK
    end = max(r["end"] for r in reqs)
    return RunData(rows=rows, error_messages={}, histograms={}, start_ns=T0, end_ns=T0 + round(end * MS),
                   cap_hit=False, stopped_reason="completed", timestamp_source=TimestampSource.KERNEL, reads=1,
                   multi_event_reads=0, output_events=1, kernel_stamped_reads=1, connections_opened=1,
                   concurrency_samples=np.zeros((0, 2)), mean_in_flight=1.0, client_cpu_ns=0, warmups=0)


# Concurrency 2: r0 and r1 go out at 0 and 1 ms (in flight reaches 2 at 1 ms); r1 ends at 50 and r2 goes
# out at 50.5 (a dip to 1 inside the interval); r0 ends at 100 and r3 goes at 100.5; r3 ends at 120 with
# nothing left to send, so in flight falls below 2 for good there; r2 ends at 150.
CLOSED = [
    {"sent": 0, "first": 10, "end": 100, "tokens": 91},  # a token per ms from 10 to 100
    {"sent": 1, "first": 11, "end": 50, "tokens": 40},
    {"sent": 50.5, "first": 60.5, "end": 150, "tokens": 90},
    {"sent": 100.5, "first": 110.5, "end": 120, "tokens": 10},
]


def even_pace_inside(r: dict[str, Any], a: float, b: float) -> float:
    """Tokens of a request inside [a, b] (ms): the first at its stamp, the rest evenly up to its end."""
    first_in = 1.0 if a <= r["first"] <= b else 0.0
    overlap = max(0.0, min(r["end"], b) - max(r["first"], a))
    return first_in + (r["tokens"] - 1) * overlap / (r["end"] - r["first"])


def test_closed_loop_interval_runs_from_reaching_the_target_to_falling_below_it_for_good() -> None:
    steady = steady_state(table(CLOSED), BenchConfig(concurrency=2))
    assert steady.reason is None and steady.basis == "closed loop" and steady.target == 2
    assert (steady.start_s, steady.end_s) == (pytest.approx(0.001), pytest.approx(0.120))
    tokens = sum(even_pace_inside(r, 1, 120) for r in CLOSED)
    assert steady.token_source == EVEN_PACE
    assert steady.output_tokens == pytest.approx(tokens)
    assert steady.output_throughput == pytest.approx(tokens / 0.119)
    # each completed request counts the share of its send-to-end time inside [1, 120]
    served = 99 / 100 + 1 + (120 - 50.5) / (150 - 50.5) + 1
    assert steady.request_throughput == pytest.approx(served / 0.119)
    # inside: sent at or after 1 ms and ended by 120 ms: r1 and r3
    assert steady.requests == 2
    assert steady.distributions["ttft"].count == 2 and steady.distributions["ttft"].mean == pytest.approx(10.0)
    assert steady.distributions["e2el"].max == pytest.approx(49.0)
    assert "itl" not in steady.distributions  # no chunk stamps kept


def test_a_closed_loop_that_never_reaches_its_target_has_no_steady_interval() -> None:
    steady = steady_state(table(CLOSED[:1]), BenchConfig(concurrency=2))
    assert steady.start_s is None and steady.output_throughput is None and steady.window_s is None
    assert steady.reason == "in flight never reached the target of 2 (at most 1 at once)"


def test_chunk_stamps_place_the_tokens_and_give_the_steady_itl() -> None:
    data = table(CLOSED)
    # the first chunk is the first token; stamps on another clock (a Ray node's) are put on the row's by it
    offset = 7 * 10**9
    stamps = {}
    for i, r in enumerate(CLOSED):
        times = np.linspace(r["first"], r["end"], r["tokens"] // 2)  # 2 tokens a chunk, evenly spread
        stamps[i] = (T0 + offset + np.rint(times * MS)).astype(np.int64).tobytes()
    data.extra["chunk_stamps"] = stamps
    steady = steady_state(data, BenchConfig(concurrency=2))
    assert steady.token_source == CHUNK_STAMPS
    expected = sum(r["tokens"] / (r["tokens"] // 2) * np.count_nonzero(
        (np.linspace(r["first"], r["end"], r["tokens"] // 2) >= 1) &
        (np.linspace(r["first"], r["end"], r["tokens"] // 2) <= 120)) for r in CLOSED)
    assert steady.output_tokens == pytest.approx(expected, rel=1e-6)
    gaps = np.concatenate([np.diff(np.linspace(r["first"], r["end"], r["tokens"] // 2)) for r in CLOSED[1::2]])
    assert steady.distributions["itl"].count == gaps.size
    assert steady.distributions["itl"].median == pytest.approx(float(np.median(gaps)), abs=1e-5)


def test_cut_short_requests_count_their_tokens_failed_ones_do_not() -> None:
    reqs = [dict(r) for r in CLOSED]
    reqs[2]["error"] = ErrorClass.CANCELLED  # cut at its end stamp by the run's stop: its tokens were made
    with_cut = steady_state(table(reqs), BenchConfig(concurrency=2))
    assert with_cut.output_tokens == pytest.approx(sum(even_pace_inside(r, 1, 120) for r in CLOSED))
    reqs[2]["error"] = ErrorClass.SERVER_ERROR
    failed = steady_state(table(reqs), BenchConfig(concurrency=2))
    assert failed.output_tokens == pytest.approx(
        sum(even_pace_inside(r, 1, 120) for j, r in enumerate(CLOSED) if j != 2))
    # neither is a completed request: neither counts towards the request throughput
    assert failed.request_throughput == pytest.approx(with_cut.request_throughput)


def test_open_loop_interval_is_first_to_last_arrival_and_a_ramp_has_none() -> None:
    reqs = [{"scheduled": 10 * i, "sent": 10 * i, "first": 10 * i + 5, "end": 10 * i + 40, "tokens": 36}
            for i in range(5)]
    steady = steady_state(table(reqs), BenchConfig(request_rate=100.0))
    assert steady.basis == "open loop" and steady.target is None
    assert (steady.start_s, steady.end_s) == (0.0, pytest.approx(0.040))
    assert steady.output_tokens == pytest.approx(sum(even_pace_inside(r, 0, 40) for r in reqs))
    assert steady.requests == 1  # only the first arrival's response ended by the last arrival
    ramp = steady_state(table(reqs), BenchConfig(ramp_up_strategy="linear", ramp_up_start_rps=1.0,
                                                 ramp_up_end_rps=10.0))
    assert ramp.reason is not None and "ramp" in ramp.reason and ramp.output_throughput is None
    one = steady_state(table(reqs[:1]), BenchConfig(request_rate=100.0))
    assert one.reason == "fewer than 2 arrivals apart in time"
    trace = steady_state(table(reqs), BenchConfig(dataset_name="mooncake", dataset_path="trace.jsonl"))
    assert trace.reason == "arrivals followed a trace's times, not a stationary process"
    sessions = steady_state(table(CLOSED), BenchConfig(concurrency=2, multi_turn=True))
    assert sessions.reason is not None and sessions.reason.startswith("multi-turn sessions")


# Agent trees at concurrency 2, one call per entry (tree, sent, first, end, tokens): tree 0 pauses between
# its calls (none in flight 100..150 ms), tree 1 starts at 120 ms, and tree 2 takes the slot tree 0 freed at
# 300 ms. Never two calls at once before 320 ms, but two trees in flight from 120 ms; the pool runs dry with
# tree 2's end at 380 ms, tree 1 running on alone to 400.
TREE_CALLS = [
    (0, 0, 10, 100, 10), (1, 120, 125, 140, 10), (0, 150, 160, 300, 20), (1, 310, 315, 400, 10),
    (2, 320, 330, 380, 12),
]


def tree_table(calls: Sequence[tuple[int, float, float, float, int]] = TREE_CALLS) -> tuple[RunData, np.ndarray]:
    data = table([{"sent": sent, "first": first, "end": end, "tokens": tokens} for _, sent, first, end, tokens
                  in calls])
    return data, np.asarray([tree for tree, *_ in calls], dtype=np.int64)


def test_agent_trees_steady_interval_is_where_every_slot_holds_a_tree() -> None:
    data, trees = tree_table()
    config = BenchConfig(dataset_name="weka", dataset_path="t.jsonl", concurrency=2)
    steady = steady_state(data, config, trees)
    assert steady.reason is None and steady.basis == TREES_IN_FLIGHT and steady.target == 2
    assert (steady.start_ns, steady.end_ns) == (T0 + 120 * MS, T0 + 380 * MS)
    # the requests' own rule sees two in flight only over 320..380 ms
    assert steady_state(data, BenchConfig(concurrency=2)).start_s == pytest.approx(0.320)
    # inside: sent at or after 120 ms and ended by 380: tree 1's first call, tree 0's second, tree 2's
    assert steady.requests == 3
    assert steady.distributions["e2el"].count == 3 and steady.distributions["e2el"].max == pytest.approx(150.0)
    reqs = [{"first": first, "end": end, "tokens": tokens} for _, _, first, end, tokens in TREE_CALLS]
    tokens = sum(even_pace_inside(r, 120, 380) for r in reqs)
    assert steady.output_tokens == pytest.approx(tokens)
    assert steady.output_throughput == pytest.approx(tokens / 0.260)
    assert "the slots held 2 agent trees" in card_text(steady)


def test_a_tree_the_stop_cut_short_holds_its_slot_to_the_runs_end() -> None:
    """The time cap at 500 ms: tree 0's call is cut there; tree 1 waits out a gap after its call ended at 300,
    its next call never sent. Tree 2 failed at 200 and ended: its unsent call does not hold the slot."""
    data, trees = tree_table([(0, 0, 10, 500, 40), (1, 20, 30, 300, 20), (1, 0, 0, 0, 0), (2, 10, 0, 200, 0),
                              (2, 0, 0, 0, 0)])
    data.rows[[2, 4]] = 0  # never sent
    data.rows[0, COL["error"]] = ErrorClass.CANCELLED
    data.rows[3, COL["error"]] = ErrorClass.HTTP_STATUS
    data.end_ns, data.cap_hit, data.stopped_reason = T0 + 500 * MS, True, "time cap"
    config = BenchConfig(dataset_name="weka", dataset_path="t.jsonl", concurrency=2)
    steady = steady_state(data, config, trees)
    assert (steady.start_ns, steady.end_ns) == (T0 + 10 * MS, T0 + 500 * MS)
    three = steady_state(data, config.replace(concurrency=3), trees)  # all three from 20 ms to tree 2's failure
    assert (three.start_ns, three.end_ns) == (T0 + 20 * MS, T0 + 200 * MS)


def test_agent_trees_short_of_the_slots_or_at_a_rate_have_no_steady_interval() -> None:
    data, trees = tree_table()
    three = steady_state(data, BenchConfig(dataset_name="weka", dataset_path="t.jsonl", concurrency=3), trees)
    assert three.reason == "trees in flight never reached the target of 3 (at most 2 at once)"
    assert three.basis == TREES_IN_FLIGHT and three.output_throughput is None
    short = steady_state(data, BenchConfig(dataset_name="weka", dataset_path="t.jsonl", concurrency=2), trees[:3])
    assert short.reason == "the tree map has 3 rows, the request table 5"
    unknown = steady_state(data, BenchConfig(dataset_name="weka", dataset_path="t.jsonl", concurrency=2))
    assert unknown.reason == "the rows' agent trees were not given"
    rate = steady_state(data, BenchConfig(dataset_name="weka", dataset_path="t.jsonl", request_rate=5.0), trees)
    assert rate.basis == TREE_ARRIVALS and rate.reason is None  # arrivals 0 to 320 ms, tree 0 took 300
    assert (rate.start_ns, rate.end_ns) == (T0 + 300 * MS, T0 + 320 * MS)
    data, trees = tree_table([(0, 0, 10, 300, 5), (1, 100, 110, 150, 5)])
    rate = steady_state(data, BenchConfig(dataset_name="weka", dataset_path="t.jsonl", request_rate=5.0), trees)
    assert rate.basis == TREE_ARRIVALS and rate.start_s is None
    assert rate.reason == ("the tree arrivals span 0.1 s, no longer than the longest tree (0.3 s): the load never "
                           "stopped ramping up (more trees, or a higher rate)")


def test_agent_trees_at_a_rate_are_steady_from_the_first_arrival_plus_the_longest_tree_to_the_last() -> None:
    """Trees arriving every 100 ms (each call scheduled 5 ms before its send); the longest, tree 1, from its
    arrival at 100 to its last end at 330 ms: the interval is 0 + 230 to the last arrival, 400 ms."""
    calls = [(0, 0, 10, 60, 5), (0, 80, 90, 120, 5), (1, 105, 110, 200, 5), (1, 250, 260, 330, 5),
             (2, 205, 210, 260, 5), (3, 305, 310, 350, 5), (4, 405, 410, 450, 5)]
    data = table([{"scheduled": max(sent - 5, 0), "sent": sent, "first": first, "end": end, "tokens": tokens}
                  for _, sent, first, end, tokens in calls])
    trees = np.asarray([tree for tree, *_ in calls], dtype=np.int64)
    steady = steady_state(data, BenchConfig(dataset_name="weka", dataset_path="t.jsonl", request_rate=10.0), trees)
    assert steady.reason is None and steady.basis == TREE_ARRIVALS and steady.target is None
    assert (steady.start_ns, steady.end_ns) == (T0 + 230 * MS, T0 + 400 * MS)
    assert steady.requests == 2  # scheduled from 230 ms and ended by 400: tree 1's second call, tree 3's


def test_the_result_carries_steady_keys_beside_the_whole_window_ones() -> None:
    data = table(CLOSED)
    data.histograms = {name: HdrHistogram(1, 3_600_000_000_000, 3) for name in ("itl_chunk", "itl_token")}
    config = BenchConfig(concurrency=2)
    result = summarize(data, config, workload_info={"dataset": "x"}, server_info={})
    doc = result_to_json_dict(result, config, environment={})
    assert doc["steady_output_throughput"] == pytest.approx(result.steady.output_throughput)  # type: ignore[union-attr]
    assert doc["steady_window_s"] == pytest.approx(0.119) and doc["steady_requests"] == 2
    assert doc["steady_median_ttft_ms"] == pytest.approx(10.0) and doc["steady_p99_itl_ms"] is None
    assert doc["fastbench"]["steady"]["distributions"]["ttft"]["count"] == 2
    assert "steady_interval" in doc["fastbench"]["definitions"]
    assert f"{result.steady.output_throughput:.2f} over 0.12 s" in render_console(result)  # type: ignore[union-attr]
    assert "| Decode tok/s, steady state |" in render_card(result, config)
    assert flat_keys(doc)[SUSTAINED_KEY] == doc["steady_output_throughput"]


def test_a_study_falls_back_to_the_whole_window_visibly() -> None:
    steady = with_sustained({"output_throughput": 90.0, "steady_output_throughput": 100.0})
    assert (steady[SUSTAINED_KEY], steady[STEADY_SHARE_KEY]) == (100.0, 1.0)
    whole = with_sustained({"output_throughput": 90.0, "steady_output_throughput": None})  # or an older file
    assert (whole[SUSTAINED_KEY], whole[STEADY_SHARE_KEY]) == (90.0, 0.0)
    assert with_sustained({})[STEADY_SHARE_KEY] is None
    assert fallback_line([1.0, 1.0]) is None
    assert fallback_line([1.0, 0.0, None]) == (
        "1 of 2 runs have no steady interval: the whole-window throughput is used")


# -- against the synthetic server ------------------------------------------------------------------------

TTFT_MS, GAP_MS, PER_CHUNK = 1.0, 5.0, 4  # the synthetic server's schedule


def synthetic_run(tmp_path: Path, **options: Any) -> tuple[dict[str, Any], list[dict[str, Any]], Any]:
    records = tmp_path / "requests.jsonl"
    config = BenchConfig(base_url=None, random_input_len=8, ignore_eos=True, result_json=str(tmp_path / "r.json"),
                         save_detailed=str(records),
                         synthetic_args=("--ttft-ms", str(TTFT_MS), "--itl-ms", str(GAP_MS),
                                         "--tokens-per-chunk", str(PER_CHUNK)), **options)
    result = fastbench.run(config)
    doc = orjson.loads((tmp_path / "r.json").read_bytes())
    opener = gzip.open if records.suffix == ".gz" else open
    with opener(records, "rb") as f:
        recs = [orjson.loads(line) for line in f]
    return doc, recs, result


def schedule_throughput(output_lens: Sequence[int], streams: int) -> float:
    """What ``streams`` streams of these requests deliver while all are busy, from the server's schedule."""
    n = np.asarray([x for x in output_lens if x > 0], dtype=np.float64)
    life_ms = TTFT_MS + np.ceil((n - 1) / PER_CHUNK) * GAP_MS
    return float(streams * n.sum() / (life_ms.sum() / 1000))


def edges_ns(doc: dict[str, Any], recs: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """The steady interval's edges as CLOCK_MONOTONIC ns, on the records' clock."""
    window_start = round(recs[0]["scheduled_ns"] - recs[0]["scheduled_ms"] * MS)
    return window_start + round(doc["steady_start_s"] * 1e9), window_start + round(doc["steady_end_s"] * 1e9)


def in_flight_at(recs: Sequence[dict[str, Any]], t_ns: int) -> int:
    return sum(1 for r in recs if r["sent_ns"] is not None and r["sent_ns"] <= t_ns < r["end_ns"])


def stamped_throughput(doc: dict[str, Any], recs: Sequence[dict[str, Any]], start: int, end: int) -> float:
    """Output tokens/s over [start, end], each token placed at the stamp of the chunk that carried it (the
    per-request itls --save-detailed keeps) with the synthetic server's chunking: 1 token, then PER_CHUNK."""
    tokens = 0.0
    for r in recs:
        if r["status"] != "completed":
            continue
        at = r["first_token_ns"] + np.concatenate([[0.0], np.cumsum(doc["itls"][r["id"]])]) * 1e9
        rest = r["output_tokens"] - 1 - PER_CHUNK * np.arange(len(at) - 1)
        per = np.concatenate([[1.0], np.minimum(PER_CHUNK, rest)])
        tokens += float(per[(at >= start) & (at <= end)].sum())
    return tokens / ((end - start) / 1e9)


def check_closed_loop(doc: dict[str, Any], recs: list[dict[str, Any]], concurrency: int,
                      expected: float | None = None, rel: float = 0.04) -> None:
    """``expected``: the steady throughput to find (default: the server's schedule's, within ``rel``)."""
    expected = schedule_throughput(doc["output_lens"], concurrency) if expected is None else expected
    steady, whole = doc["steady_output_throughput"], doc["output_throughput"]
    assert steady == pytest.approx(expected, rel=rel), (steady, whole, expected)
    assert whole < 0.95 * expected, (steady, whole, expected)  # the drain's streams end one by one
    # the definition, read off the (merged) records' stamps: the target in flight from the start, never
    # again from the end on, and below it before the start
    start, end = edges_ns(doc, recs)
    assert in_flight_at(recs, start) == concurrency and in_flight_at(recs, start - 1) < concurrency
    assert in_flight_at(recs, end - 1) == concurrency
    later = {r[k] for r in recs for k in ("sent_ns", "end_ns") if r[k] is not None and r[k] >= end}
    assert end in later and all(in_flight_at(recs, t) < concurrency for t in later)
    # latencies over the requests inside it: sent at or after its start, ended by its end
    inside = [r for r in recs if r["status"] == "completed" and r["sent_ns"] >= start and r["end_ns"] <= end]
    assert doc["steady_requests"] == len(inside)
    assert doc["steady_median_e2el_ms"] == pytest.approx(float(np.median([r["e2el_ms"] for r in inside])), rel=1e-6)


def test_closed_loop_steady_throughput_is_the_schedules_where_the_whole_window_falls_below(tmp_path: Path) -> None:
    doc, recs, result = synthetic_run(tmp_path, num_prompts=64, concurrency=8, random_output_len=120,
                                      random_range_ratio=0.95)
    check_closed_loop(doc, recs, 8)
    assert doc["fastbench"]["steady"]["token_source"] == EVEN_PACE
    assert "Steady-state output (tok/s):" in render_console(result)


def test_workers_give_the_same_definition_over_merged_records(tmp_path: Path) -> None:
    doc, recs, _ = synthetic_run(tmp_path, num_prompts=64, concurrency=8, random_output_len=120,
                                 random_range_ratio=0.95, workers=2, per_request_arrays=True)
    assert doc["fastbench"]["workers"]["count"] == 2
    # --save-detailed kept the chunk stamps: the tokens are placed by them, so the steady throughput is judged
    # against the records' own stamps (three processes and the server on a busy host slip off the schedule)
    assert doc["fastbench"]["steady"]["token_source"] == CHUNK_STAMPS
    start, end = edges_ns(doc, recs)
    check_closed_loop(doc, recs, 8, stamped_throughput(doc, recs, start, end), rel=0.01)
    inside = [r["id"] for r in recs if r["status"] == "completed" and r["sent_ns"] >= start and r["end_ns"] <= end]
    gaps_ms = [1000 * gap for i in inside for gap in doc["itls"][i]]  # vllm's per-request itls, in index order
    assert doc["steady_median_itl_ms"] == pytest.approx(float(np.median(gaps_ms)), rel=1e-6)
    assert doc["steady_mean_itl_ms"] == pytest.approx(float(np.mean(gaps_ms)), rel=1e-6)


def test_open_loop_steady_interval_is_the_arrivals(tmp_path: Path) -> None:
    doc, recs, _ = synthetic_run(tmp_path, num_prompts=30, request_rate=100.0, random_output_len=80,
                                 random_range_ratio=0.0)
    arrivals = sorted(r["scheduled_ms"] for r in recs)
    assert doc["steady_start_s"] == pytest.approx(arrivals[0] / 1000, abs=1e-9)
    assert doc["steady_end_s"] == pytest.approx(arrivals[-1] / 1000, abs=1e-9)
    # from the schedule: each request's tokens at its arrival + TTFT, then PER_CHUNK every GAP_MS
    a, b = arrivals[0], arrivals[-1]
    tokens = 0.0
    for r in recs:
        n = r["output_tokens"]
        chunks = 1 + math.ceil((n - 1) / PER_CHUNK)
        at = r["scheduled_ms"] + TTFT_MS + GAP_MS * np.arange(chunks)
        sizes = np.minimum(PER_CHUNK, n - 1 - PER_CHUNK * np.arange(chunks - 1))
        per = np.concatenate([[1.0], sizes])
        tokens += float(per[(at >= a) & (at <= b)].sum())
    assert doc["steady_output_throughput"] == pytest.approx(tokens / ((b - a) / 1000), rel=0.04)
    assert doc["output_throughput"] < doc["steady_output_throughput"]  # the drain after the last arrival


def test_fewer_prompts_than_the_concurrency_reports_no_steady_interval(tmp_path: Path) -> None:
    doc, _, result = synthetic_run(tmp_path, num_prompts=3, concurrency=8, random_output_len=16)
    assert doc["steady_output_throughput"] is None and doc["steady_window_s"] is None
    assert doc["fastbench"]["steady"]["reason"] == "in flight never reached the target of 8 (at most 3 at once)"
    assert "none: in flight never reached the target of 8" in render_console(result)
    assert "n/a: no steady interval" in render_card(result, result.config)
    flat = flat_keys(doc)
    assert (flat[SUSTAINED_KEY], flat[STEADY_SHARE_KEY]) == (doc["output_throughput"], 0.0)


# -- what a study shows -----------------------------------------------------------------------------------


def study_points() -> list[Any]:
    from fastbench.study.figures_data import RunPoint

    points = []
    for variant, rate in (("a", 50.0), ("b", 30.0)):
        for conc in (1, 2, 4):
            flat: dict[str, Any] = {"median_decode_rate_tok_s": rate / conc, "output_throughput": 90.0 * conc,
                                    "steady_output_throughput": 100.0 * conc}
            if (variant, conc) == ("b", 4):
                flat["steady_output_throughput"] = None  # it never reached its concurrency
            points.append(RunPoint(f"{variant}{conc}", variant, conc, None, with_sustained(flat), None))
    return points


def test_the_crossover_and_pareto_draw_the_steady_throughput_and_say_where_they_fell_back(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from fastbench.study import plots

    _, crossover = plots.draw_crossover(study_points(), tmp_path, ("svg",))
    assert crossover["throughput_key"] == SUSTAINED_KEY
    assert [c["mean"] for c in crossover["throughput"]["a"]] == [100.0, 200.0, 400.0]
    assert [c["mean"] for c in crossover["throughput"]["b"]] == [100.0, 200.0, 360.0]  # its whole window's at 4
    fallback = "1 of 6 runs (b c=4) have no steady interval: the whole-window throughput is used"
    assert fallback in crossover["lines"]
    svg = (tmp_path / "crossover.svg").read_text()
    assert "steady state" in svg and "(1 of 6 runs: whole window, no steady interval)" in svg  # the axis label
    _, pareto = plots.draw_pareto(study_points(), tmp_path, ("svg",))
    assert {(c["variant"], c["load"]): c["throughput"] for c in pareto["cells"]}[("b", 4.0)] == 360.0
    assert fallback in pareto["lines"] and "1 of 6 runs: whole window" in (tmp_path / "pareto.svg").read_text()


def test_the_sweep_table_shows_the_steady_throughput_and_marks_a_fallback() -> None:
    from fastbench.cli.sweepsummary import render_table
    from fastbench.study.sweepplan import SUMMARY_FIGURES, Point

    def point(variant: str, steady_share: float) -> Point:
        p = Point(variant=variant, values={"concurrency": 4}, n=2, status="done", reason="", note="", runs=[])
        p.update({name: (None, None) for name in SUMMARY_FIGURES})
        p[SUSTAINED_KEY], p[STEADY_SHARE_KEY] = (400.0, 5.0), (steady_share, 0.0)
        return p

    text = render_table([point("a", 1.0), point("b", 0.5)])
    lines = text.splitlines()
    assert "steady out tok/s" in lines[0]
    assert "400.0 ±5.0 " in lines[1] and "400.0 ±5.0*" in lines[2]
    assert lines[-1].startswith("throughput: the steady-state output throughput")
    assert lines[-1].endswith("; 1 of 2 points have runs without a steady interval: the whole-window throughput "
                              "is used (marked *)")
