"""Derived figures of a run, each with one written definition, computed from RunData off the hot path.

``summarize`` turns what the native core measured (:class:`~fastbench.results.records.RunData`) into a
:class:`~fastbench.results.result.Result`; each figure's definition is in ``definitions.DEFINITIONS``.

Per-request distributions (TTFT, TPOT, E2EL, rates, ...) are exact, computed from the rows of
completed requests as ``vllm bench serve`` computes them (numpy: linear-interpolated percentiles,
population standard deviation); each also gets an HDR histogram, kept in the result for merging.
The chunk-level ones (ITL, skew) exist only as the core's HDR histograms (3 significant digits:
within 0.1 % of the exact value, percentiles the highest value equivalent to that rank).
"""

from __future__ import annotations

import datetime
import heapq
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastbench.config import GOODPUT_METRICS, BenchConfig
from fastbench.results.definitions import CORE_HISTOGRAMS, RATE_SCALE
from fastbench.results.records import (
    COL,
    HDR_HIGHEST,
    ErrorClass,
    RunData,
    TimestampSource,
    UsageSource,
    new_histogram,
)
from fastbench.results.result import (
    ClientSummary,
    Counts,
    Distribution,
    ErrorSummary,
    PerRequest,
    Result,
    Throughput,
    TimestampSummary,
    UsageSummary,
)

# Below this many samples p99 / p99.9 are just the slowest request or two; the notes say so.
FEW_SAMPLES = 100
# Per-request lists in workload_info, used here but not copied into the result.
PER_REQUEST_WORKLOAD_KEYS = ("prompt_lens", "max_tokens")


def histogram_of(values: np.ndarray) -> Any:
    """An HDR histogram of integer values, clamped into its trackable range."""
    hist = new_histogram()
    clipped = np.clip(np.asarray(values), 0, HDR_HIGHEST).astype(np.int64)  # clip first: floats may pass int64
    uniques, counts = np.unique(clipped, return_counts=True)
    for value, count in zip(uniques.tolist(), counts.tolist()):
        hist.record_value(value, count)
    return hist


def error_name(code: Any) -> str:
    """ErrorClass name of a code from the request table; "UNKNOWN_<code>" for a code it lacks."""
    try:
        return ErrorClass(int(code)).name
    except ValueError:
        return f"UNKNOWN_{int(code)}"


def _per_s(amount: float, duration_s: float) -> float:
    return amount / duration_s if duration_s > 0 else 0.0


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole > 0 else None


def _union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length of the union of the intervals [start, end)."""
    total = 0
    cur_start = cur_end = None
    for start, end in sorted(zip(starts.tolist(), ends.tolist())):
        if cur_end is None or start > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        elif end > cur_end:
            cur_end = end
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return int(total)


def _max_overlap(starts: np.ndarray, ends: np.ndarray) -> int:
    """Most intervals [start, end) open at once; an interval ending when another starts does not overlap it."""
    events = sorted([(int(t), 1) for t in starts] + [(int(t), -1) for t in ends], key=lambda e: (e[0], e[1]))
    best = current = 0
    for _, step in events:
        current += step
        best = max(best, current)
    return best


def _prompt_tokens(rows: np.ndarray, workload_info: Mapping[str, Any]) -> np.ndarray:
    """Prompt tokens per row; the server's count, else workload_info["prompt_lens"][index], else -1."""
    prompt = rows[:, COL["prompt_tokens"]].copy()
    lens: Sequence[int] | None = workload_info.get("prompt_lens")
    if lens is not None:
        for i in np.flatnonzero(prompt < 0).tolist():
            index = int(rows[i, COL["index"]]) if rows[i].any() else i
            if 0 <= index < len(lens):
                prompt[i] = int(lens[index])
    return prompt


