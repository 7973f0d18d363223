"""A GPU with unified memory (GB10: the GPU's memory is the system's), as NVML shows it: its memory answers
NVML_ERROR_NOT_SUPPORTED. The sampler records the system's memory (MemTotal - MemAvailable of the same
sample) as the GPU's, marks the GPU so, and the card says so. NVML is ``support.fake_pynvml``: the readers
are given it directly, and a whole run against the synthetic server finds it as ``pynvml`` in a venv of
its own."""

from __future__ import annotations

import json
import os
import site
import subprocess
import venv
from pathlib import Path

import support.fake_pynvml as fake_nvml
import fastbench
import fastbench.server.memory as ms
from fastbench.server.memory import GIB, GpuInfo, GpuReading

SUPPORT = Path(__file__).resolve().parents[1] / "support"


def _fresh_nvml() -> object:
    fake_nvml.nvmlInit()
    return fake_nvml


def test_not_supported_memory_marks_the_gpu_unified_and_reads_the_systems() -> None:
    notes: list[str] = []
    infos, handles = ms.nvml_probe(_fresh_nvml(), notes.append)
    assert infos == [GpuInfo(label="GPU0", source="nvml", name="NVIDIA GB10", memory="system")]
    assert len(notes) == 1 and notes[0].startswith("GPU0 memory: NVML answers NOT_SUPPORTED (unified memory")
    notes.clear()
    system = (119 * GIB, 71 * GIB)  # MemTotal, MemAvailable
    readings = ms.nvml_read(fake_nvml, infos, handles, notes.append, system=system)
    assert readings == [GpuReading(used_bytes=48 * GIB, total_bytes=119 * GIB, util_pct=37.0, power_w=41.25)]
    assert notes == []  # the unsupported call is not made again, once per sample, to be noted as a null


def test_another_nvml_failure_of_the_memory_is_a_null_not_unified_memory() -> None:
    """Only NOT_SUPPORTED means unified memory: any other failure reads as a null with its note."""

    class Failing:
        def __getattr__(self, name: str) -> object:
            return getattr(fake_nvml, name)

        @staticmethod
        def nvmlDeviceGetMemoryInfo(handle: object) -> object:
            raise fake_nvml.NVMLError(999)  # NVML_ERROR_UNKNOWN

    nvml = Failing()
    notes: list[str] = []
    _fresh_nvml()
    infos, handles = ms.nvml_probe(nvml, notes.append)
    assert infos[0].memory == "device" and notes == []
    readings = ms.nvml_read(nvml, infos, handles, notes.append, system=(GIB, GIB))
    assert readings[0].used_bytes is None and readings[0].total_bytes is None
    assert notes == ["GPU0 memory: NVMLError: Unknown Error 999; recorded as null"]


def _venv_with_fake_nvml(where: Path) -> Path:
    """A venv that sees this interpreter's packages (a .pth file) and, before them, the fake as ``pynvml``."""
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / "bin" / "python"
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    (Path(own) / "pynvml.py").write_text((SUPPORT / "fake_pynvml.py").read_text())
    (Path(own) / "parent_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def test_a_run_records_the_systems_memory_as_the_unified_gpus_and_the_card_says_so(tmp_path: Path) -> None:
    python = _venv_with_fake_nvml(tmp_path / "venv")
    result, card = tmp_path / "run.json", tmp_path / "run.md"
    env = dict(os.environ, PYTHONPATH=str(Path(fastbench.__file__).resolve().parents[1]))
    proc = subprocess.run(
        [str(python), "-m", "fastbench", "--num-prompts", "8", "--concurrency", "4", "--random-output-len", "32",
         "--memory-interval", "0.05", "--result-json", str(result), "--result-card", str(card)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(result.read_text())
    assert doc["completed"] == 8
    memory = doc["fastbench"]["server"]["memory_series"]
    assert memory["gpu_sources"]["nvml"] == "1 device"
    assert memory["gpus"] == [{"label": "GPU0", "source": "nvml", "name": "NVIDIA GB10", "memory": "system"}]
    series = memory["series"]
    gpu = series["gpus"][0]
    total = memory["baseline"]["mem_total_bytes"]
    assert memory["num_samples"] >= 3
    # each sample's GPU memory is that sample's system memory in use, of MemTotal
    assert gpu["total_bytes"] == [total] * memory["num_samples"]
    assert gpu["used_bytes"] == [total - avail for avail in series["mem_available_bytes"]]
    assert set(gpu["util_pct"]) == {37.0} and set(gpu["power_w"]) == {41.25}
    peak = doc["fastbench"]["server"]["memory_peaks"]["gpus"][0]
    assert peak["used_bytes"] == total - min(series["mem_available_bytes"]) and peak["total_bytes"] == total
    rows = {}  # the card's Memory section: "| label | value |" rows, as memory_lines words them
    for line in card.read_text().split("## Memory", 1)[1].splitlines():
        if line.startswith("| ") and line.count(" | ") == 1:
            label, value = line.strip("| ").split(" | ")
            rows[label] = value
    used_of = f"{peak['used_bytes'] / GIB:.1f} GiB used of {total / GIB:.1f} GiB"
    gpu_row = rows["GPU0 (NVIDIA GB10, nvml)"]
    assert gpu_row.startswith(f"peak {used_of} (unified memory: NVML has no memory info for it, so this is the "
                              "system's memory"), gpu_row
    assert rows["Peak memory"].endswith(f"GPU0 {used_of} (unified: the system's)"), rows["Peak memory"]
    assert rows["Note"].startswith("GPU0 memory: NVML answers NOT_SUPPORTED (unified memory, as on GB10)")
