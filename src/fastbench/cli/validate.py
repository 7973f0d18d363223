"""``fastbench validate``: prove that fastbench's figures are the server's, not the client's own.

It starts the built-in synthetic server in its own process with a known schedule (TTFT, time between
chunks, tokens per chunk), drives it with the real client (:class:`~fastbench.load.driver.LoadGenerator`),
and compares what the client measured with what the server did. The server writes its send time
(``fb_sent_ns``, CLOCK_MONOTONIC, the client's clock too) into every chunk, so each chunk's *skew*
(client receive stamp minus server send stamp) is the client's own timing error for that chunk.

How each figure is derived (also in :data:`~fastbench.cli.validation_report.DEFINITIONS`, written into the
JSON report):

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

With ``--ray`` the client workers are Ray actors on the nodes of a cluster and the server stays on
this host (the driver); on another node CLOCK_MONOTONIC is another clock. Each node's receive stamps
are set beside the server's send stamps by the node's offset to this host's clock (estimated from the
shortest of 64 round trips, fastbench.load.clocks), less its uncertainty: the core subtracts that from
every receive stamp before it records the chunk's skew (fastbench.load.raypool). So no chunk's skew is
below its true value nor above it by more than twice the uncertainty, and every bound above, derived
from skews, holds and is widened by the uncertainty (by it on average, by at most twice it); the
report gives each node's offset and uncertainty. Rows are put on this host's clock by the offset
itself, so "request sent -> read by the server" is known to within the uncertainty. A node on this
host's kernel whose estimate holds 0 shares the clock: exact, nothing widened.

Python API: :func:`validate` (sync) and :func:`avalidate` (inside a running loop) return a
:class:`ValidationReport`; ``report.render()`` is the console table, ``report.to_dict()`` the JSON.

This module is the command: its settings, the run, the derivation above (:func:`build_report`) and
the command line. One module of ~850 lines because the derivation is read against this text and the
run's settings. What the report holds (its types, the definitions, the console table) is in
:mod:`fastbench.cli.validation_report`.
"""

from __future__ import annotations

import argparse
import asyncio
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

from fastbench.checks import MAX_PROMPTS, check_value
from fastbench.cli import hostload
from fastbench.cli.argtypes import HelpFormatter, Parser, coalesce_window
from fastbench.cli.validation_report import Check, Quantiles, SeriesCheck, ValidationReport, verdict_line
from fastbench.exceptions import ConfigError, FastbenchError, ServerError, WorkerError
from fastbench.load.driver import LoadGenerator, mean_in_flight
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.workers import WorkerPool
from fastbench.results import writers
from fastbench.results.figures import LATE_NS, client_lateness_ns
from fastbench.results.notes import coalescing_notes
from fastbench.results.records import COL, ErrorClass, RunData, TimestampSource
from fastbench.synthetic.cli import (
    HOUR_MS,  # the longest delay the synthetic server takes
    tokens_per_chunk_range,
)

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ("Check", "Quantiles", "SeriesCheck", "ValidationReport", "avalidate", "checked_settings", "main",
           "validate")

DEFAULT_OUTPUT_LEN = 64
DEFAULT_ROUNDS = 3  # default number of requests: this many per stream
MAX_REQUESTS = MAX_PROMPTS  # as fastbench's --num-prompts
MAX_OUTPUT_LEN = 1_000_000  # tokens per request; the server's context is made to fit it
TAGGED_REQUESTS = 100_000  # requests whose body names its row, for the server's read times (memory)
STREAMS_OPEN_SHARE = 0.99  # verdict: streams kept open >= this share of the asked concurrency
ENDPOINT = "/v1/completions"
MODEL = "fastbench-synthetic"


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