def _usage_statement(by_source: dict[str, int], completed: int) -> str:
    per_chunk = by_source.get("PER_CHUNK", 0)
    final = by_source.get("FINAL", 0)
    none = by_source.get("NONE", 0)
    inconsistent = by_source.get("INCONSISTENT", 0)
    if completed == 0:
        return "no completed request: no token counts"
    if per_chunk == completed:
        return "token counts from the server's per-chunk usage (exact per chunk)"
    parts = []
    if per_chunk:
        parts.append(f"{per_chunk}/{completed} requests had per-chunk usage")
    if final:
        parts.append(
            f"{final}/{completed} had usage only at the end: their totals (and so tokens per chunk) "
            "are exact, but per-token ITL counts each of their chunks as 1 token"
        )
    if none:
        parts.append(
            f"{none}/{completed} had no usage at all: their output tokens are the chunks with text "
            "(undercounts with speculative decoding) and their prompt tokens come from the workload, if known"
        )
    if inconsistent:
        parts.append(
            f"{inconsistent}/{completed} had usage that cannot be right (malformed, going backwards, past "
            "max_tokens, or no token for text) and is not trusted: their output tokens are the chunks with text"
        )
    return "token counts fall back: " + "; ".join(parts)


def _timestamp_summary(data: RunData) -> TimestampSummary:
    kernel_ratio = _ratio(data.kernel_stamped_reads, data.reads)
    if data.timestamp_source == TimestampSource.KERNEL:
        statement = "receive timestamps: kernel (SO_TIMESTAMPNS)"
        if kernel_ratio is not None and kernel_ratio < 1.0:
            statement += f"; {100 * (1 - kernel_ratio):.1f}% of reads had none and used the user-space clock"
    else:
        statement = "receive timestamps: user space (clock read after each socket read returned)"
    return TimestampSummary(
        source=TimestampSource(data.timestamp_source).name,
        statement=statement,
        reads=data.reads,
        multi_event_reads=data.multi_event_reads,
        output_events=data.output_events,
        kernel_stamped_reads=data.kernel_stamped_reads,
        multi_event_read_ratio=_ratio(data.multi_event_reads, data.reads),
        events_per_read=_ratio(data.output_events, data.reads),
        kernel_stamped_ratio=kernel_ratio,
    )


def _error_summaries(
    rows: np.ndarray, started: np.ndarray, messages: Mapping[int, str]
) -> dict[str, ErrorSummary]:
    out: dict[str, ErrorSummary] = {}
    errors = rows[:, COL["error"]]
    for code in np.unique(errors[started & (errors != ErrorClass.OK)]).tolist():
        idx = np.flatnonzero(started & (errors == code))
        examples: list[str] = []
        for i in idx.tolist():
            msg = messages.get(int(rows[i, COL["index"]]))
            if msg and msg not in examples:
                examples.append(msg)
                if len(examples) == 5:
                    break
        out[error_name(code)] = ErrorSummary(count=len(idx), examples=examples)
    return out


def _fmt_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}" if value < 10 else f"{value:.1f}"


