"""What else the host did while validate measured: CPU used by other processes, the client's wait for
a CPU, and steal time, so that a verdict can say whether a FAIL is the client's or the busy host's.

Read from Linux's /proc at the two ends of the measured window, nothing sampled in between:

- ``/proc/stat``'s first line: every CPU's busy time (user, nice, system, irq, softirq) and steal, in
  clock ticks;
- this process's CPU time (all threads) and, when validate started it, the synthetic server's: the
  rest of the busy time is other processes';
- ``/proc/self/schedstat``'s second field: how long the client's main thread, which runs the event
  loop and reads every socket, was runnable but waiting for a CPU (run-queue wait, ns). This is what a
  busy host does to the client's stamps: a chunk that arrives while the loop waits is read late.

Elsewhere (no /proc) every figure is None and nothing is judged.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

__all__ = ("HostLoad", "HostSnapshot", "between", "process_cpu_s", "snapshot", "starved_because")

# A client thread that waited this share of the window for a CPU, other processes that kept this many
# CPUs busy, or this share of steal: the host, not the client, can explain a FAIL. Measured with
# `fastbench validate` at 16, 64 and 256 streams on this project's 2-vCPU VM (bench/RESULTS.md):
# - quiet (load average 0.2-1.1, 2026-12-02 03:57-04:35): others 0.00-0.20 CPU, the client's wait
#   0.4-4.1 % (it shares the two CPUs with the synthetic server), steal 0.3-8.5 %; every run PASSed;
# - beside other test suites: others 1.2-1.9 CPUs, the wait 6.5-10.7 %.
# Other processes' CPU tells the two apart; the wait and steal thresholds sit well over the quiet figures
# (steal, which this VM's hypervisor takes at up to 8.5 % when nothing else runs, at 20 %).
RUN_QUEUE_WAIT_SHARE = 0.10
OTHERS_CPUS = 0.5
STEAL_SHARE = 0.20


@dataclasses.dataclass(frozen=True)
class HostSnapshot:
    t_ns: int  # CLOCK_MONOTONIC
    busy_ticks: int | None  # all CPUs: user + nice + system + irq + softirq
    steal_ticks: int | None
    total_ticks: int | None  # the above, idle and iowait
    own_cpu_s: float  # this process, all threads
    run_queue_wait_ns: int | None  # this process's main thread


@dataclasses.dataclass(frozen=True)
class HostLoad:
    """The host over the measured window."""

    cpus: int  # the host's CPUs (/proc/stat counts them all)
    others_cpus: float | None  # mean CPUs kept busy by other processes (the synthetic server apart)
    client_run_queue_wait_ms: float | None
    client_run_queue_wait_share: float | None  # of the window
    steal_share: float | None  # of all CPU time

    def busy_figures(self) -> list[str]:
        """The figures that say the host was busy (empty when it was quiet or nothing was read)."""
        out = []
        if self.client_run_queue_wait_share is not None and self.client_run_queue_wait_share >= RUN_QUEUE_WAIT_SHARE:
            out.append(f"the client waited {self.client_run_queue_wait_ms:.0f} ms for a CPU "
                       f"({100 * self.client_run_queue_wait_share:.1f} % of the window)")
        if self.others_cpus is not None and self.others_cpus >= OTHERS_CPUS:
            out.append(f"other processes kept {self.others_cpus:.2f} of {self.cpus} CPUs busy")
        if self.steal_share is not None and self.steal_share >= STEAL_SHARE:
            out.append(f"the hypervisor took {100 * self.steal_share:.1f} % of CPU time (steal)")
        return out

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _proc_stat() -> tuple[int, int, int] | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    busy = user + nice + system + irq + softirq
    return busy, steal, busy + idle + iowait + steal


def _run_queue_wait_ns() -> int | None:
    try:
        with open("/proc/self/schedstat", encoding="ascii") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process, from /proc (Linux); None elsewhere, or once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def snapshot() -> HostSnapshot:
    stat = _proc_stat()
    return HostSnapshot(
        t_ns=time.monotonic_ns(),
        busy_ticks=stat[0] if stat else None,
        steal_ticks=stat[1] if stat else None,
        total_ticks=stat[2] if stat else None,
        own_cpu_s=time.process_time(),
        run_queue_wait_ns=_run_queue_wait_ns(),
    )


def between(start: HostSnapshot, end: HostSnapshot, server_cpu_s: float | None = None) -> HostLoad:
    """The host from ``start`` to ``end``; ``server_cpu_s``: the synthetic server's CPU time over the same
    span, when validate started it (it is measured, not other load)."""
    window_s = (end.t_ns - start.t_ns) / 1e9
    cpus = os.cpu_count() or 1
    others = steal = None
    if (start.busy_ticks is not None and end.busy_ticks is not None and start.total_ticks is not None
            and end.total_ticks is not None and start.steal_ticks is not None and end.steal_ticks is not None
            and window_s > 0):
        tick_s = 1 / os.sysconf("SC_CLK_TCK")
        busy_s = (end.busy_ticks - start.busy_ticks) * tick_s
        others = max(0.0, busy_s - (end.own_cpu_s - start.own_cpu_s) - (server_cpu_s or 0.0)) / window_s
        total = end.total_ticks - start.total_ticks
        steal = (end.steal_ticks - start.steal_ticks) / total if total > 0 else None
    wait_ms = wait_share = None
    if start.run_queue_wait_ns is not None and end.run_queue_wait_ns is not None and window_s > 0:
        wait_ms = (end.run_queue_wait_ns - start.run_queue_wait_ns) / 1e6
        wait_share = wait_ms / 1e3 / window_s
    return HostLoad(cpus=cpus, others_cpus=others, client_run_queue_wait_ms=wait_ms,
                    client_run_queue_wait_share=wait_share, steal_share=steal)


def starved_because(load: HostLoad | None) -> str | None:
    """One line naming what kept the client from its CPU, or None when the host was quiet."""
    figures = load.busy_figures() if load is not None else []
    return "; ".join(figures) if figures else None