def checked_settings(
    concurrency: int,
    request_rate: float | None,
    tokens_per_chunk: str,
    itl_ms: float,
    ttft_ms: float,
    num_requests: int | None,
    output_len: int,
    tolerance_ms: float,
    *,
    warmup: bool,
    max_seconds: float | None,
    coalesce_ms: float | str,
    workers: int | None = None,
    ray: str | None = None,
    workers_per_node: int | None = None,
    pin: bool = False,
) -> dict[str, Any]:
    """The run's settings as the report records them, or a ConfigError naming the flag of one that
    cannot work: the one statement of validate's checks, for the Python API and the command line.
    Those a benchmark run takes too (concurrency, request rate, max seconds, coalescing, workers) are
    checked by its rules (:mod:`fastbench.checks`)."""
    for name, value in (("concurrency", concurrency), ("request_rate", request_rate),
                        ("max_seconds", max_seconds), ("coalesce_ms", coalesce_ms), ("workers", workers),
                        ("workers_per_node", workers_per_node)):
        check_value(name, value)
    _check_ray(ray, workers, workers_per_node, pin)
    n = num_requests if num_requests is not None else DEFAULT_ROUNDS * concurrency
    if not 1 <= n <= MAX_REQUESTS:
        raise ConfigError(f"--concurrency must be at least 1, --num-requests between 1 and {MAX_REQUESTS:,} "
                          f"(default {DEFAULT_ROUNDS} x --concurrency), got {n}")
    if not 2 <= output_len <= MAX_OUTPUT_LEN:
        raise ConfigError(f"--output-len must be between 2 (chunk gaps are judged) and {MAX_OUTPUT_LEN:,}, "
                          f"got {output_len}")
    tokens_per_chunk = str(tokens_per_chunk)  # 2 as well as "2"
    try:
        tokens_per_chunk_range(tokens_per_chunk)  # the synthetic server's own rule
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"--tokens-per-chunk: {exc}") from None
    # NaN passes no comparison, so each check is written as what must hold.
    if not (0 <= itl_ms <= HOUR_MS and 0 <= ttft_ms <= HOUR_MS):
        raise ConfigError(f"--itl-ms and --ttft-ms must be between 0 and {HOUR_MS:.0f} (an hour), "
                          f"got {itl_ms} and {ttft_ms}")
    if not 0 < tolerance_ms < math.inf:
        raise ConfigError(f"--tolerance-ms must be a finite number > 0, got {tolerance_ms}")
    return {
        "concurrency": concurrency, "request_rate": request_rate, "tokens_per_chunk": tokens_per_chunk,
        "itl_ms": itl_ms, "ttft_ms": ttft_ms, "num_requests": n, "output_len": output_len,
        "tolerance_ms": tolerance_ms, "warmup": warmup, "max_seconds": max_seconds,
        "coalesce_ms": coalesce_ms, "workers": workers if workers is not None or ray is not None else 1,
        "ray": ray, "workers_per_node": workers_per_node,
    }


