"""``fastbench validate --backend``: an API answered whole validated from the command line, its JSON report,
its exit status, and its refusals in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson


def _validate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", "validate", *args], capture_output=True, text=True,
                          timeout=180)


def test_validate_backend_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "v.json"
    proc = _validate("--backend", "openai-embeddings", "--batch-size", "3", "--num-requests", "30",
                     "--concurrency", "4", "--pooling-ms", "2", "--json", str(out))
    report = orjson.loads(out.read_bytes())
    assert proc.returncode == (0 if report["passed"] else 1), proc.stderr  # the verdict is the exit status
    assert report["completed"] == report["tokens_equal"] == 30 and report["settings"]["batch_size"] == 3
    assert "end skew (client end - server send)" in proc.stdout
    assert report["end_skew_ms"]["min"] >= 0  # one clock: no answer read before the server sent it


def test_validate_backend_refuses_in_one_line() -> None:
    proc = _validate("--backend", "openai-embeddings-chat", "--batch-size", "2")
    assert proc.returncode == 2 and "one message a request" in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr
