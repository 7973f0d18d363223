"""The trace scanner (csrc/fb_trace.c through fastbench._core.scan_trace): what it takes it reads exactly as
the orjson parse does, what it does not take it leaves to that parse (which names the bad line), and it never
reads outside its buffer, whatever the bytes."""

from __future__ import annotations

import ctypes
import json
import mmap
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastbench._core import scan_trace
from fastbench.exceptions import DatasetError
from fastbench.load.sources.trace import Trace, TraceFormat, _parsed, _scanned, load_trace

FMT = TraceFormat("timed_trace", 16, 0.001, "timestamp", "input_length", "output_length", "hash_ids", "")
SECONDS = TraceFormat("timed_trace", 16, 1.0, "timestamp", "input_length", "output_length", "hash_ids", "")
LABELLED = TraceFormat("timed_trace", 16, 1.0, "t", "in", "out", "ids", "")
GOOD = b'{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1, 2]}'


def _columns(trace: Trace) -> list[list[Any]]:
    return [column.tolist() for column in (trace.lines, trace.seconds, trace.input_lengths, trace.output_lengths,
                                           trace.ids_end, trace.hash_ids)]


def _agrees(raw: bytes, fmt: TraceFormat = FMT) -> bool:
    """Whether the scanner took ``raw``; where it did, the orjson parse reads the same trace from it."""
    scanned = _scanned(raw, fmt)
    if scanned is None:
        return False
    parsed = _parsed("t.jsonl", raw, fmt)  # raises if the scanner took what the parse refuses
    assert _columns(scanned) == _columns(parsed)
    return True


def _row(rng: random.Random, t: float, labels: tuple[str, ...]) -> str:
    ts, n_in, n_out, ids = labels
    fields: list[tuple[str, Any]] = [(ts, t), (n_in, rng.randint(1, 10**6)), (n_out, rng.randint(1, 4096)),
                                     (ids, [rng.randint(-10**17, 10**17) if rng.random() < 0.1 else rng.randint(0, 99)
                                            for _ in range(rng.randint(0, 6))])]
    if rng.random() < 0.3:
        fields.pop()  # no hash ids: none
    extras = [("session", f"s-{rng.randint(0, 9)}"), ("meta", {"a": [1, -2.5e-3, None, True, False, {}], "b": []}),
              ("n", rng.choice([0, -1, 3.25, 1e22, 12345678901234567890]))]
    fields += rng.sample(extras, rng.randint(0, 3))
    rng.shuffle(fields)
    colon, comma = rng.choice([(":", ","), (": ", ", "), (" : ", " , "), ("\t:\t", "\t,")])
    body = comma.join(f"{json.dumps(k)}{colon}{json.dumps(v).replace(', ', comma)}" for k, v in fields)
    return rng.choice(["", " ", "\t"]) + "{" + rng.choice(["", " "]) + body + rng.choice(["", " "]) + "}" + \
        rng.choice(["", " ", "\t"])


@pytest.mark.parametrize("seed", range(6))
def test_random_traces_read_as_the_orjson_parse_reads_them(seed: int) -> None:
    """Awkward spacing, key orders, fields to skip, labels of its own, timestamps of every form (ints,
    decimals, exponents, 17 significant digits), blank lines, CRLF, no newline at the end."""
    rng = random.Random(seed)
    labels = ("timestamp", "input_length", "output_length", "hash_ids") if seed % 2 else ("t", "in", "out", "ids")
    fmt = FMT if seed % 2 else LABELLED
    t = rng.choice([0.0, 1e9, 1.7e-5])
    lines = []
    last = t
    for _ in range(400):
        t += rng.choice([0, 1, 0.001, rng.random(), rng.random() * 1e-4])
        stamp: Any = rng.choice([t, round(t, 3), int(t) if t == int(t) else t, float(f"{t:.6e}")])
        stamp = stamp if stamp >= last else last  # in time order
        last = stamp
        lines.append(_row(rng, stamp, labels))
        if rng.random() < 0.05:
            lines.append(rng.choice(["", "  ", "\t"]))
    end = rng.choice(["\n", "\r\n", "", "\n\n", "\n  \n"])
    raw = (end[:2] if end.startswith("\r") else "\n").join(lines).encode() + end.encode()
    assert _agrees(raw, fmt)  # taken, and read as orjson reads it


