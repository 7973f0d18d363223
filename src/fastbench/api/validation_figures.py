"""``fastbench validate``'s figures from the run's data: the skew, the bounds on each derived series, the
checks and the verdict (the derivation is written out in :mod:`fastbench.api.validation`'s docstring and,
figure by figure, in :data:`fastbench.results.validation_report.DEFINITIONS`)."""


from __future__ import annotations

import resource
from typing import Any

import numpy as np

from fastbench.exceptions import WorkerError
from fastbench.load import hostload
from fastbench.load.driver import mean_in_flight
from fastbench.results.figures import LATE_NS, client_lateness_ns
from fastbench.results.notes import coalescing_notes
from fastbench.results.records import COL, ErrorClass, RunData, TimestampSource
from fastbench.results.validation_report import Check, Quantiles, SeriesCheck, ValidationReport

STREAMS_OPEN_SHARE = 0.99  # verdict: streams kept open >= this share of the asked concurrency


def _peak_rss_kib() -> int:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries ru_maxrss across execve, so a
    child of a bigger process would report its parent's peak."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# --------------------------------------------------------------------------------------------------
# From RunData to the report


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def build_report(data: RunData, settings: dict[str, Any], server_stats: dict[str, Any],
                 host: hostload.HostLoad | None = None) -> ValidationReport:
    """Derive every figure of the report from what the client measured and the server said."""
    clocks = _node_clocks(data.extra.get("workers"))  # --ray: refused here when a node's offset is unknown
    rows = data.rows
    tol = float(settings["tolerance_ms"])
    concurrency = int(settings["concurrency"])
    closed = settings["request_rate"] is None
    err = rows[:, COL["error"]]
    ok = rows[(err == int(ErrorClass.OK)) & (rows[:, COL["sent_ns"]] > 0)]
    completed = len(ok)
    cancelled = int(np.count_nonzero(err == int(ErrorClass.CANCELLED)))
    failed = int(np.count_nonzero((err != int(ErrorClass.OK)) & (err != int(ErrorClass.CANCELLED))))
    # Output chunks of the measured requests (the core's run-wide counters include the warm-up's).
    chunks = int(rows[rows[:, COL["sent_ns"]] > 0, COL["chunks"]].sum())
    ok_chunks = int(ok[:, COL["chunks"]].sum())
    tokens = int(ok[:, COL["output_tokens"]].sum())

    skew = Quantiles.from_histogram(data.histograms["skew"])
    itl = Quantiles.from_histogram(data.histograms["itl_chunk"])
    itl_tok = Quantiles.from_histogram(data.histograms["itl_token"])
    sent = rows[:, COL["sent_ns"]]
    started = rows[sent > 0]
    lag_ns = started[:, COL["sent_ns"]] - started[:, COL["scheduled_ns"]]
    lag = Quantiles.from_ns(lag_ns)
    # The client's part of the dispatch lag: in open loop, waiting for a slot under the cap is the
    # load's queueing (and part of TTFT by definition), not the client's error.
    lateness_ns = client_lateness_ns(rows, concurrency, not closed, data.extra.get("slot_pools"))
    slot = Quantiles.from_ns(lateness_ns) if lateness_ns.size else None

    # TTFT as fastbench reports it: from the send in closed loop, from the arrival in open loop.
    origin = ok[:, COL["sent_ns"]] if closed else ok[:, COL["scheduled_ns"]]
    ttft = Quantiles.from_ns(ok[:, COL["first_token_ns"]] - origin)
    out_tok = ok[:, COL["output_tokens"]]
    multi = out_tok > 1
    tpot_ns = ((ok[multi, COL["end_ns"]] - ok[multi, COL["first_token_ns"]]) / (out_tok[multi] - 1))
    tpot = Quantiles.from_ns(tpot_ns)
    itl_ms = float(settings["itl_ms"])
    nominal_tpot = (itl_ms * (ok[multi, COL["chunks"]] - 1) / (out_tok[multi] - 1))
    nominal_tpot_ms = float(np.median(nominal_tpot)) if nominal_tpot.size else None

    # A chunk gap's error is the difference of two skews, so |error| <= (larger skew) - (skew min). At
    # most 0.5 % of chunks have skew above p99.5, so at most ~1 % of gaps have an error above
    # p99.5 - min: that is the p99-level bound. The worst case uses the max.
    skew_p995 = _percentile_ms(data.histograms["skew"], 99.5)
    spread_worst = _sub(skew.max, skew.min)
    spread_p99 = _sub(skew_p995, skew.min)
    skew_p99, skew_max = skew.p99, skew.max
    # --ray: a node whose clock moved against this host's during the run (its offset estimated again
    # after the window) may have skews below their true values by up to this: every bound derived from
    # skews, and the skew check, are widened by it (0 when no clock moved beyond its uncertainty).
    slack = max((c["below_truth_ms"] for c in clocks or ()), default=0.0)
    if slack:
        skew_p99, skew_max, skew_p995, spread_worst, spread_p99 = (
            _add(v, slack) for v in (skew_p99, skew_max, skew_p995, spread_worst, spread_p99))
    fewest = int(out_tok[multi].min()) if multi.any() else 0
    series = [
        SeriesCheck("ttft", ttft.p50, ttft.p99, float(settings["ttft_ms"]),
                    _sub(ttft.p50, settings["ttft_ms"]), _sub(ttft.p99, settings["ttft_ms"]),
                    # Open loop counts the client's lateness into TTFT; closed loop does not.
                    skew_p995 if closed else _add(_percentile_ms_of(lateness_ns, 99.5), skew_p995),
                    skew_max if closed or slot is None else _add(slot.max, skew_max)),
        SeriesCheck("tpot", tpot.p50, tpot.p99, nominal_tpot_ms,
                    _sub(tpot.p50, nominal_tpot_ms), _sub(tpot.p99, nominal_tpot_ms),
                    _div(spread_p99, fewest - 1), _div(spread_worst, fewest - 1)),
        SeriesCheck("itl_chunk", itl.p50, itl.p99, itl_ms, _sub(itl.p50, itl_ms), _sub(itl.p99, itl_ms),
                    spread_p99, spread_worst),
        SeriesCheck("itl_token", itl_tok.p50, itl_tok.p99, None, None, None, spread_p99, spread_worst),
    ]

    start, end = data.start_ns, data.end_ns
    last_sent = int(sent.max()) if started.size else start
    from_start = mean_in_flight(rows, start, last_sent) if last_sent > start else data.mean_in_flight
    # Closed loop opens its streams one send after another (each a trip through the kernel); the
    # figure that says whether the client keeps them open starts once all of them are.
    ramp_end = start
    if closed and started.size >= min(concurrency, len(rows)) > 0:
        ramp_end = int(np.sort(sent[sent > 0])[min(concurrency, len(rows)) - 1])
    steady = mean_in_flight(rows, ramp_end, last_sent) if last_sent > ramp_end else from_start
    duration_s = (end - start) / 1e9 if end > start else 0.0
    lateness = server_stats.get("lateness", {})
    server_p99 = float(lateness.get("p99_ms", 0.0))
    server_cpu_s = settings.get("server_cpu_s")
    server_cpu_share = server_cpu_s / duration_s if server_cpu_s is not None and duration_s else None
    # A server late by up to ITL/2 can put two chunks of one stream closer than ITL/2 apart; then a
    # client read delayed by less than that merges them (kernel stamps cannot repair that). Past this
    # point the run measures the server, not the client.
    server_saturated = server_p99 > itl_ms / 2 or (server_cpu_share is not None and server_cpu_share > 0.9)

    checks = [
        Check("skew p99 (ms)", skew_p99, "<=", tol, skew_p99 is not None and skew_p99 <= tol),
        Check("TTFT p99-level error bound (ms)", series[0].error_bound_p99_ms, "<=", tol,
              series[0].error_bound_p99_ms is not None and series[0].error_bound_p99_ms <= tol),
        Check("chunk-gap p99-level error bound (ms)", spread_p99, "<=", tol,
              spread_p99 is not None and spread_p99 <= tol),
        Check("failed requests", float(failed), "<=", 0.0, failed == 0),
        Check("completed requests", float(completed), ">=", 1.0, completed > 0),
        Check("chunks without a server stamp", float(ok_chunks - skew.count), "<=", 0.0,
              ok_chunks == skew.count),
        # Received before they were sent: the server's clock is not the client's (another host,
        # VM or time namespace), and every skew figure above is meaningless.
        Check("chunks with negative skew", float(data.extra.get("skew_negative", 0)), "<=", 0.0,
              not data.extra.get("skew_negative", 0)),
    ]
    # Only a run that sends after its opening ramp shows whether the client keeps streams open.
    if closed and last_sent > ramp_end:
        want = STREAMS_OPEN_SHARE * min(concurrency, int(settings["num_requests"]))
        checks.append(Check("streams kept open (mean)", steady, ">=", want, steady >= want))

    notes = []
    source = data.timestamp_source
    if source != TimestampSource.KERNEL:
        notes.append(f"timestamp source {source.name}: {data.kernel_stamped_reads} of {data.reads} reads "
                     "had a kernel receive stamp; the rest were stamped after the read returned")
    if server_saturated:
        notes.append(f"the server could not keep its schedule (write lateness p99 {server_p99:.3f} ms > half the "
                     "chunk gap, or its CPU over 90 %): chunks of one stream came closer together than the "
                     "schedule says, so this run measures the server's limit, not the client's")
    elif server_p99 > tol:
        notes.append(f"the server's own write lateness (p99 {server_p99:.3f} ms) shows in 'p*-nom' (it "
                     "writes a burst of chunks due at the same time one after another); it is not client "
                     "error: skew is measured from each actual write")
    if data.extra.get("skew_negative"):
        notes.append(f"{data.extra['skew_negative']} chunks had negative skew (recorded as 0)")
    if data.cap_hit:
        notes.append("the time cap ended the run; requests in flight were cancelled")
    section = data.extra.get("workers")
    if section is not None:  # --workers: figures above are the merged ones; each worker's own here
        notes.append(f"{section['count']} client worker processes, merged: " + "; ".join(
            f"worker {w['index']}" + (f" (node {str(w['node'])[:8]})" if w.get("node") else "")
            + f" {w['completed']} done, started {w.get('started_late_ms', 0):.3f} ms after the "
            f"common instant, skew p99 {(w.get('skew_ms') or {}).get('p99', float('nan')):.3f} ms, "
            f"CPU {w.get('client_cpu_s', 0):.2f} s" for w in section["per_worker"]))
    notes.extend(_clock_notes(clocks or []))
    coalesce_ms = settings.get("coalesce_ms") or 0.0
    if coalesce_ms == "auto":
        notes.extend(coalescing_notes(data.extra.get("coalescing")))
    elif float(coalesce_ms) * 2 > itl_ms:
        notes.append(f"--coalesce-ms {coalesce_ms:g} is over half the chunk gap ({itl_ms:g} ms): chunks of one "
                     "stream can wait in its socket for the same drain and share one read's stamp")
    verdict = "PASS" if all(c.passed for c in checks) else "FAIL"
    cause = _verdict_cause([c.name for c in checks if not c.passed], server_saturated, host, notes)
    cpu = data.client_cpu_ns
    return ValidationReport(
        settings=settings,
        verdict=verdict,
        verdict_cause=cause,
        host=host.to_dict() if host is not None else None,
        checks=checks,
        timestamp_source=source.name,
        completed=completed,
        failed=failed,
        cancelled=cancelled,
        chunks=chunks,
        tokens=tokens,
        tokens_per_chunk_mean=tokens / ok_chunks if ok_chunks else None,
        reads=data.reads,
        kernel_stamped_reads=data.kernel_stamped_reads,
        multi_event_reads=data.multi_event_reads,
        wakeups=int(data.extra.get("wakeups", 0)),
        ends_watched=int(data.extra.get("ends_watched", 0)),
        coalescing=data.extra.get("coalescing"),
        arrival_lead_us=(None if data.extra.get("arrival_lead_ns") is None
                         else data.extra["arrival_lead_ns"] / 1e3),
        lead_wait_ms=data.extra.get("lead_wait_ns", 0) / 1e6,
        multi_event_read_share=data.multi_event_reads / data.reads if data.reads else None,
        skew=skew,
        skew_negative=int(data.extra.get("skew_negative", 0)),
        skew_missing=ok_chunks - skew.count,
        series=series,
        dispatch_lag=lag,
        slot_to_send=slot,
        late_share=float(np.mean(lateness_ns > LATE_NS)) if lateness_ns.size else None,
        request_read_delay=_request_read_delay(rows, server_stats.pop("receipts", None)),
        streams_asked=concurrency,
        streams_open_mean=float(steady),
        streams_open_mean_from_start=float(from_start),
        streams_open_mean_window=float(data.mean_in_flight),
        opening_ramp_ms=(ramp_end - start) / 1e6 if closed else None,
        client_cpu_us_per_chunk=cpu / chunks / 1e3 if chunks else None,
        client_cpu_ms_per_request=cpu / completed / 1e6 if completed else None,
        client_cpu_share_of_core=cpu / (end - start) if end > start else None,
        client_maxrss_kb=_peak_rss_kib(),
        duration_s=duration_s,
        chunks_per_s=chunks / duration_s if duration_s else 0.0,
        window={"start_ns": start, "all_open_ns": ramp_end, "last_sent_ns": last_sent, "end_ns": end},
        server=server_stats,
        server_cpu_share_of_core=server_cpu_share,
        server_saturated=server_saturated,
        notes=notes,
        clocks=clocks,
    )


