"""Build and drive the plain-C readers in csrc/ (fb_http, fb_sse, fb_json) through ctypes.

The compiled extension is not needed: the C files and the test shim tests/support/c/fb_test_shim.c are
compiled into a throw-away shared library. Set FASTBENCH_TEST_CFLAGS to change the flags (the
default is -O1 -g); under ASan, preload the runtime as the Makefile's test-asan target does.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.sse_reference import decode_events

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
SHIM = Path(__file__).resolve().parent / "c" / "fb_test_shim.c"
SOURCES = [SHIM, CSRC / "fb_http.c", CSRC / "fb_sse.c", CSRC / "fb_json.c"]

# fb_errors.h
FB_ERR_HTTP_STATUS_LINE = 1
FB_ERR_HTTP_HEADER = 2
FB_ERR_HTTP_LINE_TOO_LONG = 3
FB_ERR_HTTP_CHUNK = 4
FB_ERR_HTTP_EOF = 5
FB_ERR_SSE_TOO_BIG = 6
FB_ERR_JSON = 7
FB_ERR_CALLBACK = 8
FBT_ERR_OUT_FULL = -100
FBT_ERR_BODY_CAP = -104

# fb_http.h states
(
    S_STATUS,
    S_HEADERS,
    S_BODY_LENGTH,
    S_CHUNK_SIZE,
    S_CHUNK_DATA,
    S_CHUNK_DATA_END,
    S_TRAILERS,
    S_BODY_EOF,
    S_DONE,
) = range(9)
LINE_MAX = 8192

# fbt_json's facts, in its array's order
JSON_FACTS = ("completion_tokens", "prompt_tokens", "sent_ns", "has_content", "has_reasoning", "has_error",
              "has_finish", "has_usage", "n_choices", "usage_invalid", "cached_tokens", "total_tokens", "n_data",
              "has_tool", "has_end")

# fb_test_shim.c modes
SSE, HTTP, HTTP_SSE, HTTP_JSON = 0, 1, 2, 3


class Result(ctypes.Structure):
    _fields_ = [
        ("rc", ctypes.c_int),
        ("reader_rc", ctypes.c_int),
        ("eof_rc", ctypes.c_int),
        ("http_state", ctypes.c_int),
        ("status", ctypes.c_int),
        ("http_minor", ctypes.c_int),
        ("chunked", ctypes.c_int),
        ("keep_alive", ctypes.c_int),
        ("event_stream", ctypes.c_int),
        ("content_coded", ctypes.c_int),
        ("content_length", ctypes.c_int64),
        ("body_bytes", ctypes.c_uint64),
        ("consumed", ctypes.c_uint64),
        ("events", ctypes.c_uint64),
        ("grow_calls", ctypes.c_uint64),
        ("out_len", ctypes.c_uint64),
    ]


@dataclass
class Run:
    res: Result
    out: bytes

    @property
    def events(self) -> list[bytes]:
        return decode_events(self.out)


def build(tmpdir: Path) -> Path:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise RuntimeError("no C compiler")
    flags = shlex.split(os.environ.get("FASTBENCH_TEST_CFLAGS", "-O1 -g"))
    lib = tmpdir / "libfbtest.so"
    cmd = [
        cc,
        "-std=c99",
        "-Wall",
        "-Wextra",
        "-Wsign-compare",
        "-Werror",
        *flags,
        "-shared",
        "-fPIC",
        f"-I{CSRC}",
        *map(str, SOURCES),
        "-o",
        str(lib),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return lib


class Lib:
    def __init__(self, path: Path) -> None:
        self.dll = d = ctypes.CDLL(str(path))
        sz, p = ctypes.c_size_t, ctypes.c_char_p
        d.fbt_run.argtypes = [
            ctypes.c_int,
            p,
            sz,
            ctypes.POINTER(sz),
            sz,
            sz,
            sz,
            ctypes.c_int,
            p,
            sz,
            ctypes.POINTER(Result),
        ]
        d.fbt_run.restype = ctypes.c_int
        d.fbt_run_bytewise.argtypes = [
            ctypes.c_int,
            p,
            sz,
            sz,
            sz,
            ctypes.c_int,
            p,
            sz,
            ctypes.POINTER(Result),
        ]
        d.fbt_run_bytewise.restype = ctypes.c_int
        d.fbt_check_splits.argtypes = [
            ctypes.c_int,
            p,
            sz,
            ctypes.c_int,
            sz,
            sz,
            ctypes.c_int,
            p,
            sz,
            ctypes.c_int,
            ctypes.c_uint64,
            ctypes.POINTER(sz),
        ]
        d.fbt_check_splits.restype = ctypes.c_int64
        d.fbt_json.argtypes = [p, sz, ctypes.POINTER(ctypes.c_int64)]
        d.fbt_json.restype = ctypes.c_int
        d.fbt_json_answer.argtypes = [p, sz, ctypes.POINTER(ctypes.c_int64), p, sz, ctypes.POINTER(sz),
                                      ctypes.POINTER(ctypes.c_int64)]
        d.fbt_json_answer.restype = ctypes.c_int
        d.fbt_json_api.argtypes = [p, sz, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(p),
                                   ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int), p, sz,
                                   ctypes.POINTER(sz), ctypes.POINTER(ctypes.c_int64)]
        d.fbt_json_api.restype = ctypes.c_int

    def run(
        self,
        mode: int,
        data: bytes,
        cuts: list[int] | tuple[int, ...] = (),
        *,
        cap0: int = 64,
        cap_max: int = 1 << 24,
        eof: bool = False,
        out_cap: int | None = None,
    ) -> Run:
        out = ctypes.create_string_buffer(out_cap if out_cap is not None else 4 * len(data) + 64)
        arr = (ctypes.c_size_t * max(1, len(cuts)))(*cuts)
        res = Result()
        self.dll.fbt_run(
            mode, data, len(data), arr, len(cuts), cap0, cap_max, int(eof), out, len(out), ctypes.byref(res)
        )
        return Run(res, out.raw[: res.out_len])

    def run_bytewise(
        self, mode: int, data: bytes, *, cap0: int = 64, cap_max: int = 1 << 24, eof: bool = False
    ) -> Run:
        out = ctypes.create_string_buffer(4 * len(data) + 64)
        res = Result()
        self.dll.fbt_run_bytewise(
            mode, data, len(data), cap0, cap_max, int(eof), out, len(out), ctypes.byref(res)
        )
        return Run(res, out.raw[: res.out_len])

    def check_splits(
        self,
        mode: int,
        data: bytes,
        want: Run,
        *,
        pieces: int = 2,
        cap0: int = 64,
        cap_max: int = 1 << 24,
        eof: bool = False,
    ) -> tuple[int, tuple[int, int]]:
        """Every split into `pieces` pieces (2: every offset; 3: every pair of offsets) must give
        `want`'s output, error code and consumed count. Returns (mismatches, first bad cuts)."""
        bad = (ctypes.c_size_t * 2)()
        n = self.dll.fbt_check_splits(
            mode,
            data,
            len(data),
            pieces,
            cap0,
            cap_max,
            int(eof),
            want.out,
            len(want.out),
            want.res.rc,
            want.res.consumed,
            bad,
        )
        return n, (bad[0], bad[1])

    def whole_json(self, run: Run) -> tuple[int, dict[str, int]]:
        """An HTTP_JSON run's output read back: the scan's rc and facts of the whole body."""
        values = struct.unpack(f"={1 + len(JSON_FACTS)}q", run.out)
        return values[0], dict(zip(JSON_FACTS, values[1:]))

    def json(self, data: bytes) -> tuple[int, dict[str, int]]:
        facts = (ctypes.c_int64 * len(JSON_FACTS))()
        rc = self.dll.fbt_json(data, len(data), facts)
        return rc, dict(zip(JSON_FACTS, facts))

    def json_answer(self, data: bytes, cap: int = 1 << 16) -> tuple[int, dict[str, int], bytes, int]:
        """fb_json_scan_chunk_text: its rc and facts, the answer pieces' raw bytes joined, and how many
        pieces there were (a piece over ``cap`` bytes in all stops the scan)."""
        facts = (ctypes.c_int64 * len(JSON_FACTS))()
        out = ctypes.create_string_buffer(max(cap, 1))
        out_len = ctypes.c_size_t()
        pieces = ctypes.c_int64()
        rc = self.dll.fbt_json_answer(data, len(data), facts, out, cap, ctypes.byref(out_len), ctypes.byref(pieces))
        return rc, dict(zip(JSON_FACTS, facts)), out.raw[:out_len.value], pieces.value

    def json_api(self, data: bytes, events: Any, cap: int = 1 << 16) -> tuple[int, dict[str, int], bytes, int]:
        """fb_json_scan_event with the tables of ``events`` (a fastbench.load.protocols StreamEvents): its rc
        and facts, the answer it handed over and in how many pieces."""
        groups = [list(events.types.items()), list(events.delta_keys.items()),
                  [(h, 0) for h in events.usage_holders], [(k, 0) for k in events.input_keys]]
        flat = [pair for group in groups for pair in group]
        flat += [(events.output_key, 0), (events.cached_key, 0), (events.details[0], 0), (events.details[1], 0)]
        names = (ctypes.c_char_p * len(flat))(*[name.encode() for name, _ in flat])
        kinds = (ctypes.c_int * len(flat))(*[kind for _, kind in flat])
        counts = (ctypes.c_int * 4)(*[len(group) for group in groups])
        facts = (ctypes.c_int64 * len(JSON_FACTS))()
        out = ctypes.create_string_buffer(max(cap, 1))
        out_len = ctypes.c_size_t()
        pieces = ctypes.c_int64()
        rc = self.dll.fbt_json_api(data, len(data), facts, names, kinds, counts, out, cap, ctypes.byref(out_len),
                                   ctypes.byref(pieces))
        return rc, dict(zip(JSON_FACTS, facts)), out.raw[:out_len.value], pieces.value
