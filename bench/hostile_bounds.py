"""The time cap, --request-timeout, fairness and memory against a hostile server, this build beside another,
alternating which goes first: how late the cap and the timeouts came (each request's end stamp against the
cap's instant, or its send stamp plus the timeout), how the output events were shared among the
connections (fewest / most), peak RSS and the client's wall time.

The server is tests/support/hostile/server.py in its own process (``flood``: events as fast as the socket
takes them; ``huge-lines``: 1 MiB lines with no data field; see its docstring for the others). Each client
runs in a process of its own, so that its peak RSS is its own.

    .venv/bin/python bench/hostile_bounds.py --baseline-python /tmp/base/.venv/bin/python
    .venv/bin/python bench/hostile_bounds.py --baseline-python ... --mode huge-lines --concurrency 64 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

SERVER = Path(__file__).resolve().parents[1] / "tests" / "support" / "hostile" / "server.py"

# Runs in the measured build's python: only API that both builds have.
CLIENT = r"""
import json, resource, sys, time
import orjson, uvloop
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
from fastbench.results.records import COL
url, n, conc, cap_s, timeout_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
body = orjson.dumps({"model": "m", "prompt": "x", "max_tokens": 8, "stream": True})
plan = LoadPlan(bodies=[body] * n, warmup_bodies=[], concurrency=conc, max_seconds=cap_s or None,
                request_timeout_s=timeout_s or None)
t0 = time.monotonic_ns()
d = uvloop.run(LoadGenerator(Target.parse(url, "/v1/completions"), plan).run())
wall = (time.monotonic_ns() - t0) / 1e9
r = d.rows[d.rows[:, COL["sent_ns"]] > 0]
out = {"wall_s": wall, "reason": d.stopped_reason, "window_s": (d.end_ns - d.start_ns) / 1e9,
       "errors": sorted(set(int(e) for e in r[:, COL["error"]])),
       "chunks_min": int(r[:, COL["chunks"]].min()), "chunks_max": int(r[:, COL["chunks"]].max()),
       "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
if d.stopped_reason == "time cap":  # (the requests may all have failed before it)
    out["cap_late_ms"] = float((r[:, COL["end_ns"]].max() - d.start_ns) / 1e6 - cap_s * 1e3)
if timeout_s:
    late = (r[:, COL["end_ns"]] - r[:, COL["sent_ns"]]) / 1e6 - timeout_s * 1e3
    out["timeout_late_ms_max"] = float(late.max())
    out["timeout_late_ms_median"] = float(sorted(late)[len(late) // 2])
print(json.dumps(out))
"""


def one_run(python: str, mode: str, n: int, concurrency: int, cap_s: float, timeout_s: float,
            kill_after_s: float) -> dict[str, Any]:
    server = subprocess.Popen([sys.executable, str(SERVER), mode], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{int(server.stdout.readline())}"
        try:
            proc = subprocess.run([python, "-c", CLIENT, url, str(n), str(concurrency), str(cap_s), str(timeout_s)],
                                  capture_output=True, text=True, timeout=kill_after_s, cwd="/")
        except subprocess.TimeoutExpired:
            return {"killed_after_s": kill_after_s}
        if proc.returncode != 0:
            return {"failed": proc.stderr.strip().splitlines()[-1:]}
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return result
    finally:
        server.kill()
        server.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline-python", required=True, help="python of a venv with the other build")
    p.add_argument("--mode", default="flood", help="the hostile server's mode (default flood)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--requests", type=int, default=0, help="requests (default: the concurrency)")
    p.add_argument("--max-seconds", type=float, default=2.0, help="the time cap (0: none)")
    p.add_argument("--request-timeout", type=float, default=0.0, help="--request-timeout (0: none)")
    p.add_argument("--kill-after", type=float, default=60.0, help="a client still running then is killed")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="also write every run here")
    a = p.parse_args(argv)
    builds = {"this": sys.executable, "baseline": a.baseline_python}
    with open("/proc/loadavg") as f:
        print(f"load average before: {f.read().split()[:3]}", flush=True)
    runs: list[dict[str, Any]] = []
    for rnd in range(a.rounds):
        for name in (list(builds) if rnd % 2 == 0 else list(reversed(builds))):
            r = one_run(builds[name], a.mode, a.requests or a.concurrency, a.concurrency, a.max_seconds,
                        a.request_timeout, a.kill_after)
            r.update(build=name, round=rnd)
            runs.append(r)
            print(f"  {name:<9} {json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()})}",
                  flush=True)
    with open("/proc/loadavg") as f:
        print(f"load average after: {f.read().split()[:3]}")
    keys = ["cap_late_ms", "timeout_late_ms_max", "chunks_min", "chunks_max", "rss_mb", "wall_s"]
    print(f"\nMedians over {a.rounds} rounds, mode {a.mode}, concurrency {a.concurrency}:\n")
    print("| build | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name in builds:
        rs = [r for r in runs if r["build"] == name]
        cells = []
        for k in keys:
            vals = [r[k] for r in rs if k in r]
            cells.append(f"{statistics.median(vals):.1f}" if vals else "-")
        killed = sum("killed_after_s" in r for r in rs)
        print(f"| {name}{f' ({killed} killed)' if killed else ''} | " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
