"""fastbench side by side with a naive aiohttp + json client, against the built-in synthetic server.

One invocation measures, for each client in its own subprocess (so its CPU time and peak RSS are its
own) and with the server in another process, pinned to different CPUs where there are two:

1. accuracy and overhead at 16, 64 and 256 streams, 20 ms between chunks, 1 token per chunk and
   1..4 tokens per chunk (speculative decoding's shape): skew, TTFT/ITL errors, CPU per chunk,
   streams kept open (seen by the server);
2. the most chunks/s one client process sustains with p99 skew within the tolerance: 256 streams
   with less and less time between chunks; runs where the server itself could not keep its
   schedule are marked (its /fb/stats lateness), not blamed on the client;
3. peak RSS for 10,000 requests of 256 tokens.

Usage (from the repository root)::

    .venv/bin/python bench/bench_client.py            # ~2-3 minutes
    .venv/bin/python bench/bench_client.py --quick    # under a minute
    .venv/bin/python bench/bench_client.py --json bench.json

See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from fastbench.load.hostload import process_cpu_s
from fastbench.synthetic import SyntheticServer  # the installed package (pip install .)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from fast_server import FastServer, find_compiler  # noqa: E402  (a sibling script)

CLIENTS = ("fastbench", "reference")
# fastbench reading its sockets on an 8 ms timer (streams about to end still watched on every
# arrival): the CPU-per-chunk design at many streams, shown beside the default at 256 streams.
COALESCED = "fastbench --coalesce-ms 8"
NOISY_LOAD = 0.5  # other processes' CPU use (in CPUs) above which a run is flagged as shared


@dataclasses.dataclass
class Setup:
    streams: int
    tokens_per_chunk: str
    itl_ms: float
    ttft_ms: float
    num_requests: int
    output_len: int
    server: str = "python"  # the synthetic server: "python" (fastbench.synthetic) or "c" (fast_server.c)


@dataclasses.dataclass
class Run:
    client: str
    setup: Setup
    figures: dict[str, Any]  # the client's own JSON (validate report or reference summary)
    server: dict[str, Any]  # /fb/stats after the run
    server_streams_open: float | None  # mean of the server's streams_open samples in the window
    wall_s: float
    server_cpu_share: float | None  # server CPU seconds during the client's run / its measured window
    other_load: float | None  # CPUs' busy time not spent by client, server or this script / wall time


# --------------------------------------------------------------------------------------------------
# CPUs and the server


def cpu_plan(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """(client CPUs, server CPUs): the first and the last CPU when pinning and there are two."""
    if not pin or not hasattr(os, "sched_getaffinity"):
        return None, None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return {cpus[0]}, {cpus[-1]}


class StreamsSampler:
    """Polls the server's /fb/stats streams_open every `interval_s` from a thread of this process."""

    def __init__(self, base_url: str, interval_s: float = 0.05) -> None:
        self.url = base_url + "/fb/stats"
        self.interval_s = interval_s
        self.samples: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=5) as r:
                    stats = json.loads(r.read())
                self.samples.append((time.monotonic_ns(), int(stats["streams_open"])))
            except OSError:
                pass
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self, lo_ns: int, hi_ns: int) -> float | None:
        inside = [n for t, n in self.samples if lo_ns <= t <= hi_ns]
        return sum(inside) / len(inside) if inside else None


def _proc_cpu_s(pid: int) -> float:
    return process_cpu_s(pid) or 0.0


