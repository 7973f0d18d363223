"""``fastbench validate``: prove that fastbench's figures are the server's, not the client's own.

It starts the built-in synthetic server in its own process with a known schedule (TTFT, time between
chunks, tokens per chunk), drives it with the real client (:class:`~fastbench.load.driver.LoadGenerator`),
and compares what the client measured with what the server did. The server writes its send time
(``fb_sent_ns``, CLOCK_MONOTONIC, the client's clock too) into every chunk, so each chunk's *skew*
(client receive stamp minus server send stamp) is the client's own timing error for that chunk.

How each figure is derived (also in :data:`DEFINITIONS`, written into the JSON report):

* Skew is exact per chunk (an HDR histogram filled by the core, 3 significant digits).
* The core keeps chunk-level figures only as histograms, so truth-versus-measured errors of the
  derived series are *bounded* from the skew distribution, not matched chunk by chunk. A chunk gap
  is a difference of two receive stamps; the server's gap is the difference of the two send stamps;
  so the gap's error is the difference of two skews and lies within ``skew max - skew min``. A
  quantile of a series whose every element is off by at most ``d`` is off by at most ``d``.
  TTFT runs from the send in closed loop, so its error is one skew; in open loop it runs from the
  arrival, and adds the client's lateness past the later of the arrival and a free slot (waiting
  for a slot under the cap is the load's queueing, not client error). Both leave out the request's
  way to the server, which is not the client's: the upload (loopback: ~0.03 ms) and the server's
  delay in reading it (the Python server: p50 0.31 ms, p99 0.78 ms at 16 streams, and 2-3 ms at 128
  streams with 5 ms gaps, on the VM of bench/RESULTS.md, 2026-11-30), which validate reports as
  "request sent -> read by the server"; "measured - nominal" holds it. TPOT spreads one gap error
  over ``tokens - 1``.
* "measured - nominal" is shown beside each series: it holds the server's own lateness too (its
  ``/fb/stats`` are reported apart: server lateness is not client error).

Python API: :func:`validate` (sync) and :func:`avalidate` (inside a running loop) return a
:class:`ValidationReport`; ``report.render()`` is the console table, ``report.to_dict()`` the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import math
import os
import resource
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import numpy as np
import orjson

from fastbench.checks import MAX_PROMPTS
from fastbench.cli.argtypes import HelpFormatter
from fastbench.exceptions import ConfigError, FastbenchError, ServerError
from fastbench.load.driver import LoadGenerator, mean_in_flight
from fastbench.load.plan import LoadPlan, Target
from fastbench.results import writers
from fastbench.results.figures import slot_grants
from fastbench.results.records import COL, ErrorClass, RunData, TimestampSource
from fastbench.synthetic.cli import (
    HOUR_MS,  # the longest delay the synthetic server takes
    tokens_per_chunk_range,
)

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ("Check", "Quantiles", "SeriesCheck", "ValidationReport", "avalidate", "main", "validate")

DEFAULT_OUTPUT_LEN = 64
DEFAULT_ROUNDS = 3  # default number of requests: this many per stream
MAX_REQUESTS = MAX_PROMPTS  # as fastbench's --num-prompts
MAX_OUTPUT_LEN = 1_000_000  # tokens per request; the server's context is made to fit it
TAGGED_REQUESTS = 100_000  # requests whose body names its row, for the server's read times (memory)
STREAMS_OPEN_SHARE = 0.99  # verdict: streams kept open >= this share of the asked concurrency
ENDPOINT = "/v1/completions"
MODEL = "fastbench-synthetic"

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
    multi_event_read_share: float | None  # of reads that delivered bytes
    skew: Quantiles
    skew_negative: int  # chunks received "before" they were sent (recorded as 0): clocks disagree
    skew_missing: int  # output chunks without a server send stamp
    series: list[SeriesCheck]
    dispatch_lag: Quantiles
    slot_to_send: Quantiles | None
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
    definitions: dict[str, str] = dataclasses.field(default_factory=lambda: dict(DEFINITIONS))

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def render(self) -> str:
        return render(self)


# --------------------------------------------------------------------------------------------------
# Running it



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

def request_body(output_len: int, model: str = MODEL, row: int | None = None) -> bytes:
    """A streamed /v1/completions body asking for per-chunk usage and exactly output_len tokens;
    with ``row``, tagged ``fb_row`` so that the synthetic server keeps when it read it."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": "hello world",
        "max_tokens": output_len,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if row is not None:
        body["fb_row"] = row
    return orjson.dumps(body)


