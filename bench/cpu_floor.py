"""fastbench's CPU per chunk beside the floor: a minimal C client (bench/floor_client.c) that only
reads the sockets, at the same load, in one run.

At 256 streams and 20 ms between chunks (~12.8k chunks/s) every chunk arrives as its own TCP
segment, so each one costs a wake-up share, one recvmsg and the ACK it sends (on loopback the ACK's
processing at the server's socket runs on the client's CPU too). This script measures how much of
fastbench's CPU per chunk that floor already is: both clients alternate against one synthetic
server, pinned to different CPUs, with and without coalesced wake-ups, and with io_uring multishot
receives where liburing is installed.

It also prints what one wake-up costs by itself, in a C loop and on fastbench's coalesced path
(uvloop calling the core on its timerfd, no sockets): with coalescing, most of the CPU that is
left per chunk is wake-ups, and their price is set by the machine (on a VM, each costs a trip
through the hypervisor).

Usage (from the repository root)::

    .venv/bin/python bench/cpu_floor.py              # ~2 minutes
    .venv/bin/python bench/cpu_floor.py --reps 1 --seconds 3
    .venv/bin/python bench/cpu_floor.py --tokens-per-chunk 1-4 --coalesce-ms 8
    .venv/bin/python bench/cpu_floor.py --auto --coalesce-ms 8   # + fastbench's default, --coalesce-ms auto

With ``--auto`` the runs include fastbench with ``--coalesce-ms auto`` (its default), compared with the
floor at the fixed window, and the table says which tick it chose.

With ``--base BUILD`` (a venv, its python, or a git revision, built once under ~/.cache/fastbench/builds)
every fastbench client runs twice per rep, the base's build and this one's next to each other (base first
in odd reps, this first in even ones), and the output adds each rep's paired ratio this/base with its
median and range, and the accounting of both. ``--build BUILD`` measures another build in place of this
one (to bisect between two revisions)::

    .venv/bin/python bench/cpu_floor.py --auto --reps 2 --tokens-per-chunk 1-4 --base edf2cad
    .venv/bin/python bench/cpu_floor.py --auto --reps 2 --base edf2cad --build 18fbdd1

The harness is this script, whichever builds it measures: the same synthetic server, floor client, pinning
and run sizes for both, so the only difference between two rows is the build under test. A build runs only
its own ``fastbench validate`` (and the wake-up probe, on its own core); its CPU per chunk is that
validate's process CPU over its measured window, defined alike in the builds compared so far (edf2cad on).
The host's load average is printed at the start and the end; on a shared host the paired ratios, taken
seconds apart, say more than either build's median.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fast_server import CFLAGS, CompilerNotFoundError, find_compiler  # noqa: E402  (a sibling script)
from other_build import Build, resolve, this_build  # noqa: E402  (a sibling script)


def build_floor_client(out_dir: Path) -> tuple[Path, bool]:
    """Compile floor_client.c; with io_uring where liburing is there. Returns (binary, has_uring)."""
    cc = find_compiler()
    if cc is None:
        raise CompilerNotFoundError("cpu_floor: no C compiler found (set $CC, or install cc, gcc or clang)")
    src, exe = HERE / "floor_client.c", out_dir / "floor_client"
    uring = subprocess.run([*cc, *CFLAGS, "-DFLOOR_URING", "-o", str(exe), str(src), "-luring"],
                           capture_output=True).returncode == 0
    if not uring:
        subprocess.run([*cc, *CFLAGS, "-o", str(exe), str(src)], check=True)
    return exe, uring


def run_floor(exe: Path, port: int, streams: int, seconds: float, mode: str, coalesce_us: int, output_len: int,
              cpu: set[int] | None) -> dict[str, Any]:
    out = subprocess.run([str(exe), str(port), str(streams), str(seconds), mode, str(coalesce_us), str(output_len)],
                         capture_output=True, text=True, check=True,
                         preexec_fn=(lambda: os.sched_setaffinity(0, cpu)) if cpu else None)
    result: dict[str, Any] = json.loads(out.stdout)
    result["wakeups_per_s"] = result["wakeups"] / result["seconds"] if result["seconds"] else 0.0
    return result


def request_seconds(tokens_per_chunk: str, output_len: int = 64, ttft_s: float = 0.05, itl_s: float = 0.02) -> float:
    """How long one request streams: the first token, then the rest at the mean tokens per chunk."""
    lo, _, hi = tokens_per_chunk.partition("-")
    mean = (int(lo) + int(hi or lo)) / 2
    return ttft_s + (output_len - 1) / mean * itl_s


def run_fastbench(base_url: str, streams: int, seconds: float, coalesce_ms: float | str, tokens_per_chunk: str,
                  output_len: int, cpu: set[int] | None, python: str = sys.executable) -> dict[str, Any]:
    # Enough requests to fill `seconds` of window.
    num_requests = streams * max(2, round(seconds / request_seconds(tokens_per_chunk, output_len)))
    cmd = [python, "-m", "fastbench", "validate", "--base-url", base_url, "--concurrency", str(streams),
           "--num-requests", str(num_requests), "--tokens-per-chunk", tokens_per_chunk,
           "--output-len", str(output_len), "--json", "-", "--quiet", "--coalesce-ms", str(coalesce_ms)]
    # From a folder with no fastbench in it: the build `python` has is the one imported.
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir(),
                         preexec_fn=(lambda: os.sched_setaffinity(0, cpu)) if cpu else None)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"{python} -m fastbench validate failed: {out.stderr.strip()}")
    doc = json.loads(out.stdout)
    chosen = doc.get("coalescing")  # auto: the tick it chose, at the end and the longest
    return {"cpu_us_per_chunk": doc["client_cpu_us_per_chunk"], "chunks_per_s": doc["chunks_per_s"],
            "reads_per_wakeup": doc["reads"] / doc["wakeups"] if doc["wakeups"] else None,
            "wakeups_per_s": doc["wakeups"] / doc["duration_s"], "requests_per_s": doc["completed"] / doc["duration_s"],
            "verdict": doc["verdict"], "verdict_cause": doc.get("verdict_cause"), "skew_p99_ms": doc["skew"]["p99"],
            "streams_open": doc["streams_open_mean"],
            "tick_ms": chosen["tick_ms"] if chosen else None,
            "tick_changes": chosen["changes_total"] if chosen else None,
            "first_tick_s": next((c["at_s"] for c in chosen["changes"] if c["tick_ms"] > 0), None) if chosen else None,
            "tick_share": chosen["reads_on_tick"] / max(1, chosen["reads_on_tick"] + chosen["reads_on_arrival"])
            if chosen else None}


def wake_accounting(fastbench: dict[str, float], floor: dict[str, float], wake_us: float) -> dict[str, float]:
    """Splits fastbench's coalesced CPU per chunk over the floor client's, by wake-ups priced at
    ``wake_us`` each. The floor sends each next request only on its tick; a closed loop that keeps
    every stream open must wake at least once per request's end, and those wake-ups replace ticks.
    Inputs are per-client medians of cpu_us_per_chunk, chunks_per_s, wakeups_per_s (and
    requests_per_s for fastbench)."""
    def per_chunk(per_s: float) -> float:
        return per_s * wake_us / fastbench["chunks_per_s"]

    ends_over_ticks = per_chunk(max(fastbench["requests_per_s"] - floor["wakeups_per_s"], 0.0))
    beyond_ends = per_chunk(max(fastbench["wakeups_per_s"] - max(fastbench["requests_per_s"], floor["wakeups_per_s"]),
                                0.0))
    bound = floor["cpu_us_per_chunk"] + ends_over_ticks
    return {"floor": floor["cpu_us_per_chunk"], "one_wakeup_per_end": ends_over_ticks,
            "bound_keeping_streams_open": bound, "wakeups_beyond_ends": beyond_ends,
            "rest": fastbench["cpu_us_per_chunk"] - bound - beyond_ends, "fastbench": fastbench["cpu_us_per_chunk"]}


def wake_probe(seconds: float, period_us: int) -> dict[str, Any]:
    """In this process: CPU per wake-up of fastbench's coalesced path with no connections, i.e.
    uvloop calling RunState.drain when the core's tick timerfd fires."""
    import numpy as np
    import uvloop

    from fastbench._core import Recorder, RunState
    from fastbench.results.records import NCOLS, new_histogram

    async def probe() -> dict[str, Any]:
        state = RunState(np.zeros((1, NCOLS), dtype=np.int64), *(Recorder(new_histogram()) for _ in range(3)))
        fd = state.coalesce(period_us * 1000)
        # builds before the core's parts were composed call it drain_coalesced (their drain reads no tick)
        drain = getattr(state, "drain_coalesced", None) or state.drain
        asyncio.get_running_loop().add_reader(fd, drain)
        cpu0, wakes0 = time.process_time(), state.counters["wakeups"]
        await asyncio.sleep(seconds)
        wakes = state.counters["wakeups"] - wakes0
        return {"mode": "fastbench core on uvloop", "period_us": period_us, "wakeups": wakes,
                "cpu_us_per_wakeup": 1e6 * (time.process_time() - cpu0) / max(wakes, 1)}

    return uvloop.run(probe())


