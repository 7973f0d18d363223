"""Every figure of a run, derived by its written definition from what the native core measured.

``summarize`` turns :class:`~fastbench.results.records.RunData` into a
:class:`~fastbench.results.result.Result`, off the hot path, in steps: the request table's masks,
the latencies of completed requests, their distributions, the counts, throughputs, token usage,
timestamps, the client's own figures, vllm's per-request arrays, and the facts the notes state.

Per-request distributions (TTFT, TPOT, E2EL, rates, ...) are exact, computed from the rows of
completed requests as ``vllm bench serve`` computes them (numpy: linear-interpolated percentiles,
population standard deviation); each also gets an HDR histogram, kept in the result for merging.
The chunk-level ones (ITL, skew) exist only as the core's HDR histograms (3 significant digits:
within 0.1 % of the exact value, percentiles the highest value equivalent to that rank).
"""

from __future__ import annotations

import dataclasses
import datetime
import heapq
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastbench.config import GOODPUT_METRICS, BenchConfig
from fastbench.results import pooling
from fastbench.results.adapters import adapter_figures
from fastbench.results.agentic import AGENTIC_WORKLOAD_KEYS, agentic_figures
from fastbench.results.cache import prefix_cache_summary
from fastbench.results.definitions import CORE_HISTOGRAMS, RATE_SCALE
from fastbench.results.notes import (
    PACE_SLACK_MS,
    NoteFacts,
    SlotWaits,
    TracePace,
    collapse_reason,
    run_notes,
    timestamp_statement,
    usage_statement,
)
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
from fastbench.results.sessions import session_figures
from fastbench.results.steady import steady_state
from fastbench.results.workersection import worded_section

