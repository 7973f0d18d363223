"""figures.summarize on hand-built RunData with known schedules."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from fastbench.config import BenchConfig
from fastbench.results.card import render_card
from fastbench.results.definitions import DEFINITIONS, RATE_METRICS, TIME_METRICS
from fastbench.results.figures import summarize
from fastbench.results.records import COL, NCOLS, ErrorClass, RunData, TimestampSource, UsageSource
from fastbench.results.result import Result
from fastbench.results.vllm_keys import to_vllm_keys

T0 = 10**12  # an arbitrary CLOCK_MONOTONIC origin, ns
MS = 1_000_000


@dataclasses.dataclass
class Req:
    """One request of a hand-built run; times in ms from T0."""

    scheduled_ms: float
    sent_ms: float | None = None  # defaults to scheduled_ms
    ttft_ms: float = 50.0  # first output after the send
    chunk_tokens: tuple[int, ...] = (1, 2, 3, 4)
    gap_ms: float = 20.0
    prompt: int = 100
    error: ErrorClass = ErrorClass.OK
    usage: UsageSource = UsageSource.PER_CHUNK
    answer_after_ms: float = 0.0  # first answer text after the first output (reasoning first)
    connect_ms: float = 0.0
    message: str = ""


def build_run(
    reqs: Sequence[Req],
    *,
    total: int | None = None,
    duration_ms: float,
    cap_hit: bool = False,
    stopped_reason: str = "completed",
    timestamp_source: TimestampSource = TimestampSource.KERNEL,
    multi_event_reads: int = 0,
    skew_ns: Sequence[int] = (),
) -> RunData:
    rows = np.zeros((total or len(reqs), NCOLS), dtype=np.int64)
    itl_chunk = HdrHistogram(1, 3_600_000_000_000, 3)
    itl_token = HdrHistogram(1, 3_600_000_000_000, 3)
    messages: dict[int, str] = {}
    chunks_total = 0
    for i, r in enumerate(reqs):
        sched = T0 + round(r.scheduled_ms * MS)
        sent = T0 + round((r.scheduled_ms if r.sent_ms is None else r.sent_ms) * MS)
        first = sent + round(r.ttft_ms * MS)
        times = [first + round(k * r.gap_ms * MS) for k in range(len(r.chunk_tokens))]
        row = rows[i]
        row[COL["index"]] = i
        row[COL["scheduled_ns"]] = sched
        row[COL["sent_ns"]] = sent
        row[COL["first_byte_ns"]] = first
        row[COL["first_token_ns"]] = first
        row[COL["first_answer_ns"]] = first + round(r.answer_after_ms * MS)
        row[COL["end_ns"]] = times[-1] if r.error == ErrorClass.OK else first + 10_000 * MS
        row[COL["prompt_tokens"]] = r.prompt
        row[COL["output_tokens"]] = sum(r.chunk_tokens)
        row[COL["chunks"]] = len(r.chunk_tokens)
        row[COL["events"]] = len(r.chunk_tokens) + 2
        row[COL["max_chunk_tokens"]] = max(r.chunk_tokens)
        row[COL["error"]] = r.error
        row[COL["http_status"]] = 500 if r.error == ErrorClass.HTTP_STATUS else 200
        row[COL["usage_source"]] = r.usage
        row[COL["connect_ns"]] = round(r.connect_ms * MS)
        chunks_total += len(r.chunk_tokens)
        if r.message:
            messages[i] = r.message
        if r.error == ErrorClass.OK:
            for k in range(1, len(times)):
                gap = times[k] - times[k - 1]
                itl_chunk.record_value(gap)
                tokens = r.chunk_tokens[k] if r.usage == UsageSource.PER_CHUNK else 1
                itl_token.record_value(round(gap / tokens), tokens)
    histograms: dict[str, Any] = {"itl_chunk": itl_chunk, "itl_token": itl_token}
    if skew_ns:
        skew = HdrHistogram(1, 3_600_000_000_000, 3)
        for value in skew_ns:
            skew.record_value(value)
        histograms["skew"] = skew
    return RunData(
        rows=rows,
        error_messages=messages,
        histograms=histograms,
        start_ns=T0,
        end_ns=T0 + round(duration_ms * MS),
        cap_hit=cap_hit,
        stopped_reason=stopped_reason,
        timestamp_source=timestamp_source,
        reads=chunks_total,
        multi_event_reads=multi_event_reads,
        output_events=chunks_total,
        kernel_stamped_reads=chunks_total if timestamp_source == TimestampSource.KERNEL else 0,
        connections_opened=1,
        concurrency_samples=np.zeros((0, 2)),
        mean_in_flight=1.0,
        client_cpu_ns=chunks_total * 18_000,
        warmups=0,
    )


def run(data: RunData, config: BenchConfig, **workload: Any) -> Result:
    return summarize(data, config, workload_info=workload, server_info={"engine": "fastbench synthetic"})


def sequential(n: int = 10, every_ms: float = 200.0, **kw: Any) -> list[Req]:
    return [Req(scheduled_ms=i * every_ms, **kw) for i in range(n)]


CONFIG = BenchConfig(model="m", concurrency=1, num_prompts=10)
REL = 1.5e-3  # HDR histograms keep 3 significant digits


def test_known_schedule_latencies() -> None:
    # 10 requests: TTFT 50 ms, 4 chunks of 1, 2, 3, 4 tokens 20 ms apart -> E2E 110 ms
    result = run(build_run(sequential(), duration_ms=2000), CONFIG)
    d = result.distributions
    assert d["ttft"].count == 10
    assert d["ttft"].median == pytest.approx(50.0, rel=REL)
    assert d["ttft"].mean == pytest.approx(50.0, rel=REL)
    assert d["ttft"].std == pytest.approx(0.0, abs=0.05)
    assert d["ttft_raw"].median == pytest.approx(50.0, rel=REL)
    assert d["e2el"].p99 == pytest.approx(110.0, rel=REL)
    assert d["tpot"].median == pytest.approx(60.0 / 9, rel=REL)  # (110 - 50) / (10 - 1)
    # chunk ITL: every gap is 20 ms, 3 gaps per request
    assert d["itl"].count == 30
    assert d["itl"].median == pytest.approx(20.0, rel=REL)
    # per-token ITL: 20/2 twice, 20/3 three times, 20/4 four times per request
    assert d["itl_token"].count == 90
    assert d["itl_token"].max == pytest.approx(10.0, rel=REL)
    assert d["itl_token"].min == pytest.approx(5.0, rel=REL)
    assert d["itl_token"].mean == pytest.approx(60.0 / 9, rel=REL)  # per-token mean = TPOT here
    assert d["decode_rate"].median == pytest.approx(9 / 0.060, rel=REL)
    assert d["ttfa"].median == pytest.approx(50.0, rel=REL)
    assert result.mean_tokens_per_chunk == pytest.approx(2.5)


def test_per_request_figures_are_numpys_as_in_vllm() -> None:
    """vllm bench serve computes TTFT, TPOT and E2EL figures with numpy on the per-request values
    (linear-interpolated percentiles, the mean of the middle two for an even count). An HDR nearest
    rank gave p99 TPOT 18 % off on 39 requests, and medians off by half a gap."""
    ttfts = [10.0 + 7.3 * k + (k % 5) * 3.1 for k in range(40)]
    reqs = [Req(scheduled_ms=300.0 * k, ttft_ms=t, chunk_tokens=(1,) * (2 + k % 7), gap_ms=3.0 + k % 4)
            for k, t in enumerate(ttfts)]
    result = run(build_run(reqs, duration_ms=13_000), CONFIG)
    d = result.distributions
    expected_tpot = [(r.gap_ms * (len(r.chunk_tokens) - 1)) / (len(r.chunk_tokens) - 1) for r in reqs]
    expected_e2el = [r.ttft_ms + r.gap_ms * (len(r.chunk_tokens) - 1) for r in reqs]
    for name, values in (("ttft", ttfts), ("tpot", expected_tpot), ("e2el", expected_e2el)):
        v = np.asarray(values)
        dist = d[name]
        assert dist.count == 40
        assert dist.median == pytest.approx(float(np.median(v)), abs=1e-6), name
        assert dist.p99 == pytest.approx(float(np.percentile(v, 99)), abs=1e-6), name
        assert dist.p90 == pytest.approx(float(np.percentile(v, 90)), abs=1e-6), name
        assert dist.mean == pytest.approx(float(v.mean()), abs=1e-6), name
        assert dist.std == pytest.approx(float(v.std()), abs=1e-6), name
    keys = to_vllm_keys(result)
    assert keys["p99_ttft_ms"] == pytest.approx(float(np.percentile(ttfts, 99)), abs=1e-6)
    assert keys["median_ttft_ms"] == pytest.approx(float(np.median(ttfts)), abs=1e-6)


def test_known_schedule_throughputs_and_counts() -> None:
    result = run(build_run(sequential(), duration_ms=2000), CONFIG)
    assert result.duration_s == pytest.approx(2.0)
    assert result.counts.completed == 10 and result.counts.failed == 0
    assert result.total_input_tokens == 1000 and result.total_output_tokens == 100
    tp = result.throughput
    assert tp.request_throughput == pytest.approx(5.0)
    assert tp.input_throughput == pytest.approx(500.0)
    assert tp.output_throughput == pytest.approx(50.0)
    assert tp.total_token_throughput == pytest.approx(550.0)
    assert tp.request_goodput is None
    # 1000 prompt tokens over 10 disjoint 50 ms prefill windows
    assert tp.prefill_throughput == pytest.approx(2000.0)
    assert result.client.max_concurrent_requests == 1
    assert result.client.cpu_per_event_us == pytest.approx(18.0)
    assert not result.cap_hit and not result.collapsed
    assert result.usage.all_per_chunk
    assert "10/10 completed, 0 errors, in 2.0 s" in result.notes
    assert "token counts from the server's per-chunk usage (exact per chunk)" in result.notes
    assert "receive timestamps: kernel (SO_TIMESTAMPNS)" in result.notes


def test_prefill_rate_is_per_request_not_total_over_time() -> None:
    # The seed's artifact: 19/500 done at conc 1 before a 300 s cap, 53-token prompts, TTFT 50 ms.
    reqs = [
        Req(scheduled_ms=i * 15_800, prompt=53, chunk_tokens=(1, 3, 3, 3), gap_ms=5000) for i in range(19)
    ]
    reqs.append(Req(scheduled_ms=19 * 15_800, prompt=53, error=ErrorClass.CANCELLED))
    data = build_run(reqs, total=500, duration_ms=300_000, cap_hit=True, stopped_reason="time cap")
    result = run(data, BenchConfig(model="m", concurrency=1, num_prompts=500, max_seconds=300))
    assert result.throughput.input_throughput == pytest.approx(19 * 53 / 300)  # the 3.36 "load" figure
    prefill = result.distributions["prefill_rate"]
    assert prefill.count == 19
    assert prefill.median == pytest.approx(53 / 0.050, rel=REL)  # 1060 tok/s, a real rate
    assert prefill.median is not None and prefill.median > 100 * result.throughput.input_throughput
    assert result.counts.completed == 19
    assert result.counts.cancelled == 1 and result.counts.not_started == 480
    assert "19/500 completed before the 300 s time cap, 0 errors; 481 not started/cancelled" in result.notes
    assert any("p99 and p99.9 are the slowest" in note for note in result.notes)


def test_failed_and_cancelled_are_excluded_from_latency() -> None:
    reqs = sequential(6)
    reqs += [
        Req(scheduled_ms=2000, ttft_ms=9000, error=ErrorClass.HTTP_STATUS, message="HTTP 500: boom"),
        Req(scheduled_ms=2100, ttft_ms=9000, error=ErrorClass.HTTP_STATUS, message="HTTP 503: busy"),
        Req(scheduled_ms=2200, ttft_ms=9000, error=ErrorClass.TIMEOUT, message="request timeout 5 s"),
        Req(scheduled_ms=2300, ttft_ms=9000, error=ErrorClass.CANCELLED),
    ]
    result = run(build_run(reqs, total=12, duration_ms=20_000), CONFIG)
    n = result.counts
    assert (n.total, n.completed, n.failed, n.cancelled, n.not_started) == (12, 6, 3, 1, 2)
    assert n.failed_by_class == {"HTTP_STATUS": 2, "TIMEOUT": 1}
    assert result.errors["HTTP_STATUS"].examples == ["HTTP 500: boom", "HTTP 503: busy"]
    assert result.errors["CANCELLED"].count == 1
    d = result.distributions
    assert d["ttft"].count == 6 and d["ttft"].max == pytest.approx(50.0, rel=REL)
    assert d["e2el"].max == pytest.approx(110.0, rel=REL)
    assert result.total_output_tokens == 60  # completed requests only
    assert result.per_request.errors[:6] == [""] * 6
    assert result.per_request.errors[6] == "HTTP_STATUS: HTTP 500: boom"
    assert result.per_request.output_lens == [10] * 6 + [0] * 4
    assert not result.collapsed
    assert any("3 failed (HTTP_STATUS 2, TIMEOUT 1)" in note for note in result.notes)


def test_the_card_names_why_requests_were_cancelled() -> None:
    """Cancelled in flight by a max-error-rate stop: not "at the time cap" (no cap was set)."""
    reqs = sequential(4) + [Req(scheduled_ms=900.0, error=ErrorClass.CANCELLED)]
    result = run(build_run(reqs, duration_ms=1000, stopped_reason="max error rate"), CONFIG)
    card = render_card(result, CONFIG)
    assert "1 cancelled when the run stopped (max error rate)" in card and "time cap" not in card


def test_tokens_of_requests_cut_at_the_stop_are_said_not_counted() -> None:
    """As vllm bench serve, throughputs count completed requests only; what the cut requests had
    received is said, so that a short capped run's throughput is not read as the server's rate."""
    reqs = sequential(4) + [Req(scheduled_ms=900.0, error=ErrorClass.CANCELLED, chunk_tokens=(5, 5))]
    result = run(build_run(reqs, duration_ms=1000, cap_hit=True, stopped_reason="time cap"), CONFIG)
    assert result.total_output_tokens == 4 * 10
    assert any(note.startswith("1 requests cut short when the run stopped had received 10 output tokens")
               for note in result.notes), result.notes


def test_goodput_counts_requests_meeting_every_slo() -> None:
    reqs = sequential(10)
    for r in reqs[:3]:
        r.ttft_ms = 80.0  # misses a 60 ms TTFT SLO
    reqs[3].gap_ms = 40.0  # TPOT (120 / 9 = 13.3 ms) misses a 10 ms TPOT SLO
    reqs[4].chunk_tokens = (1,)  # one output token: no TPOT, meets any TPOT SLO
    config = BenchConfig(model="m", concurrency=1, num_prompts=10, goodput={"ttft": 60.0, "tpot": 10.0})
    result = run(build_run(reqs, duration_ms=2000), config)
    assert result.throughput.good_requests == 6
    assert result.throughput.request_goodput == pytest.approx(3.0)
    assert result.distributions["tpot"].count == 9  # the 1-token request has no TPOT
    assert any("fewer than 2 output tokens" in note for note in result.notes)
    e2e_only = run(build_run(reqs, duration_ms=2000), config.replace(goodput={"e2el": 115.0}))
    assert e2e_only.throughput.good_requests == 6  # 80 ms TTFT -> 140 ms E2E; 40 ms gaps -> 170 ms
    with pytest.raises(ValueError):
        run(build_run(reqs, duration_ms=2000), config.replace(goodput={"latency": 1.0}))


def test_slot_waits_count_a_holder_still_connecting_as_busy() -> None:
    """Two slots, both taken at 0-1 ms by requests still connecting (sent at 5-6 ms, after connect):
    the arrival at 2 ms waited for a slot until 115 ms. Counting 'busy' from the send stamps missed
    it (the holders looked idle at 2 ms)."""
    reqs = [Req(scheduled_ms=0.0, sent_ms=5.0, connect_ms=5.0), Req(scheduled_ms=1.0, sent_ms=6.0, connect_ms=5.0),
            Req(scheduled_ms=2.0, sent_ms=116.0), Req(scheduled_ms=400.0)]
    config = BenchConfig(model="m", concurrency=2, request_rate=10.0, num_prompts=4)
    result = run(build_run(reqs, duration_ms=600), config)
    waited = [note for note in result.notes if "slots busy" in note]
    assert waited == [waited[0]] and waited[0].startswith(
        "1 of 4 requests arrived with all 2 slots busy and waited for one (median 114.0 ms, max 114.0 ms)")


def test_open_loop_overload_corrected_vs_raw() -> None:
    # 10 req/s offered, 2 slots, each request takes 110 ms + 840 ms: the client queue grows.
    slots = [0.0, 0.0]
    reqs = []
    for i in range(20):
        scheduled = i * 100.0
        slot = min(range(2), key=lambda s: slots[s])
        sent = max(scheduled, slots[slot])
        slots[slot] = sent + 50.0 + 3 * 300.0
        reqs.append(Req(scheduled_ms=scheduled, sent_ms=sent, gap_ms=300.0))
    config = BenchConfig(model="m", concurrency=2, request_rate=10.0, num_prompts=20)
    result = run(build_run(reqs, duration_ms=max(slots)), config)
    d = result.distributions
    assert d["ttft_raw"].median == pytest.approx(50.0, rel=REL)
    assert d["ttft"].median is not None and d["ttft"].median > 2000.0  # waited for a slot
    assert d["ttft"].max == pytest.approx(reqs[-1].sent_ms - reqs[-1].scheduled_ms + 50.0, rel=REL)  # type: ignore[operator]
    assert d["e2el"].median is not None and d["e2el_raw"].median is not None
    assert d["e2el"].median > d["e2el_raw"].median
    assert d["lateness"].p99 is not None and d["lateness"].p99 > 4000.0
    assert result.client.late_share == 0.0  # each went out as its slot freed: queueing, not lateness
    # prefill rate uses the raw TTFT: client queueing is no prefill
    assert d["prefill_rate"].median == pytest.approx(2000.0, rel=REL)
    assert result.client.max_concurrent_requests == 2
    assert to_vllm_keys(result)["median_ttft_ms"] == d["ttft"].median
    (note,) = [note for note in result.notes if note.startswith("open loop at 10 req/s")]
    # the slot waits are named as such, not called the client's lateness
    assert "ms after scheduled (waits for a slot included); 0.0 % of requests sent > 0.1 ms after" in note


def test_open_loop_reports_the_share_of_requests_sent_late() -> None:
    """Uncapped open loop: 3 of 10 requests went out 0.3 ms after their arrival, the rest 0.05 ms
    after: the result says 30 % were sent more than 0.1 ms late, and the notes say it too."""
    reqs = [Req(scheduled_ms=i * 100.0, sent_ms=i * 100.0 + (0.3 if i % 4 == 0 else 0.05)) for i in range(10)]
    config = BenchConfig(model="m", request_rate=10.0, num_prompts=10)
    result = run(build_run(reqs, duration_ms=1200), config)
    assert result.client.late_share == pytest.approx(0.3)
    assert result.distributions["lateness"].max == pytest.approx(0.3, rel=REL)
    assert any("30.0 % of requests sent > 0.1 ms after they could go" in note for note in result.notes)
    assert "late_share" in DEFINITIONS


def test_usage_fallback_is_stated() -> None:
    reqs = sequential(6)
    reqs[0].usage = reqs[1].usage = UsageSource.FINAL
    reqs[2].usage = UsageSource.NONE
    reqs[2].chunk_tokens = (1, 1, 1, 1)
    reqs[2].prompt = -1
    result = run(
        build_run(reqs, duration_ms=2000),
        CONFIG,
        prompt_lens=[100] * 2 + [77] + [100] * 3,
        max_tokens=[10] * 6,
        notes=["3 prompts screened out: longer than the context window"],
    )
    assert result.usage.by_source == {"PER_CHUNK": 3, "FINAL": 2, "NONE": 1}
    assert not result.usage.all_per_chunk
    statement = result.usage.statement
    assert statement.startswith("token counts fall back:")
    assert "2/6 had usage only at the end" in statement and "1/6 had no usage at all" in statement
    assert statement in result.notes
    assert result.total_input_tokens == 5 * 100 + 77  # the workload's count fills the gap
    assert result.per_request.input_lens[2] == 77
    assert result.mean_tokens_per_chunk == pytest.approx(2.5)  # requests without usage excluded
    assert "prompt_lens" not in result.workload_info and "max_tokens" not in result.workload_info
    assert result.notes[-1] == "3 prompts screened out: longer than the context window"


def test_unknown_prompt_tokens_are_said() -> None:
    reqs = sequential(3)
    reqs[0].prompt = -1
    result = run(build_run(reqs, duration_ms=1000), CONFIG)
    assert result.distributions["prefill_rate"].count == 2
    assert result.total_input_tokens == 200
    assert any("1 completed requests have no prompt token count" in note for note in result.notes)


def test_token_totals_are_exact_and_impossible_prompts_are_said() -> None:
    """Two prompts of 2**62 tokens: an int64 sum wraps to a negative total; the exact sum does not,
    and a prompt longer than the server's context is said to be wrong."""
    reqs = sequential(3)
    reqs[0].prompt = reqs[1].prompt = 2**62
    data = build_run(reqs, duration_ms=1000)
    result = summarize(data, CONFIG, workload_info={}, server_info={"max_model_len": 4096})
    assert result.total_input_tokens == 2**63 + 100
    assert any(note.startswith("2 completed requests report more prompt tokens than the server's max_model_len "
                               "(4096)") for note in result.notes)
    assert not any("max_model_len" in note for note in run(data, CONFIG).notes)  # context unknown: no claim


