"""fastbench's CPU per chunk beside the floor: a minimal C client (bench/floor_client.c) that only
reads the sockets, at the same load, in one run.

At 256 streams and 20 ms between chunks (~12.8k chunks/s) every chunk arrives as its own TCP
segment, so each one costs a wake-up share, one recvmsg and the ACK it sends (on loopback the ACK's
processing at the server's socket runs on the client's CPU too). This script measures how much of
fastbench's CPU per chunk that floor already is: both clients alternate against one synthetic
server, pinned to different CPUs, with and without coalesced wake-ups, and with io_uring multishot
receives where liburing is installed.

Usage (from the repository root)::

    .venv/bin/python bench/cpu_floor.py              # ~2 minutes
    .venv/bin/python bench/cpu_floor.py --reps 1 --seconds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fastbench.synthetic import SyntheticServer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fast_server import CFLAGS, CompilerNotFoundError, find_compiler  # noqa: E402  (a sibling script)


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


def run_floor(exe: Path, port: int, streams: int, seconds: float, mode: str, coalesce_us: int,
              cpu: set[int] | None) -> dict[str, Any]:
    out = subprocess.run([str(exe), str(port), str(streams), str(seconds), mode, str(coalesce_us)],
                         capture_output=True, text=True, check=True,
                         preexec_fn=(lambda: os.sched_setaffinity(0, cpu)) if cpu else None)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def run_fastbench(base_url: str, streams: int, seconds: float, coalesce_ms: float,
                  cpu: set[int] | None) -> dict[str, Any]:
    # Requests of 64 chunks, ~1.3 s each at 20 ms: enough of them to fill `seconds` of window.
    num_requests = streams * max(2, round(seconds / 1.33))
    cmd = [sys.executable, "-m", "fastbench", "validate", "--base-url", base_url, "--concurrency", str(streams),
           "--num-requests", str(num_requests), "--json", "-", "--quiet"]
    if coalesce_ms:
        cmd += ["--coalesce-ms", str(coalesce_ms)]
    out = subprocess.run(cmd, capture_output=True, text=True,
                         preexec_fn=(lambda: os.sched_setaffinity(0, cpu)) if cpu else None)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"fastbench validate failed: {out.stderr.strip()}")
    doc = json.loads(out.stdout)
    return {"cpu_us_per_chunk": doc["client_cpu_us_per_chunk"], "chunks_per_s": doc["chunks_per_s"],
            "reads_per_wakeup": doc["reads"] / doc["wakeups"] if doc["wakeups"] else None,
            "verdict": doc["verdict"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--seconds", type=float, default=5.0, help="measured seconds per run")
    p.add_argument("--reps", type=int, default=3, help="alternations of all clients")
    p.add_argument("--coalesce-ms", type=float, default=1.0, help="the coalesced variant's window")
    p.add_argument("--json", help="write all runs here")
    ns = p.parse_args(argv)

    cpus = sorted(os.sched_getaffinity(0))
    client_cpu, server_cpu = ({cpus[0]}, {cpus[-1]}) if len(cpus) >= 2 else (None, None)
    coalesce_us = round(ns.coalesce_ms * 1000)
    with tempfile.TemporaryDirectory() as tmp:
        exe, has_uring = build_floor_client(Path(tmp))
        clients = [("fastbench", 0), ("floor epoll", 0), ("fastbench", coalesce_us), ("floor epoll", coalesce_us)]
        if has_uring:
            clients += [("floor uring", 0), ("floor uring", coalesce_us)]
        runs: dict[tuple[str, int], list[dict[str, Any]]] = {c: [] for c in clients}
        with SyntheticServer(ttft_ms=50, itl_ms=20) as server:
            if server_cpu:
                os.sched_setaffinity(server.pid, server_cpu)
            for rep in range(ns.reps):
                for name, co in clients if rep % 2 == 0 else reversed(clients):
                    if name == "fastbench":
                        r = run_fastbench(server.base_url, ns.streams, ns.seconds, co / 1000, client_cpu)
                    else:
                        r = run_floor(exe, server.port, ns.streams, ns.seconds, name.split()[1], co, client_cpu)
                    runs[(name, co)].append(r)
                    print(f"  rep {rep + 1} {name:12s} coalesce {co / 1000:.1f} ms: "
                          f"{r['cpu_us_per_chunk']:.2f} us/chunk, {r['reads_per_wakeup']:.1f} reads/wake-up, "
                          f"{r['chunks_per_s']:,.0f} chunks/s", flush=True)

    print(f"\nCPU per chunk, {ns.streams} streams, 20 ms between chunks (median of {ns.reps}; "
          f"client on CPU {sorted(client_cpu or [])}, server on {sorted(server_cpu or [])}):\n")
    print("| client | coalesce | CPU us/chunk (median, min-max) | reads per wake-up | vs floor epoll |")
    print("|---|---|---|---|---|")
    medians = {c: statistics.median(r["cpu_us_per_chunk"] for r in rs) for c, rs in runs.items()}
    for (name, co), rs in runs.items():
        cpu = [r["cpu_us_per_chunk"] for r in rs]
        wake = statistics.median(r["reads_per_wakeup"] or 0.0 for r in rs)
        ratio = medians[(name, co)] / medians[("floor epoll", co)]
        print(f"| {name} | {co / 1000:.1f} ms | {medians[(name, co)]:.2f} ({min(cpu):.2f}-{max(cpu):.2f}) | "
              f"{wake:.1f} | {ratio:.2f}x |")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump({f"{n} coalesce_us={c}": rs for (n, c), rs in runs.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