# Per-request lists in workload_info (and the names one indexes), used here but not copied into the result:
# the adapters' names are the adapters section's, the agent trees' names the agentic section's.
PER_REQUEST_WORKLOAD_KEYS = ("prompt_lens", "max_tokens", "session_of_row", "turn_of_row", "shared_prompt_tokens",
                             "adapter_of_request", "adapters", "inputs_per_request", *AGENTIC_WORKLOAD_KEYS)


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
        "max_model_len": 65536}``; kept in the result and used by the run card. Its ``prefix_cache_stats``
        (the /metrics hit rate over the window) is judged against the workload's own sharing (results.cache).
    """
    for key in config.goodput:
        if key not in GOODPUT_METRICS:
            raise ValueError(f"unknown goodput metric {key!r}; expected one of {GOODPUT_METRICS}")

    requests = _Requests.of(data, workload_info)
    done = _Completed.of(requests, config)
    duration_s = max(0, data.end_ns - data.start_ns) / 1e9
    distributions, histograms = _distributions(done, data.histograms, config.metric_percentiles or ())
    counts = _counts(requests, data)
    total_input = _exact_sum(np.maximum(done.prompt, 0))
    total_output = _exact_sum(np.maximum(done.output_tokens, 0))
    reason = collapse_reason(counts, data.stopped_reason, config.max_error_rate)
    throughput = _throughput(done, counts, total_input, total_output, duration_s, config.goodput)
    result = Result(
        config=config,
        created_at=datetime.datetime.now().astimezone().isoformat(timespec="milliseconds"),  # orders a second's runs
        duration_s=duration_s,
        counts=counts,
        total_input_tokens=total_input,
        total_output_tokens=total_output,
        throughput=throughput,
        distributions=distributions,
        histograms=histograms,
        mean_tokens_per_chunk=_mean_tokens_per_chunk(done),
        errors=_error_summaries(requests.rows, requests.started, data.error_messages),
        usage=_usage(done, counts.completed, workload_info if config.pooling else None),
        timestamps=_timestamp_summary(data),
        client=_client_summary(requests, data, config),
        per_request=_per_request(requests, data, config),
        cap_hit=data.cap_hit,
        stopped_reason=data.stopped_reason,
        collapsed=reason is not None,
        collapse_reason=reason,
        notes=[],
        workload_info={k: v for k, v in workload_info.items() if k not in PER_REQUEST_WORKLOAD_KEYS},
        server_info=dict(server_info),
        workers=worded_section(data.extra.get("workers")),
        sessions=session_figures(requests.rows, np.asarray(workload_info["session_of_row"]),
                                 np.asarray(workload_info["turn_of_row"]), config.open_loop,
                                 workload_info.get("prompt_lens"))
        if "session_of_row" in workload_info else None,
        agentic=agentic_figures(requests.rows, workload_info, config.open_loop) if "tree_of_row" in workload_info
        else None,
        steady=steady_state(data, config, workload_info.get("tree_of_row")),  # agent trees: theirs in flight
        prefix_cache=prefix_cache_summary(requests.rows, requests.completed, requests.prompt, config, workload_info,
                                          server_info),
        adapters=adapter_figures(requests.rows, requests.prompt, workload_info["adapter_of_request"],
                                 workload_info["adapters"], config.open_loop, duration_s)
        if workload_info.get("adapter_of_request") is not None else None,
        pooling=pooling.summarize(config, done.col["index"], workload_info, duration_s, throughput.input_throughput),
    )
    result.notes.extend(run_notes(result, _note_facts(requests, done, data, config, server_info,
                                                      workload_info.get("inputs_per_request"))))
    return result


# -- the steps of summarize, in its order ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Requests:
    """The request table by column, and which of its rows started, completed, failed or were cancelled."""

    rows: np.ndarray  # int64, one row per request of the workload (warm-ups excluded)
    col: dict[str, np.ndarray]  # column name -> one value per row
    prompt: np.ndarray  # prompt tokens per row, -1 where unknown (see _prompt_tokens)
    started: np.ndarray  # bool, one per row
    completed: np.ndarray
    failed: np.ndarray  # ended with an error other than CANCELLED
    cancelled: np.ndarray  # started, neither completed nor failed

    @classmethod
    def of(cls, data: RunData, workload_info: Mapping[str, Any]) -> _Requests:
        rows = np.asarray(data.rows, dtype=np.int64).reshape(-1, len(COL))
        col = {name: rows[:, i] for name, i in COL.items()}
        started = np.asarray(rows.any(axis=1), dtype=bool)
        error = col["error"]
        completed = started & (error == ErrorClass.OK) & (col["end_ns"] > 0)
        failed = started & (error != ErrorClass.OK) & (error != ErrorClass.CANCELLED)
        return cls(rows=rows, col=col, prompt=_prompt_tokens(rows, workload_info), started=started,
                   completed=completed, failed=failed, cancelled=started & ~completed & ~failed)


@dataclasses.dataclass(frozen=True)
class _Completed:
    """The completed requests: their columns and the times (ns) every latency figure is made of."""

    col: dict[str, np.ndarray]  # the request table's columns, completed rows only
    prompt: np.ndarray  # prompt tokens, -1 where unknown
    output_tokens: np.ndarray
    origin: np.ndarray  # where latency counts from: the arrival in open loop, the send in closed loop
    has_first: np.ndarray  # an output event arrived
    ttft: np.ndarray  # -1 where no output arrived
    ttft_raw: np.ndarray  # from the send; -1 where no output arrived
    e2el: np.ndarray
    decode_ns: np.ndarray  # end minus first output
    has_tpot: np.ndarray  # an output event arrived and at least 2 output tokens
    tpot: np.ndarray  # float; -1.0 where has_tpot is false

    @classmethod
    def of(cls, requests: _Requests, config: BenchConfig) -> _Completed:
        c = {name: values[requests.completed] for name, values in requests.col.items()}
        out_tokens = c["output_tokens"]
        has_first = c["first_token_ns"] > 0
        # Latency counts from the arrival time in open loop (coordinated-omission-correct) and from
        # the send in closed loop, where the client's own turnaround is reported as lateness instead.
        origin = c["scheduled_ns"] if config.open_loop else c["sent_ns"]
        decode_ns = c["end_ns"] - c["first_token_ns"]
        has_tpot = has_first & (out_tokens >= 2)
        return cls(
            col=c,
            prompt=requests.prompt[requests.completed],
            output_tokens=out_tokens,
            origin=origin,
            has_first=has_first,
            ttft=np.where(has_first, c["first_token_ns"] - origin, -1),
            ttft_raw=np.where(has_first, c["first_token_ns"] - c["sent_ns"], -1),
            e2el=c["end_ns"] - origin,
            decode_ns=decode_ns,
            has_tpot=has_tpot,
            tpot=np.where(has_tpot, decode_ns / np.maximum(out_tokens - 1, 1), -1.0),
        )


def _distributions(
    done: _Completed, core_histograms: Mapping[str, Any], selected: tuple[float, ...] = ()
) -> tuple[dict[str, Distribution], dict[str, Any]]:
    """Each metric's distribution and HDR histogram: exact per-request figures from the completed
    requests (the histograms kept for merging), then the core's chunk-level histograms."""
    c, origin = done.col, done.origin
    per_request_ns: dict[str, np.ndarray] = {
        "ttft": done.ttft[done.has_first],
        "ttft_raw": done.ttft_raw[done.has_first],
        "ttfa": (c["first_answer_ns"] - origin)[c["first_answer_ns"] > 0],
        "tpot": np.rint(done.tpot[done.has_tpot]),
        "e2el": done.e2el,
        "e2el_raw": c["end_ns"] - c["sent_ns"],
        "lateness": (c["sent_ns"] - c["scheduled_ns"])[c["sent_ns"] > 0],
        "connect": c["connect_ns"][c["connect_ns"] > 0],
    }
    has_decode = done.has_tpot & (done.decode_ns > 0)
    decode_rate = (done.output_tokens[has_decode] - 1) / (done.decode_ns[has_decode] / 1e9)
    has_prefill = done.has_first & (done.prompt > 0) & (done.ttft_raw > 0)
    prefill_rate = done.prompt[has_prefill] / (done.ttft_raw[has_prefill] / 1e9)

    histograms: dict[str, Any] = {name: histogram_of(v) for name, v in per_request_ns.items()}
    histograms["prefill_rate"] = histogram_of(np.rint(prefill_rate * RATE_SCALE))
    histograms["decode_rate"] = histogram_of(np.rint(decode_rate * RATE_SCALE))
    # exact per-request figures (TPOT unrounded); the histograms above are kept for merging
    distributions = {name: Distribution.from_values(v, "ms", selected=selected) for name, v in per_request_ns.items()}
    distributions["tpot"] = Distribution.from_values(done.tpot[done.has_tpot], "ms", selected=selected)
    distributions["prefill_rate"] = Distribution.from_values(prefill_rate, "tok/s", scale=1.0)
    distributions["decode_rate"] = Distribution.from_values(decode_rate, "tok/s", scale=1.0)
    for core_name, name in CORE_HISTOGRAMS.items():
        if core_name in core_histograms and core_histograms[core_name] is not None:
            histograms[name] = core_histograms[core_name]
            distributions[name] = Distribution.from_histogram(histograms[name], "ms", selected)
    return distributions, histograms


