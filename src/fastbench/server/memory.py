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
- **NVIDIA GPUs through NVML** (``pynvml``, from the optional ``nvidia-ml-py`` package): used and total
  memory (``nvmlDeviceGetMemoryInfo``), utilisation (``nvmlDeviceGetUtilizationRates().gpu``) and power
  (``nvmlDeviceGetPowerUsage``, mW). Any field may be unsupported (GB10 reports no memory info): it is
  recorded as ``None`` with a note, never an error.
- **AMD GPUs through amdgpu sysfs**: ``device/mem_info_vram_used``, ``mem_info_vram_total``,
  ``mem_info_gtt_used``, ``gpu_busy_percent`` and ``hwmon/hwmon*/power1_average`` (µW; ``power1_input``
  where there is no average) under each ``cardN`` of ``/sys/class/drm``.

Units: memory is stored as integer bytes and shown in GiB (2**30 bytes, labelled "GiB": GiB is not GB);
power in W; utilisation in %; times in ns, and in seconds from the baseline (``t_s``) in ``to_dict()``.

Why a separate interpreter and not a task in the client's event loop, nor ``multiprocessing``: the sampler
must not steal the loop's time or touch the client's heap, and a "spawn" child would re-import the
parent's ``__main__`` and the whole ``fastbench`` package (aiohttp, the compiled core: ~0.3 s and tens
of MB) to unpickle its target. Instead this file runs on its own, with the standard library only:
``python -I .../server/memory.py`` (``-I`` keeps the package directory off ``sys.path``, and ignores
``PYTHONPATH``: ``pynvml`` is looked for in the interpreter's site-packages; ``python -m
fastbench.server.memory`` works too). It talks through its pipes: commands in on stdin (``pid N``,
``stop``), one JSON line per sample out on stdout. In the parent a daemon thread reads those lines
(blocking reads, GIL released; one small message per interval). The child exits on ``stop``, or when
its stdin closes because the parent is gone; it ignores SIGINT so that Ctrl-C in a terminal reaches the
benchmark, which then calls ``stop()``.

One module of ~960 lines because, run by path under ``-I``, the co-process can import nothing but the
standard library, not even this file's neighbours, so the records, the readers and the sampling loop
(about half the file) must live here. The parent's side (``MemorySampler``, ``MemorySeries``) could
move out, but it reads the JSON lines the loop writes: kept in one file, both ends of that pipe's
message format are read together and change together.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import json
import math
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

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
    "nvml_probe",
    "nvml_read",
    "process_tree",
    "read_meminfo",
    "tree_rss",
)

GIB = 1 << 30
"""Bytes in a GiB (gibibyte). Every figure shown is in GiB and labelled so."""

RSS_SOURCE = (
    "VmRSS from /proc/<pid>/status, summed over the server's process tree "
    "(pages shared between processes count once per process)"
)
START_TIMEOUT_S = 15.0
"""How long ``start()`` waits for the co-process to report its baseline."""

_NS_PER_S = 1_000_000_000
_T = TypeVar("_T")
Note = Callable[[str], None]


class SamplerError(RuntimeError):
    """The sampler co-process could not be started (it never reported a baseline)."""


# -- the records ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Baseline:
    """System memory when the sampler started, before the server was launched."""

    t_ns: int  # CLOCK_MONOTONIC
    mem_total: int  # bytes
    mem_available: int  # bytes