def test_collapsed_run_has_no_latency_figures() -> None:
    reqs = [
        Req(scheduled_ms=i * 10, error=ErrorClass.CONNECT, message="connection refused") for i in range(5)
    ]
    result = run(build_run(reqs, duration_ms=100, stopped_reason="max error rate"), CONFIG)
    assert result.collapsed and result.collapse_reason is not None
    assert result.collapse_reason.startswith("stopped early")
    assert result.distributions["ttft"].count == 0 and result.distributions["ttft"].median is None
    keys = to_vllm_keys(result)
    assert keys["completed"] == 0 and keys["failed"] == 5
    assert keys["mean_ttft_ms"] == 0.0 and keys["p99_itl_ms"] == 0.0
    assert result.errors["CONNECT"].examples == ["connection refused"]
    assert any(note.startswith("collapsed run:") for note in result.notes)


def test_timestamps_multi_event_reads_and_skew() -> None:
    data = build_run(
        sequential(),
        duration_ms=2000,
        timestamp_source=TimestampSource.USER,
        multi_event_reads=4,
        skew_ns=[20_000] * 99 + [180_000],
    )
    result = run(data, CONFIG)
    ts = result.timestamps
    assert ts.source == "USER" and ts.multi_event_read_ratio == pytest.approx(0.1)
    assert "receive timestamps: user space (clock read after each socket read returned)" in result.notes
    assert any(note.startswith("10.0% of reads carried more than one event") for note in result.notes)
    skew = result.distributions["skew"]
    assert skew.count == 100 and skew.max == pytest.approx(0.18, rel=REL)


