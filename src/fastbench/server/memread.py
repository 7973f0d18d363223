"""What the memory sampler reads, and the records it reads them into: ``/proc/meminfo``, the server's
process tree and its RSS, NVIDIA GPUs through NVML and AMD GPUs through amdgpu sysfs (server/memory.py
says what each figure means). Plain functions, so that tests can point them at fake trees.

Standard library only: this runs in the sampler's co-process (server/memchild.py), a fresh interpreter
that imports nothing of the client's.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ("CGROUP_FILES", "CGROUP_SOURCE", "GIB", "RSS_SOURCE", "Baseline", "GpuInfo", "GpuReading", "Note", "Sample",
           "amdgpu_probe", "amdgpu_read", "cgroup_memory", "nvml_probe", "nvml_read", "process_tree", "read_meminfo",
           "tree_rss")

GIB = 1 << 30
"""Bytes in a GiB (gibibyte). Every figure shown is in GiB and labelled so."""

RSS_SOURCE = (
    "VmRSS from /proc/<pid>/status, summed over the server's process tree "
    "(pages shared between processes count once per process)"
)

CGROUP_SOURCE = (
    "the container's memory cgroup: memory.current (cgroup v2) or memory.usage_in_bytes (v1), all its "
    "processes' memory as the kernel charges it (anonymous and shared memory, and page cache it may reclaim); "
    "the kernel's own peak beside it: memory.peak (v2, Linux >= 5.19) or memory.max_usage_in_bytes (v1)"
)
CGROUP_FILES = {"v2": ("memory.current", "memory.peak"), "v1": ("memory.usage_in_bytes", "memory.max_usage_in_bytes")}
"""cgroup version -> (the usage now, the kernel's peak of it since the cgroup was made)."""

_T = TypeVar("_T")
Note = Callable[[str], None]


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
    # "device": its own memory, as the driver reports it; "system": unified memory (NVML answers
    # NOT_SUPPORTED for its memory, as on GB10), so the system's MemTotal - MemAvailable is recorded as its own
    memory: str = "device"


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
    cgroup_memory: int | None = None  # bytes: a container's memory cgroup now; None without one
    cgroup_memory_peak: int | None = None  # bytes: the kernel's peak of it


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


def cgroup_memory(directory: str, version: str) -> tuple[int | None, int | None]:
    """``(usage now, the kernel's peak)`` in bytes of the memory cgroup ``directory`` (``version`` "v1" or
    "v2", see CGROUP_FILES); either is None where its file is absent or unreadable (gone with the container)."""
    now, peak = CGROUP_FILES[version]
    return _sysfs_int(os.path.join(directory, now)), _sysfs_int(os.path.join(directory, peak))


def _field(note: Note, what: str, read: Callable[[], _T]) -> _T | None:
    try:
        return read()
    except Exception as exc:  # noqa: BLE001 (NVMLError_NotSupported and friends: a GPU must never stop the sampler)
        note(f"{what}: {type(exc).__name__}: {exc}; recorded as null")
        return None


def _not_supported(nvml: Any, exc: Exception) -> bool:
    """NVML's NVML_ERROR_NOT_SUPPORTED (pynvml raises it as NVMLError_NotSupported, ``value`` 3)."""
    code = getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)
    return getattr(exc, "value", None) == code or type(exc).__name__.endswith("NotSupported")


def _memory_kind(nvml: Any, handle: Any) -> str:
    """"system" where NVML has no memory info for the device (unified memory), else "device"."""
    try:
        nvml.nvmlDeviceGetMemoryInfo(handle)
    except Exception as exc:  # noqa: BLE001 (any other failure is noted by each read, as a null)
        return "system" if _not_supported(nvml, exc) else "device"
    return "device"


def nvml_probe(nvml: Any, note: Note) -> tuple[list[GpuInfo], list[Any]]:
    """``nvmlInit`` and the device list: ``(infos, handles)``, both empty (with a note) where NVML fails.
    A device whose memory NVML answers NOT_SUPPORTED for has unified memory (``GpuInfo.memory`` "system").

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
        memory = _memory_kind(nvml, handle)
        if memory == "system":
            note(f"{label} memory: NVML answers NOT_SUPPORTED (unified memory, as on GB10): the system's "
                 "MemTotal - MemAvailable is recorded as its used memory, MemTotal as its total")
        infos.append(GpuInfo(label=label, source="nvml", name=str(name) if name else "NVIDIA GPU", memory=memory))
        handles.append(handle)
    return infos, handles


@dataclasses.dataclass(frozen=True, slots=True)
class _Memory:
    used: int
    total: int


def nvml_read(nvml: Any, infos: Sequence[GpuInfo], handles: Sequence[Any], note: Note,
              system: tuple[int, int] | None = None) -> list[GpuReading]:
    """One reading per handle; each field that NVML does not support (or fails on) is ``None``.

    :param system: this sample's ``(MemTotal, MemAvailable)``: the memory of a unified-memory GPU.
    """
    readings = []
    for info, h in zip(infos, handles):
        mem: Any
        if info.memory == "system":
            mem = None if system is None else _Memory(used=system[0] - system[1], total=system[0])
        else:
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
