"""A JSON Lines dataset read as far as the run draws from it, not loaded whole.

In file order the lines are read and parsed one by one, as the run takes them, so 100 prompts of a
million-line file read its first hundred lines. In random order the permutation must know how many lines
there are: the file is scanned once (a line at a time) for where each non-blank line starts and its
number, their indexes are shuffled with ``random.Random(seed).shuffle`` (the same permutation as shuffling
the parsed lines: it depends only on their number), and only the lines drawn are read and parsed: 24 bytes
a line of the file (three arrays of int64), and about 1 s a million lines to scan. A dataset that keeps
only some lines (``keep``: Spec-Bench's category) must parse every line to know which, in either order.
"""

from __future__ import annotations

import array
import asyncio
import io
import itertools
import random
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import orjson

from fastbench.exceptions import DatasetError
from fastbench.load.sources import array_hint, open_dataset_file

_Line = TypeVar("_Line")

__all__ = ("JsonLinesFile",)


class JsonLinesFile:
    """The non-blank lines of the JSON Lines file ``path`` (dataset ``name``), in the run's order: the
    file's (``order`` "file") or a seeded shuffle (``order`` "random")."""

    def __init__(self, path: str | None, name: str, *, expected: str = "a JSON object",
                 keep: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.path = path or ""
        self.expected = expected
        self.keep = keep  # which lines the dataset takes (None: all); the others are read past
        self._file = open_dataset_file(path, name)
        if not self._file.seekable():  # a pipe (--dataset-path <(...)), read once: held whole, as it must be
            with self._file as pipe:
                self._file = io.BytesIO(pipe.read())
        self._offsets: array.array[int] | None = None
        self._numbers: array.array[int] = array.array("q")

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonLinesFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self) -> int:
        """The number of lines taken: non-blank, and kept (scans the file once)."""
        return len(self.offsets())

    def offsets(self) -> array.array[int]:
        """Where each non-blank line starts, in file order (and, in ``_numbers``, its line number)."""
        if self._offsets is None:
            found, numbers = array.array("q"), array.array("q")
            position = 0
            self._file.seek(0)
            for lineno, line in enumerate(self._file, start=1):
                if line.strip() and (self.keep is None or self.keep(self._parse(line, lineno)[2])):
                    found.append(position)
                    numbers.append(lineno)
                position += len(line)
            self._offsets, self._numbers = found, numbers
        return self._offsets

    def drawn(self, order: str, seed: int) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """Each line the run draws, as (line number, "PATH line N", its object), lazily: in file order, or
        shuffled as ``random.Random(seed).shuffle`` shuffles a list of the lines."""
        if order == "file":
            yield from self._in_file_order()
            return
        offsets = self.offsets()
        shuffled = array.array("q", range(len(offsets)))
        random.Random(seed).shuffle(shuffled)
        for index in shuffled:
            self._file.seek(offsets[index])
            yield self._parse(self._file.readline(), self._numbers[index])

    def _in_file_order(self) -> Iterator[tuple[int, str, dict[str, Any]]]:
        self._file.seek(0)
        lineno = 0
        while True:
            line = self._file.readline()
            if not line:
                return
            lineno += 1
            if line.strip():
                position = self._file.tell()
                parsed = self._parse(line, lineno)
                if self.keep is None or self.keep(parsed[2]):
                    yield parsed
                self._file.seek(position)  # the consumer may have read elsewhere meanwhile

    def _parse(self, line: bytes, lineno: int) -> tuple[int, str, dict[str, Any]]:
        where = f"{self.path} line {lineno}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise DatasetError(f"{where}: not valid JSON ({exc}){array_hint(lineno, line.lstrip()[:1] == b'[')}") \
                from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{where}: expected {self.expected}, found a {type(obj).__name__}"
                               f"{array_hint(lineno, isinstance(obj, list))}")
        return lineno, where, obj


async def drawn_chunks(drawn: Iterator[_Line], remaining: Callable[[], int]) -> AsyncIterator[list[_Line]]:
    """The lines ``drawn``, in chunks of what the run still wants (``remaining()``, 16 at least), until it
    wants none or the file ends; each chunk read in a thread, since the first draw of a random order scans
    the file."""
    while (wanted := remaining()) > 0:
        chunk = await asyncio.to_thread(list, itertools.islice(drawn, max(wanted, 16)))
        if not chunk:
            return
        yield chunk
