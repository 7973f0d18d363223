"""Open loop on time: how late the client sends each arrival, this code beside another build.

What it measures: in open loop TTFT counts from the scheduled arrival, so the client's own send
lateness lands in the server's figures. This script runs ``fastbench validate`` (the same command
users run) against the C synthetic server (``fast_server.c``: it keeps 50 ms between chunks for
1,000 streams), once per client build, alternating which goes first, and prints per setting:

* dispatch lag (sent - scheduled, every request) p50 / p99 / max and the share sent > 0.1 ms late;
* the client's lateness past the later of the arrival and a free slot (what validate adds to the
  TTFT bound) p99 / max, and the TTFT p99-level error bound validate derives;
* skew p99, streams the server saw open (mean), client CPU per chunk;
* closed loop at the same stream count: streams kept open, skew, CPU per chunk.

Beside them, per open-loop setting and round, the host's own floor: ``timer_floor.c``, a C process that
does nothing but wait for Poisson arrivals at the same rate (timerfd armed 300 us early, the most the
core's lead goes to; the rest spun), pinned and scheduled as the clients are. Its lateness is what any
client on this host gets at best.

``--baseline-python`` is the interpreter of a venv with the other build installed, e.g. main at
0efc6a7 (``git archive 0efc6a7 | tar -x -C /tmp/base && cd /tmp/base && python3 -m venv .venv &&
.venv/bin/pip install -e .``). Each client run is a subprocess; client and server are pinned to
different CPUs where there are two.

    .venv/bin/python bench/open_loop_lag.py --baseline-python /tmp/base/.venv/bin/python
    .venv/bin/python bench/open_loop_lag.py --baseline-python ... --quick   # shorter runs
    .venv/bin/python bench/open_loop_lag.py --baseline-python ... --realtime   # clients under chrt -f 10
    .venv/bin/python bench/open_loop_lag.py --baseline-python ... --workers 2  # each client over 2 workers
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from fast_server import CFLAGS, CompilerNotFoundError, FastServer, find_compiler  # noqa: E402  (a sibling script)

ITL_MS = 50.0
TTFT_MS = 20.0


@dataclasses.dataclass(frozen=True)
class Setting:
    rate: float | None  # None: closed loop
    output_len: int
    num_requests: int
    concurrency: int
    coalesce_ms: float | None  # None: no flag, each build's default (auto since it has one, else 0)

    @property
    def label(self) -> str:
        mode = f"{self.rate:g}/s" if self.rate else "closed"
        streams = (f"~{self.rate * (TTFT_MS + self.output_len * ITL_MS) / 1e3:.0f} streams" if self.rate
                   else f"{self.concurrency} streams")
        window = "default" if self.coalesce_ms is None else f"{self.coalesce_ms:g}"
        return f"{mode}, {self.output_len} tok, {streams}" + (f", coalesce {window}" if self.coalesce_ms != 0 else "")


def settings(quick: bool) -> list[Setting]:
    """Open loop at 60 and 300 requests/s with ~750 streams open (50 ms between chunks), on every
    arrival, with 8 ms coalescing and with each build's default; closed loop at 768 streams."""
    scale = 0.5 if quick else 1.0
    out = []
    for coalesce in (0.0, 8.0, None):
        # 60/s x (0.02 + 256 x 0.05 s) = ~770 streams; 300/s x (0.02 + 50 x 0.05) = ~756.
        out.append(Setting(60.0, 256, int(1500 * scale), 1024, coalesce))
        out.append(Setting(300.0, 50, int(6000 * scale), 1024, coalesce))
    out.append(Setting(None, 64, int(3 * 768 * scale), 768, 0.0))
    return out


def cpu_plan() -> tuple[set[int] | None, set[int] | None]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    return {cpus[0]}, {cpus[-1]}


def run_client(python: str, base_url: str, s: Setting, client_cpus: set[int] | None,
               realtime: bool = False, workers: int = 1) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [python, "-m", "fastbench", "validate", "--base-url", base_url, "--quiet", "--json", out,
               "--concurrency", str(s.concurrency), "--num-requests", str(s.num_requests),
               "--output-len", str(s.output_len), "--itl-ms", str(ITL_MS), "--ttft-ms", str(TTFT_MS),
               "--tolerance-ms", "0.1"]
        if s.rate:
            cmd += ["--request-rate", str(s.rate)]
        if s.coalesce_ms is not None:
            cmd += ["--coalesce-ms", str(s.coalesce_ms)]
        if workers > 1:  # the client's worker processes inherit its CPUs
            cmd += ["--workers", str(workers)]
        if realtime:  # SCHED_FIFO: other processes on a shared machine cannot preempt the client
            cmd = ["chrt", "-f", "10", *cmd]
        # The other build's package, not this tree's: run from a neutral directory.
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if client_cpus:
            os.sched_setaffinity(proc.pid, client_cpus)
        _, err = proc.communicate(timeout=900)
        if not os.path.exists(out):
            raise RuntimeError(f"{python} validate failed ({proc.returncode}): {err.decode(errors='replace')}")
        with open(out) as f:
            report: dict[str, Any] = json.load(f)
    return report


FLOOR_LEAD_US = 300  # the most the core's learnt lead goes to: what it could get at best