@dataclasses.dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU, as found when the sampler started."""

    label: str  # "GPU0" (NVML index) or "card1" (the drm card)
    source: str  # "nvml" or "amdgpu"
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU in one sample. ``None``: the field is unsupported or could not be read."""

    used_bytes: int | None
    total_bytes: int | None
    util_pct: float | None
    power_w: float | None
    gtt_used_bytes: int | None = None  # amdgpu only: system memory mapped for the GPU

    def to_list(self) -> list[float | int | None]:
        return [self.used_bytes, self.total_bytes, self.util_pct, self.power_w, self.gtt_used_bytes]

    @classmethod
    def from_list(cls, row: Sequence[Any]) -> GpuReading:
        used, total, util, power, gtt = row
        return cls(used, total, util, power, gtt)


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """One sample: system memory, the server tree, and one reading per GPU (in ``MemorySeries.gpus`` order)."""

    t_ns: int  # CLOCK_MONOTONIC
    mem_total: int  # bytes
    mem_available: int  # bytes
    mem_available_drop: int  # bytes: baseline MemAvailable minus this one (negative if memory was freed)
    server_rss: int | None  # bytes; None before a server pid is known or after the server is gone
    server_procs: int  # processes in the server's tree that were read
    gpus: tuple[GpuReading, ...]


# -- readers (run in the co-process; plain functions so that tests can point them at fake trees) ---------


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except (OSError, ValueError):  # vanished process (ENOENT, ESRCH), permission, EBUSY from a driver
        return None


