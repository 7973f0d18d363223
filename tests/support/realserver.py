"""Shared by the real-server tests: run a setup script that prints KEY=VALUE lines, and run
fastbench against the server it launches."""

from __future__ import annotations

import subprocess
import sys
import time
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


def run_fastbench(argv: list[str], result_json: Path, server_log: Path, timeout_s: float) -> tuple[Any, float]:
    """``python -m fastbench argv``; fails with the ends of its stderr and of the server's log unless it
    exits 0. Returns the result file's document and the wall time in seconds."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "fastbench", *argv], capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, f"{proc.stderr[-3000:]}\n--- server log ---\n{server_log.read_text()[-3000:]}"
    return orjson.loads(result_json.read_bytes()), wall
