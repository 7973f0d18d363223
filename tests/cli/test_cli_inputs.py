"""The command line with inputs beyond text and LoRA traffic: a random-mm run split over adapters against the
synthetic server, its prompt tokens from the server's usage (image tokens included), and the one-line
refusals (a file that is not an image, openai-audio)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson

from support.result_schema import undocumented
from fastbench.cli import command as cli
from fastbench.datasetoptions import RandomMMOptions
from fastbench.load.sources.random_mm import draw_items, item_rule
from fastbench.synthetic.model import CHAT_MESSAGE_OVERHEAD, IMAGE_TILE


def fastbench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


BUCKETS = "{(64, 96, 1): 0.5, (40, 40, 1): 0.5}"


def test_a_random_mm_run_over_adapters_counts_every_request_and_image_token(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    n, words, seed = 40, 12, 5
    proc = fastbench("--backend", "openai-chat", "--dataset-name", "random-mm", "--num-prompts", str(n),
                     "--random-input-len", str(words), "--max-tokens", "3", "--seed", str(seed),
                     "--random-mm-base-items-per-request", "2", "--random-mm-num-mm-items-range-ratio", "0.5",
                     "--random-mm-bucket-config", BUCKETS, "--lora-modules", "sql-lora", "math-lora",
                     "--synthetic-args", "--lora-modules sql-lora math-lora --strict-model --itl-ms 1 --ttft-ms 1",
                     "--result-json", str(out), "--result-card", str(tmp_path / "card.md"))
    assert proc.returncode == 0, proc.stderr
    assert "LoRA adapters" in proc.stdout
    doc = orjson.loads(out.read_bytes())["fastbench"]
    per = {a["adapter"]: a for a in doc["adapters"]["per_adapter"]}
    stats = doc["server"]["synthetic_stats"]
    # the split the server saw is the result's, request for request
    assert {name: a["requests"] for name, a in per.items()} == {
        name: k for name, k in stats["requests_by_model"].items() if name != "fastbench-synthetic"}
    assert sum(a["completed"] for a in per.values()) == doc["counts"]["completed"] == n
    assert sum(a["total_input_tokens"] for a in per.values()) == doc["tokens"]["total_input"]
    # prompt tokens from the server's usage, by its rule: the message's words + 4 + one per 32x32 tile
    options = RandomMMOptions(base_items_per_request=2, num_mm_items_range_ratio=0.5,
                              bucket_config=((64, 96, 1, 0.5), (40, 40, 1, 0.5)))
    items = draw_items(item_rule(options), n, np.random.default_rng(seed))
    tiles = sum(math.ceil(h / IMAGE_TILE) * math.ceil(w / IMAGE_TILE) for request in items for h, w, _ in request)
    assert doc["tokens"]["total_input"] == n * (CHAT_MESSAGE_OVERHEAD + words) + tiles
    assert stats["images"] == sum(len(request) for request in items)
    assert any("include the image tokens" in note for note in doc["notes"])
    assert "## LoRA adapters" in (tmp_path / "card.md").read_text()
    assert undocumented(orjson.loads(out.read_bytes())) == []  # the adapters and the server's counts included


def test_an_image_file_that_is_not_an_image_stops_the_run_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "chart.png").write_bytes(b"%PDF-1.7 not an image")
    dataset = tmp_path / "images.jsonl"
    dataset.write_bytes(orjson.dumps({"prompt": "Describe the chart", "image_files": [str(tmp_path / "chart.png")]}))
    out = tmp_path / "result.json"
    proc = fastbench("--endpoint", "/v1/chat/completions", "--dataset-name", "custom_image", "--dataset-path",
                     str(dataset), "--num-prompts", "2", "--result-json", str(out))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "chart.png is not an image" in lines[0] and "line 1" in lines[0], proc.stderr
    assert not out.exists()


def test_openai_audio_is_refused_with_its_reason() -> None:
    proc = fastbench("--backend", "openai-audio")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "--backend openai-audio" in line and "audio" in line and "transcriptions" in line


def test_the_random_mm_and_lora_flags_set_their_fields() -> None:
    parser = cli.build_parser()
    argv = ["--dataset-name", "random-mm", "--random-mm-base-items-per-request", "3",
            "--random-mm-num-mm-items-range-ratio", "0.25", "--random-mm-limit-mm-per-prompt", '{"image": 4}',
            "--random-mm-bucket-config", "{(10, 20, 1): 0.3, '(30, 40, 1)': 0.7}", "--lora-modules", "a=/x", "b",
            "--lora-assignment", "round-robin", "--output-len", "7"]
    config = cli.config_from_args(parser.parse_args(argv), argv)
    assert config.options(RandomMMOptions) == RandomMMOptions(base_items_per_request=3, num_mm_items_range_ratio=0.25,
                                               limit_mm_per_prompt={"image": 4},
                                               bucket_config=((10, 20, 1, 0.3), (30, 40, 1, 0.7)))
    assert (config.lora_modules, config.lora_assignment, config.random_output_len) == (("a", "b"), "round-robin", 7)
    defaults = cli.config_from_args(parser.parse_args([]), [])
    assert defaults.options(RandomMMOptions) == RandomMMOptions() and defaults.lora_modules == ()
