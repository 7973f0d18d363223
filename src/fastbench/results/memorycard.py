"""The run card's Memory lines, worded here from the memory sampler's series as the result keeps it
(``server.memory.MemorySeries.to_dict()``): the sampler co-process stays a plain stdlib script that
measures, and the words are the card's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ("memory_lines",)

_GIB = 1 << 30


def _unified(gpu: Mapping[str, Any]) -> bool:
    """A GPU whose memory is the system's (``gpus[].memory`` "system"; absent in older result files)."""
    return gpu.get("memory") == "system"


def memory_lines(series: Mapping[str, Any], baseline_before_server: bool = True, *,
                 running_since: str = "attached") -> list[str]:
    """"Label: value" lines for the card, the first one the headline:
    ``Peak memory: 5.21 GiB MemAvailable drop (1 s sampling); server RSS peak 3.90 GiB; GPU0 79.1 GiB
    used of 80.0 GiB``. ``baseline_before_server`` False: the server was already running when the
    baseline was taken, so the drop is only what the run added; ``running_since`` says why, in a few words
    ("attached": fastbench attached to it; a sweep's launch shared by several runs says so)."""
    p = series["peaks"]
    every = f"{series['interval_s']:g} s sampling"
    during = "" if baseline_before_server else " during the run, the server already loaded"
    if p["mem_available_drop_bytes"] is None:
        head = f"Peak memory: n/a (no sample recorded; {every})"
    else:
        head = f"Peak memory: {p['mem_available_drop_bytes'] / _GIB:.2f} GiB MemAvailable drop{during} ({every})"
    if p["server_rss_bytes"] is not None:
        head += f"; server RSS peak {p['server_rss_bytes'] / _GIB:.2f} GiB"
    if p.get("cgroup_memory_bytes") is not None:
        head += f"; container cgroup peak {p['cgroup_memory_bytes'] / _GIB:.2f} GiB"
    for info, g in zip(series["gpus"], p["gpus"]):
        if g["used_bytes"] is not None:
            head += f"; {g['label']} {g['used_bytes'] / _GIB:.1f} GiB used"
            if g["total_bytes"] is not None:
                head += f" of {g['total_bytes'] / _GIB:.1f} GiB"
            if _unified(info):
                head += " (unified: the system's)"
    b = series["baseline"]
    lines = [
        head,
        (
            f"MemAvailable drop: from a baseline of {b['mem_available_bytes'] / _GIB:.2f} GiB available of "
            f"{b['mem_total_bytes'] / _GIB:.2f} GiB MemTotal, "
            + ("taken before the server started; reservations count, not only memory in use"
               if baseline_before_server else
               f"taken with the server already running ({running_since}): its own footprint is not in the drop")
            + f" ({series['num_samples']} samples)"
        ),
    ]
    pid = series["server_pid"]
    if pid is None:
        lines.append("Server RSS: not measured (no server pid)")
    elif p["server_rss_bytes"] is None:
        lines.append(f"Server RSS: no reading (pid {pid} was never seen)")
    else:
        procs = max(series["series"]["server_procs"])
        lines.append(
            f"Server RSS: peak {p['server_rss_bytes'] / _GIB:.2f} GiB (VmRSS summed over pid {pid} and its "
            f"descendants, up to {procs} processes; shared pages count once per process)"
        )
    cgroup = series.get("cgroup")
    if cgroup is not None:
        lines.append(_cgroup_line(cgroup, p))
    for info, g in zip(series["gpus"], p["gpus"]):
        used = "n/a" if g["used_gib"] is None else f"{g['used_bytes'] / _GIB:.1f} GiB"
        total = "n/a" if g["total_gib"] is None else f"{g['total_bytes'] / _GIB:.1f} GiB"
        text = f"{info['label']} ({info['name']}, {info['source']}): peak {used} used of {total}"
        if _unified(info):
            text += (" (unified memory: NVML has no memory info for it, so this is the system's memory, "
                     "MemTotal - MemAvailable used of MemTotal, the whole machine's and not only the server's)")
        if g["gtt_used_bytes"] is not None:
            text += f", GTT peak {g['gtt_used_bytes'] / _GIB:.1f} GiB"
        text += ", utilisation peak " + ("n/a" if g["util_pct"] is None else f"{g['util_pct']:.0f} %")
        text += ", power peak " + ("n/a" if g["power_w"] is None else f"{g['power_w']:.0f} W")
        lines.append(text)
    if not series["gpus"]:
        found = "; ".join(f"{k}: {v}" for k, v in series["gpu_sources"].items())
        lines.append(f"GPU: none measured ({found})")
    lines += [f"Note: {n}" for n in series["notes"]]
    return lines


def _cgroup_line(cgroup: Mapping[str, Any], p: Mapping[str, Any]) -> str:
    """The container's memory cgroup: its peak as sampled, and the kernel's own peak."""
    now, peak = ("memory.current", "memory.peak") if cgroup["version"] == "v2" else (
        "memory.usage_in_bytes", "memory.max_usage_in_bytes")
    where = f"cgroup {cgroup['version']} {now} of {cgroup['path']}"
    if p.get("cgroup_memory_bytes") is None:
        return f"Container memory: no reading ({where})"
    text = f"Container memory: peak {p['cgroup_memory_bytes'] / _GIB:.2f} GiB sampled ({where}; page cache included)"
    if p.get("cgroup_memory_peak_bytes") is not None:
        text += f"; the kernel's peak ({peak}) {p['cgroup_memory_peak_bytes'] / _GIB:.2f} GiB"
    return text
