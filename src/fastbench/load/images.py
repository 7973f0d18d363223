"""Images sent in chat messages as data URLs: synthetic PNGs of random pixels (``random-mm``) and local
image files read and checked once (``custom_image``).

A synthetic image is a PNG of random RGB pixels, as vLLM's ``random-mm`` draws its (every pixel uniform
in 0..255: the worst case for compression, which stresses the transfer and the decoder). Building one
per request whole would cost a request's pixels each time (2.8 MB for 720x1280), and a run holds every
body before it starts, so each size's image is split in three, laid out so that each part's base64 is
a whole number of base64 groups:

* a head of the request's own: the signature, ``IHDR``, and a first ``IDAT`` chunk holding the zlib
  header and the first row of pixels, drawn for this image alone (so that no two images of a run are
  the same, and a server's image cache, keyed by the pixels, never hits);
* a middle shared by every image of the size: one ``IDAT`` chunk of the other rows, drawn once, stored
  (deflate's uncompressed blocks: random pixels do not compress), its base64 made once and sent from
  where it lies (the core's ``BodyParts``), never copied into a body;
* a tail of the request's own: the zlib stream's Adler-32 (the row's checksum combined with the
  middle's, without reading the middle again) in a last ``IDAT``, and ``IEND``.

The image decodes as any PNG does (zlib, Pillow). What differs from vLLM: vLLM encodes its images as
JPEG (quality 75) with Pillow, fastbench as PNG without a dependency, so a body is larger (the raw
pixels, 4/3 of them in base64) and its rows after the first repeat across the run's images of one size.
"""

from __future__ import annotations

import base64
import os
import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from fastbench.exceptions import DatasetError

__all__ = ("IMAGE_PART_CLOSE", "IMAGE_PART_OPEN", "SyntheticPNG", "file_data_url", "image_type")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# a non-final stored deflate block of no bytes (what zlib's sync flush writes): two of them align the head
_EMPTY_STORED = b"\x00\x00\x00\xff\xff"
_STORED_MAX = 65535  # bytes of one stored deflate block
_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"
_ADLER_MOD = 65521

# One image part of a chat message's content, around the image's base64.
IMAGE_PART_OPEN = b',{"type":"image_url","image_url":{"url":"data:image/png;base64,'
IMAGE_PART_CLOSE = b'"}}'


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _stored_blocks(data: bytes, final: bool) -> Iterator[bytes]:
    """``data`` as stored deflate blocks; the last carries BFINAL when ``final``."""
    for start in range(0, max(len(data), 1), _STORED_MAX):
        piece = data[start:start + _STORED_MAX]
        last = final and start + _STORED_MAX >= len(data)
        yield struct.pack("<BHH", 1 if last else 0, len(piece), len(piece) ^ 0xFFFF) + piece


def adler32_combine(first: int, second: int, second_len: int) -> int:
    """The Adler-32 of two byte strings joined, from each one's (zlib's adler32_combine)."""
    a1, b1 = first & 0xFFFF, first >> 16
    a2, b2 = second & 0xFFFF, second >> 16
    a = (a1 + a2 - 1) % _ADLER_MOD
    b = (b1 + b2 + second_len * (a1 - 1)) % _ADLER_MOD
    return (b << 16) | a


class ImageParts(NamedTuple):
    """One synthetic image's base64, in its three parts: ``head + middle + tail`` is the whole."""

    head: bytes
    tail: bytes


class SyntheticPNG:
    """Random-pixel PNGs of one size (``height`` x ``width``, RGB, 8 bits): the rows after the first drawn
    once from ``rng`` and shared (``middle``, base64), each image's first row its own (:meth:`parts`)."""

    def __init__(self, height: int, width: int, rng: np.random.Generator) -> None:
        self.height, self.width = height, width
        self.row_bytes = 3 * width
        ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        self._final_row = height == 1
        row_data = 1 + self.row_bytes  # the filter byte (0: none), then the pixels
        blocks = -(-row_data // _STORED_MAX)  # stored blocks of the first row
        # the first IDAT's data: the zlib header, empty blocks so that the head is a whole number of 3-byte
        # groups, then the row's stored blocks
        fixed = len(PNG_SIGNATURE) + len(ihdr) + 12 + 2 + 5 * blocks + row_data
        self._idat_start = b"\x78\x01" + _EMPTY_STORED * next(e for e in range(3) if (fixed + 5 * e) % 3 == 0)
        self._head_prefix = PNG_SIGNATURE + ihdr
        self._idat_length = len(self._idat_start) + 5 * blocks + row_data
        middle = b""
        self._rest_adler, self._rest_len = 1, 0
        if not self._final_row:
            rows = np.zeros((height - 1, row_data), dtype=np.uint8)
            rows[:, 1:] = rng.integers(0, 256, size=(height - 1, self.row_bytes), dtype=np.uint8)
            rest = rows.tobytes()
            self._rest_adler, self._rest_len = zlib.adler32(rest), len(rest)
            stored = b"".join(_stored_blocks(rest, final=True))
            # empty blocks first, so that the chunk too is a whole number of 3-byte groups
            pad = (12 + len(stored)) % 3
            middle = _chunk(b"IDAT", _EMPTY_STORED * pad + stored)
        self.middle = base64.b64encode(middle)
        self.png_bytes = len(self._head_prefix) + 12 + self._idat_length + len(middle) + 16 + len(_IEND)

    def parts(self, row: bytes) -> ImageParts:
        """The base64 head and tail of the image whose first row of pixels is ``row`` (3 x width bytes)."""
        data = b"\x00" + row
        head = self._head_prefix + _chunk(b"IDAT", self._idat_start + b"".join(_stored_blocks(data,
                                                                                              self._final_row)))
        adler = adler32_combine(zlib.adler32(data), self._rest_adler, self._rest_len)
        tail = _chunk(b"IDAT", struct.pack(">I", adler)) + _IEND
        return ImageParts(base64.b64encode(head), base64.b64encode(tail))

    def whole(self, row: bytes) -> bytes:
        """The PNG file itself (for tests and for a reader's eyes; a run sends the parts)."""
        parts = self.parts(row)
        return base64.b64decode(parts.head + self.middle + parts.tail)


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
