"""The lines around a run's table: the first say what is measured against what (the built-in synthetic
server when no --base-url is given), the last where the results went or how to keep them; notes whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fastbench import BenchConfig, LaunchConfig
from fastbench.cli import runtext

QUICK = ("--num-prompts", "4", "--concurrency", "2", "--random-input-len", "16", "--random-output-len", "4",
         "--synthetic-args", "--ttft-ms 1 --itl-ms 1")


def fastbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OPENAI_API_KEY": ""})


def test_a_first_run_says_what_it_measured_and_that_nothing_was_saved() -> None:
    proc = fastbench(*QUICK)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    opening = " ".join(" ".join(lines[:lines.index("============ Serving Benchmark Result ============")]).split())
    assert opening.startswith("fastbench: measuring the built-in synthetic server (--ttft-ms 1 --itl-ms 1; "
                              "no --base-url given, so no real model), /v1/completions")
    assert ("fastbench: workload: random, 16 prompt tokens and 4 output tokens a request; 4 requests, 2 in flight "
            "(closed loop)") in opening
    closing = " ".join(" ".join(lines[lines.index("=" * 50, 1):]).split())
    assert closing.endswith("fastbench: nothing saved: --result-json FILE keeps the result, --result-card FILE a "
                            "Markdown card, --store DIR the run for `fastbench runs`, compare and report")
    assert "…" not in proc.stdout  # every note whole


def test_a_run_that_writes_says_where(tmp_path: Path) -> None:
    out, card = tmp_path / "r.json", tmp_path / "r.md"
    proc = fastbench(*QUICK, "--result-json", str(out), "--result-card", str(card))
    assert proc.returncode == 0, proc.stderr
    assert out.is_file() and card.is_file()
    assert proc.stdout.splitlines()[-1] == f"fastbench: written: result {out}; card {card}"


def test_the_opening_names_a_url_a_launch_and_an_open_loop() -> None:
    attached = runtext.opening_lines(BenchConfig(base_url="http://user:pw@h:8000", model="m", request_rate=2.5,
                                                 concurrency=8, max_seconds=60, dataset_name="sharegpt",
                                                 dataset_path="sg.json", max_tokens=256))
    assert attached == ["fastbench: measuring http://***@h:8000, model m, /v1/completions",
                        "fastbench: workload: sharegpt from sg.json, 256 output tokens a request; 200 requests, "
                        "arrivals at 2.5 req/s, at most 8 in flight, for at most 60 s"]
    launched = runtext.opening_lines(BenchConfig(launch=LaunchConfig(engine="vllm", model="Qwen/Qwen3-0.6B")))
    assert launched[0] == "fastbench: measuring a vllm server launched here for Qwen/Qwen3-0.6B, /v1/completions"
    unnamed = runtext.opening_lines(BenchConfig(base_url="http://h:1"))
    assert unnamed[0] == "fastbench: measuring http://h:1, the first model its /v1/models lists, /v1/completions"