def build_timer_floor(out_dir: str) -> str:
    cc = find_compiler()
    if cc is None:
        raise CompilerNotFoundError("open_loop_lag: no C compiler found (set $CC, or install cc, gcc or clang)")
    exe = os.path.join(out_dir, "timer_floor")
    subprocess.run([*cc, *CFLAGS, "-o", exe, str(ROOT / "bench" / "timer_floor.c"), "-lm"], check=True)
    return exe


def run_floor(exe: str, s: Setting, cpus: set[int] | None, realtime: bool, seed: int) -> dict[str, Any]:
    """The host's floor at this setting's rate, for as long as the clients' arrivals last."""
    assert s.rate
    cmd = [exe, str(s.rate), f"{s.num_requests / s.rate:.1f}", str(FLOOR_LEAD_US), str(seed)]
    if realtime:
        cmd = ["chrt", "-f", "10", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    r: dict[str, Any] = json.loads(out.stdout)
    # slot_*: with nothing to wait for, the floor's lateness is its lateness past when it could send
    return {"lag_p50": r["lag_p50"], "lag_p99": r["lag_p99"], "lag_p995": r["lag_p995"], "lag_max": r["lag_max"],
            "slot_p99": r["lag_p99"], "slot_max": r["lag_max"], "late_share": r["late_share"]}


def figures(r: dict[str, Any]) -> dict[str, Any]:
    series = {x["name"]: x for x in r["series"]}
    lag, slot = r["dispatch_lag"], r.get("slot_to_send") or {}
    return {
        "lag_p50": lag["p50"], "lag_p99": lag["p99"], "lag_max": lag["max"],
        "slot_p99": slot.get("p99"), "slot_max": slot.get("max"),
        "ttft_bound_p99": series["ttft"]["error_bound_p99_ms"],
        "skew_p99": r["skew"]["p99"], "streams_open": r["streams_open_mean"],
        "cpu_us_chunk": r["client_cpu_us_per_chunk"], "chunks_s": r["chunks_per_s"],
        "failed": r["failed"] + r["cancelled"], "late_share": r.get("late_share"),
    }


def _f(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline-python", help="python of a venv with the other build (without it: this build alone)")
    p.add_argument("--rounds", type=int, default=1, help="runs of each client per setting (alternating)")
    p.add_argument("--quick", action="store_true", help="half the requests")
    p.add_argument("--only", default="", help="comma-separated setting indexes to run (0-based)")
    p.add_argument("--json", help="also write every run's figures here")
    p.add_argument("--realtime", action="store_true",
                   help="run each client under chrt -f 10 (root): on a shared machine, what the client does "
                        "when other processes cannot preempt it")
    p.add_argument("--workers", type=int, default=1,
                   help="run each client as --workers N (the open loop's cap is then shared, or split, by them)")
    a = p.parse_args(argv)
    clients = {"this": sys.executable}
    if a.baseline_python:
        clients["baseline"] = a.baseline_python
    floor_dir = tempfile.mkdtemp(prefix="timer_floor-")
    floor = build_timer_floor(floor_dir)
    client_cpus, server_cpus = cpu_plan()
    chosen = settings(a.quick)
    if a.only:
        chosen = [chosen[int(i)] for i in a.only.split(",")]
    with open("/proc/loadavg") as f:
        print(f"load average before: {f.read().split()[:3]}; client CPUs {client_cpus}, server CPUs {server_cpus}")
    results: list[dict[str, Any]] = []
    for k, s in enumerate(chosen):
        server = FastServer(ttft_ms=TTFT_MS, itl_ms=ITL_MS, max_model_len=4096).start()
        if server_cpus:
            os.sched_setaffinity(server.pid, server_cpus)
        try:
            for rnd in range(a.rounds):
                order = list(clients) if (k + rnd) % 2 == 0 else list(reversed(clients))
                for name in order:
                    t0 = time.monotonic()
                    fig = figures(run_client(clients[name], server.base_url, s, client_cpus, a.realtime, a.workers))
                    fig.update(client=name, setting=s.label, round=rnd, wall_s=time.monotonic() - t0)
                    results.append(fig)
                    print(f"  {s.label:<40} {name:<10} lag p50/p99/max {_f(fig['lag_p50'])}/{_f(fig['lag_p99'])}/"
                          f"{_f(fig['lag_max'])} ms; TTFT p99 bound {_f(fig['ttft_bound_p99'])}", flush=True)
                if s.rate:
                    fig = run_floor(floor, s, client_cpus, a.realtime, seed=k * 100 + rnd + 1)
                    fig.update(client="host floor", setting=s.label, round=rnd, wall_s=None)
                    results.append(fig)
                    print(f"  {s.label:<40} host floor lag p50/p99/p99.5/max {_f(fig['lag_p50'])}/"
                          f"{_f(fig['lag_p99'])}/{_f(fig['lag_p995'])}/{_f(fig['lag_max'])} ms", flush=True)
        finally:
            server.stop()
    shutil.rmtree(floor_dir, ignore_errors=True)
    cols = ["lag_p50", "lag_p99", "lag_p995", "lag_max", "slot_p99", "slot_max", "ttft_bound_p99", "skew_p99",
            "streams_open", "cpu_us_chunk", "chunks_s", "failed", "late_share"]
    print()
    print("| setting | client | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for fig in results:
        print(f"| {fig['setting']} | {fig['client']} | " + " | ".join(
            _f(fig.get(c), 1 if c in ("streams_open", "chunks_s") else 3) for c in cols) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