def _counts(requests: _Requests, data: RunData) -> Counts:
    error = requests.col["error"]
    failed_by_class = {
        error_name(code): int(n) for code, n in zip(*np.unique(error[requests.failed], return_counts=True))
    }
    return Counts(
        total=len(requests.rows),
        completed=int(requests.completed.sum()),
        failed=int(requests.failed.sum()),
        failed_by_class=failed_by_class,
        cancelled=int(requests.cancelled.sum()),
        not_started=int((~requests.started).sum()),
        warmups=data.warmups,
        resent=data.stale_retries,
    )


def _throughput(
    done: _Completed, counts: Counts, total_input: int, total_output: int, duration_s: float,
    goodput: Mapping[str, float],
) -> Throughput:
    good = _good_requests(done, goodput)
    known_prompt = done.has_first & (done.prompt > 0)
    prefill_wall_ns = _union_ns(done.col["sent_ns"][known_prompt], done.col["first_token_ns"][known_prompt])
    return Throughput(
        request_throughput=_per_s(counts.completed, duration_s),
        request_goodput=None if good is None else _per_s(good, duration_s),
        good_requests=good,
        input_throughput=_per_s(total_input, duration_s),
        output_throughput=_per_s(total_output, duration_s),
        total_token_throughput=_per_s(total_input + total_output, duration_s),
        prefill_throughput=(
            _exact_sum(done.prompt[known_prompt]) / (prefill_wall_ns / 1e9) if prefill_wall_ns > 0 else None
        ),
    )


