"""Images sent in chat messages as data URLs: synthetic JPEGs of random pixels (``random-mm``) and local
image files read and checked once (``custom_image``).

A synthetic image is a JPEG of random RGB pixels made as vLLM's ``random-mm`` makes its: every pixel
uniform in 0..255 (the worst case for compression, which stresses the transfer and the decoder), saved by
Pillow as vLLM's ``process_image`` saves it (``image.save(..., format="JPEG")``: Pillow's defaults, quality
75, 4:2:0, baseline, the standard Huffman tables). Encoding each request's image whole would cost 4 ms for
720x1280 and a run holds every body before it starts, so each size is encoded once with a restart marker
after every row of MCUs (``restart_marker_rows=1``: DRI), and an image is cut at those markers into parts
whose base64 joins by concatenation (each part but the last a whole number of 3-byte groups, made so
with 0xFF fill bytes before its marker, which the JPEG standard allows before any marker, B.1.1.2):

* its first ``OWN_ROWS`` MCU rows (16 pixel rows each), the first with the headers (SOI, JFIF, tables, SOF,
  DRI, SOS), picked from pools drawn once per size, row by row: fresh random pixels encoded by Pillow with
  the same call, so the same tables, their entropy-coded data ended by that row's RST marker (RST0, RST1;
  the markers cycle 0..7). Image ``i`` of a size takes ``i``'s digits in the pool's size as its picks, so
  no two images of a run are alike in pixels and a server's image cache, keyed by content, never hits;
* a middle shared by every image of the size: the other rows as Pillow wrote them (a restart resets the
  DC predictions, so a row decodes the same after any other), and EOI, its base64 made once and sent from
  where it lies (the core's ``BodyParts``), never copied into a body.

A pool holds ``ceil(images ** (1 / OWN_ROWS))`` rows per position: 71 Pillow calls per row for 5,000
images, where one per image (0.05-0.1 ms each for 256-1280 pixels wide) would keep the build under
10,000 requests a second. The image decodes as any baseline JPEG does (Pillow, libjpeg's ``djpeg
-strict``). What differs from vLLM: the restart markers and fill bytes (a few bytes a row), and the rows
after the first two repeat across the run's images of one size, where vLLM draws every pixel.
"""

from __future__ import annotations

import base64
import io
import os
import re
from types import ModuleType
from typing import Any

import numpy as np

from fastbench.exceptions import ConfigError, DatasetError

__all__ = ("IMAGE_PART_CLOSE", "IMAGE_PART_OPEN", "OWN_ROWS", "SyntheticJPEG", "file_data_url", "image_type",
           "pillow")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
OWN_ROWS = 2  # MCU rows per image picked from the pools: the pools hold images ** (1 / OWN_ROWS) rows
_EOI = b"\xff\xd9"
_SOS = 0xDA
_SOF0 = 0xC0
_TABLES = (0xDB, 0xC4)  # DQT, DHT: what a row must share with the image it goes into
# a restart marker in entropy-coded data: a data byte 0xFF is always followed by 0x00 there
_RESTART = re.compile(rb"\xff[\xd0-\xd7]")

# One image part of a chat message's content, around the image's base64.
IMAGE_PART_OPEN = b',{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,'
IMAGE_PART_CLOSE = b'"}}'


def pillow() -> ModuleType:
    """``PIL.Image``, or a ConfigError in one line naming the extra that brings it."""
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError("random-mm makes its JPEGs with Pillow, as vLLM does: pip install "
                          "'fastbench-llm[images]'") from None
    return Image


class _Layout:
    """Where a JPEG's entropy-coded data starts, its MCU height and its tables, from its markers."""

    def __init__(self, data: bytes) -> None:
        pos, tables, self.mcu_height = 2, [], 8
        while True:
            marker, length = data[pos + 1], int.from_bytes(data[pos + 2:pos + 4], "big")
            if marker in _TABLES:
                tables.append(data[pos:pos + 2 + length])
            elif marker == _SOF0:
                components = data[pos + 10:pos + 10 + 3 * data[pos + 9]]
                self.mcu_height = 8 * max(components[i + 1] & 0x0F for i in range(0, len(components), 3))
            pos += 2 + length
            if marker == _SOS:
                break
        self.scan_start = pos
        self.tables = b"".join(tables)


def _encode(image: ModuleType, pixels: np.ndarray, **options: Any) -> bytes:
    with io.BytesIO() as out:  # vLLM's process_image: image.save(image_data, format="JPEG")
        image.fromarray(pixels).save(out, format="JPEG", **options)
        return out.getvalue()


