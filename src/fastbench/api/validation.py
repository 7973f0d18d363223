"""``fastbench validate``'s run: prove that fastbench's figures are the server's, not the client's own.

It starts the built-in synthetic server in its own process with a known schedule (TTFT, time between
chunks, tokens per chunk), drives it with the real client (:class:`~fastbench.load.driver.LoadGenerator`),
and compares what the client measured with what the server did. The server writes its send time
(``fb_sent_ns``, CLOCK_MONOTONIC, the client's clock too) into every chunk, so each chunk's *skew*
(client receive stamp minus server send stamp) is the client's own timing error for that chunk.

How each figure is derived (also in :data:`~fastbench.results.validation_report.DEFINITIONS`, written into the
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

Python API: :func:`validate_client` (sync) and :func:`avalidate_client` (inside a running loop) return a
:class:`ValidationReport`; ``report.render()`` is the console table, ``report.to_dict()`` the JSON.

This module is the run: its settings, the server, the load. The derivation above is
:mod:`fastbench.api.validation_figures` (``build_report``); what the report holds (its types, the
definitions, the console table) is :mod:`fastbench.results.validation_report`; the command line is
:mod:`fastbench.cli.validate`.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import orjson

from fastbench.api.validation_figures import build_report
from fastbench.checks import MAX_PROMPTS, check_value
from fastbench.exceptions import ConfigError, ServerError
from fastbench.load import hostload, protocols
from fastbench.load.drive import drive
from fastbench.load.generators import make_generator
from fastbench.load.plan import LoadPlan, Target
from fastbench.results.validation_report import Check, Quantiles, SeriesCheck, ValidationReport
from fastbench.synthetic.cli import (
    HOUR_MS,  # the longest delay the synthetic server takes
    tokens_per_chunk_range,
)

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ("ENDPOINT", "Check", "Quantiles", "SeriesCheck", "ValidationReport", "avalidate_client", "build_report",
           "checked_settings", "request_body", "validate_client")

DEFAULT_OUTPUT_LEN = 64
DEFAULT_ROUNDS = 3  # default number of requests: this many per stream
MAX_REQUESTS = MAX_PROMPTS  # as fastbench's --num-prompts
MAX_OUTPUT_LEN = 1_000_000  # tokens per request; the server's context is made to fit it
TAGGED_REQUESTS = 100_000  # requests whose body names its row, for the server's read times (memory)
ENDPOINT = "/v1/completions"
MODEL = "fastbench-synthetic"


# --------------------------------------------------------------------------------------------------
# Running it


def request_body(output_len: int, model: str = MODEL, row: int | None = None, endpoint: str = ENDPOINT) -> bytes:
    """A streamed body of the API ``endpoint`` speaks asking for exactly output_len tokens (and, where the API
    has it, per-chunk usage); with ``row``, tagged ``fb_row`` so that the synthetic server keeps when it
    read it."""
    body = protocols.by_endpoint(endpoint).body(model, "hello world", output_len)
    body["ignore_eos"] = True
    if row is not None:
        body["fb_row"] = row
    return orjson.dumps(body)


def _request_bodies(output_len: int, n: int, endpoint: str) -> list[bytes]:
    """Each of the first TAGGED_REQUESTS bodies names its row; the rest share one untagged body."""
    shared = request_body(output_len, endpoint=endpoint)
    return [request_body(output_len, row=i, endpoint=endpoint) if i < TAGGED_REQUESTS else shared
            for i in range(n)]


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


async def avalidate_client(
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
    endpoint: str = ENDPOINT,
) -> ValidationReport:
    """Run a validation inside a running event loop (uvloop recommended: it is what the client uses)
    and return its report; :func:`validate_client` runs it to the end on uvloop.

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
        for the clocks. Needs ``fastbench-llm[ray]``.
    :param workers_per_node: with ``ray``: this many workers on each node.
    :param endpoint: the API the requests speak (``/v1/completions``, ``/v1/chat/completions``,
        ``/v1/responses``, ``/v1/messages``): the synthetic server streams each as its servers do.
    :raises ConfigError: settings that cannot work (see :func:`checked_settings`), before anything starts.
    :raises WorkerError: --ray without Ray, a cluster that cannot be joined, a node whose clock offset is
        unknown.
    """
    settings = checked_settings(concurrency, request_rate, tokens_per_chunk, itl_ms, ttft_ms, num_requests,
                                output_len, tolerance_ms, warmup=warmup, max_seconds=max_seconds,
                                coalesce_ms=coalesce_ms, workers=workers, ray=ray,
                                workers_per_node=workers_per_node, pin=pin)
    if endpoint not in protocols.PROTOCOLS:
        raise ConfigError(f"--endpoint must be one of {', '.join(protocols.PROTOCOLS)}, got {endpoint!r}")
    settings["endpoint"] = endpoint
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
                bodies=_request_bodies(output_len, n, endpoint),
                warmup_bodies=[request_body(1, endpoint=endpoint)] * (concurrency if warmup else 0),
                concurrency=concurrency,
                request_rate=request_rate,
                max_seconds=max_seconds if max_seconds is not None else _safety_cap_s(settings),
                coalesce_s="auto" if coalesce_ms == "auto" else float(coalesce_ms) / 1e3,
                expected_output_tokens=[output_len] * n,
                # the same span as the window's figures: not the connections' set-up and warm-up
                on_window_start=on_window_start,
                endpoint=endpoint,
            )
            await asyncio.to_thread(_http_json, base_url, "/fb/reset", "POST")
            target = Target.parse(base_url, endpoint)
            generator, _ = make_generator(target, plan, workers=workers, workers_per_node=workers_per_node,
                                          ray=cluster.address if cluster is not None else None)
            data = await drive(generator)
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


validate_client = _on_uvloop(avalidate_client, "validate_client")


def _safety_cap_s(settings: dict[str, Any]) -> float:
    """A time cap far beyond the run's expected length, so that a stuck server cannot hang validate."""
    per_request_s = (float(settings["ttft_ms"]) + int(settings["output_len"]) * float(settings["itl_ms"])) / 1e3
    n, c = int(settings["num_requests"]), int(settings["concurrency"])
    rate = settings["request_rate"]
    expected = (n / float(rate) if rate else -(-n // c) * per_request_s) + per_request_s
    return 60.0 + 5.0 * expected