def _check_ray(ray: str | None, workers: int | None, workers_per_node: int | None, pin: bool) -> None:
    """--ray's options: the placement given one way, and only with --ray; nothing that pins this host."""
    if ray is None:
        if workers_per_node is not None:
            raise ConfigError("--workers-per-node places workers on the nodes of a Ray cluster: give --ray")
        return
    if not ray.strip():
        raise ConfigError("--ray must be 'auto' or a Ray cluster's address (host:port or ray://host:port)")
    if workers is not None and workers_per_node is not None:
        raise ConfigError("--ray: give --workers N (N workers spread over the nodes) or --workers-per-node K "
                          "(K on each node), not both")
    if pin:
        raise ConfigError("--pin pins the client to a CPU of this host; with --ray the client workers are Ray "
                          "actors on the cluster's nodes: leave --pin out")


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
    coalesce_ms: float | str = "auto",
    workers: int | None = None,
    ray: str | None = None,
    workers_per_node: int | None = None,
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
        to end is watched on every arrival; chunks of one stream closer than this share a read);
        0: on every arrival; "auto" (default): a tick the client chooses from the chunk gaps.
    :param workers: client processes sharing the streams (``--workers``; default 1); the report is of their
        merged figures, and names each worker's skew and start. With ``ray``: that many Ray actors
        spread over the nodes.
    :param ray: "auto" or a Ray cluster's address (``--ray``): the client workers are Ray actors on its
        nodes (by default one on each node), the server stays on this host; see the module's docstring
        for the clocks. Needs ``fastbench[ray]``.
    :param workers_per_node: with ``ray``: this many workers on each node.
    :raises ConfigError: settings that cannot work (see :func:`checked_settings`), before anything starts.
    :raises WorkerError: --ray without Ray, a cluster that cannot be joined, a node whose clock offset is
        unknown.
    """
    settings = checked_settings(concurrency, request_rate, tokens_per_chunk, itl_ms, ttft_ms, num_requests,
                                output_len, tolerance_ms, warmup=warmup, max_seconds=max_seconds,
                                coalesce_ms=coalesce_ms, workers=workers, ray=ray,
                                workers_per_node=workers_per_node, pin=pin)
    tokens_per_chunk, n = settings["tokens_per_chunk"], settings["num_requests"]
    if base_url is not None:
        # also drops a trailing /v1, as the client does, for the server's own /fb/ endpoints
        base_url = Target.parse(base_url, ENDPOINT).base_url
    server = None
    cluster = _RayCluster(ray) if ray is not None else None
    listen, listen_why = "127.0.0.1", ""
    if cluster is not None:  # joined first: where the server listens depends on where the nodes are
        listen, listen_why = await asyncio.to_thread(cluster.join)
    host: hostload.HostLoad | None = None
    try:
        if base_url is None:
            from fastbench.synthetic import SyntheticServer

            server = SyntheticServer(ttft_ms=ttft_ms, itl_ms=itl_ms, tokens_per_chunk=tokens_per_chunk, host=listen,
                                     max_model_len=max(4096, output_len + 64))  # room for any --output-len
            await asyncio.to_thread(server.start)
            base_url = server.base_url
            settings["server"] = "started: " + " ".join(server.argv) + (
                f"; listening on {listen} ({listen_why})" if listen_why else "")
        else:
            settings["server"] = f"external: {base_url}"
        with _pinned(server.pid if server is not None else None, pin) as pinning:
            settings["pinning"] = pinning
            window_cpu: list[float | None] = []  # the server's CPU seconds when the window opened
            window_host: list[hostload.HostSnapshot] = []  # the host when the window opened

            def on_window_start() -> None:
                window_host.append(hostload.snapshot())
                if server is not None:
                    window_cpu.append(hostload.process_cpu_s(server.pid))

            plan = LoadPlan(
                bodies=_request_bodies(output_len, n),
                warmup_bodies=[request_body(1)] * (concurrency if warmup else 0),
                concurrency=concurrency,
                request_rate=request_rate,
                max_seconds=max_seconds if max_seconds is not None else _safety_cap_s(settings),
                coalesce_s="auto" if coalesce_ms == "auto" else float(coalesce_ms) / 1e3,
                expected_output_tokens=[output_len] * n,
                # the same span as the window's figures: not the connections' set-up and warm-up
                on_window_start=on_window_start,
            )
            await asyncio.to_thread(_http_json, base_url, "/fb/reset", "POST")
            target = Target.parse(base_url, ENDPOINT)
            generator: LoadGenerator | WorkerPool
            if cluster is not None:
                from fastbench.load.raypool import RayPool

                generator = RayPool(target, plan, address=cluster.address, workers=workers,
                                    workers_per_node=workers_per_node)
            elif workers is None or workers == 1:
                generator = LoadGenerator(target, plan)
            else:
                generator = WorkerPool(target, plan, workers=workers)
            data = await generator.run()
            host_end = hostload.snapshot()
            if server is not None and window_cpu and window_cpu[0] is not None:
                cpu = hostload.process_cpu_s(server.pid)
                if cpu is not None:
                    settings["server_cpu_s"] = cpu - window_cpu[0]
            if window_host:
                host = hostload.between(window_host[0], host_end, settings.get("server_cpu_s"))
            server_stats = await asyncio.to_thread(_http_json, base_url, "/fb/stats")
            try:
                server_stats["receipts"] = await asyncio.to_thread(_http_json, base_url, "/fb/receipts")
            except ServerError:  # a server that keeps no read times: the figure is left out
                pass
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)
        if cluster is not None:
            await asyncio.to_thread(cluster.leave)
    return build_report(data, settings, server_stats, host)


class _RayCluster:
    """--ray: the cluster validate joins before it starts its server, and leaves at the end."""

    def __init__(self, address: str) -> None:
        from fastbench.load.raypool import import_ray

        self.address = address
        self.ray = import_ray()  # a one-line error naming the extra, before anything starts
        self.joined_here = False

    def join(self) -> tuple[str, str]:
        """Join; returns where the synthetic server listens, and why there: loopback when every node
        is on this host, else the address Ray's nodes reach this host at."""
        from fastbench.load.raypool import join_cluster

        self.joined_here = join_cluster(self.ray, self.address)
        here = str(self.ray.util.get_node_ip_address())
        elsewhere = sorted({str(n.get("NodeManagerAddress")) for n in self.ray.nodes() if n.get("Alive")}
                           - {here, "127.0.0.1", "::1", "localhost"})
        if not elsewhere:
            return "127.0.0.1", "every node of the Ray cluster is on this host"
        return here, (f"the address the Ray cluster reaches this host at; nodes elsewhere: "
                      f"{', '.join(elsewhere[:4])}{' ...' if len(elsewhere) > 4 else ''}")

    def leave(self) -> None:
        if self.joined_here:
            self.ray.shutdown()


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
                         "on a machine that runs nothing else (see README)")
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


