"""What ``fastbench validate`` reports: the figures' types, the definition of each (written into the JSON
report), and the console table. How the figures are derived is in :mod:`fastbench.api.validation`."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fastbench.results.notes import console_notes

__all__ = ("DEFINITIONS", "Check", "Quantiles", "SeriesCheck", "ValidationReport", "render", "verdict_line")

DEFINITIONS: dict[str, str] = {
    "skew": "Per output chunk: client receive stamp minus the synthetic server's send stamp (fb_sent_ns, "
            "taken just before its write), exact per chunk, from the core's HDR histogram.",
    "error_bound_worst": "Bound on the client's part of a series' error, from all chunks: chunk gap "
                         "= skew max - skew min; TTFT = skew max (closed loop: TTFT runs from the send), "
                         "or slot_to_send max + skew max (open loop: it runs from the arrival); TPOT = "
                         "(skew max - skew min) / (fewest output tokens - 1).",
    "error_bound_p99": "The same bound with skew p99.5 instead of skew max (and slot_to_send p99.5): at most "
                       "0.5 % of chunks lie above it, so at most ~1 % of gaps (two chunks each) can be off by "
                       "more; for TTFT and TPOT the skew of all chunks stands in for that of first/last chunks.",
    "measured_minus_nominal": "Reported value minus the server's schedule (--ttft-ms, --itl-ms): includes "
                              "the server's own lateness (its writes', reported apart, and its reading of "
                              "the request) and, in open loop, the wait for a free slot under the cap.",
    "dispatch_lag": "Per request: sent_ns - scheduled_ns, as the client records it (closed loop: from the "
                    "kernel's receive stamp of the read that ended the slot's previous request, so the "
                    "client's delay in reading that end counts; open loop: from the arrival time, so "
                    "waiting for a free slot counts).",
    "slot_to_send": "An estimate of the client's lateness per request: send stamp minus the moment the "
                    "request could have gone, which is when a slot freed (closed loop, after the opening "
                    "ramp) or the later of its arrival and that (open loop). Requests take slots in order, "
                    "each the one that freed first, at its request's end stamp. Includes the loop's delay "
                    "in noticing the completion.",
    "arrival_lead_us": "Open loop: the core arms its arrival timer this much before each arrival and waits out "
                       "the rest; it follows ~p99 of the timer's wake-up delays (plus 10 us), within bounds "
                       "that keep the wait under 5 % of a core at the run's rate. Its value at the end.",
    "lead_wait_ms": "Open loop: the time the core spent waiting out the arrival timer's lead, in total.",
    "late_share": "Of the requests with a slot_to_send estimate, the share sent more than 0.1 ms after they "
                  "could go (the result's client.late_share, by the same rule).",
    "streams_open": "Time-weighted mean of requests in flight (send stamp to end stamp) from the moment "
                    "all asked streams were first open (closed loop: the concurrency-th send; open loop: "
                    "the start of the window) to the last send (after it the run drains by design).",
    "opening_ramp": "Closed loop: from the start of the window to the concurrency-th send, while the "
                    "first request of every stream goes out one send after another. "
                    "streams_open_mean_from_start counts it in.",
    "client_cpu": "Process CPU time (user + system) of the client over the measured window, per output "
                  "chunk of the measured requests and per completed request; share_of_a_core = CPU time / "
                  "wall time.",
    "multi_event_reads": "Socket reads that delivered more than one output event; those events share the "
                         "read's stamp. Their error is already inside the skew figures (each event's "
                         "skew is against its own send stamp). Counted over the measured window (the "
                         "warm-up's reads are left out), as are reads and kernel_stamped_reads.",
    "request_read_delay": "Per request: the synthetic server's read time of the request (it keeps one per "
                          "request tagged fb_row) minus the client's send stamp, same clock: the upload and "
                          "the server's delay in reading it. Inside TTFT as measured (so inside TTFT "
                          "measured - nominal), outside every skew; the server's, not the client's. Null "
                          "against a server that keeps no read times.",
    "host": "What else the host did over the window (Linux /proc): others_cpus, the mean CPUs kept busy by "
            "other processes (all CPUs' busy time less the client's and, when validate started it, the "
            "synthetic server's); client_run_queue_wait, how long the client's event-loop thread was "
            "runnable but waiting for a CPU (/proc/self/schedstat); steal_share, the hypervisor's share of "
            "CPU time. A FAIL of the timing checks with others >= 0.5 CPU, a wait >= 10 % of the window or "
            "steal >= 20 % is the busy host's (verdict_cause).",
    "clocks": "--ray: per node of the cluster, its CLOCK_MONOTONIC's offset to this host's (the server's), "
              "estimated from the shortest of many round trips to within half of it (uncertainty_ms): method "
              "'udp', 200 UDP pings to a responder in the node's worker actor, or 'ray-call', 64 Ray actor "
              "calls when no valid UDP reply came (fallback says why); 0 with "
              "uncertainty 0 for a node on this host's kernel whose estimate holds 0. The node's rows are "
              "put on this host's clock by offset_ms; its receive stamps less skew_offset_ms (offset less "
              "uncertainty) give its skews, so each is its true value plus 0 to 2 x uncertainty_ms and every "
              "bound derived from skews holds, widened by that. after_offset_ms: the offset estimated again once "
              "the window was over (moved_ms from the first estimate); a clock that moved below the first "
              "estimate's range can leave skews below their true values by up to below_truth_ms, and the "
              "skew check and every bound are widened by the largest of it.",
    "server_lateness": "The synthetic server's own write lateness (write time - due time) from /fb/stats, "
                       "over the run including warm-up chunks. Not client error.",
}


# --------------------------------------------------------------------------------------------------
# Report types


@dataclasses.dataclass(frozen=True)
class Quantiles:
    """A distribution in ms: count, min, p50, p99, p99.9, max (None when empty)."""

    count: int
    min: float | None
    p50: float | None
    p99: float | None
    p999: float | None
    max: float | None

    @classmethod
    def from_histogram(cls, hist: Any) -> Quantiles:
        n = int(hist.get_total_count())
        if n == 0:
            return cls(0, None, None, None, None, None)

        def at(p: float) -> float:
            return float(hist.get_value_at_percentile(p)) / 1e6

        return cls(n, float(hist.get_min_value()) / 1e6, at(50.0), at(99.0), at(99.9),
                   float(hist.get_max_value()) / 1e6)

    @classmethod
    def from_ns(cls, values: np.ndarray) -> Quantiles:
        if values.size == 0:
            return cls(0, None, None, None, None, None)
        p50, p99, p999 = (float(v) / 1e6 for v in np.percentile(values, [50.0, 99.0, 99.9]))
        return cls(int(values.size), float(values.min()) / 1e6, p50, p99, p999, float(values.max()) / 1e6)


@dataclasses.dataclass(frozen=True)
class SeriesCheck:
    """One reported series against the server's schedule, with bounds on the client's part of the error."""

    name: str
    measured_p50_ms: float | None
    measured_p99_ms: float | None
    nominal_ms: float | None  # the server's schedule (median of per-request nominal for TPOT)
    p50_minus_nominal_ms: float | None
    p99_minus_nominal_ms: float | None
    error_bound_p99_ms: float | None
    error_bound_worst_ms: float | None


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    value: float | None
    op: str  # "<=" or ">="
    limit: float
    passed: bool


@dataclasses.dataclass
class ValidationReport:
    settings: dict[str, Any]
    verdict: str  # "PASS" or "FAIL"
    # a FAIL's cause: "run" (requests failed, stamps missing or negative), else of the timing checks
    # "server" (off its schedule), "busy host" or "client"; None for a PASS
    verdict_cause: str | None
    host: dict[str, Any] | None  # hostload.HostLoad over the window; None where not measured
    checks: list[Check]
    timestamp_source: str
    completed: int
    failed: int
    cancelled: int
    chunks: int
    tokens: int
    tokens_per_chunk_mean: float | None
    reads: int
    kernel_stamped_reads: int
    multi_event_reads: int
    wakeups: int  # event-loop wake-ups in the window (each drains every ready connection)
    ends_watched: int  # coalescing: requests whose last chunk was watched for on every arrival
    coalescing: dict[str, Any] | None  # --coalesce-ms auto: the tick chosen and when (driver.coalescing_summary)
    arrival_lead_us: float | None  # open loop: the arrival timer's lead, as the core learnt it by the end
    lead_wait_ms: float  # open loop: time the core spent waiting out leads (CPU, inside the client's)
    multi_event_read_share: float | None  # of reads that delivered bytes
    skew: Quantiles
    skew_negative: int  # chunks received "before" they were sent (recorded as 0): clocks disagree
    skew_missing: int  # output chunks without a server send stamp
    series: list[SeriesCheck]
    dispatch_lag: Quantiles
    slot_to_send: Quantiles | None
    late_share: float | None  # of started requests, those sent > 0.1 ms after they could go
    request_read_delay: Quantiles | None  # client send stamp -> the server's read of the request
    streams_asked: int
    streams_open_mean: float  # all streams open (end of the opening ramp) to the last send
    streams_open_mean_from_start: float  # start of the window to the last send
    streams_open_mean_window: float  # whole window, drain included
    opening_ramp_ms: float | None  # closed loop: start of the window to the concurrency-th send
    client_cpu_us_per_chunk: float | None
    client_cpu_ms_per_request: float | None
    client_cpu_share_of_core: float | None
    client_maxrss_kb: int
    duration_s: float
    chunks_per_s: float
    window: dict[str, int]
    server: dict[str, Any]  # /fb/stats after the run
    server_cpu_share_of_core: float | None  # server CPU time / window (only when validate started it)
    server_saturated: bool
    notes: list[str]
    # --ray: each node's clock offset to this host's and its uncertainty, as applied (ms); None without
    clocks: list[dict[str, Any]] | None = None
    definitions: dict[str, str] = dataclasses.field(default_factory=lambda: dict(DEFINITIONS))

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def render(self) -> str:
        return render(self)


# --------------------------------------------------------------------------------------------------
# Console table


def _f(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _cell(value: float | None, width: int = 9) -> str:
    """A table cell: right-aligned, and never run into its neighbour (TTFT past 10 s is 9 wide)."""
    return (" " + _f(value)).rjust(width)


def verdict_line(r: ValidationReport) -> str:
    """``verdict: PASS``, or ``verdict: FAIL (cause: busy host)``."""
    return f"verdict: {r.verdict}" + (f" (cause: {r.verdict_cause})" if r.verdict_cause else "")


def _clock_lines(clocks: list[dict[str, Any]] | None) -> list[str]:
    """--ray: one line per node, its offset to this host's clock and the uncertainty its skews carry."""
    if not clocks:
        return []
    lines = ["  node clocks (offset to this host's +- uncertainty, ms; skews and bounds widened by it):"]
    for c in clocks:
        same = " (this host's clock)" if c["same_clock"] else ""
        how = "UDP" if c.get("method") == "udp" else "Ray calls, no UDP reply" if c.get("fallback") else "Ray calls"
        lines.append(f"    node {str(c['node'])[:8]} on {c['host']}: {c['offset_ms']:+.3f} +- "
                     f"{c['uncertainty_ms']:.3f}{same}; by {how}; workers {', '.join(map(str, c['workers']))}")
    return lines


