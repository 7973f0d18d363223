"""The memory sampler: readers on fake /proc, sysfs and NVML; the co-process on this machine (no GPU here:
NVML is absent, so the GPU lists are empty and the series says why); stop() when the co-process died."""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import fastbench.server.memory as ms
from fastbench.results.memorycard import memory_lines
from fastbench.server.memory import (
    GIB,
    Baseline,
    GpuInfo,
    GpuReading,
    MemorySampler,
    MemorySeries,
    Sample,
    SamplerError,
)

MB = 1_000_000
MIB = 1 << 20


def _wait_for(pred: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def _write(path: Path, text: str) -> None:
    """Write as the kernel's files appear: whole, at once (replace, so a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# -- a fake /proc ------------------------------------------------------------------------------------------


def _meminfo(proc: Path, total_kb: int, avail_kb: int) -> None:
    _write(
        proc / "meminfo",
        f"MemTotal:       {total_kb} kB\nMemFree:        {avail_kb // 2} kB\n"
        f"MemAvailable:   {avail_kb} kB\nBuffers:            9956 kB\nHugePages_Total:       0\n",
    )


def _process(proc: Path, pid: int, ppid: int, comm: str = "python3", rss_kb: int | None = 1000) -> None:
    _write(proc / str(pid) / "stat", f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 150 0 0 0 1 0 0\n")
    vm = f"VmRSS:\t{rss_kb} kB\n" if rss_kb is not None else ""
    _write(proc / str(pid) / "status", f"Name:\t{comm}\nPid:\t{pid}\nPPid:\t{ppid}\n{vm}Threads:\t1\n")


def _fake_proc(tmp_path: Path) -> Path:
    """Server 100 -> 101 (comm with spaces and parentheses) -> 103; 100 -> 102 (a zombie: no VmRSS);
    unrelated 1 and 200; 104 vanished (directory without files); 105 has a stat but no status."""
    proc = tmp_path / "proc"
    _meminfo(proc, total_kb=16 * MIB, avail_kb=12 * MIB)
    _process(proc, 1, 0, "init", 5000)
    _process(proc, 100, 1, "vllm", 300_000)
    _process(proc, 101, 100, "VLLM::Worker (TP0) ) x", 200_000)
    _process(proc, 102, 100, "defunct", None)
    _process(proc, 103, 101, "python3", 50_000)
    _process(proc, 200, 1, "sshd", 7000)
    (proc / "104").mkdir()
    _write(proc / "105" / "stat", "105 (gone) S 100 1 1 0\n")
    (proc / "self").mkdir()  # non-numeric entries are ignored
    return proc


def test_read_meminfo(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _meminfo(proc, total_kb=24_684_092, avail_kb=24_235_528)
    assert ms.read_meminfo(str(proc)) == (24_684_092 * 1024, 24_235_528 * 1024)
    _write(proc / "meminfo", "MemTotal: 100 kB\nMemFree: 50 kB\n")
    with pytest.raises(ValueError, match="MemAvailable"):
        ms.read_meminfo(str(proc))


def test_read_meminfo_real() -> None:
    total, avail = ms.read_meminfo()
    assert 0 < avail <= total


def test_process_tree_fake(tmp_path: Path) -> None:
    proc = str(_fake_proc(tmp_path))
    assert ms.process_tree(100, proc) == [100, 101, 102, 105, 103]
    assert ms.process_tree(101, proc) == [101, 103]
    assert ms.process_tree(999, proc) == []
    # 105 vanished between the walk and the status read; 102 is a zombie (counted, 0 bytes).
    assert ms.tree_rss(100, proc) == ((300_000 + 200_000 + 50_000) * 1024, 4)
    assert ms.tree_rss(999, proc) == (None, 0)
    assert ms.tree_rss(100, str(tmp_path / "no-such-proc")) == (None, 0)


def test_process_tree_survives_a_cycle(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _process(proc, 10, 11)
    _process(proc, 11, 10)
    assert ms.process_tree(10, str(proc)) == [10, 11]


def test_process_tree_real() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen(['sleep', '30']); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
    )
    try:
        _wait_for(lambda: len(ms.process_tree(child.pid)) == 2)
        tree = ms.process_tree(os.getpid())
        assert tree[0] == os.getpid() and child.pid in tree and len(tree) >= 3
        rss, procs = ms.tree_rss(child.pid)
        assert procs == 2 and rss is not None and rss > MIB
    finally:
        grandchildren = ms.process_tree(child.pid)[1:]
        child.kill()
        child.communicate()
        for pid in grandchildren:
            os.kill(pid, signal.SIGKILL)


# -- a fake amdgpu sysfs tree -------------------------------------------------------------------------------


def _amd_card(
    drm: Path, name: str, vram_used: int, *, busy: int | None = 37, power_file: str = "power1_average"
) -> None:
    dev = drm / name / "device"
    _write(dev / "mem_info_vram_used", f"{vram_used}\n")
    _write(dev / "mem_info_vram_total", f"{64 * GIB}\n")
    _write(dev / "mem_info_gtt_used", f"{3 * GIB}\n")
    if busy is not None:
        _write(dev / "gpu_busy_percent", f"{busy}\n")
    _write(dev / "hwmon" / "hwmon3" / power_file, "123456789\n")  # µW


def _fake_drm(tmp_path: Path) -> Path:
    drm = tmp_path / "drm"
    _amd_card(drm, "card0", 10 * GIB)
    _write(drm / "card0-DP-1" / "status", "disconnected\n")  # a connector, not a card
    _write(drm / "card1" / "device" / "vendor", "0x1af4\n")  # another driver's card: no amdgpu counters
    _amd_card(drm, "card10", GIB, busy=None, power_file="power1_input")
    _amd_card(drm, "card2", 2 * GIB)
    _write(drm / "card2" / "device" / "product_name", "AMD Instinct MI300X\n")
    _write(drm / "version", "drm 1.1.0\n")
    return drm


def test_amdgpu_probe_and_read(tmp_path: Path) -> None:
    cards = ms.amdgpu_probe(str(_fake_drm(tmp_path)))
    assert [info.label for info, _ in cards] == ["card0", "card2", "card10"]
    assert cards[1][0] == GpuInfo(label="card2", source="amdgpu", name="AMD Instinct MI300X")
    assert all(info.source == "amdgpu" for info, _ in cards)
    notes: list[str] = []
    readings = [ms.amdgpu_read(device, info.label, notes.append) for info, device in cards]
    assert readings[0] == GpuReading(10 * GIB, 64 * GIB, 37.0, 123.456789, 3 * GIB)
    assert readings[2] == GpuReading(GIB, 64 * GIB, None, 123.456789, 3 * GIB)  # power1_input fallback
    assert notes == ["card10 gpu_busy_percent: absent or unreadable; recorded as null"]
    assert ms.amdgpu_probe(str(tmp_path / "absent")) == []


def test_amdgpu_garbage_and_no_hwmon(tmp_path: Path) -> None:
    dev = tmp_path / "drm" / "card0" / "device"
    _write(dev / "mem_info_vram_used", "not a number\n")
    notes: list[str] = []
    ((info, device),) = ms.amdgpu_probe(str(tmp_path / "drm"))
    assert ms.amdgpu_read(device, info.label, notes.append) == GpuReading(None, None, None, None, None)
    assert len(notes) == 5 and any("power" in n for n in notes)


# -- a fake pynvml ---------------------------------------------------------------------------------------------


class _NVMLError(Exception):
    pass


class _NVMLErrorNotSupported(_NVMLError):
    def __str__(self) -> str:
        return "Not Supported"


class _FakeNVML:
    """The calls of pynvml the sampler makes. GPU0 supports everything (an 80 GiB card); GPU1 is like a GB10:
    no memory info (unified memory: the system's is recorded as its) and no power; GPU2's handle cannot be
    had. Method names are pynvml's (tests/server/test_unified_memory.py has a whole fake pynvml module)."""

    NVMLError = _NVMLError

    def __init__(self, init_error: Exception | None = None) -> None:
        self.init_error = init_error
        self.used = int(79.1 * GIB)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error

    def nvmlDeviceGetCount(self) -> int:
        return 3

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if i == 2:
            raise _NVMLError("Unknown Error")
        return 1000 + i

    def nvmlDeviceGetName(self, h: int) -> str | bytes:
        return "NVIDIA H100 80GB HBM3" if h == 1000 else b"NVIDIA GB10"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        if h == 1001:
            raise _NVMLErrorNotSupported()
        return type("Mem", (), {"used": self.used, "total": 80 * GIB, "free": 80 * GIB - self.used})()

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return type("Util", (), {"gpu": 97 if h == 1000 else 12, "memory": 40})()

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1001:
            raise _NVMLErrorNotSupported()
        return 612_345  # mW


def test_nvml_with_unsupported_fields() -> None:
    nvml = _FakeNVML()
    notes: list[str] = []
    infos, handles = ms.nvml_probe(nvml, notes.append)
    assert infos == [
        GpuInfo(label="GPU0", source="nvml", name="NVIDIA H100 80GB HBM3"),
        GpuInfo(label="GPU1", source="nvml", name="NVIDIA GB10", memory="system"),
    ]
    assert notes[0].startswith("GPU1 memory: NVML answers NOT_SUPPORTED (unified memory, as on GB10)")
    assert notes[1:] == ["GPU2 handle: _NVMLError: Unknown Error; recorded as null"]
    notes.clear()
    readings = ms.nvml_read(nvml, infos, handles, notes.append, system=(128 * GIB, 100 * GIB))
    assert readings == [
        GpuReading(used_bytes=int(79.1 * GIB), total_bytes=80 * GIB, util_pct=97.0, power_w=612.345),
        GpuReading(used_bytes=28 * GIB, total_bytes=128 * GIB, util_pct=12.0, power_w=None),
    ]
    assert notes == ["GPU1 power: _NVMLErrorNotSupported: Not Supported; recorded as null"]
    # without the sample's system memory, a unified GPU's memory is unknown, not made up
    assert ms.nvml_read(nvml, infos, handles, notes.append)[1].used_bytes is None


def test_nvml_init_failure() -> None:
    notes: list[str] = []
    assert ms.nvml_probe(_FakeNVML(init_error=_NVMLError("Driver Not Loaded")), notes.append) == ([], [])
    assert notes == ["NVML unavailable: _NVMLError: Driver Not Loaded"]


# -- the series: peaks, JSON, the card's lines ---------------------------------------------------------------


def _series() -> MemorySeries:
    base = Baseline(t_ns=5_000_000_000, mem_total=128 * GIB, mem_available=120 * GIB)
    gpus = [GpuInfo("GPU0", "nvml", "NVIDIA H100"), GpuInfo("GPU1", "nvml", "NVIDIA GB10")]

    def sample(t_s: float, drop: int, rss: int | None, used: int, power: float) -> Sample:
        return Sample(
            t_ns=base.t_ns + int(t_s * 1e9),
            mem_total=base.mem_total,
            mem_available=base.mem_available - drop,
            mem_available_drop=drop,
            server_rss=rss,
            server_procs=0 if rss is None else 3,
            gpus=(
                GpuReading(used, 80 * GIB, 50.0, power),
                GpuReading(None, None, None, None),
            ),
        )

    samples = [
        sample(0.0, 0, None, GIB, 70.0),
        sample(1.0, int(5.21 * GIB), int(3.9 * GIB), int(79.1 * GIB), 650.5),
        sample(2.0, 4 * GIB, 3 * GIB, 70 * GIB, 400.0),
    ]
    return MemorySeries(
        interval_s=1.0,
        baseline=base,
        samples=samples,
        gpus=gpus,
        gpu_sources={"nvml": "2 devices", "amdgpu": "0 cards under /sys/class/drm"},
        server_pid=4242,
        notes=["GPU1 memory: NVMLError_NotSupported: Not Supported; recorded as null"],
    )


def test_peaks_and_summary() -> None:
    series = _series()
    peaks = series.peaks()
    assert peaks["mem_available_drop_bytes"] == int(5.21 * GIB) and peaks["mem_available_drop_t_s"] == 1.0
    assert peaks["server_rss_bytes"] == int(3.9 * GIB) and peaks["server_rss_gib"] == 3.9
    g0, g1 = peaks["gpus"]
    assert g0["used_bytes"] == int(79.1 * GIB) and g0["total_gib"] == 80.0 and g0["power_w"] == 650.5
    assert g1["used_bytes"] is None and g1["power_w"] is None and g1["util_pct"] is None
    assert peaks["gpu_power_total_w"] == 650.5
    lines = memory_lines(series.to_dict())
    assert lines[0] == (
        "Peak memory: 5.21 GiB MemAvailable drop (1 s sampling); server RSS peak 3.90 GiB; "
        "GPU0 79.1 GiB used of 80.0 GiB"
    )
    assert "120.00 GiB available of 128.00 GiB MemTotal" in lines[1]
    assert any(line.startswith("Server RSS: peak 3.90 GiB") and "pid 4242" in line for line in lines)
    assert "GPU1 (NVIDIA GB10, nvml): peak n/a used of n/a, utilisation peak n/a, power peak n/a" in lines
    assert lines[-1].startswith("Note: GPU1 memory")
    assert not any(re.search(r"\bGB\b", line) for line in lines)  # GiB, never GB
    assert "taken before the server started" in lines[1]
    # attached to a server already running: the drop is what the run added, and the card says so
    attached = memory_lines(series.to_dict(), baseline_before_server=False)
    assert attached[0].startswith("Peak memory: 5.21 GiB MemAvailable drop during the run, the server already loaded")
    assert "taken with the server already running (attached)" in attached[1]
    assert "before the server started" not in " ".join(attached)


def test_to_dict_is_json_with_units_in_keys() -> None:
    d = json.loads(json.dumps(_series().to_dict(), allow_nan=False))
    assert d["series"]["t_s"] == [0.0, 1.0, 2.0]
    assert d["t0_monotonic_ns"] == 5_000_000_000 and d["clock"] == "CLOCK_MONOTONIC"
    assert d["series"]["server_rss_bytes"][0] is None
    assert d["series"]["gpus"][1]["used_bytes"] == [None, None, None]
    assert d["baseline"]["mem_total_gib"] == 128.0
    assert d["gpus"][0] == {"label": "GPU0", "source": "nvml", "name": "NVIDIA H100", "memory": "device"}

    def keys(obj: Any) -> list[str]:
        if isinstance(obj, dict):
            return [k for k, v in obj.items() for k in [k, *keys(v)]]
        return [k for v in obj for k in keys(v)] if isinstance(obj, list) else []

    unitless = {"interval_s", "clock", "num_samples", "server_pid", "baseline", "gpus", "gpu_sources", "nvml"}
    unitless |= {"amdgpu", "rss_source", "peaks", "series", "definitions", "notes", "label", "source", "name", "memory"}
    unitless |= {"server_procs", "gib", "gpu used_bytes", "gpu util_pct", "gpu power_w", "cgroup"}
    suffixes = ("_bytes", "_gib", "_w", "_pct", "_s", "_ns")
    assert {k for k in keys(d) if not k.endswith(suffixes)} <= unitless


def test_empty_series() -> None:
    series = MemorySeries(1.0, Baseline(0, GIB, GIB), [], [], {"nvml": "disabled"}, None, [])
    assert series.peaks()["mem_available_drop_bytes"] is None
    lines = memory_lines(series.to_dict())
    assert lines[0].startswith("Peak memory: n/a")
    assert "Server RSS: not measured (no server pid)" in lines
    assert "GPU: none measured (nvml: disabled)" in lines


# -- the co-process -----------------------------------------------------------------------------------------


def test_coprocess_on_fake_trees(tmp_path: Path) -> None:
    proc, drm = _fake_proc(tmp_path), _fake_drm(tmp_path)
    sampler = MemorySampler(0.05, nvml=False, sysfs_root=str(drm), proc_root=str(proc))
    sampler.start()
    _wait_for(lambda: (s := sampler.latest()) is not None and s.server_rss is None)
    sampler.set_server_pid(100)
    _wait_for(lambda: (s := sampler.latest()) is not None and s.server_rss is not None)
    _meminfo(proc, total_kb=16 * MIB, avail_kb=9 * MIB)  # the server took 3 GiB
    _process(proc, 103, 101, "python3", 1_050_000)  # a worker grew by 1,000,000 kB
    _write(drm / "card2" / "device" / "mem_info_vram_used", f"{50 * GIB}\n")
    _wait_for(lambda: (s := sampler.latest()) is not None and s.gpus[1].used_bytes == 50 * GIB)
    _meminfo(proc, total_kb=16 * MIB, avail_kb=10 * MIB)  # and gave one back
    _wait_for(lambda: (s := sampler.latest()) is not None and s.mem_available_drop == 2 * GIB)
    series = sampler.stop()

    assert series.baseline.mem_total == 16 * GIB and series.baseline.mem_available == 12 * GIB
    assert series.gpu_sources["nvml"] == "disabled"
    assert [g.label for g in series.gpus] == ["card0", "card2", "card10"]
    assert series.server_pid == 100
    p = series.peaks()
    assert p["mem_available_drop_bytes"] == 3 * GIB
    assert p["server_rss_bytes"] == (300_000 + 200_000 + 1_050_000) * 1024
    assert [g["used_bytes"] for g in p["gpus"]] == [10 * GIB, 50 * GIB, GIB]
    assert p["gpus"][2]["util_pct"] is None and p["gpus"][0]["util_pct"] == 37.0
    assert p["gpu_power_total_w"] == pytest.approx(3 * 123.456789)
    assert series.samples[-1].server_procs == 4
    t = [s.t_ns for s in series.samples]
    assert t == sorted(t) and t[0] >= series.baseline.t_ns
    assert "card10 gpu_busy_percent: absent or unreadable; recorded as null" in series.notes
    assert len(series.notes) == len(set(series.notes))  # each note once, not once per sample
    d = series.to_dict()
    assert d["series"]["gpus"][1]["gtt_used_bytes"][0] == 3 * GIB
    assert "card2 50.0 GiB used of 64.0 GiB" in memory_lines(series.to_dict())[0]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_coprocess_reads_a_containers_memory_cgroup(tmp_path: Path, version: str) -> None:
    """A container's memory cgroup beside the tree's RSS: the usage as sampled, the kernel's peak, the card's
    line; a v2 cgroup without memory.peak (Linux < 5.19) is noted, not an error."""
    proc = _fake_proc(tmp_path)
    cgroup = tmp_path / "cg"
    now, peak = ("memory.usage_in_bytes", "memory.max_usage_in_bytes") if version == "v1" else (
        "memory.current", "memory.peak")
    _write(cgroup / now, f"{2 * GIB}\n")
    if version == "v1":
        _write(cgroup / peak, f"{5 * GIB}\n")
    sampler = MemorySampler(0.05, nvml=False, sysfs_root=str(tmp_path / "no-drm"), proc_root=str(proc))
    sampler.start()
    sampler.set_server_pid(100)
    sampler.set_server_cgroup(str(cgroup), version)
    _wait_for(lambda: (s := sampler.latest()) is not None and s.cgroup_memory == 2 * GIB)
    _write(cgroup / now, f"{3 * GIB}\n")
    _wait_for(lambda: (s := sampler.latest()) is not None and s.cgroup_memory == 3 * GIB)
    _write(cgroup / now, f"{GIB}\n")
    _wait_for(lambda: (s := sampler.latest()) is not None and s.cgroup_memory == GIB)
    series = sampler.stop()
    p = series.peaks()
    assert p["cgroup_memory_bytes"] == 3 * GIB and p["server_rss_bytes"] is not None
    d = series.to_dict()
    assert d["cgroup"]["path"] == str(cgroup) and d["cgroup"]["version"] == version
    assert d["series"]["cgroup_memory_bytes"][-1] == GIB
    lines = memory_lines(d)
    assert "container cgroup peak 3.00 GiB" in lines[0]
    line = next(line for line in lines if line.startswith("Container memory:"))
    assert f"cgroup {version} {now} of {cgroup}" in line
    if version == "v1":
        assert p["cgroup_memory_peak_bytes"] == 5 * GIB and f"the kernel's peak ({peak}) 5.00 GiB" in line
    else:
        assert p["cgroup_memory_peak_bytes"] is None and "kernel's peak" not in line
        assert any("has no peak file (memory.peak needs Linux >= 5.19)" in n for n in series.notes)


def _allocating_child(mb: int, grandchild_mb: int = 0) -> subprocess.Popen[bytes]:
    """A process holding ``mb`` MB of touched memory (and a child holding ``grandchild_mb``); it prints a
    line once everything is allocated and exits when its stdin closes."""
    code = (
        "import subprocess, sys\n"
        f"b = bytearray(b'x') * {mb * MB}\n"  # repetition writes every page, so all of it is resident
        f"if {grandchild_mb}:\n"
        "    g = subprocess.Popen([sys.executable, '-c', "
        f"\"import sys; b = bytearray(b'x') * {grandchild_mb * MB}; print(1, flush=True); sys.stdin.read()\"], "
        "stdin=subprocess.PIPE, stdout=subprocess.PIPE)\n"
        "    g.stdout.readline()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None
    assert child.stdout.readline() == b"ready\n"
    return child


def _end(child: subprocess.Popen[bytes]) -> None:
    child.communicate(timeout=5)  # closes its stdin; the grandchild's stdin closes as the child exits


def test_real_sampling_sees_the_server_rss() -> None:
    sampler = MemorySampler(0.1)  # nvml=True: this machine has no NVIDIA GPU and no pynvml
    sampler.start()
    child = _allocating_child(200)
    try:
        sampler.set_server_pid(child.pid)
        _wait_for(lambda: (s := sampler.latest()) is not None and (s.server_rss or 0) > 200 * MB)
        time.sleep(0.25)
    finally:
        _end(child)
    series = sampler.stop()

    peak = series.peaks()["server_rss_bytes"]
    assert 200 * MB < peak < 200 * MB + 64 * MIB  # the bytearray plus an interpreter's few MiB
    assert series.samples[0].server_rss is None  # before the server pid was known
    assert series.baseline.mem_total == ms.read_meminfo()[0]
    assert all(0 < s.mem_available <= s.mem_total for s in series.samples)
    # Judged by the samples' own stamps, so that a stall of the co-process does not fail the test: it
    # samples on a grid of 0.1 s ticks from its first sample, so none comes before its tick (the one
    # after a late sample comes early only against that one), and the typical gap is the interval.
    ticked = series.samples[:-1]  # the last sample is the one taken at stop()
    assert len(ticked) >= 4, len(ticked)
    assert all(s.t_ns - ticked[0].t_ns >= (i - 0.5) * 0.1e9 for i, s in enumerate(ticked)), ticked
    gaps = [(b.t_ns - a.t_ns) / 1e9 for a, b in zip(ticked, ticked[1:])]
    assert 0.075 < statistics.median(gaps) < 0.15, gaps
    # No GPU on this machine: the lists are empty and the series says why.
    assert series.gpus == [] and all(s.gpus == () for s in series.samples)
    assert "pynvml" in series.gpu_sources["nvml"] or "NVML" in series.gpu_sources["nvml"]
    assert any(line.startswith("GPU: none measured (nvml: ") for line in memory_lines(series.to_dict()))


def test_real_sampling_counts_the_whole_tree() -> None:
    with MemorySampler(0.1) as sampler:
        child = _allocating_child(100, grandchild_mb=150)
        try:
            sampler.set_server_pid(child.pid)
            _wait_for(lambda: (s := sampler.latest()) is not None and s.server_procs == 2)
            time.sleep(0.15)
        finally:
            _end(child)
    series = sampler.stop()  # __exit__ stopped it; a second stop() returns the same series
    assert series is sampler.stop()
    peak = series.peaks()["server_rss_bytes"]
    assert 250 * MB < peak < 250 * MB + 96 * MIB
    assert max(s.server_procs for s in series.samples) == 2
    with pytest.raises(RuntimeError):
        sampler.set_server_pid(1)


def test_stop_when_the_coprocess_was_killed() -> None:
    sampler = MemorySampler(0.5)
    sampler.start()
    _wait_for(lambda: sampler.latest() is not None)
    assert sampler.pid is not None
    os.kill(sampler.pid, signal.SIGKILL)
    time.sleep(0.1)
    t = time.monotonic()
    series = sampler.stop()
    assert time.monotonic() - t < 0.5 + 1.0
    assert len(series.samples) >= 1
    assert any("died before stop() (killed by SIGKILL)" in n for n in series.notes), series.notes


def test_stop_does_not_hang_on_a_stuck_coprocess() -> None:
    sampler = MemorySampler(0.2)
    sampler.start()
    _wait_for(lambda: sampler.latest() is not None)
    assert sampler.pid is not None
    os.kill(sampler.pid, signal.SIGSTOP)  # as if a driver call never returned
    t = time.monotonic()
    series = sampler.stop()
    assert time.monotonic() - t < 0.2 + 1.0 + 0.5
    assert len(series.samples) >= 1
    assert any("did not stop within 1.2 s and was killed" in n for n in series.notes), series.notes


def test_stop_is_prompt_and_ctrl_c_does_not_kill_the_coprocess() -> None:
    sampler = MemorySampler(2.0)
    sampler.start()
    _wait_for(lambda: sampler.latest() is not None)
    assert sampler.pid is not None
    os.kill(sampler.pid, signal.SIGINT)  # as a terminal's Ctrl-C reaches the whole process group
    time.sleep(0.1)
    t = time.monotonic()
    series = sampler.stop()
    assert time.monotonic() - t < 1.0  # the co-process wakes on "stop", not at its next tick
    assert len(series.samples) == 2  # the first and the one taken at stop()
    assert not any("died" in n for n in series.notes), series.notes


def test_coprocess_exits_when_its_parent_is_gone() -> None:
    child = subprocess.Popen(
        ms.child_command("--interval-s=0.05", "--no-nvml"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdin is not None
    first = json.loads(child.stdout.readline())
    assert first["k"] == "baseline" and first["total"] >= first["avail"] > 0
    child.stdin.close()  # what the parent's death does
    assert child.wait(2) == 0
    child.stdout.close()


def test_start_fails_clearly(tmp_path: Path) -> None:
    sampler = MemorySampler(0.1, nvml=False, proc_root=str(tmp_path))  # no meminfo there
    with pytest.raises(SamplerError, match="meminfo"):
        sampler.start()
    with pytest.raises(RuntimeError):
        MemorySampler().stop()
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="interval_s"):
            MemorySampler(bad)


def test_the_coprocess_imports_the_standard_library_only() -> None:
    """The co-process's modules import nothing outside the standard library (and the package's own
    lazy __init__ files): it must not load the client's dependencies nor its compiled core."""
    root = str(Path(ms.__file__).resolve().parents[2])  # as child_command puts it on the child's sys.path
    code = (f"import sys; sys.path.insert(0, {root!r}); before = set(sys.modules); "
            "import fastbench.server.memchild; print('\\n'.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True).stdout.split()
    ours = sorted(name for name in out if name.split(".")[0] == "fastbench")
    assert ours == ["fastbench", "fastbench._version", "fastbench.server", "fastbench.server.memchild",
                    "fastbench.server.memread"], ours
    foreign = [name for name in out if name.split(".")[0] not in sys.stdlib_module_names
               and name.split(".")[0] != "fastbench"]
    assert foreign == [], foreign