def _tokens_per_chunk(text: str) -> str:
    tokens_per_chunk_range(text)  # the server's own rule; it takes the text
    return text


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
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
    p.add_argument("--coalesce-ms", type=coalesce_window, default="auto", metavar="auto|X",
                   help="client: drain the sockets at least every X ms, not on every arrival (fewer "
                   "wake-ups per chunk; kernel stamps keep arrival times; streams about to end are still "
                   "watched on every arrival; keep it under half the chunk gap, or chunks of one stream "
                   "share a read); 0: on every arrival; auto (default): a tick chosen from the chunk gaps")
    p.add_argument("--workers", type=int, default=None,
                   help="client processes sharing the streams, merged exactly (default 1); the report is of the "
                   "merged figures. With --ray: that many Ray actors spread over the nodes")
    p.add_argument("--ray", default=None, metavar="auto|ADDRESS",
                   help="the client workers as Ray actors on a Ray cluster's nodes (auto: the cluster this machine "
                   "belongs to; or host:port, ray://host:port), one per node unless --workers or "
                   "--workers-per-node says otherwise; the server stays here. Each node's clock offset and its "
                   "uncertainty are in the report, and skews and bounds are widened by it. Needs "
                   "pip install 'fastbench[ray]'")
    p.add_argument("--workers-per-node", type=int, default=None, metavar="K",
                   help="with --ray: K workers on each node")
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
    try:  # before the run, so that nothing is started for settings that cannot work
        checked_settings(ns.concurrency, ns.request_rate, ns.tokens_per_chunk, ns.itl_ms, ns.ttft_ms,
                         ns.num_requests, ns.output_len, ns.tolerance_ms, warmup=not ns.no_warmup,
                         max_seconds=ns.max_seconds, coalesce_ms=ns.coalesce_ms, workers=ns.workers, ray=ns.ray,
                         workers_per_node=ns.workers_per_node, pin=ns.pin)
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
            coalesce_ms=ns.coalesce_ms, workers=ns.workers, ray=ns.ray, workers_per_node=ns.workers_per_node,
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
        print(verdict_line(report), file=sys.stderr if ns.json == "-" else sys.stdout)
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
