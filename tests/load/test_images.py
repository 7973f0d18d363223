"""Inputs beyond text: random-mm's images (the draw by vLLM's rule, the JPEGs, the bodies), custom_image's
local files, and LoRA traffic's model per request."""

from __future__ import annotations

import asyncio
import base64
import io
import math
import os
import random
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from PIL import Image

from fastbench._core import BodyParts
from fastbench.config import BenchConfig
from fastbench.datasetoptions import RandomMMOptions
from fastbench.exceptions import ConfigError, DatasetError
from fastbench.load.datasets import Workload, build_workload, check_inputs
from fastbench.load.images import OWN_ROWS, SyntheticJPEG
from fastbench.load.lora import draw
from fastbench.load.sources.random_mm import draw_items, item_rule

MODEL = "base-model"
CHAT = "/v1/chat/completions"


def build(config: BenchConfig) -> Workload:
    return asyncio.run(build_workload(config, MODEL, max_model_len=None))


def mm(**options: Any) -> BenchConfig:
    fields = {k: options.pop(k) for k in list(options) if k in ("num_prompts", "seed", "num_warmups",
                                                                 "lora_modules", "lora_assignment", "random_input_len",
                                                                 "request_id_prefix")}
    return BenchConfig(endpoint=CHAT, dataset_name="random-mm", random_input_len=fields.pop("random_input_len", 8),
                       dataset_options=RandomMMOptions(**options), **fields)


# -- vLLM's rule, transcribed from vllm/benchmarks/datasets/datasets.py (RandomMultiModalDataset, 0.32) --------
# get_mm_item_sampling_params and get_mm_item_iterator, with self._rng given; the pixel draws left out.


def _vllm_normalize(bucket_config: dict[tuple[int, int, int], float]) -> dict[tuple[int, int, int], float]:
    bucket_config = {k: v for k, v in bucket_config.items() if v > 0}
    total = sum(bucket_config.values())
    return {k: v / total for k, v in bucket_config.items()}


def _vllm_modality(config: tuple[int, int, int]) -> str:
    return "image" if config[-1] == 1 else "video"


def _vllm_items(rng: np.random.Generator, base: int, ratio: float, limit: dict[str, int],
                buckets: dict[tuple[int, int, int], float]) -> Iterator[tuple[int, int, int]]:
    buckets = _vllm_normalize(buckets)
    allowed = {_vllm_modality(c) for c in buckets}
    limit = {k: v for k, v in limit.items() if k in allowed}
    max_n = min(sum(limit.values()), math.ceil(base * (1 + ratio)))
    min_n = max(0, math.floor(base * (1 - ratio)))
    n = int(rng.integers(min_n, max_n + 1))
    if n == 0:
        return
    counter = {_vllm_modality(k): 0 for k in buckets}
    copy = buckets.copy()
    while sum(counter.values()) < n:
        config = rng.choice(list(copy.keys()), p=list(copy.values()))
        modality = _vllm_modality(config)
        if counter[modality] < limit[modality]:
            counter[modality] += 1
            yield tuple(int(x) for x in config)  # type: ignore[misc]
        else:
            for k in copy:
                if _vllm_modality(k) == modality:
                    copy[k] = 0
            if all(v == 0 for v in copy.values()):
                break
            copy = _vllm_normalize(copy)