def test_reasoning_first_gives_later_ttfa() -> None:
    result = run(build_run(sequential(answer_after_ms=20.0), duration_ms=2000), CONFIG)
    assert result.distributions["ttfa"].median == pytest.approx(70.0, rel=REL)
    assert result.distributions["ttft"].median == pytest.approx(50.0, rel=REL)
    assert any(note.startswith("reasoning output first") for note in result.notes)


def test_vllm_keys() -> None:
    result = run(build_run(sequential(), duration_ms=2000), CONFIG)
    keys = to_vllm_keys(result)
    for name in (
        "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
        "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
        "max_concurrency", "input_lens", "output_lens", "ttfts", "errors",
    ):  # fmt: skip
        assert name in keys
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p90", "p99", "p99.9"):
            assert f"{stat}_{metric}_ms" in keys
    assert keys["duration"] == pytest.approx(2.0)
    assert keys["request_throughput"] == pytest.approx(5.0)
    assert keys["median_ttft_ms"] == pytest.approx(50.0, rel=REL)
    assert keys["p99.9_itl_ms"] == pytest.approx(20.0, rel=REL)
    assert keys["request_rate"] == "inf" and keys["max_concurrency"] == 1
    assert keys["backend"] == "openai" and keys["model_id"] == "m"
    asked = summarize(
        build_run(sequential(), duration_ms=2000),
        CONFIG.replace(model=None),
        workload_info={},
        server_info={"model": "served"},
    )
    assert to_vllm_keys(asked)["model_id"] == "served"
    assert keys["ttfts"] == pytest.approx([0.05] * 10)
    assert keys["input_lens"] == [100] * 10 and keys["output_lens"] == [10] * 10
    assert "itls" not in keys and "generated_texts" not in keys


def test_every_figure_has_a_definition() -> None:
    for name in (*TIME_METRICS, *RATE_METRICS):
        assert DEFINITIONS[name]
    result = run(build_run(sequential(), duration_ms=2000), CONFIG)
    assert set(result.distributions) <= set(DEFINITIONS)
    assert "(E2E latency - TTFT) / (output tokens - 1)" in DEFINITIONS["tpot"]


def test_unreadable_saved_outputs_are_said() -> None:
    data = build_run(sequential(3), duration_ms=1000)
    data.extra["outputs"] = {0: ("ok", ""), 1: (None, None), 2: ("ok", "")}
    data.extra["outputs_unreadable"] = 1
    assert any(note.startswith("--save-outputs: 1 requests streamed events that are not readable")
               for note in run(data, CONFIG).notes)
    data.extra["outputs_unreadable"] = 0
    assert not any("--save-outputs" in note for note in run(data, CONFIG).notes)