def _good_requests(done: _Completed, goodput: Mapping[str, float]) -> int | None:
    """Completed requests meeting every SLO (ms) in ``goodput``; None when it sets none."""
    if not goodput:
        return None
    ok = np.ones(len(done.e2el), dtype=bool)
    if "ttft" in goodput:
        ok &= done.has_first & (done.ttft <= goodput["ttft"] * 1e6)
    if "tpot" in goodput:
        ok &= ~done.has_tpot | (done.tpot <= goodput["tpot"] * 1e6)
    if "e2el" in goodput:
        ok &= done.e2el <= goodput["e2el"] * 1e6
    return int(ok.sum())


def _error_summaries(
    rows: np.ndarray, started: np.ndarray, messages: Mapping[int, str]
) -> dict[str, ErrorSummary]:
    """Per ErrorClass name of the failed and cancelled requests: how many, and up to 5 distinct messages."""
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


def _usage(done: _Completed, completed: int, whole: Mapping[str, Any] | None = None) -> UsageSummary:
    """``whole``: a run of whole answers' workload info (their statement is of input tokens, results.pooling)."""
    usage_codes = done.col["usage_source"]
    by_source = {
        src.name: int((usage_codes == src).sum()) for src in UsageSource if (usage_codes == src).any()
    }
    whole_statement = pooling.usage_statement(by_source, whole) if whole is not None else None
    return UsageSummary(
        by_source=by_source,
        all_per_chunk=completed > 0 and by_source.get("PER_CHUNK", 0) == completed,
        statement=whole_statement or usage_statement(by_source, completed),
    )


def _mean_tokens_per_chunk(done: _Completed) -> float | None:
    # Only usage the server gave and fastbench trusts: INCONSISTENT requests fall back to counting
    # chunks, which would pull the mean towards 1.
    chunks = done.col["chunks"]
    with_usage = np.isin(done.col["usage_source"], (UsageSource.PER_CHUNK, UsageSource.FINAL)) & (chunks > 0)
    chunk_total = int(chunks[with_usage].sum())
    return _exact_sum(done.output_tokens[with_usage]) / chunk_total if chunk_total else None


def _timestamp_summary(data: RunData) -> TimestampSummary:
    kernel_ratio = _ratio(data.kernel_stamped_reads, data.reads)
    return TimestampSummary(
        source=TimestampSource(data.timestamp_source).name,
        statement=timestamp_statement(data.timestamp_source, kernel_ratio),
        reads=data.reads,
        multi_event_reads=data.multi_event_reads,
        output_events=data.output_events,
        kernel_stamped_reads=data.kernel_stamped_reads,
        multi_event_read_ratio=_ratio(data.multi_event_reads, data.reads),
        events_per_read=_ratio(data.output_events, data.reads),
        kernel_stamped_ratio=kernel_ratio,
    )


LATE_NS = 100_000  # a send this much past when it could go counts as late (late_share)


def client_lateness_ns(rows: np.ndarray, slots: int, open_loop: bool,
                       pools: Sequence[tuple[np.ndarray, int]] | None = None) -> np.ndarray:
    """Per started request, how late the client sent it: the send stamp minus the moment it could
    have gone, the later of its arrival and its slot's freeing (slot_grants) in open loop, the
    slot's freeing in closed loop, whose opening ramp (slots free from the start) is left out.
    Waiting for a slot under the cap is the load's queueing, not the client's lateness."""
    granted, freed = slot_grants(rows, slots, pools)
    sent = granted[:, COL["sent_ns"]]
    if open_loop:
        return np.asarray(sent - np.maximum(granted[:, COL["scheduled_ns"]], freed))
    return np.asarray((sent - freed)[freed > 0])


def _client_summary(requests: _Requests, data: RunData, config: BenchConfig) -> ClientSummary:
    col = requests.col
    slots = config.effective_concurrency or max(1, len(requests.rows))
    lateness = client_lateness_ns(requests.rows, slots, config.open_loop, data.extra.get("slot_pools"))
    in_flight = requests.started & (col["sent_ns"] > 0)
    ends = np.where(col["end_ns"] > 0, col["end_ns"], max(data.end_ns, 1))[in_flight]
    return ClientSummary(
        mean_in_flight=float(data.mean_in_flight),
        max_concurrent_requests=_max_overlap(col["sent_ns"][in_flight], ends),
        cpu_s=data.client_cpu_ns / 1e9,
        cpu_per_event_us=(data.client_cpu_ns / data.output_events / 1e3) if data.output_events else None,
        connections_opened=data.connections_opened,
        late_share=float(np.mean(lateness > LATE_NS)) if lateness.size else None,
        coalescing=data.extra.get("coalescing"),
    )


