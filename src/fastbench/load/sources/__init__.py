"""The datasets: each module here draws or reads one dataset's prompts and offers them for screening.

A dataset module has two functions, listed by ``--dataset-name`` in ``fastbench.load.datasets``:

Its own options are one object of ``fastbench.datasetoptions`` (``RandomOptions``, ...), read as
``config.options(RandomOptions)``.

* ``check(config)``: what can be checked without the server (the file parses and has the expected
  shape, the lengths can work). Blocking: it may read the file.
* ``offer(ctx)`` (a coroutine): offers ``Candidate`` prompts to ``ctx.selector`` until it holds enough
  or the dataset runs out, notes in ``ctx.notes`` what the reader of the result should know, and returns
  the dataset's name for ``Workload.dataset``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, BinaryIO, NamedTuple

import orjson

from fastbench.config import BenchConfig
from fastbench.exceptions import DatasetError
from fastbench.load.screening import Selector
from fastbench.load.tokens import LocalTokenizer, TokenCounter


@dataclasses.dataclass
class Context:
    """What a dataset is given to fill a run."""

    config: BenchConfig
    chat: bool  # the chat endpoint: each prompt goes out as one user message
    selector: Selector  # takes the prompts offered, screened against max_model_len
    counter: TokenCounter  # counts text prompts
    local: LocalTokenizer | None  # --tokenizer, where given: random text, decoding token ids
    notes: list[str]


class Dataset(NamedTuple):
    """One dataset's two functions (see the module's docstring)."""

    check: Callable[[BenchConfig], None]
    offer: Callable[[Context], Awaitable[str]]


def read_dataset_file(path: str | None, name: str) -> bytes:
    """The bytes of dataset ``name``'s file; a DatasetError that says what to fix when it cannot be read."""
    with open_dataset_file(path, name) as f:
        try:
            return f.read()
        except OSError as exc:
            raise DatasetError(f"cannot read dataset file {path}: {exc.strerror}") from None


def open_dataset_file(path: str | None, name: str) -> BinaryIO:
    """Dataset ``name``'s file opened for reading; a DatasetError that says what to fix when it cannot be."""
    if not path:
        raise DatasetError(f"--dataset-name {name} needs --dataset-path (the {name} file to read)")
    if os.path.isdir(path):
        raise DatasetError(f"dataset path {path} is a directory; give the {name} file itself")
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise DatasetError(f"dataset file not found: {path}") from None
    except OSError as exc:
        raise DatasetError(f"cannot read dataset file {path}: {exc.strerror}") from None


def json_lines(raw: bytes, path: str, expected: str = "a JSON object") -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Each non-blank line of a JSON Lines file as (line number, "PATH line N", its object); a DatasetError
    naming the line for one that is not a JSON object (``expected`` says what it should be)."""
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            hint = array_hint(lineno, line.lstrip()[:1] == b"[")
            raise DatasetError(f"{where}: not valid JSON ({exc}){hint}") from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{where}: expected {expected}, found a {type(obj).__name__}"
                               f"{array_hint(lineno, isinstance(obj, list))}")
        yield lineno, where, obj


def array_hint(lineno: int, is_array: bool) -> str:
    """A first line that is (or opens) a JSON array: the whole file is one, as ShareGPT's are."""
    return "; a JSON array (a ShareGPT file) needs --dataset-name sharegpt" if lineno == 1 and is_array else ""


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The garbage collector paused, around a build's synchronous bulk work: a few objects per request
    (a parsed record, its prompt, its candidate, its body), none in a cycle, and the collector's passes
    over them took a tenth to a quarter of building 100,000 trace requests (bench/bench_trace.py). Only
    where nothing is awaited: other tasks would run with it paused too."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