def summarize(
    data: RunData,
    config: BenchConfig,
    *,
    workload_info: Mapping[str, Any],
    server_info: Mapping[str, Any],
) -> Result:
    """Derive every figure of a run. Latencies and rates come from completed requests only.

    :param workload_info: what the workload generator knows, e.g. ``{"dataset": "ShareGPT V3",
        "prompt_lens": [...]}``; ``prompt_lens`` (indexed by request index) fills in prompt tokens
        the server did not report.
    :param server_info: what is known of the server, e.g. ``{"engine": "vLLM 0.32.0",
        "max_model_len": 65536}``; kept in the result and used by the run card.
    """
    for key in config.goodput:
        if key not in GOODPUT_METRICS:
            raise ValueError(f"unknown goodput metric {key!r}; expected one of {GOODPUT_METRICS}")

    rows = np.asarray(data.rows, dtype=np.int64).reshape(-1, len(COL))
    col = {name: rows[:, i] for name, i in COL.items()}
    started = np.asarray(rows.any(axis=1), dtype=bool)
    error = col["error"]
    completed = started & (error == ErrorClass.OK) & (col["end_ns"] > 0)
    failed = started & (error != ErrorClass.OK) & (error != ErrorClass.CANCELLED)
    cancelled = started & ~completed & ~failed
    prompt = _prompt_tokens(rows, workload_info)
    duration_s = max(0, data.end_ns - data.start_ns) / 1e9

    # -- per completed request ------------------------------------------------------------------
    c = {name: values[completed] for name, values in col.items()}
    c_prompt = prompt[completed]
    out_tokens = c["output_tokens"]
    has_first = c["first_token_ns"] > 0
    # Latency counts from the arrival time in open loop (coordinated-omission-correct) and from
    # the send in closed loop, where the client's own turnaround is reported as lateness instead.
    origin = c["scheduled_ns"] if config.request_rate is not None else c["sent_ns"]
    ttft = np.where(has_first, c["first_token_ns"] - origin, -1)
    ttft_raw = np.where(has_first, c["first_token_ns"] - c["sent_ns"], -1)
    e2el = c["end_ns"] - origin
    decode_ns = c["end_ns"] - c["first_token_ns"]
    has_tpot = has_first & (out_tokens >= 2)
    tpot = np.where(has_tpot, decode_ns / np.maximum(out_tokens - 1, 1), -1.0)
    per_request_ns: dict[str, np.ndarray] = {
        "ttft": ttft[has_first],
        "ttft_raw": ttft_raw[has_first],
        "ttfa": (c["first_answer_ns"] - origin)[c["first_answer_ns"] > 0],
        "tpot": np.rint(tpot[has_tpot]),
        "e2el": e2el,
        "e2el_raw": c["end_ns"] - c["sent_ns"],
        "lateness": (c["sent_ns"] - c["scheduled_ns"])[c["sent_ns"] > 0],
        "connect": c["connect_ns"][c["connect_ns"] > 0],
    }
    has_decode = has_tpot & (decode_ns > 0)
    decode_rate = (out_tokens[has_decode] - 1) / (decode_ns[has_decode] / 1e9)
    has_prefill = has_first & (c_prompt > 0) & (ttft_raw > 0)
    prefill_rate = c_prompt[has_prefill] / (ttft_raw[has_prefill] / 1e9)

    histograms: dict[str, Any] = {name: histogram_of(v) for name, v in per_request_ns.items()}
    histograms["prefill_rate"] = histogram_of(np.rint(prefill_rate * RATE_SCALE))
    histograms["decode_rate"] = histogram_of(np.rint(decode_rate * RATE_SCALE))
    # exact per-request figures (TPOT unrounded); the histograms above are kept for merging
    distributions = {name: Distribution.from_values(v, "ms") for name, v in per_request_ns.items()}
    distributions["tpot"] = Distribution.from_values(tpot[has_tpot], "ms")
    distributions["prefill_rate"] = Distribution.from_values(prefill_rate, "tok/s", scale=1.0)
    distributions["decode_rate"] = Distribution.from_values(decode_rate, "tok/s", scale=1.0)
    for core_name, name in CORE_HISTOGRAMS.items():
        if core_name in data.histograms and data.histograms[core_name] is not None:
            histograms[name] = data.histograms[core_name]
            distributions[name] = Distribution.from_histogram(histograms[name], "ms")

    # -- counts, tokens, throughputs --------------------------------------------------------------
    failed_by_class = {
        error_name(code): int(n) for code, n in zip(*np.unique(error[failed], return_counts=True))
    }
    counts = Counts(
        total=len(rows),
        completed=int(completed.sum()),
        failed=int(failed.sum()),
        failed_by_class=failed_by_class,
        cancelled=int(cancelled.sum()),
        not_started=int((~started).sum()),
        warmups=data.warmups,
        resent=data.stale_retries,
    )
    total_input = _exact_sum(np.maximum(c_prompt, 0))
    total_output = _exact_sum(np.maximum(out_tokens, 0))

    good: int | None = None
    if config.goodput:
        ok = np.ones(len(e2el), dtype=bool)
        if "ttft" in config.goodput:
            ok &= has_first & (ttft <= config.goodput["ttft"] * 1e6)
        if "tpot" in config.goodput:
            ok &= ~has_tpot | (tpot <= config.goodput["tpot"] * 1e6)
        if "e2el" in config.goodput:
            ok &= e2el <= config.goodput["e2el"] * 1e6
        good = int(ok.sum())

    known_prompt = has_first & (c_prompt > 0)
    prefill_wall_ns = _union_ns(c["sent_ns"][known_prompt], c["first_token_ns"][known_prompt])
    throughput = Throughput(
        request_throughput=_per_s(counts.completed, duration_s),
        request_goodput=None if good is None else _per_s(good, duration_s),
        good_requests=good,
        input_throughput=_per_s(total_input, duration_s),
        output_throughput=_per_s(total_output, duration_s),
        total_token_throughput=_per_s(total_input + total_output, duration_s),
        prefill_throughput=(
            _exact_sum(c_prompt[known_prompt]) / (prefill_wall_ns / 1e9) if prefill_wall_ns > 0 else None
        ),
    )

    # -- usage, tokens per chunk, timestamps, client ---------------------------------------------
    usage_codes = c["usage_source"]
    by_source = {
        src.name: int((usage_codes == src).sum()) for src in UsageSource if (usage_codes == src).any()
    }
    usage = UsageSummary(
        by_source=by_source,
        all_per_chunk=counts.completed > 0 and by_source.get("PER_CHUNK", 0) == counts.completed,
        statement=_usage_statement(by_source, counts.completed),
    )
    # Only usage the server gave and fastbench trusts: INCONSISTENT requests fall back to counting
    # chunks, which would pull the mean towards 1.
    with_usage = np.isin(usage_codes, (UsageSource.PER_CHUNK, UsageSource.FINAL)) & (c["chunks"] > 0)
    chunk_total = int(c["chunks"][with_usage].sum())
    mean_tokens_per_chunk = _exact_sum(out_tokens[with_usage]) / chunk_total if chunk_total else None

    timestamps = _timestamp_summary(data)
    in_flight = started & (col["sent_ns"] > 0)
    ends = np.where(col["end_ns"] > 0, col["end_ns"], max(data.end_ns, 1))[in_flight]
    client = ClientSummary(
        mean_in_flight=float(data.mean_in_flight),
        max_concurrent_requests=_max_overlap(col["sent_ns"][in_flight], ends),
        cpu_s=data.client_cpu_ns / 1e9,
        cpu_per_event_us=(data.client_cpu_ns / data.output_events / 1e3) if data.output_events else None,
        connections_opened=data.connections_opened,
    )

    # -- per-request arrays (vllm) ------------------------------------------------------------------
    errors_text: list[str] = []
    for i in np.flatnonzero(started).tolist():
        if completed[i]:
            errors_text.append("")
            continue
        name = error_name(error[i])
        msg = data.error_messages.get(int(col["index"][i]), "")
        errors_text.append(f"{name}: {msg}" if msg else name)
    all_origin = col["scheduled_ns"] if config.request_rate is not None else col["sent_ns"]
    first = np.where(col["first_token_ns"] > 0, col["first_token_ns"] - all_origin, 0)
    per_request = PerRequest(
        index=col["index"][started].tolist(),
        input_lens=np.maximum(prompt[started], 0).tolist(),
        output_lens=np.where(completed, np.maximum(col["output_tokens"], 0), 0)[started].tolist(),
        ttfts=(first[started] / 1e9).tolist(),
        errors=errors_text,
    )

    # -- flags and notes ------------------------------------------------------------------------------
    finished = counts.completed + counts.failed
    collapse_reason: str | None = None
    if data.stopped_reason == "max error rate":
        collapse_reason = f"stopped early: failed/finished passed max_error_rate {config.max_error_rate}"
    elif counts.completed == 0:
        collapse_reason = "no request completed"
    elif finished and counts.failed / finished > 0.5:
        collapse_reason = f"most requests failed ({counts.failed}/{finished})"

    result = Result(
        config=config,
        created_at=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        duration_s=duration_s,
        counts=counts,
        total_input_tokens=total_input,
        total_output_tokens=total_output,
        throughput=throughput,
        distributions=distributions,
        histograms=histograms,
        mean_tokens_per_chunk=mean_tokens_per_chunk,
        errors=_error_summaries(rows, started, data.error_messages),
        usage=usage,
        timestamps=timestamps,
        client=client,
        per_request=per_request,
        cap_hit=data.cap_hit,
        stopped_reason=data.stopped_reason,
        collapsed=collapse_reason is not None,
        collapse_reason=collapse_reason,
        notes=[],
        workload_info={k: v for k, v in workload_info.items() if k not in PER_REQUEST_WORKLOAD_KEYS},
        server_info=dict(server_info),
    )
    max_model_len = server_info.get("max_model_len")
    over_context = int((c_prompt > max_model_len).sum()) if isinstance(max_model_len, int) else 0
    result.notes.extend(
        _notes(
            result, data, no_tpot=int((has_first & ~has_tpot).sum()), unknown_prompt=int((c_prompt < 0).sum()),
            over_context=over_context,
        )
    )
    return result


