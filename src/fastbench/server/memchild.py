"""The memory sampler's co-process: a sample every interval on a fixed grid, one JSON line each on
stdout; commands on stdin (``pid N``; ``cgroup VERSION DIR``, a container's memory cgroup; ``stop``).
server/memory.py's MemorySampler starts it as ``python -I`` with this package's own root on sys.path
(MemorySampler.child_command), and reads its lines.

Standard library only (and server/memread.py, likewise): a fresh interpreter that imports nothing of the
client's, so that sampling steals neither the client loop's time nor its heap. It ignores SIGINT, so that
a terminal's Ctrl-C reaches the benchmark, which then sends ``stop``; it exits when its stdin closes
because the parent is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import select
import signal
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

from fastbench.server.memread import (
    GpuInfo,
    amdgpu_probe,
    amdgpu_read,
    cgroup_memory,
    nvml_probe,
    nvml_read,
    read_meminfo,
    tree_rss,
)

__all__ = ("main",)

_NS_PER_S = 1_000_000_000


class _Child:
    """The sampling loop. Stdlib only: this runs as its own script in a fresh interpreter."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.interval_ns = max(1, round(args.interval_s * _NS_PER_S))
        self.proc_root: str = args.proc_root
        self.server_pid: int | None = args.pid
        self.cgroup: tuple[str, str] | None = None  # (directory, "v1" | "v2")
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
                sources["nvml"] = f"pynvml not importable ({exc}); pip install 'fastbench-llm[gpu]' for NVIDIA GPUs"
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
        cg_now = cg_peak = None
        if self.cgroup is not None:
            cg_now, cg_peak = cgroup_memory(*self.cgroup)
            if cg_now is None:
                self.note(f"memory cgroup {self.cgroup[0]} not readable (the container gone?)")
            elif cg_peak is None:
                self.note(f"memory cgroup {self.cgroup[0]} has no peak file (memory.peak needs Linux >= 5.19)")
        gpus = nvml_read(self._nvml, self._nvml_infos, self._nvml_handles, self.note,
                         system=(total, avail)) if self._nvml else []
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
                "cg": [cg_now, cg_peak],
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
                        elif cmd == "cgroup" and arg.partition(" ")[0] in ("v1", "v2"):
                            version, _, directory = arg.partition(" ")
                            self.cgroup = (directory, version)
                        elif cmd == "stop":
                            self.safe_sample()  # the state at the end of the run
                            self.emit({"k": "end", "skipped_ticks": skipped})
                            return 0
        finally:
            if self._nvml is not None:
                with contextlib.suppress(Exception):  # exiting anyway; NVMLError_Uninitialized if init failed
                    self._nvml.nvmlShutdown()


def main(argv: Sequence[str] | None = None) -> int:
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
    sys.exit(main())