def test_timestamps_are_the_correctly_rounded_doubles() -> None:
    rng = np.random.default_rng(1)
    texts = [repr(float(x)) for x in rng.random(2000) * 10.0 ** rng.integers(-8, 9, 2000)]
    texts += ["0", "-0", "-0.0", "0.0", "1e2", "1E+2", "15e-1", "123456789012345", "9007199254740991", "0.1",
              "2.5e-22", "1e22", "3.0e-5", "0.5", "12345678901234567890", "1000000113.1536752", "1e23", "1e-23",
              "9007199254740993", "0.30000000000000004", "1" + "0" * 39, "-" + "9" * 40 + "e-99"]
    for text in texts:
        raw = b'{"timestamp": %s, "input_length": 1, "output_length": 1}' % text.encode()
        scanned = _scanned(raw, SECONDS)
        assert scanned is not None and scanned.seconds.tolist() == [float(json.loads(text))], text
    assert _scanned(b'{"timestamp": 0.1, "input_length": 1, "output_length": 1}', FMT) is not None


@pytest.mark.parametrize("line", [
    b'{"timestamp": 1, "input_length": 10.0, "output_length": 2}',  # a float where an integer is needed
    b'{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1, 2.0]}',
    b'{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1, "2"]}',
    b'{"timestamp": "1", "input_length": 10, "output_length": 2}',  # a string where a number is
    b'{"timestamp": 1, "input_length": 0, "output_length": 2}',
    b'{"timestamp": 1, "input_length": 10, "output_length": -2}',
    b'{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": null}',
    b'{"timestamp": 1, "input_length": 1234567890123456789, "output_length": 2}',  # 19 digits
    b'{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [18446744073709551616]}',
    b'{"timestamp": 1, "input_length": 10, "input_length": 11, "output_length": 2}',  # a repeated field
    b'{"timestamp": 1, "input_length": 10, "output_length": 2, "x": "caf\\u00e9"}',  # an escape
    b'{"timestamp": 1, "input_length": 10, "output_length": 2, "x": "caf\xc3\xa9"}',  # not ASCII
    b'{"timestamp": 1, "input_\\u006cength": 10, "output_length": 2}',  # an escaped key
    b'{"timestamp": 1, "input_length": 10, "output_length": 2, "x": 1e400}',  # infinity to orjson
    b'{"timestamp": 1e400, "input_length": 10, "output_length": 2}',
    b'{"timestamp": NaN, "input_length": 10, "output_length": 2}',
    b'{"timestamp": 01, "input_length": 10, "output_length": 2}',
    b'{"timestamp": 1., "input_length": 10, "output_length": 2}',
    b'{"timestamp": 1, "input_length": 10, "output_length": 2, "x": ' + b"[" * 40 + b"]" * 40 + b"}",
    b'{"timestamp": 1, "input_length": 10, "output_length": 2, "x": tru}',
    b'{"timestamp": 1, "input_length": 10, "output_length": 2,}',
    b'{"timestamp": 1, "input_length": 10}',  # a field missing
    b"{}",
    b"[1, 2]",
    b'{"timestamp": 1, "input_length": 10, "output_length": 2}\r{"timestamp": 2, "input_length": 1, '
    b'"output_length": 2}',  # a lone CR: a line break to splitlines
    b'{"timestamp": 1, "input_length": 10,\n"output_length": 2}',  # a record over two lines
    GOOD + b" " + GOOD,  # two records on a line
    GOOD + b",",
    b"\xef\xbb\xbf" + GOOD,  # a byte-order mark
    b"\x0c" + GOOD,
    GOOD[:-1],
])
def test_what_it_does_not_take_goes_to_the_orjson_parse(tmp_path: Path, line: bytes) -> None:
    """Lines the scanner leaves: the parse reads them (the same trace a run then gets) or names what is
    wrong, as it did before the scanner."""
    raw = GOOD + b"\n" + line + b"\n" + GOOD.replace(b'"timestamp": 1', b'"timestamp": 9')
    assert _scanned(raw, FMT) is None
    path = tmp_path / "t.jsonl"
    path.write_bytes(raw)
    outcomes = []
    for read in (lambda: load_trace(str(path), FMT), lambda: _parsed(str(path), raw, FMT)):
        try:
            outcomes.append(_columns(read()))
        except DatasetError as exc:
            outcomes.append([str(exc)])
    assert outcomes[0] == outcomes[1]
    labels = TraceFormat("timed_trace", 16, 1.0, "timestamp", "timestamp", "output_length", "hash_ids", "")
    assert _scanned(GOOD, labels) is None  # two fields under one name: the parse says which