def slot_grants(rows: np.ndarray, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """Which slot each started request took, as the load generator hands them out: in order of
    ``scheduled_ns``, each the slot that frees first, held from its grant to the request's end
    stamp (a holder still connecting is busy). Returns the started rows in that order and, for
    each, when its slot had freed (0: free from the start)."""
    started = rows[rows[:, COL["sent_ns"]] > 0]
    started = started[np.argsort(started[:, COL["scheduled_ns"]], kind="stable")]
    free_at = [0] * slots  # a heap of the moments the slots free
    freed = [heapq.heapreplace(free_at, int(max(end, sent)))
             for sent, end in started[:, [COL["sent_ns"], COL["end_ns"]]].tolist()]
    return started, np.asarray(freed, dtype=np.int64)


def _slot_wait_notes(rows: np.ndarray, cap: int) -> list[str]:
    """Open loop under a cap: how many requests arrived with every slot busy and waited for one
    (the wait is in their TTFT and E2EL, which run from the arrival), and how many were still
    waiting when the run stopped (cancelled, so left out of every latency figure)."""
    granted, freed = slot_grants(rows, cap)
    arrival = granted[:, COL["scheduled_ns"]]
    waited = freed > arrival  # every slot was still busy at the arrival
    waits_ms = (granted[waited, COL["sent_ns"]] - arrival[waited]) / 1e6
    notes = []
    if waits_ms.size:
        notes.append(f"{waits_ms.size} of {len(granted)} requests arrived with all {cap} slots busy and waited "
                     f"for one (median {np.median(waits_ms):.1f} ms, max {waits_ms.max():.1f} ms): the wait is in "
                     "their TTFT and E2EL, which run from the arrival; without --concurrency there is no cap")
    scheduled, end = rows[:, COL["scheduled_ns"]], rows[:, COL["end_ns"]]
    queued = (scheduled > 0) & (rows[:, COL["sent_ns"]] == 0) & (rows[:, COL["error"]] == int(ErrorClass.CANCELLED))
    if queued.any():
        waited_ms = (end[queued] - scheduled[queued]) / 1e6
        notes.append(f"{int(queued.sum())} requests were still waiting for a slot when the run stopped (median "
                     f"{np.median(waited_ms):.1f} ms waited so far): cancelled, so no latency figure counts them")
    return notes


def _exact_sum(tokens: np.ndarray) -> int:
    """A server's usage may hold any 63-bit number, and an int64 sum would wrap without a word."""
    return sum(tokens.tolist())


def _notes(result: Result, data: RunData, *, no_tpot: int, unknown_prompt: int, over_context: int = 0) -> list[str]:
    """Short statements about the run, for the card's Notes and the result file."""
    cfg, n, d = result.config, result.counts, result.distributions
    notes: list[str] = []
    failed = ", ".join(f"{name} {k}" for name, k in n.failed_by_class.items())
    failed_text = f"{n.failed} failed ({failed})" if n.failed else "0 errors"
    left = n.cancelled + n.not_started
    if result.cap_hit:
        cap = f"{cfg.max_seconds:g} s " if cfg.max_seconds is not None else ""
        notes.append(
            f"{n.completed}/{n.total} completed before the {cap}time cap, {failed_text}; "
            f"{left} not started/cancelled"
        )
    else:
        text = f"{n.completed}/{n.total} completed, {failed_text}, in {result.duration_s:.1f} s"
        if left:
            text += f"; {left} not started/cancelled"
        notes.append(text)
    if result.stopped_reason == "interrupted":
        notes.append("interrupted before the workload finished")
    if result.collapse_reason:
        notes.append(f"collapsed run: {result.collapse_reason}")
    if data.stale_retries:
        notes.append(
            f"{data.stale_retries} requests were re-sent once on a new connection: their kept-alive "
            "connection closed or reset before any response byte"
        )
    slots = cfg.effective_concurrency
    if cfg.request_rate is not None and slots is not None:
        notes += _slot_wait_notes(data.rows, slots)
    cut = (data.rows[:, COL["error"]] == int(ErrorClass.CANCELLED)) & (data.rows[:, COL["sent_ns"]] > 0)
    cut_tokens = _exact_sum(np.maximum(data.rows[cut, COL["output_tokens"]], 0))
    if cut_tokens:
        notes.append(f"{int(cut.sum())} requests cut short when the run stopped had received {cut_tokens:,} output "
                     "tokens: like vllm bench serve, token counts and throughputs cover completed requests only")
    if data.extra.get("outputs_unreadable"):
        notes.append(f"--save-outputs: {data.extra['outputs_unreadable']} requests streamed events that are not "
                     "readable OpenAI chunks (bad JSON or types); their output_text and reasoning_text are null")
    if n.warmups:
        notes.append(f"{n.warmups} warm-up requests sent before the measured window, not counted")
    if 0 < n.completed < FEW_SAMPLES:
        notes.append(
            f"only {n.completed} requests completed: p99 and p99.9 are the slowest one or two requests"
        )
    notes.append(result.usage.statement)
    if unknown_prompt:
        notes.append(f"{unknown_prompt} completed requests have no prompt token count (counted as 0)")
    if over_context:
        notes.append(f"{over_context} completed requests report more prompt tokens than the server's "
                     f"max_model_len ({result.server_info['max_model_len']}): its usage cannot be right there")
    if no_tpot:
        notes.append(f"{no_tpot} completed requests had fewer than 2 output tokens: no TPOT for them")
    ts = result.timestamps
    notes.append(ts.statement)
    if ts.multi_event_read_ratio is not None:
        notes.append(
            f"{100 * ts.multi_event_read_ratio:.1f}% of reads carried more than one event "
            f"({ts.events_per_read:.2f} output events per read; events of one read share its timestamp)"
        )
    if cfg.coalesce_ms:
        text = (f"reads coalesced (--coalesce-ms {cfg.coalesce_ms:g}): each socket drained at least every "
                f"{cfg.coalesce_ms:g} ms, a stream about to end on every arrival; times from kernel stamps")
        gap = d["itl"].median
        if gap is not None and 2 * cfg.coalesce_ms > gap:
            text += (f"; the window is over half the median chunk gap ({_fmt_ms(gap)} ms): chunks of one "
                     "stream can share a read and its stamp, and a server that leaves Nagle on waits for "
                     "the read's ACK: use a smaller window or none")
        notes.append(text)
    prefill = d.get("prefill_rate")
    if prefill is not None and prefill.count:
        notes.append(
            f"prefill rate is the median of per-request prompt tokens / raw TTFT (n={prefill.count}), "
            "not total prompt tokens / run time"
        )
    if cfg.request_rate is not None:
        ttft, raw, late = d["ttft"], d["ttft_raw"], d["lateness"]
        notes.append(
            f"open loop at {cfg.request_rate:g} req/s (burstiness {cfg.burstiness:g}): TTFT and E2E count "
            f"from the scheduled time; median TTFT {_fmt_ms(ttft.median)} ms vs {_fmt_ms(raw.median)} ms "
            f"from the send time; client lateness p99 {_fmt_ms(late.p99)} ms"
        )
    ttfa_median, ttft_median = d["ttfa"].median, d["ttft"].median
    if ttfa_median is not None and ttft_median is not None and ttfa_median > ttft_median * 1.01:
        notes.append(f"reasoning output first: median TTFA {_fmt_ms(ttfa_median)} ms")
    skew = d.get("skew")
    if skew is not None and skew.count:
        notes.append(
            f"client skew vs the synthetic server's send stamps: p99 {skew.p99:.3f} ms, max {skew.max:.3f} ms"
        )
    cl = result.client
    slots = cfg.effective_concurrency
    in_flight = f"mean in flight {cl.mean_in_flight:.1f} ({'no cap' if slots is None else f'concurrency {slots}'}"
    in_flight += f", peak {cl.max_concurrent_requests})"
    if cl.cpu_per_event_us is not None:
        in_flight += f"; client CPU {cl.cpu_per_event_us:.1f} us per output event"
    notes.append(in_flight)
    notes.extend(str(note) for note in result.workload_info.get("notes") or [])
    return notes
