"""Where a run ran, as its result records it: fastbench's and Python's versions, the platform, the
host's name, CPU model and count, RAM, and the NVIDIA GPUs nvidia-smi names (nothing secret)."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

from fastbench._version import __version__

__all__ = ("environment",)


def environment() -> dict[str, Any]:
    """What the result records about where it ran (nothing secret)."""
    return {
        "fastbench": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _proc_field("/proc/cpuinfo", "model name"),
        "mem_total_gib": _mem_total_gib(),
        "gpus": _nvidia_gpus(),
    }


def _proc_field(path: str, name: str) -> str | None:
    """The first ``name: value`` line's value in a /proc file (Linux), or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == name:
                    return " ".join(value.split())
    except OSError:
        pass
    return None


def _mem_total_gib() -> float | None:
    total = _proc_field("/proc/meminfo", "MemTotal")  # "24680000 kB"
    try:
        return round(int(total.split()[0]) / 2**20, 1) if total else None
    except (ValueError, IndexError):
        return None


def _nvidia_gpus() -> list[str]:
    """"NAME (driver VERSION)" per NVIDIA GPU, from nvidia-smi when it is there; [] otherwise."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        name, _, driver = (part.strip() for part in line.rpartition(","))
        if name:
            gpus.append(f"{name} (driver {driver})")
    return gpus
