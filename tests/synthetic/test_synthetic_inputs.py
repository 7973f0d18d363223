"""The synthetic server's inputs beyond text: image parts counted into its prompt tokens by its stated rule,
and LoRA adapter names served beside the model and counted per name."""

from __future__ import annotations

import asyncio
import base64
import struct
import zlib
from typing import Any

from support.synthetic_helpers import request, stream_body
from fastbench.synthetic import CHAT_MESSAGE_OVERHEAD, SyntheticServer
from fastbench.synthetic.model import IMAGE_TILE, IMAGE_TOKENS_UNREAD


def _png(width: int, height: int) -> bytes:
    """A small PNG made here (stored zlib), independent of the client's maker."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + bytes(3 * width) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def _jpeg_head(width: int, height: int) -> bytes:
    """A JPEG's first segments made here: JFIF, a table, fill bytes, the frame header (SOF0), the scan."""
    def segment(marker: int, data: bytes) -> bytes:
        return bytes((0xFF, marker)) + struct.pack(">H", 2 + len(data)) + data
    return (b"\xff\xd8" + segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
            + segment(0xDB, bytes(65)) + b"\xff\xff"
            + segment(0xC0, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
            + segment(0xDA, b"\x01\x01\x00\x00\x3f\x00") + bytes(30) + b"\xff\xd9")


def _image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _usage(base: str, body: dict[str, Any]) -> dict[str, Any]:
    r = asyncio.run(request(base, "POST", "/v1/chat/completions", body))
    assert r.status == 200, r.body
    usage = r.chunks()[-1]["usage"]
    assert isinstance(usage, dict)
    return usage


def test_image_parts_count_into_the_prompt_tokens_by_the_stated_rule() -> None:
    gif = b"GIF89a" + struct.pack("<HH", 65, 31) + bytes(20)
    content = [{"type": "text", "text": "three words here"},
               _image(_data_url(_png(256, 256))),  # 8 x 8 tiles
               _image(_data_url(_png(33, 1))),  # 2 x 1
               _image(_data_url(gif, "image/gif")),  # 3 x 1
               _image(_data_url(_jpeg_head(70, 40), "image/jpeg")),  # 3 x 2
               _image(_data_url(b"\xff\xd8\xff\xe0" + bytes(40), "image/jpeg")),  # size not read
               _image("https://example.com/cat.png")]
    tiles = (256 // IMAGE_TILE) ** 2 + 2 + 3 + 6
    with SyntheticServer(ttft_ms=1, itl_ms=1) as s:
        usage = _usage(s.base_url, stream_body(2, chat=True, messages=[{"role": "user", "content": content}]))
        assert usage["prompt_tokens"] == CHAT_MESSAGE_OVERHEAD + 3 + tiles + 2 * IMAGE_TOKENS_UNREAD
        text_only = _usage(s.base_url, stream_body(2, chat=True, prompt="three words here"))
        assert text_only["prompt_tokens"] == CHAT_MESSAGE_OVERHEAD + 3
        assert s.stats()["images"] == 6


def test_lora_modules_are_served_counted_and_accepted_when_strict() -> None:
    with SyntheticServer("--lora-modules", "sql-lora=/adapters/sql", "math-lora", ttft_ms=1, itl_ms=1,
                         strict_model=True) as s:
        listed = asyncio.run(request(s.base_url, "GET", "/v1/models")).json()["data"]
        assert [(m["id"], m["parent"]) for m in listed] == [("fastbench-synthetic", None),
                                                           ("sql-lora", "fastbench-synthetic"),
                                                           ("math-lora", "fastbench-synthetic")]
        for model in ("sql-lora", "sql-lora", "math-lora", "fastbench-synthetic"):
            r = asyncio.run(request(s.base_url, "POST", "/v1/completions", stream_body(2, model=model)))
            assert r.status == 200
        r = asyncio.run(request(s.base_url, "POST", "/v1/completions", stream_body(2, model="other")))
        assert r.status == 404
        assert s.stats()["requests_by_model"] == {"fastbench-synthetic": 1, "sql-lora": 2, "math-lora": 1}


def test_without_adapters_or_images_the_stats_keep_their_keys() -> None:
    with SyntheticServer(ttft_ms=1, itl_ms=1) as s:
        asyncio.run(request(s.base_url, "POST", "/v1/completions", stream_body(2, model="anything")))
        stats = s.stats()
        assert "requests_by_model" not in stats and "images" not in stats