def _node_clocks(section: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """--ray: each node's clock as its stamps were set beside the server's (ms), from the result's
    workers section; None without --ray. A node whose offset is unknown is refused (WorkerError): its
    skews would compare two clocks."""
    ray = (section or {}).get("ray")
    if not ray:
        return None
    clocks = []
    for node in ray["nodes"]:
        estimate = node.get("estimate")
        if estimate is None:
            raise WorkerError(f"validate --ray: the clock offset of node {str(node['node'])[:12]} on {node['host']} "
                              "is unknown: its chunks' skews cannot be set beside the server's send stamps")
        clocks.append({
            "node": node["node"], "host": node["host"], "workers": list(node.get("workers", ())),
            "same_clock": bool(node["same_clock"]),
            "offset_ms": node["offset_ns"] / 1e6,  # applied to its rows
            "uncertainty_ms": node["uncertainty_ns"] / 1e6,  # of the offset applied (0: same clock)
            "skew_offset_ms": node["skew_offset_ns"] / 1e6,  # subtracted from its receive stamps for skew
            "estimate_offset_ms": estimate["offset_ns"] / 1e6,
            "estimate_uncertainty_ms": estimate["uncertainty_ns"] / 1e6,
            "min_round_trip_ms": estimate["min_round_trip_ns"] / 1e6,
            "median_round_trip_ms": estimate["median_round_trip_ns"] / 1e6,
            "method": estimate.get("method") or "ray-call",  # "udp", or "ray-call" (UDP got no valid reply)
            "samples": estimate["samples"],
            "fallback": node.get("clock_fallback"),  # why UDP was not used, None when it was
            **_moved(node),
        })
    return clocks


def _moved(node: dict[str, Any]) -> dict[str, float | None]:
    """A node's offset estimated again after the window: where it went, and how far below their true
    values its skews may then be (its receive stamps were set back by the least offset the first
    estimate allowed; a clock that drifted since can have been set back too far)."""
    after = node.get("estimate_after")
    if after is None:
        return {"after_offset_ms": None, "after_uncertainty_ms": None, "moved_ms": None, "below_truth_ms": 0.0}
    below = 0.0
    if not node["same_clock"]:  # the true offset lay within both estimates' ranges, or between them
        least = min(node["offset_ns"] - node["uncertainty_ns"], after["offset_ns"] - after["uncertainty_ns"])
        below = max(0, node["skew_offset_ns"] - least) / 1e6
    return {"after_offset_ms": after["offset_ns"] / 1e6, "after_uncertainty_ms": after["uncertainty_ns"] / 1e6,
            "moved_ms": (after["offset_ns"] - node["estimate"]["offset_ns"]) / 1e6, "below_truth_ms": below}


def _estimated_how(c: dict[str, Any]) -> str:
    """How a node's offset was estimated: the exchanges, their shortest round trip, and why UDP was
    not used when it was not."""
    trips = f"shortest of {c['samples']} round trips {c['min_round_trip_ms']:.3f} ms"
    if c["method"] == "udp":
        return f"UDP pings, {trips}"
    return f"Ray actor calls, {trips}" + (f"; not by UDP: {c['fallback']}" if c["fallback"] else "")


def _clock_notes(clocks: list[dict[str, Any]]) -> list[str]:
    """--ray: what each node's clock adds to the figures above."""
    if not clocks:
        return []
    notes = []
    for c in clocks:
        where = f"node {str(c['node'])[:8]} on {c['host']} (workers {', '.join(map(str, c['workers']))})"
        how = _estimated_how(c)
        if c["same_clock"]:
            notes.append(f"clock of {where}: this host's (same kernel; its estimate {c['estimate_offset_ms']:+.3f} "
                         f"+- {c['estimate_uncertainty_ms']:.3f} ms holds 0, {how}): its skews are exact")
        else:
            notes.append(f"clock of {where}: offset {c['offset_ms']:+.3f} +- {c['uncertainty_ms']:.3f} ms to this "
                         f"host's ({how}); its skews are the "
                         f"true ones plus 0 to {2 * c['uncertainty_ms']:.3f} ms (its receive stamps less "
                         f"{c['skew_offset_ms']:+.3f} ms, the least the offset can be), and its requests' "
                         f"'sent -> read by the server' is known to +- {c['uncertainty_ms']:.3f} ms"
                         + ("" if c["after_offset_ms"] is None else
                            f"; estimated again after the window: {c['after_offset_ms']:+.3f} +- "
                            f"{c['after_uncertainty_ms']:.3f} ms (moved {c['moved_ms']:+.3f} ms)")
                         + ("" if not c["below_truth_ms"] else
                            f": its skews may be up to {c['below_truth_ms']:.3f} ms below their true values, and "
                            "every bound above is widened by that too"))
    widest = max(c["uncertainty_ms"] for c in clocks)
    if widest > 0:
        notes.append(f"skew and every bound derived from it are widened by the nodes' clock uncertainty (up to "
                     f"+- {widest:.3f} ms: by that on average, by at most {2 * widest:.3f} ms): the checks hold "
                     "for the true values")
    return notes


# The checks a busy host or a late server can fail; the others (requests failed, stamps missing or
# negative) fail on what the run returned, whatever the timing.
TIMING_CHECKS = frozenset({"skew p99 (ms)", "TTFT p99-level error bound (ms)",
                           "chunk-gap p99-level error bound (ms)", "streams kept open (mean)"})


def _verdict_cause(failed: list[str], server_saturated: bool, host: hostload.HostLoad | None,
                   notes: list[str]) -> str | None:
    """Whose a FAIL is: "run" when a check of what the run returned failed; for the timing checks, the
    server's (it missed its schedule), the busy host's (the client waited for a CPU, other processes or
    the hypervisor took it), else the client's. None for a PASS. A note names the busy host's figures."""
    busy = hostload.starved_because(host)
    timing_only = bool(failed) and TIMING_CHECKS.issuperset(failed)
    if busy is not None:
        if timing_only and not server_saturated:
            notes.append(f"this FAIL is the busy host's, not the client's: {busy}. validate judges the client "
                         "on a machine that runs nothing else (see docs/validate.md)")
        else:
            notes.append(f"the host was busy during the window: {busy}")
    if not failed:
        return None
    if not timing_only:
        return "run"
    if server_saturated:
        return "server"
    return "busy host" if busy is not None else "client"


def _request_read_delay(rows: np.ndarray, receipts: dict[str, Any] | None) -> Quantiles | None:
    """Per request the server kept a read time for: that time minus the client's send stamp (same
    clock): the upload and the server's delay in reading the request, inside TTFT as measured and
    outside every chunk's skew. None when the server keeps no read times."""
    if not receipts or not receipts.get("rows"):
        return None
    tagged = np.asarray(receipts["rows"], dtype=np.int64)
    read_ns = np.asarray(receipts["read_ns"], dtype=np.int64)
    known = (tagged >= 0) & (tagged < len(rows))
    tagged, read_ns = tagged[known], read_ns[known]
    sent = rows[tagged, COL["sent_ns"]]
    return Quantiles.from_ns((read_ns - sent)[sent > 0])


def _percentile_ms(hist: Any, p: float) -> float | None:
    return float(hist.get_value_at_percentile(p)) / 1e6 if hist.get_total_count() else None


def _percentile_ms_of(values_ns: np.ndarray, p: float) -> float | None:
    """The smallest sample with at most (100 - p) % of samples above it (so, under 200 samples
    and p = 99.5, the max): a bound, not an interpolation."""
    return float(np.percentile(values_ns, p, method="higher")) / 1e6 if values_ns.size else None


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _div(a: float | None, d: int) -> float | None:
    return None if a is None or d <= 0 else a / d


# --------------------------------------------------------------------------------------------------
# CLI