def _machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine so far (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> tuple[float, float]:
    """(CPU seconds of this process, of its waited-for children)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def client_command(client: str, base_url: str, s: Setup, out: str) -> list[str]:
    common = ["--base-url", base_url, "--concurrency", str(s.streams), "--num-requests", str(s.num_requests),
              "--output-len", str(s.output_len), "--json", out]
    if client.startswith("fastbench"):
        return [sys.executable, "-m", "fastbench", "validate", *common, "--quiet",
                "--itl-ms", str(s.itl_ms), "--ttft-ms", str(s.ttft_ms), "--tokens-per-chunk", s.tokens_per_chunk,
                *(["--coalesce-ms", "8"] if client == COALESCED else [])]
    return [sys.executable, str(ROOT / "bench" / "reference_client.py"), *common]


def run_client(client: str, server: SyntheticServer, s: Setup, client_cpus: set[int] | None,
               timeout_s: float = 600.0) -> Run:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        server.reset_stats()
        t0 = time.monotonic()
        busy0, server0, (self0, kids0) = _machine_busy_s(), _proc_cpu_s(server.pid), _own_cpu_s()
        sampler = StreamsSampler(server.base_url)
        sampler.start()
        proc = subprocess.Popen(client_command(client, server.base_url, s, out), env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if client_cpus:
            os.sched_setaffinity(proc.pid, client_cpus)
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise RuntimeError(f"{client} did not finish within {timeout_s:.0f} s") from None
        finally:
            sampler.stop()
        wall = time.monotonic() - t0
        self1, kids1 = _own_cpu_s()
        server_cpu = _proc_cpu_s(server.pid) - server0
        other = _machine_busy_s() - busy0 - server_cpu - (self1 - self0) - (kids1 - kids0)
        if not os.path.exists(out):
            raise RuntimeError(f"{client} failed (exit {proc.returncode}):\n{err.decode(errors='replace')}")
        with open(out) as f:
            figures = json.load(f)
    stats = server.stats()
    # The C server polls instead of sleeping when its next write is due within microseconds; that
    # time is not work (it reports it as spin_idle_s, counted since the reset before this run).
    server_cpu -= float(stats.get("spin_idle_s", 0.0))
    window = figures["window"]
    window_s = (window["end_ns"] - window["start_ns"]) / 1e9
    return Run(client, s, figures, stats, sampler.mean(window["all_open_ns"], window["last_sent_ns"]), wall,
               server_cpu / window_s if window_s > 0 else None, max(other, 0.0) / wall)


def start_server(s: Setup, server_cpus: set[int] | None) -> SyntheticServer:
    kind = FastServer if s.server == "c" else SyntheticServer
    server = kind(ttft_ms=s.ttft_ms, itl_ms=s.itl_ms, tokens_per_chunk=s.tokens_per_chunk).start()
    if server_cpus:
        os.sched_setaffinity(server.pid, server_cpus)
    return server


def run_pair(s: Setup, cpus: tuple[set[int] | None, set[int] | None], flip: bool,
             clients: tuple[str, ...] = CLIENTS) -> list[Run]:
    """Both clients, one after the other, against one server; `flip` swaps which goes first."""
    server = start_server(s, cpus[1])
    try:
        order = list(reversed(clients)) if flip else list(clients)
        runs = {c: run_client(c, server, s, cpus[0]) for c in order}
    finally:
        server.stop()
    return [runs[c] for c in clients]


# --------------------------------------------------------------------------------------------------
# Figures common to both clients


def common(r: Run) -> dict[str, float | None]:
    """The figures both clients report, with the same meaning (see docs/definitions.md)."""
    f = r.figures
    s = r.setup
    lat = r.server.get("lateness", {})
    if r.client.startswith("fastbench"):
        series = {x["name"]: x for x in f["series"]}
        skew = f["skew"]
        ttft, itl = series["ttft"], series["itl_chunk"]
        ttft_p50, ttft_p99 = ttft["measured_p50_ms"], ttft["measured_p99_ms"]
        itl_p99 = itl["measured_p99_ms"]
        itl_err = itl["error_bound_p99_ms"]
        cpu = f["client_cpu_us_per_chunk"]
        chunks_s = f["chunks_per_s"]
        rss = f["client_maxrss_kb"]
        multi = f["multi_event_read_share"]
        client_open = f["streams_open_mean"]
    else:
        skew = f["skew_ms"] or {}
        ttft_p50 = (f["ttft_ms"] or {}).get("p50")
        ttft_p99 = (f["ttft_ms"] or {}).get("p99")
        itl_p99 = (f["itl_chunk_ms"] or {}).get("p99")
        itl_err = (f["itl_gap_error_ms"] or {}).get("p99")
        cpu = f["client_cpu"]["us_per_chunk"]
        chunks_s = f["chunks_per_s"]
        rss = f["client_maxrss_kb"]
        multi = None
        client_open = f["streams"]["mean_in_flight_client"]
    return {
        "skew_p50": skew.get("p50"), "skew_p99": skew.get("p99"), "skew_p999": skew.get("p999"),
        "skew_max": skew.get("max"),
        "ttft_p50_err": _minus(ttft_p50, s.ttft_ms), "ttft_p99_err": _minus(ttft_p99, s.ttft_ms),
        "itl_p99_err": _minus(itl_p99, s.itl_ms), "itl_gap_err_p99": itl_err,
        "cpu_us_per_chunk": cpu, "chunks_per_s": chunks_s, "maxrss_mb": rss / 1024 if rss else None,
        "streams_open_server": r.server_streams_open, "streams_open_client": client_open,
        "multi_event_read_share": multi,
        "server_late_p50": lat.get("p50_ms"), "server_late_p99": lat.get("p99_ms"),
    }


def _minus(a: float | None, b: float) -> float | None:
    return None if a is None else a - b


def _f(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "-"
    return f"{a / b:,.1f}x"


def server_saturated(r: Run) -> bool:
    """The server could not keep its schedule (the rule of fastbench validate): its p99 write lateness
    passed half the chunk gap, so two chunks of one stream could arrive closer than that and merge in
    the client's socket however fast the client reads, or the server used over 90 % of its CPU."""
    late_p99 = float(r.server.get("lateness", {}).get("p99_ms", 0.0))
    return late_p99 > r.setup.itl_ms / 2 or (r.server_cpu_share or 0.0) > 0.9


# --------------------------------------------------------------------------------------------------
# Tables


def accuracy_table(pairs: list[list[Run]]) -> str:
    head = ("| tpc | streams | client | skew p50 | skew p99 | skew max | TTFT p50 err | TTFT p99 err | "
            "ITL p99 err | ITL gap err p99 | CPU us/chunk | streams open server / client | chunks/s | "
            "server late p99 | other load |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for pair in pairs:
        figs = {r.client: common(r) for r in pair}
        for r in pair:
            c = figs[r.client]
            gap_note = " (bound)" if r.client.startswith("fastbench") else ""
            lines.append(
                f"| {r.setup.tokens_per_chunk} | {r.setup.streams} | {r.client} | {_f(c['skew_p50'])} | "
                f"{_f(c['skew_p99'])} | {_f(c['skew_max'])} | {_f(c['ttft_p50_err'], 2)} | "
                f"{_f(c['ttft_p99_err'], 2)} | {_f(c['itl_p99_err'], 2)} | {_f(c['itl_gap_err_p99'])}{gap_note} | "
                f"{_f(c['cpu_us_per_chunk'], 1)} | {_f(c['streams_open_server'], 1)} / "
                f"{_f(c['streams_open_client'], 1)} of {r.setup.streams} | "
                f"{_f(c['chunks_per_s'], 0)} | {_f(c['server_late_p99'], 2)} | {_f(r.other_load, 2)} |")
        if "fastbench" in figs and "reference" in figs:
            fb, ref = figs["fastbench"], figs["reference"]
            lines.append(
                f"| | | **ref / fb** | {_ratio(ref['skew_p50'], fb['skew_p50'])} | "
                f"{_ratio(ref['skew_p99'], fb['skew_p99'])} | {_ratio(ref['skew_max'], fb['skew_max'])} | | | | "
                f"{_ratio(ref['itl_gap_err_p99'], fb['itl_gap_err_p99'])} | "
                f"{_ratio(ref['cpu_us_per_chunk'], fb['cpu_us_per_chunk'])} | | | | |")
    return "\n".join(lines)


def capacity_table(runs: list[Run], tol: float) -> str:
    head = ("| client | server | streams | itl ms | chunks/s | skew p99 | skew max | multi-event reads | "
            "CPU us/chunk | client CPU | server CPU | server late p50 / p99 | other load | "
            "p99 skew within tolerance |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in runs:
        c = common(r)
        share = r.figures.get("client_cpu_share_of_core") if r.client.startswith("fastbench") else \
            r.figures["client_cpu"]["share_of_a_core"]
        ok = c["skew_p99"] is not None and c["skew_p99"] <= tol
        verdict = "yes" if ok else "no"
        if server_saturated(r):
            verdict += " (server saturated)"
        multi = c["multi_event_read_share"]
        lines.append(
            f"| {r.client} | {r.setup.server} | {r.setup.streams} | {r.setup.itl_ms:g} | {_f(c['chunks_per_s'], 0)} | "
            f"{_f(c['skew_p99'])} | {_f(c['skew_max'])} | {_f(multi * 100 if multi is not None else None, 1)} % | "
            f"{_f(c['cpu_us_per_chunk'], 1)} | {_f(share * 100 if share else None, 0)} % | "
            f"{_f((r.server_cpu_share or 0) * 100, 0)} % | {_f(c['server_late_p50'], 2)} / "
            f"{_f(c['server_late_p99'], 2)} | {_f(r.other_load, 2)} | {verdict} |")
    return "\n".join(lines)


def max_sustained(runs: list[Run], client: str, tol: float) -> tuple[float | None, list[str], float | None]:
    """(most chunks/s of a run with p99 skew within tol, the runs at lower chunks/s that failed and why,
    CPU-bound estimate = 1e6 / the lowest CPU us per chunk seen)."""
    mine = sorted((r for r in runs if r.client == client), key=lambda r: common(r)["chunks_per_s"] or 0.0)

    def within(r: Run) -> bool:
        skew = common(r)["skew_p99"]
        return skew is not None and skew <= tol

    passed = [common(r)["chunks_per_s"] or 0.0 for r in mine if within(r)]
    best = max(passed) if passed else None
    failed_below = []
    for r in mine:
        rate = common(r)["chunks_per_s"] or 0.0
        if not within(r) and (best is None or rate < best):
            why = "server saturated" if server_saturated(r) else f"other load {_f(r.other_load, 2)} CPUs"
            failed_below.append(f"{_f(rate, 0)} chunks/s: p99 skew {_f(common(r)['skew_p99'])} ms ({why})")
    cpus = [common(r)["cpu_us_per_chunk"] for r in mine]
    low = min((c for c in cpus if c), default=None)
    return best, failed_below, (1e6 / low if low else None)


# --------------------------------------------------------------------------------------------------
# Main


def machine() -> str:
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()[:14]
    except OSError:
        lscpu = []
    return "\n".join([*lscpu, f"kernel: {platform.release()}", f"python: {sys.version.split()[0]}",
                      f"cpus usable: {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'}"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="under a minute: fewer requests, two capacity points, a 2,000-request RSS run")
    p.add_argument("--streams", default="16,64,256", help="stream counts of the accuracy table")
    p.add_argument("--tolerance-ms", type=float, default=0.5, help="p99 skew limit for 'sustained'")
    p.add_argument("--no-pin", action="store_true", help="do not pin client and server to different CPUs")
    p.add_argument("--skip", default="", help="comma list of parts to skip: accuracy,capacity,rss")
    p.add_argument("--json", metavar="PATH", help="write every run's raw figures here")
    ns = p.parse_args(argv)
    skip = set(filter(None, ns.skip.split(",")))
    where = machine()
    cpus = cpu_plan(not ns.no_pin)
    if cpus[1]:
        os.sched_setaffinity(0, cpus[1])  # this process (the sampler) shares the server's CPU
    streams = [int(x) for x in ns.streams.split(",")]
    rounds = 2 if ns.quick else 3
    started = time.monotonic()
    print(f"# fastbench vs naive reference client, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %z}")
    print(f"command: {' '.join([os.path.relpath(sys.executable, ROOT), *sys.argv])}")
    print(f"pinning: client CPUs {cpus[0] or 'any'}, server CPUs {cpus[1] or 'any'}\n")
    print("```\n" + where + "\n```\n")
    out: dict[str, Any] = {"machine": where, "argv": sys.argv, "runs": []}

    pairs: list[list[Run]] = []
    if "accuracy" not in skip:
        for tpc in ("1", "1-4"):
            for i, n in enumerate(streams):
                s = Setup(n, tpc, 20.0, 50.0, rounds * n, 64)
                clients = (*CLIENTS, COALESCED) if n >= 256 else CLIENTS
                pairs.append(run_pair(s, cpus, flip=bool(i % 2), clients=clients))
                print(f"  ... {tpc} tokens/chunk, {n} streams done ({time.monotonic() - started:.0f} s)",
                      file=sys.stderr)
        print("## Accuracy and overhead: TTFT 50 ms, 20 ms between chunks, 64 tokens per request, "
              f"{rounds} requests per stream\n")
        print("All times in ms except CPU. err = reported minus the server's schedule (holds server lateness); "
              "ITL gap err p99: reference exact (its gap minus the server's), fastbench a bound (skew p99.5 - "
              "skew min).\n")
        print(accuracy_table(pairs) + "\n")
        noisy = [f"{r.setup.tokens_per_chunk} tpc / {r.setup.streams} streams / {r.client}" for pair in pairs
                 for r in pair if (r.other_load or 0.0) > NOISY_LOAD]
        if noisy:
            print(f"Runs that shared the machine (other load > {NOISY_LOAD} CPU): {', '.join(noisy)}. Their "
                  "tails (p99, max) hold stalls of the machine, not only of the client.\n")
        out["runs"] += [dataclasses.asdict(r) for pair in pairs for r in pair]

    if "capacity" not in skip:
        cap_runs: list[Run] = []
        # The Python server saturates its core near 140k chunks/s; past that the C one keeps the
        # schedule (1.25 ms between chunks at 256 streams asks for 204.8k chunks/s).
        points = [("python", itl) for itl in ((10.0, 2.0) if ns.quick else (10.0, 5.0, 2.0, 1.0))]
        if find_compiler() is not None:
            points += [("c", itl) for itl in ((1.25,) if ns.quick else (2.0, 1.25, 1.0))]
        else:
            print("no C compiler: the capacity part runs against the Python server only\n")
        for i, (kind, itl) in enumerate(points):
            # TTFT = the chunk gap on the C server, so that the window's rate is the schedule's.
            ttft = itl if kind == "c" else 50.0
            s = Setup(256, "1", itl, ttft, 1024 if kind == "c" else 512, 256 if itl <= 2 else 128, kind)
            cap_runs += run_pair(s, cpus, flip=bool(i % 2))
            print(f"  ... capacity at {itl:g} ms ({kind} server) done ({time.monotonic() - started:.0f} s)",
                  file=sys.stderr)
        print("## Chunks/s one client process sustains (256 streams, 1 token per chunk)\n")
        print(capacity_table(cap_runs, ns.tolerance_ms) + "\n")
        for client in CLIENTS:
            best, failed_below, est = max_sustained(cap_runs + [r for pair in pairs for r in pair], client,
                                                    ns.tolerance_ms)
            print(f"- {client}: most chunks/s in a run with p99 skew <= {ns.tolerance_ms:g} ms: {_f(best, 0)}; "
                  f"CPU-bound estimate (1e6 / lowest CPU us per chunk, an extrapolation): {_f(est, 0)} chunks/s")
            if failed_below:
                shown = failed_below if client == "fastbench" else failed_below[:1] + (
                    [f"... and {len(failed_below) - 1} more"] if len(failed_below) > 1 else [])
                print(f"  - runs at lower chunks/s over the tolerance: {'; '.join(shown)}")
        print()
        out["runs"] += [dataclasses.asdict(r) for r in cap_runs]

    if "rss" not in skip:
        n_req = 2000 if ns.quick else 10000
        s = Setup(256, "1", 0.0, 0.0, n_req, 256)
        rss_runs = run_pair(s, cpus, flip=False)
        print(f"## Peak RSS: {n_req:,} requests x 256 tokens, 256 streams, server with no delays\n")
        print("| client | peak RSS MB | chunks | chunks/s | CPU us/chunk |")
        print("|---|---|---|---|---|")
        for r in rss_runs:
            c = common(r)
            chunks = r.figures["chunks"]
            print(f"| {r.client} | {_f(c['maxrss_mb'], 1)} | {chunks:,} | {_f(c['chunks_per_s'], 0)} | "
                  f"{_f(c['cpu_us_per_chunk'], 2)} |")
        print()
        out["runs"] += [dataclasses.asdict(r) for r in rss_runs]

    print(f"total time: {time.monotonic() - started:.0f} s")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
