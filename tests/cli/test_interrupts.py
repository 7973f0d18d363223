"""An interrupt never loses a result: SIGINT as ``timeout -s INT`` sends it (the process, then its group)
and as a terminal's Ctrl-C does (the group), a hundred times over, each run ends with exit status 130, a
complete result file marked interrupted, in-flight requests cancelled (not failed), and no error line.

The runs are forked by tests/support/interrupt_harness.py (see there why a script of its own)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.sanitizer import UNDER_SANITIZER

HARNESS = Path(__file__).resolve().parents[1] / "support" / "interrupt_harness.py"
STOPPING = "fastbench: stopping; writing what was measured"
# Only a hang's guard: 80 runs take ~1 min here, and ASan on a loaded host took them past 300 s.
HARNESS_TIMEOUT_S = 900 if UNDER_SANITIZER else 300


def _interrupted_runs(tmp_path: Path, repeats: int, *flags: str) -> list[dict[str, object]]:
    proc = subprocess.run([sys.executable, str(HARNESS), str(tmp_path), str(repeats), *flags],
                          capture_output=True, text=True, timeout=HARNESS_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(runs) == repeats
    return runs


@pytest.mark.parametrize(("repeats", "flags"), [(80, ()), (20, ("--builtin",))], ids=["attached", "built-in server"])
def test_every_interrupted_run_writes_its_result(tmp_path: Path, repeats: int, flags: tuple[str, ...]) -> None:
    for i, run in enumerate(_interrupted_runs(tmp_path, repeats, *flags)):
        where = f"run {i}: {run}"
        assert run["status"] == 130, where
        assert run["run"] is not None and run["run"]["stopped_reason"] == "interrupted", where  # type: ignore[index]
        assert isinstance(run["completed"], int) and run["completed"] > 0, where
        assert run["failed"] == 0, where  # in flight at the stop: cancelled, not failed
        stderr = str(run["stderr"])
        assert stderr.strip() == STOPPING + " (signal again, a second later, to abandon)", where  # no error line
