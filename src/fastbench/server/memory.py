"""The memory sampler: a co-process that records what the server takes, once per interval.

What is measured, every ``interval_s`` on CLOCK_MONOTONIC (``time.monotonic_ns()``, the clock of every
fastbench process, so samples line up with request timestamps):

- **System memory**: ``MemTotal`` and ``MemAvailable`` from ``/proc/meminfo``, and the *drop* of
  MemAvailable from a baseline read when the sampler starts. fastbench starts the sampler before it
  launches a server, so the drop is what the server took: everything, reservations included (a vLLM
  ``--gpu-memory-utilization 0.85`` reservation on a unified-memory machine is in it, which is why the
  published cards had to write "108 GB = 0.85 reservation, not footprint"). MemAvailable counts
  reclaimable page cache as available, so reading weights from disk does not show up as a drop. On
  unified-memory machines (GB10, Strix Halo) this is the only figure there is.
- **The server's process tree RSS**: the root pid and all its descendants, found by one scan of
  ``/proc/*/stat`` parent pids per sample (``/proc/<pid>/task/*/children`` needs CONFIG_PROC_CHILDREN,
  absent on this machine's kernel, and is documented as unreliable unless the children are stopped);
  ``VmRSS`` of each from ``/proc/<pid>/status``, summed. Pages shared between processes (shared memory,
  libraries, copy-on-write after fork) count once per process, so the sum can exceed the footprint.
  Processes that vanish mid-walk are skipped. For a docker server, give the container's main pid
  (``docker inspect -f '{{.State.Pid}}'``), not the pid of the ``docker run`` client.
- **A container's memory cgroup** (``set_server_cgroup``; server/container.py finds it): ``memory.current``
  and the kernel's ``memory.peak`` (cgroup v2), or ``memory.usage_in_bytes`` and ``memory.max_usage_in_bytes``
  (v1): what the kernel charges all the container's processes, page cache included. Beside the tree's RSS
  it counts shared pages once and sees processes that left the tree.
- **NVIDIA GPUs through NVML** (``pynvml``, from the optional ``nvidia-ml-py`` package): used and total
  memory (``nvmlDeviceGetMemoryInfo``), utilisation (``nvmlDeviceGetUtilizationRates().gpu``) and power
  (``nvmlDeviceGetPowerUsage``, mW). Any field may be unsupported: it is recorded as ``None`` with a
  note, never an error. A GPU whose memory NVML answers NOT_SUPPORTED for (GB10: unified memory, the
  GPU's memory is the system's) gets the system's figures as its own (``GpuInfo.memory`` "system"):
  MemTotal - MemAvailable used of MemTotal, read in the same sample.
- **AMD GPUs through amdgpu sysfs**: ``device/mem_info_vram_used``, ``mem_info_vram_total``,
  ``mem_info_gtt_used``, ``gpu_busy_percent`` and ``hwmon/hwmon*/power1_average`` (µW; ``power1_input``
  where there is no average) under each ``cardN`` of ``/sys/class/drm``.

Units: memory is stored as integer bytes and shown in GiB (2**30 bytes, labelled "GiB": GiB is not GB);
power in W; utilisation in %; times in ns, and in seconds from the baseline (``t_s``) in ``to_dict()``.

Why a separate interpreter and not a task in the client's event loop, nor ``multiprocessing``: the sampler
must not steal the loop's time or touch the client's heap, and a "spawn" child would re-import the
parent's ``__main__`` and the whole ``fastbench`` package (aiohttp, the compiled core: ~0.3 s and tens
of MB) to unpickle its target. Instead the co-process is ``server/memchild.py`` (its loop) over
``server/memread.py`` (the readers and records), both standard library only, run as ``python -I`` with
this package's root on ``sys.path`` (``-I`` ignores ``PYTHONPATH`` and the user's site: ``pynvml`` is
looked for in the interpreter's site-packages). It talks through its pipes: commands in on stdin
(``pid N``, ``stop``), one JSON line per sample out on stdout. Here, a daemon thread reads those lines
(blocking reads, GIL released; one small message per interval). The child exits on ``stop``, or when
its stdin closes because the parent is gone; it ignores SIGINT so that Ctrl-C in a terminal reaches the
benchmark, which then calls ``stop()``. Both ends of the pipe's message format are this module's
``_on_message`` and memchild's ``emit`` calls.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from fastbench.server.memread import (
    CGROUP_SOURCE,
    GIB,
    RSS_SOURCE,
    Baseline,
    GpuInfo,
    GpuReading,
    Sample,
    amdgpu_probe,
    amdgpu_read,
    nvml_probe,
    nvml_read,
    process_tree,
    read_meminfo,
    tree_rss,
)

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self needs Python 3.11

__all__ = (
    "GIB",
    "Baseline",
    "GpuInfo",
    "GpuReading",
    "MemorySampler",
    "MemorySeries",
    "Sample",
    "SamplerError",
    "amdgpu_probe",
    "amdgpu_read",
    "child_command",
    "nvml_probe",
    "nvml_read",
    "process_tree",
    "read_meminfo",
    "tree_rss",
)

START_TIMEOUT_S = 15.0
"""How long ``start()`` waits for the co-process to report its baseline."""

_NS_PER_S = 1_000_000_000
_T = TypeVar("_T")
# The directory that holds the fastbench package the parent runs: the child imports the same copy.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class SamplerError(RuntimeError):
    """The sampler co-process could not be started (it never reported a baseline)."""


def child_command(*args: str) -> list[str]:
    """The co-process's command line: ``python -I`` running server/memchild.py's ``main`` from this
    package's own copy (not whichever fastbench the bare interpreter would find), with ``args``."""
    code = (f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); from fastbench.server.memchild import main; "
            "sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-I", "-c", code, *args]


