"""Inputs beyond text: random-mm's images (the draw by vLLM's rule, the PNGs, the bodies), custom_image's
local files, and LoRA traffic's model per request."""

from __future__ import annotations

import asyncio
import base64
import io
import math
import random
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from fastbench._core import BodyParts
from fastbench.config import BenchConfig
from fastbench.datasetoptions import RandomMMOptions
from fastbench.exceptions import ConfigError, DatasetError
from fastbench.load.datasets import Workload, build_workload, check_inputs
from fastbench.load.images import SyntheticPNG, adler32_combine
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


# -- the PNGs ------------------------------------------------------------------------------------------------


def _decode_png(data: bytes) -> tuple[int, int, bytes]:
    """A PNG read by hand (chunks, CRCs, the zlib stream): width, height and the filtered scanlines."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", (0, 0)
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body), kind
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
            assert body[8:] == b"\x08\x02\x00\x00\x00"  # 8-bit RGB, no interlace
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert kind == b"IEND"
    return size[0], size[1], zlib.decompress(idat)  # checks the Adler-32 too


@pytest.mark.parametrize("height,width", [(1, 1), (1, 7), (2, 3), (5, 4), (256, 256), (100, 30000)])
def test_a_synthetic_png_is_a_png_of_its_size_and_row(height: int, width: int) -> None:
    rng = np.random.default_rng(height * 1000 + width)
    png = SyntheticPNG(height, width, rng)
    row = rng.integers(0, 256, 3 * width, dtype=np.uint8).tobytes()
    whole = png.whole(row)
    assert len(whole) == png.png_bytes
    w, h, raw = _decode_png(whole)
    assert (w, h) == (width, height)
    lines = [raw[i * (1 + 3 * width):(i + 1) * (1 + 3 * width)] for i in range(height)]
    assert len(raw) == height * (1 + 3 * width) and all(line[0] == 0 for line in lines)
    assert lines[0][1:] == row
    parts = png.parts(row)  # every part but the last is whole base64 groups: they join by concatenation
    assert len(parts.head) % 4 == 0 and b"=" not in parts.head and b"=" not in png.middle
    other = png.whole(bytes(3 * width))  # another image of the size: its own first row, the rest shared
    assert _decode_png(other)[2][1 + 3 * width:] == raw[1 + 3 * width:]


def test_pillow_reads_the_synthetic_png() -> None:
    image_module = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(3)
    png = SyntheticPNG(72, 128, rng)
    row = rng.integers(0, 256, 3 * 128, dtype=np.uint8).tobytes()
    image = image_module.open(io.BytesIO(png.whole(row)))
    image.load()
    assert (image.format, image.size, image.mode) == ("PNG", (128, 72), "RGB")
    assert np.asarray(image)[0].tobytes() == row


def test_adler32_combine_is_zlibs() -> None:
    rng = random.Random(5)
    for _ in range(50):
        a = rng.randbytes(rng.randrange(0, 5000))
        b = rng.randbytes(rng.randrange(0, 200000))
        assert adler32_combine(zlib.adler32(a), zlib.adler32(b), len(b)) == zlib.adler32(a + b)


# -- the bodies ----------------------------------------------------------------------------------------------


def _images(body: bytes) -> tuple[dict[str, Any], list[tuple[int, int, bytes]]]:
    doc = orjson.loads(body)
    (message,) = doc["messages"]
    text, *images = message["content"]
    assert message["role"] == "user" and text["type"] == "text" and isinstance(text["text"], str)
    out = []
    for part in images:
        assert part["type"] == "image_url"
        prefix, _, data = part["image_url"]["url"].partition(",")
        assert prefix == "data:image/png;base64"
        out.append(_decode_png(base64.b64decode(data)))
    return doc, out


def test_random_mm_bodies_carry_the_drawn_images() -> None:
    buckets = ((16, 24, 1, 0.5), (9, 5, 1, 0.5))
    config = mm(num_prompts=40, seed=11, base_items_per_request=2, num_mm_items_range_ratio=1.0,
                bucket_config=buckets, num_warmups=3)
    work = build(config)
    expected = draw_items(item_rule(config.options(RandomMMOptions)), 43, np.random.default_rng(11))
    rows = set()
    for spec, items in zip([*work.requests, *work.warmups], expected):
        assert isinstance(spec.body, BodyParts)  # the shared rows sent from where they lie
        doc, images = _images(bytes(spec.body))
        assert doc["model"] == MODEL and doc["stream"] is True
        assert [(h, w) for w, h, _ in images] == [(b[0], b[1]) for b in items]
        rows |= {raw[:1 + 3 * w] for w, _, raw in images}
        assert spec.prompt_len == len(doc["messages"][0]["content"][0]["text"].split())  # the text alone
    assert len(rows) == sum(len(x) for x in expected)  # every image its own: no two alike
    assert work.dataset.startswith("random-mm")
    assert any("include the image tokens" in note for note in work.notes)


def test_random_mm_draws_fresh_for_another_seed() -> None:
    one, two = build(mm(num_prompts=30, seed=1)), build(mm(num_prompts=30, seed=2))
    sizes = [[(w, h) for w, h, _ in _images(bytes(s.body))[1]] for s in one.requests]
    assert sizes != [[(w, h) for w, h, _ in _images(bytes(s.body))[1]] for s in two.requests]
    assert bytes(one.requests[0].body) == bytes(build(mm(num_prompts=30, seed=1)).requests[0].body)


def test_zero_images_is_a_text_request() -> None:
    work = build(mm(num_prompts=3, base_items_per_request=0))
    for spec in work.requests:
        assert _images(bytes(spec.body))[1] == []


# -- custom_image --------------------------------------------------------------------------------------------


def _png_file(path: Path, height: int, width: int) -> bytes:
    rng = np.random.default_rng(width)
    data = SyntheticPNG(height, width, rng).whole(bytes(3 * width))
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
