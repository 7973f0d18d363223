"""The command line: help, bad input, the embedded default run and its output files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest


def fastbench(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_help_explains_flags() -> None:
    out = fastbench("--help").stdout
    for flag in ("--base-url", "--concurrency", "--max-concurrency", "--request-rate", "--burstiness",
                 "--num-prompts", "--max-seconds", "--num-warmups", "--goodput", "--extra-body",
                 "--dataset-name", "--random-range-ratio", "--result-json", "--result-card",
                 "--save-detailed", "--api-key", "--insecure", "--ignore-eos"):
        assert flag in out, flag
    assert "default" in out


@pytest.mark.parametrize("args,words", [
    (["--concurrency", "0"], "at least 1"),
    (["--request-rate", "-3"], "request-rate"),
    (["--extra-body", "{bad"], "not valid JSON"),
    (["--extra-body", "[1]"], "JSON object"),
    (["--goodput", "ttft:abc"], "KEY:MS"),
    (["--coalesce-ms", "-1"], "--coalesce-ms"),
    (["--base-url", "ftp://x"], "http://host:port"),
    (["--base-url", "http://127.0.0.1:1", "--num-prompts", "1"], "127.0.0.1"),
    (["--dataset-name", "sharegpt", "--dataset-path", "/nonexistent.json", "--num-prompts", "1"], "nonexistent"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    proc = fastbench(*args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    err = proc.stderr.strip().splitlines()
    assert words in err[-1], proc.stderr


def test_default_run_against_the_synthetic_server(tmp_path: Path) -> None:
    key = "sk-fastbench-secret-0123456789"
    out_json, card, detailed = tmp_path / "r.json", tmp_path / "card.md", tmp_path / "d.jsonl"
    proc = fastbench(
        "--num-prompts", "12", "--concurrency", "4", "--random-input-len", "32", "--random-output-len", "8",
        "--synthetic-args", "--ttft-ms 20 --itl-ms 5", "--api-key", key,
        "--result-json", str(out_json), "--result-card", str(card), "--save-detailed", str(detailed),
        env={"OPENAI_API_KEY": key},
    )
    assert proc.returncode == 0, proc.stderr
    assert "Serving Benchmark Result" in proc.stdout
    doc = orjson.loads(out_json.read_bytes())
    assert doc["completed"] == 12 and doc["failed"] == 0
    assert 19 < doc["median_ttft_ms"] < 60
    assert 4.5 < doc["median_tpot_ms"] < 8
    assert doc["fastbench"]["schema_version"] == 1
    text = card.read_text()
    for section in ("Configuration", "Measured results", "Full run command", "Notes"):
        assert section in text
    records = [orjson.loads(line) for line in detailed.read_text().splitlines()]
    assert len(records) == 12
    for rec in records:  # closed loop: TTFT from the send, as in the result file
        assert rec["ttft_ms"] == pytest.approx((rec["first_token_ns"] - rec["sent_ns"]) / 1e6)
    for output in (proc.stdout, proc.stderr, out_json.read_text(), text, detailed.read_text()):
        assert key not in output


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_signal_writes_a_partial_result(tmp_path: Path, sig: str) -> None:
    import signal
    import time

    out_json, card = tmp_path / "r.json", tmp_path / "card.md"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastbench", "--num-prompts", "400", "--concurrency", "4",
         "--random-input-len", "16", "--random-output-len", "20", "--synthetic-args", "--ttft-ms 5 --itl-ms 10",
         "--result-json", str(out_json), "--result-card", str(card)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    time.sleep(4.0)  # the synthetic server starts, then some requests complete (each takes ~0.2 s)
    proc.send_signal(getattr(signal, sig))
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    doc = orjson.loads(out_json.read_bytes())
    assert 0 < doc["completed"] < 400
    assert doc["fastbench"]["run"]["stopped_reason"] == "interrupted"
    assert "partial" in card.read_text()
    assert "Traceback" not in stderr


def test_unknown_endpoint_is_one_line() -> None:
    proc = fastbench("--endpoint", "/v1/embeddings")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "--endpoint" in proc.stderr