def _chunk_gaps_s(stamps: bytes | None) -> list[float]:
    """vllm's ``itl`` of one request: seconds between successive output chunks, from the core's receive
    stamps (kept for completed requests only; [] for the others, as vllm leaves a failed one's empty)."""
    if not stamps:
        return []
    gaps: list[float] = (np.diff(np.frombuffer(stamps, dtype=np.int64)) / 1e9).tolist()
    return gaps


def _per_request(requests: _Requests, data: RunData, config: BenchConfig) -> PerRequest:
    """vllm's per-request arrays, for every started request in index order."""
    col, started, completed = requests.col, requests.started, requests.completed
    errors_text: list[str] = []
    for i in np.flatnonzero(started).tolist():
        if completed[i]:
            errors_text.append("")
            continue
        name = error_name(col["error"][i])
        msg = data.error_messages.get(int(col["index"][i]), "")
        errors_text.append(f"{name}: {msg}" if msg else name)
    origin = col["scheduled_ns"] if config.open_loop else col["sent_ns"]
    first = np.where(col["first_token_ns"] > 0, col["first_token_ns"] - origin, 0)
    arrays: dict[str, Any] = {}
    if config.per_request_arrays:  # --save-detailed: vllm's further arrays
        sent = col["sent_ns"]
        outputs = data.extra.get("outputs") or {}
        stamps = data.extra.get("chunk_stamps") or {}
        arrays = {
            "start_times": (np.where(sent > 0, sent - data.start_ns, 0)[started] / 1e9).tolist(),
            "latencies": (np.where(completed, col["end_ns"] - origin, 0)[started] / 1e9).tolist(),
            "queue_times": (np.where(sent > 0, sent - col["scheduled_ns"], 0)[started] / 1e9).tolist(),
            "generated_texts": [(outputs.get(i) or (None, None))[0] or "" for i in col["index"][started].tolist()],
            "itls": [_chunk_gaps_s(stamps.get(i)) for i in col["index"][started].tolist()],
        }
    return PerRequest(
        index=col["index"][started].tolist(),
        input_lens=np.maximum(requests.prompt[started], 0).tolist(),
        output_lens=np.where(completed, np.maximum(col["output_tokens"], 0), 0)[started].tolist(),
        ttfts=(first[started] / 1e9).tolist(),
        errors=errors_text,
        **arrays,
    )


def _note_facts(
    requests: _Requests, done: _Completed, data: RunData, config: BenchConfig, server_info: Mapping[str, Any],
    inputs_per_request: Sequence[int] | None = None,
) -> NoteFacts:
    rows = requests.rows
    max_model_len = server_info.get("max_model_len")
    cut = (rows[:, COL["error"]] == int(ErrorClass.CANCELLED)) & (rows[:, COL["sent_ns"]] > 0)
    slots = config.effective_concurrency
    return NoteFacts(
        no_tpot=int((done.has_first & ~done.has_tpot).sum()),
        unknown_prompt=int((done.prompt < 0).sum()),
        over_context=_over_context(done, max_model_len, inputs_per_request),
        cut_short=int(cut.sum()),
        cut_short_tokens=_exact_sum(np.maximum(rows[cut, COL["output_tokens"]], 0)),
        unreadable_outputs=data.extra.get("outputs_unreadable") or 0,
        slot_waits=(_slot_waits(rows, slots, data.extra.get("slot_pools"))
                    if config.open_loop and slots is not None else None),
        trace_pace=_trace_pace(rows) if config.trace_timed else None,
    )


def _over_context(done: _Completed, max_model_len: Any, inputs_per_request: Sequence[int] | None) -> int:
    """Completed requests whose usage reports more prompt tokens than the context allows: max_model_len
    holds for each input, so a batch of N inputs (embeddings, rerank) may report up to N times it."""
    if not isinstance(max_model_len, int):
        return 0
    if not inputs_per_request:
        return int((done.prompt > max_model_len).sum())
    per_request = np.asarray(inputs_per_request, dtype=np.int64)
    index = done.col["index"]
    known = index < len(per_request)
    inputs = np.where(known, per_request[np.where(known, index, 0)], 1)
    return int((done.prompt > max_model_len * np.maximum(inputs, 1)).sum())


def _trace_pace(rows: np.ndarray) -> TracePace:
    """Each started request's send stamp against its time in the trace (its scheduled time)."""
    sent = rows[:, COL["sent_ns"]]
    started = sent > 0
    lag_ms = (sent[started] - rows[started, COL["scheduled_ns"]]) / 1e6
    if not lag_ms.size:
        return TracePace(0, 0, 0.0, 0.0)
    return TracePace(int(lag_ms.size), int((lag_ms > PACE_SLACK_MS).sum()), float(np.percentile(lag_ms, 99)),
                     float(lag_ms.max()))


def _slot_waits(rows: np.ndarray, cap: int, pools: Sequence[tuple[np.ndarray, int]] | None = None) -> SlotWaits:
    """Open loop under a cap: who arrived with every slot busy (the wait is in their TTFT and E2EL,
    which run from the arrival), and who was still waiting when the run stopped (cancelled)."""
    granted, freed = slot_grants(rows, cap, pools)
    arrival = granted[:, COL["scheduled_ns"]]
    waited = freed > arrival  # every slot was still busy at the arrival
    scheduled, end = rows[:, COL["scheduled_ns"]], rows[:, COL["end_ns"]]
    queued = (scheduled > 0) & (rows[:, COL["sent_ns"]] == 0) & (rows[:, COL["error"]] == int(ErrorClass.CANCELLED))
    return SlotWaits(
        cap=cap,
        granted=len(granted),
        waited_ms=(granted[waited, COL["sent_ns"]] - arrival[waited]) / 1e6,
        still_waiting_ms=(end[queued] - scheduled[queued]) / 1e6,
        pools=len(pools) if pools else 1,
    )


# -- helpers ----------------------------------------------------------------------------------------------


def slot_grants(rows: np.ndarray, slots: int, pools: Sequence[tuple[np.ndarray, int]] | None = None,
                ) -> tuple[np.ndarray, np.ndarray]:
    """Which slot each started request took, as the load generator hands them out: in order of
    ``scheduled_ns``, each the slot that frees first, held from its grant to the request's end
    stamp (a holder still connecting is busy). Returns the started rows in that order and, for
    each, when its slot had freed (0: free from the start).

    ``pools`` (``--workers``, RunData.extra["slot_pools"]): each worker's rows and slots; a request
    takes a slot of its own worker's only, so each pool is granted apart."""
    if pools:
        parts = [slot_grants(rows[index], pool_slots) for index, pool_slots in pools]
        return (np.concatenate([p[0] for p in parts]).reshape(-1, rows.shape[1]),
                np.concatenate([p[1] for p in parts]).astype(np.int64))
    started = rows[rows[:, COL["sent_ns"]] > 0]
    started = started[np.argsort(started[:, COL["scheduled_ns"]], kind="stable")]
    free_at = [0] * slots  # a heap of the moments the slots free
    freed = [heapq.heapreplace(free_at, int(max(end, sent)))
             for sent, end in started[:, [COL["sent_ns"], COL["end_ns"]]].tolist()]
    return started, np.asarray(freed, dtype=np.int64)


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
    lens: Sequence[int | None] | None = workload_info.get("prompt_lens")
    if lens is not None:
        for i in np.flatnonzero(prompt < 0).tolist():
            index = int(rows[i, COL["index"]]) if rows[i].any() else i
            known = lens[index] if 0 <= index < len(lens) else None
            if known is not None:  # None: unknown ahead (a multi-turn turn after the server's reply)
                prompt[i] = int(known)
    return prompt


def _exact_sum(tokens: np.ndarray) -> int:
    """A server's usage may hold any 63-bit number, and an int64 sum would wrap without a word."""
    return sum(tokens.tolist())