def _aligned(data: bytes, marker: int) -> bytes:
    """``data`` ended by ``marker``, with the 0xFF fill before it that makes it whole 3-byte groups."""
    return data + b"\xff" * (-(len(data) + 2) % 3) + bytes((0xFF, marker))


class SyntheticJPEG:
    """Random-pixel JPEGs of one size (``height`` x ``width``, RGB), ``images`` of them all different: each
    image's first ``own_rows`` MCU rows picked from ``pieces`` (base64, per row, ``pool`` of each), the
    rest shared (``middle``, base64; empty when the image has no more rows). Drawn from ``rng``."""

    def __init__(self, height: int, width: int, images: int, rng: np.random.Generator) -> None:
        image = pillow()
        self.height, self.width = height, width
        full = _encode(image, rng.integers(0, 256, (height, width, 3), dtype=np.uint8), restart_marker_rows=1)
        layout = _Layout(full)
        mcu = layout.mcu_height
        rows = -(-height // mcu)
        scan = full[layout.scan_start:-len(_EOI)]
        restarts = [m.start() for m in _RESTART.finditer(scan)]
        if len(restarts) != rows - 1:
            version = getattr(image, "__version__", "?")
            raise ConfigError(f"random-mm: Pillow {version} wrote {len(restarts)} restart markers in a "
                              f"{height}x{width} JPEG of {rows} MCU rows; it needs Pillow >= 10.2")
        self.own_rows = min(OWN_ROWS, rows)
        self.pool = max(1, round(max(images, 1) ** (1 / self.own_rows)))
        while self.pool ** self.own_rows < images:
            self.pool += 1
        self.pieces: list[list[bytes]] = []
        for k in range(self.own_rows):
            last = k == rows - 1
            strips = rng.integers(0, 256, (self.pool, height - mcu * k if last else mcu, width, 3), dtype=np.uint8)
            row: list[bytes] = []
            for strip in strips:
                data = _encode(image, strip)
                own = _Layout(data)
                if own.tables != layout.tables:
                    raise ConfigError(f"random-mm: Pillow wrote other tables for a {strip.shape[0]}x{width} "
                                      f"row than for its {height}x{width} image")
                data = (full[:layout.scan_start] if k == 0 else b"") + data[own.scan_start:-len(_EOI)]
                row.append(base64.b64encode(data + _EOI if last else _aligned(data, 0xD0 + k % 8)))
            self.pieces.append(row)
        middle = scan[restarts[self.own_rows - 1] + 2:] + _EOI if rows > self.own_rows else b""
        self.middle = base64.b64encode(middle)

    def picks(self, index: int) -> list[int]:
        """Image ``index``'s piece of each own row: ``index``'s digits in base ``pool``."""
        return [index // self.pool ** k % self.pool for k in range(self.own_rows)]

    def parts(self, index: int) -> list[bytes]:
        """Image ``index``'s base64, in its parts: joined, they are the whole."""
        own = [self.pieces[k][p] for k, p in enumerate(self.picks(index))]
        return [*own, self.middle] if self.middle else own

    def whole(self, index: int) -> bytes:
        """The JPEG file itself (for tests and for a reader's eyes; a run sends the parts)."""
        return base64.b64decode(b"".join(self.parts(index)))


# What a file begins with, for each image type a server's image loader (Pillow) reads.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (PNG_SIGNATURE, "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"), (b"BM", "image/bmp"), (b"II*\x00", "image/tiff"), (b"MM\x00*", "image/tiff"),
)


def image_type(data: bytes) -> str | None:
    """The MIME type of an image file's bytes, from its first bytes; None when they are no image's."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    return None


def file_data_url(path: str, where: str) -> str:
    """The image file at ``path`` as a ``data:`` URL, read once; a DatasetError naming it (``where``: the
    dataset line that names it) when it cannot be read or is not an image."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise DatasetError(f"{where}: image file not found: {path}") from None
    except IsADirectoryError:
        raise DatasetError(f"{where}: image path {path} is a directory; give the image file") from None
    except OSError as exc:
        raise DatasetError(f"{where}: cannot read image file {path}: {exc.strerror}") from None
    mime = image_type(data)
    if mime is None:
        kind = "an empty file" if not data else f"it begins {data[:8]!r}"
        raise DatasetError(f"{where}: {path} is not an image (PNG, JPEG, GIF, WebP, BMP or TIFF): {kind}")
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def resolve(path: str, dataset_path: str) -> str:
    """An image path of a dataset line: absolute, or relative to the working directory as vLLM reads it,
    else to the dataset file's folder."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    beside = os.path.join(os.path.dirname(os.path.abspath(dataset_path)), path)
    return beside if os.path.exists(beside) else path