def _request_bodies(output_len: int, n: int) -> list[bytes]:
    """Each of the first TAGGED_REQUESTS bodies names its row; the rest share one untagged body."""
    shared = request_body(output_len)
    return [request_body(output_len, row=i) if i < TAGGED_REQUESTS else shared for i in range(n)]


def _http_json(base_url: str, path: str, method: str = "GET") -> dict[str, Any]:
    """Ask one of the synthetic server's own endpoints (/fb/reset, /fb/stats); the ServerError says
    so plainly when ``base_url`` is some other server."""
    req = urllib.request.Request(base_url.rstrip("/") + path, data=b"{}" if method == "POST" else None,
                                 method=method, headers={"Content-Type": "application/json"})
    foreign = f"{base_url} is not fastbench's synthetic server: {method} {path} answered"
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
    except urllib.error.HTTPError as exc:
        raise ServerError(f"{foreign} HTTP {exc.code} {exc.reason}") from None
    except OSError as exc:  # URLError, a refused connection, a timeout
        raise ServerError(f"cannot reach {base_url}: {getattr(exc, 'reason', None) or exc}") from None
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise ServerError(f"{foreign} {body[:60]!r}, not a JSON object")
    return doc


@contextmanager
def _pinned(server_pid: int | None, pin: bool) -> Iterator[str]:
    """Pin the server to the last CPU and this process to the first; yields what was done."""
    if not pin or server_pid is None or not hasattr(os, "sched_setaffinity"):
        yield "not pinned"
        return
    mine = os.sched_getaffinity(0)
    cpus = sorted(mine)
    if len(cpus) < 2:
        yield "not pinned (one CPU)"
        return
    os.sched_setaffinity(server_pid, {cpus[-1]})
    os.sched_setaffinity(0, {cpus[0]})
    try:
        yield f"client on CPU {cpus[0]}, server on CPU {cpus[-1]}"
    finally:
        os.sched_setaffinity(0, mine)