def wake_costs(exe: Path, seconds: float, period_us: int, cpu: set[int] | None,
               pythons: tuple[str, ...] = (sys.executable,)) -> list[dict[str, Any]]:
    """CPU per wake-up by itself: floor_client's C loop, then fastbench's path of each build's python
    (this script's probe run by that python, so on that build's core), each pinned."""
    pin = (lambda: os.sched_setaffinity(0, cpu)) if cpu else None
    runs = []
    out = subprocess.run([str(exe), "0", "0", str(seconds), "wake", str(period_us)], capture_output=True, text=True,
                         check=True, preexec_fn=pin)
    runs.append(json.loads(out.stdout))
    for python in pythons:
        out = subprocess.run([python, __file__, "--wake-probe", str(seconds), str(period_us)], capture_output=True,
                             text=True, preexec_fn=pin, cwd=tempfile.gettempdir())
        if out.returncode:  # a build whose core the probe does not know: its runs above still stand
            runs.append({"wakeups": 0, "cpu_us_per_wakeup": None,
                         "error": (out.stderr.strip().splitlines() or ["failed"])[-1]})
        else:
            runs.append(json.loads(out.stdout))
    return runs


def load_average() -> list[float]:
    """The host's 1, 5 and 15 minute load averages."""
    return list(os.getloadavg())


def paired_ratios(this: list[dict[str, Any]], base: list[dict[str, Any]]) -> list[float]:
    """Each rep's this/base CPU per chunk: the two runs of a rep are seconds apart, so a host's load
    that drifts over minutes moves both."""
    return [t["cpu_us_per_chunk"] / b["cpu_us_per_chunk"] for t, b in zip(this, base)]


AUTO = -1  # the "coalesce" key of fastbench --coalesce-ms auto


def _window(co: int) -> str:
    return "auto" if co == AUTO else f"{co / 1000:.1f} ms"


THIS, BASE = "this", "base"  # the builds a fastbench client's runs belong to; the floor's: None


def _row(name: str, build: str | None) -> str:
    return f"{name} (base)" if build == BASE else name


def _loads(avg: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in avg) + " (1, 5, 15 min)"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--seconds", type=float, default=5.0, help="measured seconds per run")
    p.add_argument("--reps", type=int, default=3, help="alternations of all clients")
    p.add_argument("--coalesce-ms", type=float, default=1.0, help="the coalesced variant's window")
    p.add_argument("--tokens-per-chunk", default="1", help="the server's tokens per chunk: N or A-B")
    p.add_argument("--output-len", type=int, default=64, help="tokens per request (vllm bench serve's default: 128)")
    p.add_argument("--auto", action="store_true", help="also fastbench --coalesce-ms auto (its default)")
    p.add_argument("--base", metavar="BUILD",
                   help="another build whose fastbench runs beside this one's, alternating, with paired ratios: "
                        "a venv (or its python) or a git revision (built once under ~/.cache/fastbench/builds)")
    p.add_argument("--build", metavar="BUILD",
                   help="the build measured as this one (default: the python running this script); as --base")
    p.add_argument("--json", help="write all runs here")
    p.add_argument("--wake-probe", nargs=2, metavar=("SECONDS", "PERIOD_US"), help=argparse.SUPPRESS)
    ns = p.parse_args(argv)
    if ns.output_len < 2:
        p.error("--output-len must be at least 2 (validate judges the gaps between chunks)")
    if ns.wake_probe:  # the child that wake_costs() runs pinned
        print(json.dumps(wake_probe(float(ns.wake_probe[0]), int(ns.wake_probe[1]))))
        return 0
    from fastbench.synthetic import SyntheticServer  # here: the wake probe's child may be another build's python

    try:  # before the load average: a revision not built yet is built first
        builds: dict[str, Build] = {THIS: resolve(ns.build) if ns.build else this_build()}
        if ns.base:
            builds[BASE] = resolve(ns.base)
    except ValueError as e:
        p.error(str(e))
    load_start = load_average()
    print(f"load average at start: {_loads(load_start)}")
    if ns.base:
        for which, build in builds.items():
            print(f"{which}: {build.label}, {build.python}")

    cpus = sorted(os.sched_getaffinity(0))
    client_cpu, server_cpu = ({cpus[0]}, {cpus[-1]}) if len(cpus) >= 2 else (None, None)
    coalesce_us = round(ns.coalesce_ms * 1000)
    with tempfile.TemporaryDirectory() as tmp:
        exe, has_uring = build_floor_client(Path(tmp))
        kinds = [("fastbench", 0), ("floor epoll", 0), ("fastbench", coalesce_us), ("floor epoll", coalesce_us)]
        if ns.auto:
            kinds.insert(1, ("fastbench auto", AUTO))
        if has_uring:
            kinds += [("floor uring", 0), ("floor uring", coalesce_us)]
        # Each fastbench client's base run right before this build's (after it in the reversed reps).
        clients: list[tuple[str, int, str | None]] = []
        for name, co in kinds:
            for b in ((BASE, THIS) if ns.base else (THIS,)) if name.startswith("fastbench") else (None,):
                clients.append((name, co, b))
        runs: dict[tuple[str, int, str | None], list[dict[str, Any]]] = {c: [] for c in clients}
        with SyntheticServer(ttft_ms=50, itl_ms=20, tokens_per_chunk=ns.tokens_per_chunk) as server:
            if server_cpu:
                os.sched_setaffinity(server.pid, server_cpu)
            for rep in range(ns.reps):
                if ns.base:
                    print(f"  rep {rep + 1}: load average {_loads(load_average())}", flush=True)
                for name, co, b in clients if rep % 2 == 0 else reversed(clients):
                    if b is not None:
                        r = run_fastbench(server.base_url, ns.streams, ns.seconds, "auto" if co == AUTO else co / 1000,
                                          ns.tokens_per_chunk, ns.output_len, client_cpu, builds[b].python)
                    else:
                        r = run_floor(exe, server.port, ns.streams, ns.seconds, name.split()[1], co, ns.output_len,
                                      client_cpu)
                    runs[(name, co, b)].append(r)
                    chose = (f", tick {r['tick_ms']:.2f} ms from {r['first_tick_s']} s, {r['tick_changes']} changes"
                             if co == AUTO else "")
                    print(f"  rep {rep + 1} {_row(name, b):14s} coalesce {_window(co)}: "
                          f"{r['cpu_us_per_chunk']:.2f} us/chunk, {r['reads_per_wakeup']:.1f} reads/wake-up, "
                          f"{r['chunks_per_s']:,.0f} chunks/s{chose}", flush=True)

        wakes = wake_costs(exe, min(ns.seconds, 3.0), 1000, client_cpu, tuple(b.python for b in builds.values()))
    load_end = load_average()

    print(f"\nCPU per chunk, {ns.streams} streams, 20 ms between chunks, {ns.tokens_per_chunk} tokens per chunk, "
          f"{ns.output_len} tokens per request "
          f"(median of {ns.reps}; client on CPU {sorted(client_cpu or [])}, server on {sorted(server_cpu or [])}):\n")
    print("| client | coalesce | CPU us/chunk (median, min-max) | reads per wake-up | vs floor epoll |")
    print("|---|---|---|---|---|")
    medians = {c: statistics.median(r["cpu_us_per_chunk"] for r in rs) for c, rs in runs.items()}
    for (name, co, b), rs in runs.items():
        cpu = [r["cpu_us_per_chunk"] for r in rs]
        wake = statistics.median(r["reads_per_wakeup"] or 0.0 for r in rs)
        ratio = medians[(name, co, b)] / medians[("floor epoll", coalesce_us if co == AUTO else co, None)]
        print(f"| {_row(name, b)} | {_window(co)} | {medians[(name, co, b)]:.2f} ({min(cpu):.2f}-{max(cpu):.2f}) | "
              f"{wake:.1f} | {ratio:.2f}x |")
    ratios: dict[tuple[str, int], list[float]] = {}
    if ns.base:
        print(f"\nThis build ({builds[THIS].label}) against the base ({builds[BASE].label}): CPU per chunk this/base, "
              f"each rep's two runs side by side:\n")
        print("| client | coalesce | this/base per rep | median (min-max) | this us/chunk | base us/chunk |")
        print("|---|---|---|---|---|---|")
        for name, co in kinds:
            if name.startswith("fastbench"):
                pair = ratios[(name, co)] = paired_ratios(runs[(name, co, THIS)], runs[(name, co, BASE)])
                print(f"| {name} | {_window(co)} | {', '.join(f'{x:.3f}' for x in pair)} | "
                      f"**{statistics.median(pair):.3f}** ({min(pair):.3f}-{max(pair):.3f}) | "
                      f"{medians[(name, co, THIS)]:.2f} | {medians[(name, co, BASE)]:.2f} |")
    if ns.auto:
        for which in builds:
            rs = runs[("fastbench auto", AUTO, which)]
            print(f"\n{'auto' if which == THIS else 'auto (base)'} chose (per rep): reads on the tick "
                  f"{[round(r['tick_share'], 2) for r in rs]}, ticks at the end "
                  f"{[r['tick_ms'] for r in rs]} ms, first from "
                  f"{[r['first_tick_s'] for r in rs]} s, {[r['tick_changes'] for r in rs]} changes; skew p99 "
                  f"{[r['skew_p99_ms'] for r in rs]} ms; streams open {[round(r['streams_open'], 2) for r in rs]}; "
                  f"verdicts {[r['verdict'] for r in rs]} (vs floor epoll at {coalesce_us / 1000:g} ms)")
            causes = [f"rep {i + 1}: {r['verdict_cause']}" for i, r in enumerate(rs) if r["verdict"] != "PASS"]
            if causes:
                print(f"  why not PASS: {'; '.join(causes)}")
    print("\nCPU per wake-up by itself (a timerfd every 1 ms, nothing to read):\n")
    whos = ["a C epoll loop (floor_client)", "fastbench's coalesced path (uvloop -> core)"]
    if ns.base:
        whos[1:] = [f"fastbench's coalesced path (uvloop -> core), {w}: {builds[w].label}" for w in builds]
    for w, who in zip(wakes, whos):
        print(f"- {who}: {w['cpu_us_per_wakeup']:.1f} us ({w['wakeups']} wake-ups)" if w["cpu_us_per_wakeup"]
              else f"- {who}: the probe failed ({w['error']})")
    accounts: dict[str, dict[str, float]] = {}
    if coalesce_us:
        def med(client: tuple[str, int, str | None]) -> dict[str, float]:
            keys = ("cpu_us_per_chunk", "chunks_per_s", "wakeups_per_s", "requests_per_s")
            return {k: statistics.median(r[k] for r in runs[client]) for k in keys if k in runs[client][0]}

        fl = med(("floor epoll", coalesce_us, None))
        for which, wake_cost in zip(builds, wakes[1:]):
            if wake_cost["cpu_us_per_wakeup"] is None:
                continue
            fb = med(("fastbench", coalesce_us, which))
            acc = accounts[which] = wake_accounting(fb, fl, wake_cost["cpu_us_per_wakeup"])
            whose = f", {which}: {builds[which].label}" if ns.base else ""
            print(f"\nWhere fastbench's coalesced CPU per chunk goes{whose} ({fb['requests_per_s']:.0f} requests/s; "
                  f"wake-ups/s: fastbench {fb['wakeups_per_s']:.0f}, floor {fl['wakeups_per_s']:.0f}; "
                  f"{wake_cost['cpu_us_per_wakeup']:.1f} us each):\n")
            print(f"- the floor client (reads only; sends each next request on its tick): {acc['floor']:.2f} us")
            print(f"- + one wake-up per request's end, beyond the floor's ticks: {acc['one_wakeup_per_end']:.2f} us")
            print(f"- = the least a client keeping every stream open spends here: "
                  f"{acc['bound_keeping_streams_open']:.2f} us")
            print(f"- + fastbench's other wake-ups (chunks that might have been a stream's last): "
                  f"{acc['wakeups_beyond_ends']:.2f} us")
            print(f"- + the rest (HTTP/SSE/JSON parsing, histograms, rows, sending): {acc['rest']:.2f} us")
            print(f"- = fastbench: {acc['fastbench']:.2f} us")
    print(f"\nload average at start: {_loads(load_start)}; at the end: {_loads(load_end)}")
    if ns.json:
        with open(ns.json, "w") as f:
            doc: dict[str, Any] = {f"{_row(n, b)} coalesce_us={c}": rs for (n, c, b), rs in runs.items()}
            doc["wake_cost"] = wakes
            if THIS in accounts:
                doc["accounting"] = accounts[THIS]
            if BASE in accounts:
                doc["accounting_base"] = accounts[BASE]
            doc["builds"] = {b: {"label": build.label, "python": build.python} for b, build in builds.items()}
            doc["paired_ratios_this_over_base"] = {f"{n} coalesce_us={c}": rs for (n, c), rs in ratios.items()}
            doc["load_average"] = {"start": load_start, "end": load_end}
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