def render(r: ValidationReport) -> str:
    """The console table: settings, skew, each series against the schedule, overhead, checks, verdict."""
    s = r.settings
    if s["request_rate"]:
        mode = f"rate {s['request_rate']:g}/s, cap {s['concurrency']}"
    else:
        mode = f"closed loop, {s['concurrency']} streams"
    lat = r.server.get("lateness", {})
    server_cpu = ("" if r.server_cpu_share_of_core is None
                  else f"; server CPU {100 * r.server_cpu_share_of_core:.0f} % of a core")
    client_share = None if r.client_cpu_share_of_core is None else 100 * r.client_cpu_share_of_core
    k = r.skew
    out = [
        (f"fastbench validate: {mode}; server TTFT {s['ttft_ms']:g} ms, {s['itl_ms']:g} ms between chunks, "
         f"{s['tokens_per_chunk']} tokens/chunk; {s['num_requests']} requests x {s['output_len']} tokens"),
        f"  {s['server']}; {s['pinning']}; {s.get('endpoint', '/v1/completions')}",
        (f"  {r.completed} completed, {r.failed} failed, {r.cancelled} cancelled; {r.chunks} chunks in "
         f"{r.duration_s:.2f} s ({r.chunks_per_s:,.0f} chunks/s); mean tokens/chunk "
         f"{_f(r.tokens_per_chunk_mean, 2)}"),
        "",
        f"  {'client skew (recv - server send), ms':<40}{'p50':>9}{'p99':>9}{'p99.9':>9}{'max':>9}",
        f"  {'':<40}{_cell(k.p50)}{_cell(k.p99)}{_cell(k.p999)}{_cell(k.max)}",
        *_clock_lines(r.clocks),
        "",
        (f"  {'series, ms':<14}{'p50':>9}{'p99':>9}{'nominal':>9}{'p50-nom':>9}{'p99-nom':>9}"
         f"{'bound p99':>11}{'bound max':>11}"),
    ]
    for x in r.series:
        out.append(
            f"  {x.name:<14}{_cell(x.measured_p50_ms)}{_cell(x.measured_p99_ms)}{_cell(x.nominal_ms)}"
            f"{_cell(x.p50_minus_nominal_ms)}{_cell(x.p99_minus_nominal_ms)}"
            f"{_cell(x.error_bound_p99_ms, 11)}{_cell(x.error_bound_worst_ms, 11)}")
    out.append("  (bound: the most the client can be off from the server's truth, derived from the skew; "
               "p*-nom also holds the server's lateness)")
    out.append("")
    out.append(f"  server write lateness (its own, not client error): p50 {_f(lat.get('p50_ms'))}  p99 "
               f"{_f(lat.get('p99_ms'))}  max {_f(lat.get('max_ms'))} ms over {lat.get('count', 0)} chunks"
               f"{server_cpu}")
    if r.request_read_delay is not None:
        d = r.request_read_delay
        out.append(f"  request sent -> read by the server (its own, inside TTFT, not client error): p50 "
                   f"{_f(d.p50)}  p99 {_f(d.p99)}  max {_f(d.max)} ms over {d.count} requests")
    out.append(f"  client CPU: {_f(r.client_cpu_us_per_chunk, 2)} us/chunk, "
               f"{_f(r.client_cpu_ms_per_request, 3)} ms/request, {_f(client_share, 1)} % of a core; "
               f"peak RSS {r.client_maxrss_kb / 1024:.0f} MiB")
    out.append(f"  dispatch lag (sent - scheduled), ms: p50 {_f(r.dispatch_lag.p50)}  "
               f"p99 {_f(r.dispatch_lag.p99)}  max {_f(r.dispatch_lag.max)}")
    if r.slot_to_send is not None:
        ready = "slot free" if r.settings["request_rate"] is None else "arrival or slot free, if later,"
        out.append(f"  {ready} -> sent (estimate), ms: p50 {_f(r.slot_to_send.p50)}  "
                   f"p99 {_f(r.slot_to_send.p99)}  max {_f(r.slot_to_send.max)}"
                   + ("" if r.late_share is None else f"; {100 * r.late_share:.1f} % sent > 0.1 ms late"))
    if r.arrival_lead_us is not None:
        out.append(f"  arrival timer lead (learnt): {r.arrival_lead_us:.0f} us; {r.lead_wait_ms:.1f} ms spent "
                   f"waiting leads out")
    ramp = "" if r.opening_ramp_ms is None else (
        f" (opening ramp {r.opening_ramp_ms:.3f} ms: {r.streams_open_mean_from_start:.2f} counting it)")
    if r.opening_ramp_ms is not None and r.window["all_open_ns"] >= r.window["last_sent_ns"]:
        out.append(f"  streams kept open: not judged (no request went out after all {r.streams_asked} were "
                   f"open); {r.streams_open_mean_window:.2f} over the whole window")
    else:
        out.append(f"  streams kept open: {r.streams_open_mean:.2f} of {r.streams_asked} asked, from all open "
                   f"to the last send{ramp}; {r.streams_open_mean_window:.2f} over the whole window")
    out.append(f"  timestamps: {r.timestamp_source} ({r.kernel_stamped_reads} of {r.reads} reads "
               f"kernel-stamped); multi-event reads: {r.multi_event_reads} "
               f"({_f(100 * (r.multi_event_read_share or 0.0), 2)} % of reads; their error is inside the skew)")
    if r.wakeups:
        ends = (f"; {r.ends_watched} requests' ends watched on every arrival"
                if r.settings.get("coalesce_ms") not in (0, 0.0, None) else "")
        out.append(f"  event-loop wake-ups: {r.wakeups} ({r.reads / r.wakeups:.2f} reads per wake-up){ends}")
    if r.host is not None:
        h = r.host
        others = "-" if h["others_cpus"] is None else f"{h['others_cpus']:.2f} of {h['cpus']} CPUs"
        wait = "-" if h["client_run_queue_wait_ms"] is None else (
            f"{h['client_run_queue_wait_ms']:.1f} ms ({100 * h['client_run_queue_wait_share']:.2f} %)")
        steal = "-" if h["steal_share"] is None else f"{100 * h['steal_share']:.2f} %"
        out.append(f"  host: other processes {others}; client waited for a CPU {wait}; steal {steal}")
    out.append("")
    for c in r.checks:
        out.append(f"  [{'ok' if c.passed else 'FAIL'}] {c.name}: {_f(c.value)} {c.op} {c.limit:g}")
    out += console_notes(r.notes, "  note: ")
    out.append(verdict_line(r))
    return "\n".join(out)