async def avalidate(
    concurrency: int,
    request_rate: float | None = None,
    tokens_per_chunk: str = "1",
    itl_ms: float = 20.0,
    ttft_ms: float = 50.0,
    num_requests: int | None = None,
    output_len: int = DEFAULT_OUTPUT_LEN,
    tolerance_ms: float = 0.5,
    *,
    base_url: str | None = None,
    pin: bool = False,
    warmup: bool = True,
    max_seconds: float | None = None,
    coalesce_ms: float = 0.0,
) -> ValidationReport:
    """Run a validation inside a running event loop (uvloop recommended: it is what the client uses)
    and return its report; :func:`validate` runs it to the end on uvloop.

    :param concurrency: streams to keep open (closed loop), or the cap on them with ``request_rate``.
    :param request_rate: open-loop arrivals per second (Poisson); None for closed loop.
    :param tokens_per_chunk: "N" or "A-B": tokens per decode step after the first chunk.
    :param num_requests: requests to measure; default ``3 * concurrency``.
    :param output_len: output tokens per request (``max_tokens`` with ``ignore_eos``).
    :param tolerance_ms: the verdict's limit on p99 skew and on the p99-level error bounds.
    :param base_url: use an already running synthetic server started with the same schedule,
        instead of starting one.
    :param pin: pin the server and the client to different CPUs (Linux).
    :param coalesce_ms: drain the client's sockets at least every this many ms, not on every arrival,
        so that one wake-up reads many sockets (kernel stamps keep arrival times; a stream about
        to end is watched on every arrival; chunks of one stream closer than this share a read).
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if not 2 <= output_len <= MAX_OUTPUT_LEN:
        raise ValueError(f"output_len must be between 2 (chunk gaps are judged) and {MAX_OUTPUT_LEN:,}")
    tokens_per_chunk = str(tokens_per_chunk)  # 2 as well as "2"
    if request_rate is not None and not request_rate > 0:
        raise ValueError("request_rate must be > 0")
    n = num_requests if num_requests is not None else DEFAULT_ROUNDS * concurrency
    if not 1 <= n <= MAX_REQUESTS:
        raise ValueError(f"num_requests must be between 1 and {MAX_REQUESTS:,}")
    try:
        tokens_per_chunk_range(tokens_per_chunk)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"tokens_per_chunk: {exc}") from None
    # NaN passes no comparison, so each check is written as what must hold.
    if not (0 <= itl_ms <= HOUR_MS and 0 <= ttft_ms <= HOUR_MS):
        raise ValueError(f"itl_ms and ttft_ms must be between 0 and {HOUR_MS:.0f} (an hour), "
                         f"got {itl_ms} and {ttft_ms}")
    if not 0 < tolerance_ms < math.inf:
        raise ValueError(f"tolerance_ms must be > 0, got {tolerance_ms}")
    if not 0 <= coalesce_ms <= 1000:
        raise ValueError(f"coalesce_ms must be between 0 and 1000, got {coalesce_ms}")
    if max_seconds is not None and not max_seconds > 0:
        raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
    if base_url is not None:
        # also drops a trailing /v1, as the client does, for the server's own /fb/ endpoints
        base_url = Target.parse(base_url, ENDPOINT).base_url
    settings: dict[str, Any] = {
        "concurrency": concurrency, "request_rate": request_rate, "tokens_per_chunk": tokens_per_chunk,
        "itl_ms": itl_ms, "ttft_ms": ttft_ms, "num_requests": n, "output_len": output_len,
        "tolerance_ms": tolerance_ms, "warmup": warmup, "max_seconds": max_seconds,
        "coalesce_ms": coalesce_ms,
    }
    server = None
    if base_url is None:
        from fastbench.synthetic import SyntheticServer

        server = SyntheticServer(ttft_ms=ttft_ms, itl_ms=itl_ms, tokens_per_chunk=tokens_per_chunk,
                                 max_model_len=max(4096, output_len + 64))  # room for any --output-len
        await asyncio.to_thread(server.start)
        base_url = server.base_url
        settings["server"] = "started: " + " ".join(server.argv)
    else:
        settings["server"] = f"external: {base_url}"
    try:
        with _pinned(server.pid if server is not None else None, pin) as pinning:
            settings["pinning"] = pinning
            window_cpu: list[float | None] = []  # the server's CPU seconds when the window opened
            plan = LoadPlan(
                bodies=_request_bodies(output_len, n),
                warmup_bodies=[request_body(1)] * (concurrency if warmup else 0),
                concurrency=concurrency,
                request_rate=request_rate,
                max_seconds=max_seconds if max_seconds is not None else _safety_cap_s(settings),
                coalesce_s=coalesce_ms / 1e3,
                expected_output_tokens=[output_len] * n,
                # the same span as the window's figures: not the connections' set-up and warm-up
                on_window_start=(lambda: window_cpu.append(_process_cpu_s(server.pid)))
                if server is not None else None,
            )
            await asyncio.to_thread(_http_json, base_url, "/fb/reset", "POST")
            data = await LoadGenerator(Target.parse(base_url, ENDPOINT), plan).run()
            if server is not None and window_cpu and window_cpu[0] is not None:
                cpu = _process_cpu_s(server.pid)
                if cpu is not None:
                    settings["server_cpu_s"] = cpu - window_cpu[0]
            server_stats = await asyncio.to_thread(_http_json, base_url, "/fb/stats")
            try:
                server_stats["receipts"] = await asyncio.to_thread(_http_json, base_url, "/fb/receipts")
            except ServerError:  # a server that keeps no read times: the figure is left out
                pass
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)
    return build_report(data, settings, server_stats)



def _on_uvloop(coro_fn: Callable[P, Coroutine[Any, Any, R]], name: str) -> Callable[P, R]:
    """The same function, run to the end on a new uvloop; one signature for both forms."""

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        import uvloop

        return uvloop.run(coro_fn(*args, **kwargs))

    functools.update_wrapper(run, coro_fn)
    run.__name__ = run.__qualname__ = name
    return run


validate = _on_uvloop(avalidate, "validate")

def _safety_cap_s(settings: dict[str, Any]) -> float:
    """A time cap far beyond the run's expected length, so that a stuck server cannot hang validate."""
    per_request_s = (float(settings["ttft_ms"]) + int(settings["output_len"]) * float(settings["itl_ms"])) / 1e3
    n, c = int(settings["num_requests"]), int(settings["concurrency"])
    rate = settings["request_rate"]
    expected = (n / float(rate) if rate else -(-n // c) * per_request_s) + per_request_s
    return 60.0 + 5.0 * expected


def _process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process, from /proc (Linux); None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------------------------------
# From RunData to the report


def _send_lateness_ns(rows: np.ndarray, concurrency: int, closed: bool) -> np.ndarray:
    """Per request, an estimate of how late the client sent it: send stamp minus the moment it could
    have gone, which is when its slot freed (closed loop) or the later of its arrival and that (open
    loop); slots as metrics.slot_grants gives them. Closed loop leaves out the opening ramp (its
    slots were free from the start)."""
    granted, freed = slot_grants(rows, concurrency)
    sent: np.ndarray = granted[:, COL["sent_ns"]]
    if closed:
        return np.asarray((sent - freed)[freed > 0])
    return np.asarray(sent - np.maximum(granted[:, COL["scheduled_ns"]], freed))


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def build_report(data: RunData, settings: dict[str, Any], server_stats: dict[str, Any]) -> ValidationReport:
    """Derive every figure of the report from what the client measured and the server said."""
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
    lateness_ns = _send_lateness_ns(rows, concurrency, closed)
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
    fewest = int(out_tok[multi].min()) if multi.any() else 0
    series = [
        SeriesCheck("ttft", ttft.p50, ttft.p99, float(settings["ttft_ms"]),
                    _sub(ttft.p50, settings["ttft_ms"]), _sub(ttft.p99, settings["ttft_ms"]),
                    # Open loop counts the client's lateness into TTFT; closed loop does not.
                    skew_p995 if closed else _add(_percentile_ms_of(lateness_ns, 99.5), skew_p995),
                    skew.max if closed or slot is None else _add(slot.max, skew.max)),
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
        Check("skew p99 (ms)", skew.p99, "<=", tol, skew.p99 is not None and skew.p99 <= tol),
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
    coalesce_ms = float(settings.get("coalesce_ms") or 0.0)
    if coalesce_ms * 2 > itl_ms:
        notes.append(f"--coalesce-ms {coalesce_ms:g} is over half the chunk gap ({itl_ms:g} ms): chunks of one "
                     "stream can wait in its socket for the same drain and share one read's stamp")
    cpu = data.client_cpu_ns
    return ValidationReport(
        settings=settings,
        verdict="PASS" if all(c.passed for c in checks) else "FAIL",
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
        multi_event_read_share=data.multi_event_reads / data.reads if data.reads else None,
        skew=skew,
        skew_negative=int(data.extra.get("skew_negative", 0)),
        skew_missing=ok_chunks - skew.count,
        series=series,
        dispatch_lag=lag,
        slot_to_send=slot,
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
    )


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
# Console table


def _f(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _cell(value: float | None, width: int = 9) -> str:
    """A table cell: right-aligned, and never run into its neighbour (TTFT past 10 s is 9 wide)."""
    return (" " + _f(value)).rjust(width)


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
        f"  {s['server']}; {s['pinning']}",
        (f"  {r.completed} completed, {r.failed} failed, {r.cancelled} cancelled; {r.chunks} chunks in "
         f"{r.duration_s:.2f} s ({r.chunks_per_s:,.0f} chunks/s); mean tokens/chunk "
         f"{_f(r.tokens_per_chunk_mean, 2)}"),
        "",
        f"  {'client skew (recv - server send), ms':<40}{'p50':>9}{'p99':>9}{'p99.9':>9}{'max':>9}",
        f"  {'':<40}{_cell(k.p50)}{_cell(k.p99)}{_cell(k.p999)}{_cell(k.max)}",
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
                   f"p99 {_f(r.slot_to_send.p99)}  max {_f(r.slot_to_send.max)}")
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
                if r.settings.get("coalesce_ms") else "")
        out.append(f"  event-loop wake-ups: {r.wakeups} ({r.reads / r.wakeups:.2f} reads per wake-up){ends}")
    out.append("")
    for c in r.checks:
        out.append(f"  [{'ok' if c.passed else 'FAIL'}] {c.name}: {_f(c.value)} {c.op} {c.limit:g}")
    for note in r.notes:
        out.append(f"  note: {note}")
    out.append(f"verdict: {r.verdict}")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------
# CLI


def _tokens_per_chunk(text: str) -> str:
    tokens_per_chunk_range(text)  # the server's own rule; it takes the text
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fastbench validate",
        description="Measure fastbench's own timing error and overhead against the built-in synthetic "
                    "server, which stamps its send time into every chunk; prints a table and a verdict.",
        formatter_class=HelpFormatter,
        epilog="Exit status: 0 PASS, 1 FAIL, 2 bad input, the run could not be made or --json could not be "
               "written.",
    )
    p.add_argument("--concurrency", type=int, default=16, help="streams kept open (closed loop)")
    p.add_argument("--request-rate", type=float, default=None,
                   help="open-loop arrivals per second (Poisson), --concurrency caps streams")
    p.add_argument("--tokens-per-chunk", type=_tokens_per_chunk, default="1", metavar="N|A-B",
                   help="tokens per decode step after the first chunk (1-4 mimics speculative decoding)")
    p.add_argument("--itl-ms", type=float, default=20.0, help="server: time between chunks")
    p.add_argument("--ttft-ms", type=float, default=50.0, help="server: time to first token")
    p.add_argument("--coalesce-ms", type=float, default=0.0,
                   help="client: drain the sockets at least every this many ms, not on every arrival (fewer "
                   "wake-ups per chunk; kernel stamps keep arrival times; streams about to end are still "
                   "watched on every arrival; keep it under half the chunk gap, or chunks of one stream "
                   "share a read)")
    p.add_argument("--num-requests", type=int, default=None, help="default: 3 x --concurrency")
    p.add_argument("--output-len", type=int, default=DEFAULT_OUTPUT_LEN, help="output tokens per request")
    p.add_argument("--tolerance-ms", type=float, default=0.5,
                   help="limit on p99 skew and on the p99-level error bounds")
    p.add_argument("--max-seconds", type=float, default=None, help="cap on the measured window")
    p.add_argument("--base-url", default=None,
                   help="use a synthetic server already running with the same --ttft-ms/--itl-ms/"
                        "--tokens-per-chunk instead of starting one")
    p.add_argument("--pin", action="store_true", help="pin server and client to different CPUs")
    p.add_argument("--no-warmup", action="store_true",
                   help="skip the warm-up (one 1-token request per stream, opening the connections)")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON ('-' for stdout)")
    p.add_argument("--quiet", action="store_true", help="no table: only the verdict line (on stderr with --json -)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if ns.concurrency < 1 or (ns.num_requests is not None and not 1 <= ns.num_requests <= MAX_REQUESTS):
        parser.error(f"--concurrency must be at least 1, --num-requests between 1 and {MAX_REQUESTS:,}")
    if not 2 <= ns.output_len <= MAX_OUTPUT_LEN:
        parser.error(f"--output-len must be between 2 (chunk gaps are judged) and {MAX_OUTPUT_LEN:,}")
    # written as what must hold, so that nan and inf fail them too
    if not (0 <= ns.itl_ms <= HOUR_MS and 0 <= ns.ttft_ms <= HOUR_MS and 0 < ns.tolerance_ms < math.inf):
        parser.error(f"--itl-ms and --ttft-ms must be between 0 and {HOUR_MS:.0f} (an hour), "
                     "and --tolerance-ms a finite number > 0")
    if ns.request_rate is not None and not ns.request_rate > 0:
        parser.error("--request-rate must be > 0")
    if ns.max_seconds is not None and not ns.max_seconds > 0:
        parser.error(f"--max-seconds must be > 0, got {ns.max_seconds}")
    if not 0 <= ns.coalesce_ms <= 1000:
        parser.error(f"--coalesce-ms must be between 0 and 1000, got {ns.coalesce_ms}")
    try:
        if ns.base_url is not None:
            Target.parse(ns.base_url, ENDPOINT)
        if ns.json and ns.json != "-":  # before the run, so that the run is not thrown away
            writers.check_output_path("--json", ns.json)
    except ConfigError as exc:
        parser.error(str(exc))
    try:
        report = validate(
            ns.concurrency, ns.request_rate, ns.tokens_per_chunk, ns.itl_ms, ns.ttft_ms, ns.num_requests,
            ns.output_len, ns.tolerance_ms, base_url=ns.base_url, pin=ns.pin, warmup=not ns.no_warmup,
            coalesce_ms=ns.coalesce_ms,
            max_seconds=ns.max_seconds,
        )
    except (FastbenchError, OSError, RuntimeError, ValueError) as exc:
        print(f"fastbench validate: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fastbench validate: interrupted", file=sys.stderr)
        return 130
    if not ns.quiet:
        print(report.render())
    else:  # stdout may be the JSON (--json -)
        print(f"verdict: {report.verdict}", file=sys.stderr if ns.json == "-" else sys.stdout)
    if ns.json:
        text = orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
        if ns.json == "-":
            sys.stdout.write(text.decode() + "\n")
        else:
            try:
                writers.write_bytes_atomic(ns.json, text + b"\n")
            except OSError as exc:  # disk full, the directory gone: the table at least is shown
                if ns.quiet:
                    print(report.render())
                print(f"fastbench validate: error: could not write --json {ns.json}: {exc.strerror or exc}",
                      file=sys.stderr)
                return 2
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