# -- the series ------------------------------------------------------------------------------------------


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / GIB, 3)


def _peak(values: Sequence[_T | None], t_s: Sequence[float]) -> tuple[_T | None, float | None]:
    best: Any = None
    at = None
    for v, t in zip(values, t_s):
        if v is not None and (best is None or v > best):
            best, at = v, t
    return best, at


DEFINITIONS = {
    "mem_available_drop_bytes": (
        "MemAvailable at the baseline (taken when the sampler started, before the server was launched) minus "
        "MemAvailable at the sample: everything the machine lost since, reservations included"
    ),
    "server_rss_bytes": RSS_SOURCE,
    "cgroup_memory_bytes": CGROUP_SOURCE,
    "gpu used_bytes": (
        "device memory in use: NVML nvmlDeviceGetMemoryInfo().used, or amdgpu mem_info_vram_used; for a GPU with "
        "unified memory (gpus[].memory 'system': NVML answers NOT_SUPPORTED for its memory, as on GB10) the "
        "system's MemTotal - MemAvailable, its total MemTotal"
    ),
    "gpu util_pct": "NVML utilization.gpu, or amdgpu gpu_busy_percent",
    "gpu power_w": "NVML nvmlDeviceGetPowerUsage (mW / 1000), or amdgpu hwmon power1_average (µW / 1e6)",
    "gib": "GiB = 2**30 bytes",
}