def read_meminfo(proc_root: str = "/proc") -> tuple[int, int]:
    """``(MemTotal, MemAvailable)`` in bytes from ``<proc_root>/meminfo``.

    :raises OSError: when the file cannot be read.
    :raises ValueError: when either field is missing (MemAvailable needs Linux >= 3.14).
    """
    with open(os.path.join(proc_root, "meminfo"), "rb") as f:
        text = f.read()
    fields: dict[bytes, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(b":")
        if key in (b"MemTotal", b"MemAvailable"):
            value, *unit = rest.split()
            fields[key] = int(value) * (1024 if unit == [b"kB"] else 1)
    if len(fields) != 2:
        raise ValueError(f"{proc_root}/meminfo has no MemTotal or no MemAvailable (needs Linux >= 3.14)")
    return fields[b"MemTotal"], fields[b"MemAvailable"]


def _parent_pid(stat: bytes) -> int:
    # /proc/<pid>/stat: "pid (comm) state ppid ...". comm may hold spaces and ')', so split after the last ')'.
    return int(stat[stat.rindex(b")") + 2 :].split()[1])


def process_tree(root: int, proc_root: str = "/proc") -> list[int]:
    """``root`` and all its descendants that exist now (``[]`` if ``root`` does not), root first.

    One pass over ``<proc_root>/*/stat`` builds the parent -> children map; a process that exits
    during the pass is simply not in it.
    """
    children: dict[int, list[int]] = {}
    found_root = False
    try:
        names = os.listdir(proc_root)
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        stat = _read_bytes(os.path.join(proc_root, name, "stat"))
        if stat is None:
            continue
        try:
            ppid = _parent_pid(stat)
        except (ValueError, IndexError):
            continue
        pid = int(name)
        found_root = found_root or pid == root
        children.setdefault(ppid, []).append(pid)
    if not found_root:
        return []
    tree, seen = [root], {root}
    for pid in tree:  # breadth first; ``tree`` grows while it is walked
        for child in sorted(children.get(pid, ())):
            if child not in seen:  # a fake tree, or pid reuse mid-scan, could make a cycle
                seen.add(child)
                tree.append(child)
    return tree


def _vm_rss(status: bytes) -> int:
    for line in status.splitlines():
        if line.startswith(b"VmRSS:"):
            return int(line.split()[1]) * 1024  # always in kB
    return 0  # kernel threads and zombies have no VmRSS


def tree_rss(root: int, proc_root: str = "/proc") -> tuple[int | None, int]:
    """``(sum of VmRSS in bytes, processes read)`` over ``root``'s process tree; ``(None, 0)`` if it is gone."""
    total, count = 0, 0
    for pid in process_tree(root, proc_root):
        status = _read_bytes(os.path.join(proc_root, str(pid), "status"))
        if status is None:
            continue  # exited since the walk
        total += _vm_rss(status)
        count += 1
    return (total, count) if count else (None, 0)


def _field(note: Note, what: str, read: Callable[[], _T]) -> _T | None:
    try:
        return read()
    except Exception as exc:  # noqa: BLE001 (NVMLError_NotSupported and friends: a GPU must never stop the sampler)
        note(f"{what}: {type(exc).__name__}: {exc}; recorded as null")
        return None


def nvml_probe(nvml: Any, note: Note) -> tuple[list[GpuInfo], list[Any]]:
    """``nvmlInit`` and the device list: ``(infos, handles)``, both empty (with a note) where NVML fails.

    :param nvml: the ``pynvml`` module, or any object with its functions (tests pass a fake).
    """
    try:
        nvml.nvmlInit()
        count = int(nvml.nvmlDeviceGetCount())
    except Exception as exc:  # noqa: BLE001 (NVMLError_LibraryNotFound, _DriverNotLoaded, ...)
        note(f"NVML unavailable: {type(exc).__name__}: {exc}")
        return [], []
    infos: list[GpuInfo] = []
    handles: list[Any] = []
    for i in range(count):
        label = f"GPU{i}"
        handle = _field(note, f"{label} handle", functools.partial(nvml.nvmlDeviceGetHandleByIndex, i))
        if handle is None:
            continue
        name = _field(note, f"{label} name", functools.partial(nvml.nvmlDeviceGetName, handle))
        if isinstance(name, bytes):  # nvidia-ml-py < 11.5 returned bytes
            name = name.decode(errors="replace")
        infos.append(GpuInfo(label=label, source="nvml", name=str(name) if name else "NVIDIA GPU"))
        handles.append(handle)
    return infos, handles


def nvml_read(nvml: Any, infos: Sequence[GpuInfo], handles: Sequence[Any], note: Note) -> list[GpuReading]:
    """One reading per handle; each field that NVML does not support (or fails on) is ``None``."""
    readings = []
    for info, h in zip(infos, handles):
        mem = _field(note, f"{info.label} memory", functools.partial(nvml.nvmlDeviceGetMemoryInfo, h))
        util = _field(
            note, f"{info.label} utilisation", functools.partial(nvml.nvmlDeviceGetUtilizationRates, h)
        )
        power_mw = _field(note, f"{info.label} power", functools.partial(nvml.nvmlDeviceGetPowerUsage, h))
        readings.append(
            GpuReading(
                used_bytes=int(mem.used) if mem is not None else None,
                total_bytes=int(mem.total) if mem is not None else None,
                util_pct=float(util.gpu) if util is not None else None,
                power_w=power_mw / 1000.0 if power_mw is not None else None,
            )
        )
    return readings


_AMD_COUNTERS = ("mem_info_vram_used", "mem_info_vram_total", "mem_info_gtt_used", "gpu_busy_percent")


def amdgpu_probe(sysfs_root: str = "/sys/class/drm") -> list[tuple[GpuInfo, str]]:
    """The amdgpu cards under ``sysfs_root``: ``(info, device directory)`` per ``cardN`` that has any of
    the amdgpu counters (connectors such as ``card0-DP-1`` and other drivers' cards are skipped)."""
    try:
        names = os.listdir(sysfs_root)
    except OSError:
        return []
    cards = []
    for name in sorted((n for n in names if re.fullmatch(r"card\d+", n)), key=lambda n: int(n[4:])):
        device = os.path.join(sysfs_root, name, "device")
        if not any(os.path.exists(os.path.join(device, c)) for c in _AMD_COUNTERS):
            continue
        product = (_read_bytes(os.path.join(device, "product_name")) or b"").decode(errors="replace").strip()
        cards.append((GpuInfo(label=name, source="amdgpu", name=product or "AMD GPU (amdgpu)"), device))
    return cards


def _sysfs_int(path: str) -> int | None:
    data = _read_bytes(path)
    try:
        return int(data) if data is not None else None
    except ValueError:
        return None


def amdgpu_read(device: str, label: str, note: Note) -> GpuReading:
    """One reading of an amdgpu card's sysfs counters; a missing or unreadable one is ``None`` (noted)."""

    def counter(name: str) -> int | None:
        value = _sysfs_int(os.path.join(device, name))
        if value is None:
            note(f"{label} {name}: absent or unreadable; recorded as null")
        return value

    power_uw = None
    hwmon_root = os.path.join(device, "hwmon")
    try:
        hwmons = sorted(os.listdir(hwmon_root))
    except OSError:
        hwmons = []
    for hwmon in hwmons:
        for sensor in ("power1_average", "power1_input"):  # µW; newer chips have only the input
            power_uw = _sysfs_int(os.path.join(hwmon_root, hwmon, sensor))
            if power_uw is not None:
                break
        if power_uw is not None:
            break
    else:
        note(f"{label} power: no hwmon power1_average or power1_input; recorded as null")
    busy = counter("gpu_busy_percent")
    return GpuReading(
        used_bytes=counter("mem_info_vram_used"),
        total_bytes=counter("mem_info_vram_total"),
        util_pct=float(busy) if busy is not None else None,
        power_w=power_uw / 1e6 if power_uw is not None else None,
        gtt_used_bytes=counter("mem_info_gtt_used"),
    )


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
    "gpu used_bytes": "device memory in use: NVML nvmlDeviceGetMemoryInfo().used, or amdgpu mem_info_vram_used",
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

    def _t_s(self) -> list[float]:
        return [round((s.t_ns - self.baseline.t_ns) / _NS_PER_S, 6) for s in self.samples]

    def peaks(self) -> dict[str, Any]:
        """Peak MemAvailable drop, peak server RSS, per-GPU peaks (used memory, utilisation, power) and the
        peak of the GPUs' summed power, each with the time of the peak in seconds from the baseline."""
        t_s = self._t_s()
        drop, drop_t = _peak([s.mem_available_drop for s in self.samples], t_s)
        rss, rss_t = _peak([s.server_rss for s in self.samples], t_s)
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
        cmd = [
            sys.executable,
            "-I",
            os.path.abspath(__file__),
            f"--interval-s={self.interval_s!r}",
            f"--proc-root={self._proc_root}",
            f"--sysfs-root={self._sysfs_root}",
        ]
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


# -- the co-process's side -------------------------------------------------------------------------------


class _Child:
    """The sampling loop. Stdlib only: this runs as its own script in a fresh interpreter."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.interval_ns = max(1, round(args.interval_s * _NS_PER_S))
        self.proc_root: str = args.proc_root
        self.server_pid: int | None = args.pid
        self.out = sys.stdout.buffer
        self._noted: set[str] = set()
        self._nvml: Any = None
        self._nvml_infos: list[GpuInfo] = []
        self._nvml_handles: list[Any] = []
        self._amd: list[tuple[GpuInfo, str]] = []
        self._use_nvml: bool = args.nvml
        self._sysfs_root: str = args.sysfs_root

    def emit(self, msg: dict[str, Any]) -> None:
        self.out.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        self.out.flush()

    def note(self, text: str) -> None:
        if text not in self._noted:  # each distinct note once, not once per sample
            self._noted.add(text)
            self.emit({"k": "note", "text": text})

    def probe_gpus(self) -> None:
        sources = {}
        if not self._use_nvml:
            sources["nvml"] = "disabled"
        else:
            try:
                with warnings.catch_warnings():  # the old "pynvml" shim package warns that it is deprecated
                    warnings.simplefilter("ignore")
                    pynvml = importlib.import_module("pynvml")
            except ImportError as exc:
                sources["nvml"] = f"pynvml not importable ({exc}); install fastbench[gpu] for NVIDIA GPUs"
            else:
                self._nvml = pynvml
                why: list[str] = []

                def note(text: str) -> None:
                    why.append(text)
                    self.note(text)

                self._nvml_infos, self._nvml_handles = nvml_probe(pynvml, note)
                n = len(self._nvml_infos)
                sources["nvml"] = f"{n} device{'s' * (n != 1)}" if n or not why else why[0]
        self._amd = amdgpu_probe(self._sysfs_root)
        n = len(self._amd)
        sources["amdgpu"] = f"{n} card{'s' * (n != 1)} under {self._sysfs_root}"
        gpus = self._nvml_infos + [info for info, _ in self._amd]
        self.emit({"k": "gpus", "gpus": [dataclasses.asdict(g) for g in gpus], "sources": sources})

    def sample(self) -> None:
        t_ns = time.monotonic_ns()
        total, avail = read_meminfo(self.proc_root)
        rss, procs = None, 0
        if self.server_pid is not None:
            rss, procs = tree_rss(self.server_pid, self.proc_root)
            if rss is None:
                self.note(f"server pid {self.server_pid} not found (not started yet, or gone)")
        gpus = nvml_read(self._nvml, self._nvml_infos, self._nvml_handles, self.note) if self._nvml else []
        gpus += [amdgpu_read(device, info.label, self.note) for info, device in self._amd]
        self.emit(
            {
                "k": "s",
                "t": t_ns,
                "total": total,
                "avail": avail,
                "rss": rss,
                "procs": procs,
                "gpus": [g.to_list() for g in gpus],
            }
        )

    def safe_sample(self) -> None:
        try:
            self.sample()
        except BrokenPipeError:
            raise  # the parent is gone
        except (OSError, ValueError) as exc:
            self.note(f"a sample failed: {type(exc).__name__}: {exc}")

    def run(self) -> int:
        t0 = time.monotonic_ns()
        total, avail = read_meminfo(self.proc_root)  # the baseline: first, before anything slow
        self.emit({"k": "baseline", "t": t0, "total": total, "avail": avail})
        self.probe_gpus()
        stdin = sys.stdin.buffer.fileno()
        pending = b""
        tick, skipped = 0, 0
        grid0 = time.monotonic_ns()  # ticks at grid0 + k * interval: no drift, however long a sample takes
        try:
            while True:
                self.safe_sample()
                tick += 1
                due = (time.monotonic_ns() - grid0) // self.interval_ns + 1  # the next tick still ahead
                if due > tick:
                    skipped += due - tick
                    tick = due
                while (wait_ns := grid0 + tick * self.interval_ns - time.monotonic_ns()) > 0:
                    ready, _, _ = select.select([stdin], [], [], wait_ns / _NS_PER_S)
                    if not ready:
                        continue
                    chunk = os.read(stdin, 4096)
                    if not chunk:
                        return 0  # stdin closed without "stop": the parent is gone
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        cmd, _, arg = line.decode(errors="replace").strip().partition(" ")
                        if cmd == "pid" and arg.isdigit():
                            self.server_pid = int(arg)
                        elif cmd == "stop":
                            self.safe_sample()  # the state at the end of the run
                            self.emit({"k": "end", "skipped_ticks": skipped})
                            return 0
        finally:
            if self._nvml is not None:
                with contextlib.suppress(Exception):  # exiting anyway; NVMLError_Uninitialized if init failed
                    self._nvml.nvmlShutdown()


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="fastbench memory sampler co-process (JSON lines on stdout)")
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--pid", type=int, default=None)
    parser.add_argument("--proc-root", default="/proc")
    parser.add_argument("--sysfs-root", default="/sys/class/drm")
    parser.add_argument("--no-nvml", dest="nvml", action="store_false")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the benchmark, which then calls stop()
    try:
        return _Child(args).run()
    except BrokenPipeError:
        # The parent closed our stdout; point it at /dev/null so the interpreter's final flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(_main())