def test_time_going_back_is_left_to_the_parse_which_names_the_line() -> None:
    raw = GOOD + b"\n" + GOOD.replace(b'"timestamp": 1', b'"timestamp": 0.5')
    assert _scanned(raw, FMT) is None
    with pytest.raises(DatasetError, match="line 2: 'timestamp' 0.5 is earlier than line 1's 1"):
        _parsed("t.jsonl", raw, FMT)


def _guarded(data: bytes, keep: list[Any]) -> memoryview:
    """``data`` at the very end of readable memory: the next page is PROT_NONE, so a read past the end
    faults (the test process dies) instead of reading something."""
    page = mmap.PAGESIZE
    pages = -(-len(data) // page) or 1
    region = mmap.mmap(-1, (pages + 1) * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(base + pages * page, page, 0) == 0  # PROT_NONE
    at = pages * page - len(data)
    region[at:at + len(data)] = data
    keep.append(region)
    return memoryview(region)[at:at + len(data)]


def _scan(data: Any) -> tuple[int, int] | None:
    rows = 64
    columns = [np.empty(rows, np.int64), np.empty(rows), np.empty(rows, np.int64), np.empty(rows, np.int64),
               np.empty(rows, np.int64), np.empty(4 * rows, np.int64)]
    keys = (b"timestamp", b"input_length", b"output_length", b"hash_ids")
    return scan_trace(data, keys, *columns)  # type: ignore[arg-type]


def test_no_read_past_the_buffer_for_any_truncation_or_mutation() -> None:
    """Every prefix of a few lines, and thousands of random mutations of them, scanned from the end of
    readable memory; what it takes from a mutation, the orjson parse reads the same."""
    keep: list[Any] = []
    text = (b'{"timestamp": 1.5e3, "input_length": 10, "output_length": 2, "hash_ids": [1, -2], "x": '
            b'{"y": [true, false, null, "s", -0.5E+2]}}\r\n\n {"hash_ids":[],"timestamp":1600,"input_length":'
            b'123456789012345678,"output_length":1}')
    for end in range(len(text) + 1):
        _scan(_guarded(text[:end], keep))
        _agrees(text[:end])
    rng = random.Random(7)
    alphabet = b'{}[],:"\\ -+.0123456789eEtrufalsn\r\n\t\x00\xff'
    taken = 0
    for _ in range(3000):
        data = bytearray(text)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data) + 1)
            kind = rng.random()
            if kind < 0.4 and at < len(data):
                data[at] = rng.choice(alphabet)
            elif kind < 0.7:
                data[at:at] = bytes([rng.choice(alphabet)])
            else:
                del data[at:at + rng.randint(1, 8)]
        data = bytes(data)
        _scan(_guarded(data, keep))
        taken += _agrees(data)
        del keep[:-4]
    assert taken > 10  # some mutations stay good traces (and read the same both ways)


def test_full_columns_give_up_rather_than_write_past_them() -> None:
    rows = 2
    columns = [np.empty(rows, np.int64), np.empty(rows), np.empty(rows, np.int64), np.empty(rows, np.int64),
               np.empty(rows, np.int64), np.empty(1, np.int64)]
    keys = (b"timestamp", b"input_length", b"output_length", b"hash_ids")
    assert scan_trace(GOOD, keys, *columns) is None  # two hash ids, room for one
    columns[-1] = np.empty(4, np.int64)
    assert scan_trace(GOOD, keys, *columns) == (1, 2)
    assert scan_trace(b"\n".join([GOOD] * 3), keys, *columns) is None  # three records, room for two
    assert scan_trace(b"", keys, *columns) is None