@dataclasses.dataclass
class MemorySeries:
    """What the sampler recorded: the baseline, one ``Sample`` per interval, the GPUs and notes."""

    interval_s: float
    baseline: Baseline
    samples: list[Sample]
    gpus: list[GpuInfo]
    gpu_sources: dict[str, str]  # "nvml" / "amdgpu" -> what was found ("2 devices", "pynvml not importable")
    server_pid: int | None
    notes: list[str]
    rss_source: str = RSS_SOURCE
    cgroup: tuple[str, str] | None = None  # a container's memory cgroup: (directory, "v1" | "v2")

    def _t_s(self) -> list[float]:
        return [round((s.t_ns - self.baseline.t_ns) / _NS_PER_S, 6) for s in self.samples]

    def peaks(self) -> dict[str, Any]:
        """Peak MemAvailable drop, peak server RSS, per-GPU peaks (used memory, utilisation, power) and the
        peak of the GPUs' summed power, each with the time of the peak in seconds from the baseline."""
        t_s = self._t_s()
        drop, drop_t = _peak([s.mem_available_drop for s in self.samples], t_s)
        rss, rss_t = _peak([s.server_rss for s in self.samples], t_s)
        cg, cg_t = _peak([s.cgroup_memory for s in self.samples], t_s)
        cg_kernel, _ = _peak([s.cgroup_memory_peak for s in self.samples], t_s)
        gpus = []
        for i, info in enumerate(self.gpus):
            rows = [s.gpus[i] for s in self.samples]
            used, used_t = _peak([r.used_bytes for r in rows], t_s)
            total, _ = _peak([r.total_bytes for r in rows], t_s)
            gtt, _ = _peak([r.gtt_used_bytes for r in rows], t_s)
            util, _ = _peak([r.util_pct for r in rows], t_s)
            power, _ = _peak([r.power_w for r in rows], t_s)
            gpus.append(
                {
                    "label": info.label,
                    "used_bytes": used,
                    "used_gib": _gib(used),
                    "used_t_s": used_t,
                    "total_bytes": total,
                    "total_gib": _gib(total),
                    "gtt_used_bytes": gtt,
                    "gtt_used_gib": _gib(gtt),
                    "util_pct": util,
                    "power_w": power,
                }
            )
        power_sums = [
            sum(p) if (p := [r.power_w for r in s.gpus if r.power_w is not None]) else None
            for s in self.samples
        ]
        total_power, _ = _peak(power_sums, t_s)
        return {
            "mem_available_drop_bytes": drop,
            "mem_available_drop_gib": _gib(drop),
            "mem_available_drop_t_s": drop_t,
            "server_rss_bytes": rss,
            "server_rss_gib": _gib(rss),
            "server_rss_t_s": rss_t,
            "cgroup_memory_bytes": cg,
            "cgroup_memory_gib": _gib(cg),
            "cgroup_memory_t_s": cg_t,
            "cgroup_memory_peak_bytes": cg_kernel,
            "cgroup_memory_peak_gib": _gib(cg_kernel),
            "gpus": gpus,
            "gpu_power_total_w": None if total_power is None else round(total_power, 3),
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: units in every key (``_bytes``, ``_gib``, ``_w``, ``_pct``), times as ``t_s`` from
        the baseline; the series as columns; ``t0_monotonic_ns`` aligns them with the client's clock."""
        b = self.baseline
        series: dict[str, Any] = {
            "t_s": self._t_s(),
            "mem_available_bytes": [s.mem_available for s in self.samples],
            "mem_available_drop_bytes": [s.mem_available_drop for s in self.samples],
            "server_rss_bytes": [s.server_rss for s in self.samples],
            "server_procs": [s.server_procs for s in self.samples],
            "cgroup_memory_bytes": [s.cgroup_memory for s in self.samples],
            "cgroup_memory_peak_bytes": [s.cgroup_memory_peak for s in self.samples],
            "gpus": [
                {
                    "label": info.label,
                    "used_bytes": [s.gpus[i].used_bytes for s in self.samples],
                    "total_bytes": [s.gpus[i].total_bytes for s in self.samples],
                    "util_pct": [s.gpus[i].util_pct for s in self.samples],
                    "power_w": [s.gpus[i].power_w for s in self.samples],
                    **(
                        {"gtt_used_bytes": [s.gpus[i].gtt_used_bytes for s in self.samples]}
                        if info.source == "amdgpu"
                        else {}
                    ),
                }
                for i, info in enumerate(self.gpus)
            ],
        }
        return {
            "interval_s": self.interval_s,
            "clock": "CLOCK_MONOTONIC",
            "t0_monotonic_ns": b.t_ns,
            "num_samples": len(self.samples),
            "server_pid": self.server_pid,
            "baseline": {
                "mem_total_bytes": b.mem_total,
                "mem_total_gib": _gib(b.mem_total),
                "mem_available_bytes": b.mem_available,
                "mem_available_gib": _gib(b.mem_available),
            },
            "gpus": [dataclasses.asdict(g) for g in self.gpus],
            "gpu_sources": dict(self.gpu_sources),
            "rss_source": self.rss_source,
            "cgroup": (None if self.cgroup is None else
                       {"path": self.cgroup[0], "version": self.cgroup[1], "source": CGROUP_SOURCE}),
            "peaks": self.peaks(),
            "series": series,
            "definitions": dict(DEFINITIONS),
            "notes": list(self.notes),
        }


# -- the parent's side -----------------------------------------------------------------------------------


class MemorySampler:
    """Starts, steers and stops the sampler co-process.

    ::

        sampler = MemorySampler(interval_s=1.0)
        sampler.start()                      # baseline taken here, before the server exists
        server = launch_server()
        sampler.set_server_pid(server.pid)
        ...                                  # the benchmark
        series = sampler.stop()              # returns within about interval_s + 1 s, even if the child died

    :param interval_s: seconds between samples (> 0).
    :param server_pid: root of the server's process tree, if already known (see ``set_server_pid``).
    :param nvml: read NVIDIA GPUs through ``pynvml`` where it imports and ``nvmlInit`` succeeds.
    :param sysfs_root: where to look for amdgpu ``cardN`` directories.
    :param proc_root: where ``meminfo`` and the ``<pid>`` directories are (tests use fake trees).
    """

    def __init__(
        self,
        interval_s: float = 1.0,
        server_pid: int | None = None,
        *,
        nvml: bool = True,
        sysfs_root: str = "/sys/class/drm",
        proc_root: str = "/proc",
    ) -> None:
        if not (math.isfinite(interval_s) and interval_s > 0):
            raise ValueError(f"interval_s must be a finite number of seconds > 0, got {interval_s}")
        self.interval_s = interval_s
        self._server_pid = server_pid
        self._cgroup: tuple[str, str] | None = None
        self._nvml = nvml
        self._sysfs_root = sysfs_root
        self._proc_root = proc_root
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._baseline_seen = threading.Event()
        self._baseline: Baseline | None = None
        self._samples: list[Sample] = []
        self._gpus: list[GpuInfo] = []
        self._gpu_sources: dict[str, str] = {}
        self._notes: list[str] = []
        self._ended = False
        self._skipped_ticks = 0
        self._series: MemorySeries | None = None

    @property
    def pid(self) -> int | None:
        """The co-process's own pid (``None`` before ``start()``)."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the co-process and wait until it has read the baseline (normally well under a second).

        :raises SamplerError: when it does not report a baseline within ``START_TIMEOUT_S``.
        """
        if self._proc is not None:
            raise RuntimeError("this MemorySampler was already started")
        cmd = child_command(
            f"--interval-s={self.interval_s!r}", f"--proc-root={self._proc_root}", f"--sysfs-root={self._sysfs_root}")
        if not self._nvml:
            cmd.append("--no-nvml")
        if self._server_pid is not None:
            cmd.append(f"--pid={self._server_pid}")
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True
        )
        self._reader = threading.Thread(target=self._read, name="fastbench-memsampler", daemon=True)
        self._reader.start()
        if not self._baseline_seen.wait(START_TIMEOUT_S) or self._baseline is None:
            self._proc.kill()
            self._proc.wait()
            self._reader.join(1.0)
            err = self._stderr_tail()
            self._close_pipes()
            raise SamplerError(
                f"the memory sampler reported no baseline within {START_TIMEOUT_S:g} s"
                + (f": {err}" if err else "")
            )

    def set_server_pid(self, pid: int) -> None:
        """Measure ``pid`` and its descendants from the next sample on (the server is launched after the
        baseline, so its pid is usually known only now)."""
        self._server_pid = pid
        if self._proc is None:
            return  # passed on the command line at start()
        if self._series is not None:
            raise RuntimeError("set_server_pid() after stop()")
        self._send(f"pid {int(pid)}\n".encode())

    def set_server_cgroup(self, directory: str, version: str) -> None:
        """Read this memory cgroup (a container's; ``version`` "v1" or "v2") from the next sample on."""
        if self._series is not None:
            raise RuntimeError("set_server_cgroup() after stop()")
        self._cgroup = (directory, version)
        if self._proc is not None:
            self._send(f"cgroup {version} {directory}\n".encode())

    def latest(self) -> Sample | None:
        """The most recent sample received, for a live display (``None`` before the first)."""
        return self._samples[-1] if self._samples else None

    def stop(self) -> MemorySeries:
        """Stop the co-process (it takes one last sample) and return the series.

        Returns within about ``interval_s + 1`` s: a co-process that does not exit by then is killed. If it
        died earlier, the series holds what was received, and a note says so. A second call returns the
        same series.
        """
        if self._series is not None:
            return self._series
        if self._proc is None or self._reader is None or self._baseline is None:
            raise RuntimeError("stop() before start()")
        deadline = time.monotonic() + self.interval_s + 1.0
        self._send(b"stop\n")
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        except OSError:
            pass
        self._reader.join(max(0.0, deadline - time.monotonic()))
        try:
            self._proc.wait(max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            self._notes.append(
                f"the sampler did not stop within {self.interval_s + 1:g} s and was killed; the series "
                f"holds the {len(self._samples)} samples received"
            )
        else:
            if not self._ended:
                self._notes.append(self._death_note())
        self._reader.join(1.0)
        if not self._reader.is_alive():
            self._close_pipes()
        if self._skipped_ticks:
            self._notes.append(
                f"{self._skipped_ticks} sampling ticks were skipped because a sample took longer "
                f"than the {self.interval_s:g} s interval"
            )
        self._series = MemorySeries(
            interval_s=self.interval_s,
            baseline=self._baseline,
            samples=list(self._samples),
            gpus=list(self._gpus),
            gpu_sources=dict(self._gpu_sources),
            server_pid=self._server_pid,
            notes=list(self._notes),
            cgroup=self._cgroup,
        )
        return self._series

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- internals

    def _send(self, line: bytes) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(line)
            self._proc.stdin.flush()
        except (OSError, ValueError):  # the co-process is gone (BrokenPipeError) or stdin already closed
            pass

    def _read(self) -> None:
        """The reader thread: one JSON message per line until the co-process's stdout closes."""
        assert self._proc is not None and self._proc.stdout is not None
        try:
            for line in self._proc.stdout:
                try:
                    self._on_message(json.loads(line))
                except (ValueError, KeyError, TypeError) as exc:  # a line cut short by a kill, at worst
                    self._notes.append(f"unreadable message from the sampler ({exc!r}): {line[:80]!r}")
        finally:
            self._baseline_seen.set()  # also unblocks start() when the co-process died before a baseline

    def _on_message(self, msg: dict[str, Any]) -> None:
        kind = msg["k"]
        if kind == "s":
            assert self._baseline is not None
            avail = msg["avail"]
            self._samples.append(
                Sample(
                    t_ns=msg["t"],
                    mem_total=msg["total"],
                    mem_available=avail,
                    mem_available_drop=self._baseline.mem_available - avail,
                    server_rss=msg["rss"],
                    server_procs=msg["procs"],
                    gpus=tuple(GpuReading.from_list(row) for row in msg["gpus"]),
                    cgroup_memory=msg["cg"][0],
                    cgroup_memory_peak=msg["cg"][1],
                )
            )
        elif kind == "note":
            self._notes.append(msg["text"])
        elif kind == "baseline":
            self._baseline = Baseline(t_ns=msg["t"], mem_total=msg["total"], mem_available=msg["avail"])
            self._baseline_seen.set()
        elif kind == "gpus":
            self._gpus = [GpuInfo(**g) for g in msg["gpus"]]
            self._gpu_sources = dict(msg["sources"])
        elif kind == "end":
            self._skipped_ticks = msg["skipped_ticks"]
            self._ended = True

    def _close_pipes(self) -> None:
        assert self._proc is not None
        for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):  # stdin's flush on close, if the co-process is gone
                    pipe.close()

    def _stderr_tail(self) -> str:
        assert self._proc is not None and self._proc.stderr is not None
        if self._proc.poll() is None:
            return ""
        try:
            err = self._proc.stderr.read().decode(errors="replace").strip()
        except (OSError, ValueError):
            return ""
        return " | ".join(err.splitlines()[-3:])

    def _death_note(self) -> str:
        assert self._proc is not None
        rc = self._proc.returncode
        if rc is not None and rc < 0:
            try:
                how = f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                how = f"killed by signal {-rc}"
        else:
            how = f"exit status {rc}"
        last = self.latest()
        until = (
            f", up to t={(last.t_ns - self._baseline.t_ns) / _NS_PER_S:.1f} s"
            if last is not None and self._baseline is not None
            else ""
        )
        err = self._stderr_tail()
        return (
            f"the sampler process died before stop() ({how}); the series holds the {len(self._samples)} "
            f"samples received{until}" + (f"; its stderr: {err}" if err else "")
        )
