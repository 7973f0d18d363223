"""The memory sampler of one run: started before any launch, given the server's pid, stopped after
the window; what it measured, with vLLM's own account of its footprint, as a ``MemoryReport``.

The sampler itself is ``server/memory.py``, which also runs as a standalone script and so imports
nothing of fastbench; this is the glue between it and a run.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from fastbench.config import BenchConfig
from fastbench.results.observations import MemoryReport
from fastbench.server.external import ExternalServer
from fastbench.server.launch import LaunchedServer

if TYPE_CHECKING:
    from fastbench.server.memory import MemorySampler, MemorySeries

__all__ = ("MemoryRun", "memory_report", "start_memory_sampler")


class MemoryRun:
    """The memory sampler of one run; ``stop()`` may be called twice."""

    def __init__(self, sampler: MemorySampler) -> None:
        self.sampler = sampler
        self.series: MemorySeries | None = None
        self.stopped = False

    def set_server_pid(self, pid: int) -> None:
        self.sampler.set_server_pid(pid)

    def follow(self, server: LaunchedServer | ExternalServer) -> None:
        """Measure the server's process tree and, for a container, its memory cgroup, from the next
        sample on (as soon as they are known: a launch's at its start)."""
        if server.pid is not None:
            self.sampler.set_server_pid(server.pid)
        cgroup = server.memory_cgroup if isinstance(server, LaunchedServer) else None
        if cgroup is not None:
            self.sampler.set_server_cgroup(*cgroup)

    def stop(self) -> MemorySeries | None:
        """Stop sampling (once) and return the MemorySeries."""
        if not self.stopped:
            self.stopped = True
            self.series = self.sampler.stop()
        return self.series


def start_memory_sampler(config: BenchConfig) -> MemoryRun | None:
    """A started memory sampler when sampling is on for this run: ``--memory-interval`` (default 1 s
    when fastbench launches the server, off otherwise). None when off or when the module is missing."""
    interval = config.memory_interval_s
    if interval is None:
        interval = 1.0 if config.launch is not None else 0.0
    if not interval > 0:
        return None
    try:
        from fastbench.server.memory import MemorySampler, SamplerError
    except ImportError:  # pragma: no cover - the module ships with fastbench
        return None
    sampler = MemorySampler(interval_s=interval, server_pid=None)
    try:
        sampler.start()
    except SamplerError as exc:  # memory figures are lost, the benchmark is not
        warnings.warn(f"memory sampling is off for this run: {exc}", RuntimeWarning, stacklevel=2)
        return None
    return MemoryRun(sampler)


def memory_report(series: MemorySeries | None, server: LaunchedServer | ExternalServer, *,
                  baseline_before_server: bool = True) -> MemoryReport | None:
    """The memory series for the result, its peaks, and the engine's footprint from its
    log (vLLM's); None when there is neither. ``baseline_before_server`` False: fastbench attached to a
    server already running."""
    footprint = server.footprint() if isinstance(server, LaunchedServer) else None
    if series is None and footprint is None:
        return None
    return MemoryReport(
        series=series.to_dict() if series is not None else None,
        peaks=series.peaks() if series is not None else None,
        footprint=footprint,
        baseline_before_server=baseline_before_server,
    )