@pytest.mark.parametrize("base,ratio,limit,buckets", [
    (1, 0.0, {"image": 255, "video": 1}, {(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}),
    (3, 1.0, {"image": 4}, {(64, 64, 1): 0.2, (32, 48, 1): 0.3, (8, 8, 1): 0.5}),
    (5, 0.4, {"image": 5}, {(10, 20, 1): 1.0, (30, 40, 1): 3.0}),
])
@pytest.mark.parametrize("seed", [0, 7, 2**61 + 3])
def test_image_counts_and_sizes_follow_vllms_draw(base: int, ratio: float, limit: dict[str, int],
                                                  buckets: dict[tuple[int, int, int], float], seed: int) -> None:
    options = RandomMMOptions(base_items_per_request=base, num_mm_items_range_ratio=ratio, limit_mm_per_prompt=limit,
                              bucket_config=tuple((*k, p) for k, p in buckets.items()))
    ours = draw_items(item_rule(options), 300, np.random.default_rng(seed))
    reference_rng = np.random.default_rng(seed)
    theirs = [list(_vllm_items(reference_rng, base, ratio, limit, buckets)) for _ in range(300)]
    assert ours == theirs
    counts = [len(x) for x in ours]
    assert min(counts) >= max(0, math.floor(base * (1 - ratio)))
    assert max(counts) <= min(sum(limit.values()), math.ceil(base * (1 + ratio)))


def test_a_cap_below_the_count_range_is_one_line() -> None:
    with pytest.raises(ConfigError, match="allows 2"):
        item_rule(RandomMMOptions(base_items_per_request=4, limit_mm_per_prompt={"image": 2}))


@pytest.mark.parametrize("options,words", [
    ({"bucket_config": ((720, 1280, 16, 1.0),)}, "images only"),
    ({"bucket_config": ((0, 10, 1, 1.0),)}, "whole numbers >= 1"),
    ({"bucket_config": ((10, 10, 1, 0.0),)}, "every probability is 0"),
    ({"num_mm_items_range_ratio": 1.5}, "in [0, 1]"),
    ({"limit_mm_per_prompt": {"audio": 1}}, "--random-mm-limit-mm-per-prompt"),
])
def test_bad_random_mm_options_are_one_line(options: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check_inputs_and_config(mm(**options))
    assert words in str(refused.value) and "\n" not in str(refused.value)


def check_inputs_and_config(config: BenchConfig) -> None:
    from fastbench.checks import check_config

    check_config(config)
    check_inputs(config)


def test_random_mm_needs_the_chat_endpoint() -> None:
    with pytest.raises(ConfigError, match="/v1/chat/completions"):
        check_inputs_and_config(BenchConfig(dataset_name="random-mm"))


# -- the JPEGs -----------------------------------------------------------------------------------------------


def _jpeg_structure(data: bytes) -> tuple[int, int, int]:
    """A baseline JPEG walked by hand, strictly: segment lengths, one SOF0, the restart interval, and in
    the entropy-coded data only stuffed 0xFF 0x00, fill 0xFF before a marker, RSTn in order, EOI last.
    Returns (width, height, restart markers)."""
    assert data[:2] == b"\xff\xd8"
    pos, frame, interval = 2, (0, 0), 0
    while True:
        while data[pos:pos + 2] == b"\xff\xff":  # fill before a marker
            pos += 1
        assert data[pos] == 0xFF, pos
        marker, length = data[pos + 1], int.from_bytes(data[pos + 2:pos + 4], "big")
        assert marker not in range(0xC1, 0xD0) or marker in (0xC4, 0xCC), f"not baseline: {marker:#x}"
        if marker == 0xC0:
            frame = struct.unpack(">HH", data[pos + 5:pos + 9])
        elif marker == 0xDD:
            (interval,) = struct.unpack(">H", data[pos + 4:pos + 6])
        pos += 2 + length
        if marker == 0xDA:
            break
    height, width = frame
    rows = -(-height // 16)  # 4:2:0: 16x16 MCUs
    assert interval == -(-width // 16) or rows == 1
    restarts = 0
    while pos < len(data):
        if data[pos] != 0xFF:
            pos += 1
            continue
        follow = data[pos + 1]
        if follow == 0x00:
            pos += 2
        elif follow == 0xFF:
            pos += 1
        elif follow == 0xD0 + restarts % 8:
            restarts += 1
            pos += 2
        else:
            assert follow == 0xD9 and pos + 2 == len(data), f"marker {follow:#x} at {pos} of {len(data)}"
            break
    assert restarts == rows - 1
    return width, height, restarts


def _pixels(data: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(data))
    image.load()
    assert (image.format, image.mode) == ("JPEG", "RGB")
    return np.asarray(image)


@pytest.mark.parametrize("height,width,images", [(1, 1, 4), (9, 5, 7), (16, 16, 3), (17, 5, 10), (50, 37, 30),
                                                 (256, 256, 12), (40, 3000, 2)])
def test_a_synthetic_jpeg_is_a_baseline_jpeg_of_its_size_each_image_its_own(height: int, width: int,
                                                                             images: int) -> None:
    jpeg = SyntheticJPEG(height, width, images, np.random.default_rng(height * 1000 + width))
    seen = set()
    for index in range(images):
        data = jpeg.whole(index)
        assert _jpeg_structure(data)[:2] == (width, height)
        pixels = _pixels(data)
        assert pixels.shape == (height, width, 3)
        seen.add(pixels.tobytes())
        parts = jpeg.parts(index)  # every part but the last is whole base64 groups: they join by concatenation
        assert all(len(p) % 4 == 0 and b"=" not in p for p in parts[:-1])
        assert parts[-1] == jpeg.middle or height <= 16 * OWN_ROWS
    assert len(seen) == images  # no two alike in pixels: no image cache keyed by content hits
    if height > 16 * OWN_ROWS:  # the rows after the own ones are the same bytes, held once
        first, second = jpeg.whole(0), jpeg.whole(1)
        assert first.endswith(base64.b64decode(jpeg.middle)) and second.endswith(base64.b64decode(jpeg.middle))


def test_a_synthetic_jpeg_has_vllms_format_and_quality() -> None:
    # vllm/benchmarks/datasets/datasets.py, process_image: image.save(image_data, format="JPEG")
    rng = np.random.default_rng(4)
    theirs = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (64, 48, 3), dtype=np.uint8)).save(theirs, format="JPEG")
    ours = SyntheticJPEG(64, 48, 3, rng).whole(2)

    def segments(data: bytes, kinds: tuple[int, ...]) -> list[bytes]:
        pos, out = 2, []
        while data[pos + 1] != 0xDA:
            if data[pos + 1] == 0xFF:
                pos += 1
                continue
            length = int.from_bytes(data[pos + 2:pos + 4], "big")
            if data[pos + 1] in kinds:
                out.append(data[pos:pos + 2 + length])
            pos += 2 + length
        return out

    # the quantisation tables (quality 75), the Huffman tables (standard) and the frame (sampling) are vLLM's
    assert segments(ours, (0xDB, 0xC4, 0xC0, 0xE0)) == segments(theirs.getvalue(), (0xDB, 0xC4, 0xC0, 0xE0))
    assert Image.open(io.BytesIO(ours)).info.get("progression") is None


def test_djpeg_strict_decodes_the_synthetic_jpeg(tmp_path: Path) -> None:
    djpeg = shutil.which("djpeg")
    if djpeg is None:
        pytest.skip("djpeg (libjpeg-turbo-progs) not installed")
    jpeg = SyntheticJPEG(72, 40, 4, np.random.default_rng(8))
    good = jpeg.whole(3)
    rst1 = good.index(b"\xff\xd1")
    bad = good[:rst1] + b"\xff\xd2" + good[rst1 + 2:]  # RST2 where RST1 is due: strict refuses it
    for name, data, rc in (("good.jpg", good, 0), ("bad.jpg", bad, 1)):
        (tmp_path / name).write_bytes(data)
        proc = subprocess.run([djpeg, "-strict", "-outfile", os.devnull, str(tmp_path / name)],
                              capture_output=True, text=True, check=False)
        assert (proc.returncode != 0) == bool(rc), (name, proc.stderr)


def test_random_mm_without_pillow_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL raises ImportError
    for attempt in (lambda: check_inputs(mm()), lambda: build(mm(num_prompts=2))):
        with pytest.raises(ConfigError) as refused:
            attempt()
        assert "pip install 'fastbench-llm[images]'" in str(refused.value) and "\n" not in str(refused.value)
    assert build(mm(num_prompts=2, base_items_per_request=0)).requests  # no images, no Pillow needed


# -- custom_image --------------------------------------------------------------------------------------------


def _png_file(path: Path, height: int, width: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(width).integers(0, 256, (height, width, 3), dtype=np.uint8)).save(
        out, format="PNG")
    data = out.getvalue()
    path.write_bytes(data)
    return data


def test_custom_image_sends_each_file_as_a_data_url(tmp_path: Path) -> None:
    a, b = _png_file(tmp_path / "a.png", 4, 6), _png_file(tmp_path / "b.png", 3, 2)
    lines = [{"prompt": "How many blocks?", "image_files": ["a.png", str(tmp_path / "b.png")]},
             {"content": [{"type": "text", "text": "Compare "}, {"type": "image", "image": "b.png"},
                          {"type": "text", "text": " and"}, {"type": "image_url", "image_url": {"url": "a.png"}}],
              "output_tokens": 7}]
    dataset = tmp_path / "images.jsonl"
    dataset.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    config = BenchConfig(endpoint=CHAT, dataset_name="custom_image", dataset_path=dataset, num_prompts=2,
                         dataset_order="file", custom_output_len=-1, random_input_len=1)
    with pytest.raises(DatasetError, match="line 1: --custom-output-len -1"):
        build(config)
    config = config.replace(custom_output_len=9)
    check_inputs(config)
    work = build(config)
    first, second = (orjson.loads(bytes(s.body))["messages"][0]["content"] for s in work.requests)
    urls = [p["image_url"]["url"] for p in first + second if p["type"] == "image_url"]
    assert urls == [f"data:image/png;base64,{base64.b64encode(x).decode()}" for x in (a, b, b, a)]
    assert first[0] == {"type": "text", "text": "How many blocks?"}
    assert [p["text"] for p in second if p["type"] == "text"] == ["Compare ", " and"]
    assert [s.max_tokens for s in work.requests] == [9, 9]


def test_an_image_file_that_is_not_an_image_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "notes.png").write_text("these are notes, not pixels")
    dataset = tmp_path / "images.jsonl"
    dataset.write_bytes(orjson.dumps({"prompt": "What is it?", "image_files": ["notes.png"]}))
    config = BenchConfig(endpoint=CHAT, dataset_name="custom_image", dataset_path=dataset)
    for attempt in (lambda: check_inputs(config), lambda: build(config)):
        with pytest.raises(DatasetError) as refused:
            attempt()
        message = str(refused.value)
        assert "\n" not in message and "notes.png is not an image" in message and "line 1" in message
    (tmp_path / "notes.png").unlink()
    with pytest.raises(DatasetError, match="image file not found: .*notes.png"):
        check_inputs(config)


# -- LoRA ----------------------------------------------------------------------------------------------------


def test_each_requests_model_is_drawn_as_vllm_bench_serve_draws_it() -> None:
    names = ("sql-lora", "math-lora", "sql-lora")
    config = BenchConfig(num_prompts=50, seed=9, lora_modules=names, num_warmups=2, request_id_prefix="r")
    work = build(config)
    random.seed(9)  # vllm/benchmarks/serve.py: random.seed(args.seed) at the start, then one choice per request
    expected = [random.choice(list(names)) for _ in range(50)]
    sent = [orjson.loads(bytes(s.body)) for s in work.requests]
    assert [doc["model"] for doc in sent] == expected
    assert [doc["request_id"] for doc in sent] == [f"r{i}" for i in range(50)]
    assert work.adapter_of_row == [0 if name == "sql-lora" else 1 for name in expected]
    assert {orjson.loads(bytes(s.body))["model"] for s in work.warmups} == {MODEL}
    others = [{k: v for k, v in doc.items() if k not in ("model", "request_id")} for doc in sent]
    plain = build(BenchConfig(num_prompts=50, seed=9))
    assert others == [{k: v for k, v in orjson.loads(bytes(s.body)).items() if k != "model"} for s in plain.requests]


def test_round_robin_and_image_bodies_take_the_adapter_too() -> None:
    assert draw(["a", "b", "c"], 7, 0, "round-robin") == ["a", "b", "c", "a", "b", "c", "a"]
    work = build(mm(num_prompts=4, lora_modules=("x", "y"), lora_assignment="round-robin"))
    assert [orjson.loads(bytes(s.body))["model"] for s in work.requests] == ["x", "y", "x", "y"]
    assert all(isinstance(s.body, BodyParts) for s in work.requests)


@pytest.mark.parametrize("config,words", [
    (BenchConfig(lora_assignment="round-robin"), "give --lora-modules"),
    (BenchConfig(lora_modules=("a", " ")), "adapter names"),
    (BenchConfig(lora_modules=("a",), extra_body={"model": "b"}), "both set the model"),
])
def test_bad_lora_options_are_one_line(config: BenchConfig, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        check_inputs_and_config(config)
