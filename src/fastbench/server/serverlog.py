"""A launched server's log: the file, and what its lines say.

``ServerLog`` is the file the engine's output is appended to, with fastbench's own ``# fastbench``
lines among it: everything read from it starts at this launch (a reused ``--server-log`` holds
earlier runs). While the engine loads it is scanned for a fatal line; the measured window is marked
in it, and the window's warnings and "SpecDecoding metrics" lines are read back a block at a time.

What the lines say, as data: :func:`window_warnings` (any engine's WARNING / ERROR lines, counted),
vLLM's precision (:func:`parse_vllm_precision`) and footprint (:func:`parse_vllm_footprint`) from
its loading phase, and its "SpecDecoding metrics" lines (:func:`spec_log_summary`).
"""

from __future__ import annotations

import datetime
import math
import os
import re
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = (
    "FATAL_PATTERNS",
    "ServerLog",
    "parse_spec_log_line",
    "parse_vllm_device",
    "parse_vllm_footprint",
    "parse_vllm_precision",
    "spec_log_summary",
    "window_warnings",
)

# A line that means loading has failed even if the process has not exited (yet).
FATAL_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError"), "out of memory"),
    (re.compile(r"address already in use", re.IGNORECASE), "the port is already in use"),
    (re.compile(r"Engine core initialization failed"), "the engine failed to start"),
    (re.compile(r"No available memory for the cache blocks"), "no memory left for the KV cache"),
)
# A traceback at column 0 (the main process's; vLLM prefixes its workers' lines) is fatal too, reported
# with its exception line, once that has come or a second has passed.
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
TRACEBACK_WAIT_S = 1.0
_LEVEL = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b")
_WINDOW_LINE = re.compile(rb"\b(?:WARNING|ERROR|CRITICAL)\b|SpecDecoding metrics")  # what the card reads
_LOG_PREFIX = re.compile(
    r"^.*?\b(?:WARNING|ERROR|CRITICAL)\b\s*(?:\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s*)?(?:\[[^\]]*\]\s*)?"
)
_OWN_LINE = "# fastbench "
_BLOCK = 1 << 20


class ServerLog:
    """The log file of one launch (see the module docstring). ``window`` is the measured window as
    byte offsets, its end None until it is marked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.window: tuple[int, int | None] | None = None
        # Where the first measured window began: the end of the loading phase for every run a launch
        # serves (a sweep's launch serves several, each with its own window).
        self.first_window_start: int | None = None
        self.windows_ended = 0  # measured windows marked in this launch's log, the latest included
        self._file: IO[bytes] | None = None
        self._scan_pos = self._launch_pos = 0
        self._scan_rest = b""
        self._fatal: str | None = None
        self._traceback_at: float | None = None
        self._traceback_line = ""

    def open(self) -> IO[bytes]:
        """Open the file for appending (the engine's output goes to it); raises OSError."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab")  # noqa: SIM115 (lives as long as the server)
        self._launch_pos = self._scan_pos = self._file.tell()
        return self._file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def note(self, text: str) -> None:
        """A line of fastbench's own in the log (the file is opened for appending)."""
        if self._file is not None:
            stamp = datetime.datetime.now().isoformat(timespec="seconds")
            self._file.write(f"{_OWN_LINE}{stamp}: {text}\n".encode())
            self._file.flush()

    # -- while loading -------------------------------------------------------------------------

    def scan(self) -> None:
        """Read what the server logged since the last scan; remember the first fatal line."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._scan_pos)
                data = f.read()
        except OSError:
            return
        self._scan_pos += len(data)
        lines = (self._scan_rest + data).split(b"\n")
        self._scan_rest = lines.pop()
        if self._fatal is not None:
            return
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").rstrip("\r")
            for pattern, reason in FATAL_PATTERNS:
                if pattern.search(line):
                    self._fatal = f"{reason}: {line.strip()[:300]}"
                    return
            if _TRACEBACK.match(line):
                self._traceback_at = self._traceback_at or time.monotonic()
            elif self._traceback_at is not None and not self._traceback_line and line[:1] not in ("", " ", "\t"):
                self._traceback_line = line.strip()[:300]  # the exception: the traceback's first unindented line

    def fatal(self) -> str | None:
        """Why loading has failed, from what :meth:`scan` read: a fatal line, or a top-level traceback
        once its exception line has come or TRACEBACK_WAIT_S has passed; None while neither."""
        if self._fatal is None and self._traceback_at is not None and (
                self._traceback_line or time.monotonic() - self._traceback_at > TRACEBACK_WAIT_S):
            self._fatal = f"a Python traceback at top level: {self._traceback_line or 'Traceback ...'}"
        return self._fatal

    # -- reading it back -----------------------------------------------------------------------

    def text(self, last_bytes: int | None = None, *, until_window: bool = False,
             until_first_window: bool = False) -> str:
        """What this launch logged (from its launch on), or its last ``last_bytes``; with
        ``until_window``, only up to the latest measured window's start; with ``until_first_window``,
        only up to the first one's (the loading phase, the same for every run of the launch)."""
        end = None
        if until_first_window and self.first_window_start is not None:
            end = self.first_window_start
        elif (until_window or until_first_window) and self.window is not None:
            end = self.window[0]
        try:
            with open(self.path, "rb") as f:
                start = self._launch_pos
                if last_bytes is not None:
                    start = max(start, f.seek(0, os.SEEK_END) - last_bytes)
                f.seek(start)
                if end is not None:
                    return f.read(max(0, end - start)).decode("utf-8", errors="replace")
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def mark_window_start(self) -> None:
        self.note("measured window starts")
        self.window = (self._size(), None)
        if self.first_window_start is None:
            self.first_window_start = self.window[0]

    def mark_window_end(self) -> None:
        if self.window is not None:
            self.window = (self.window[0], self._size())
            self.windows_ended += 1
            self.note("measured window ends")

    def window_lines(self) -> list[str]:
        """The lines the server logged between the window marks that the card reads: warnings and
        errors, and "SpecDecoding metrics" lines. Read a block at a time: a server that logs every
        request writes hundreds of MB in a long window."""
        if self.window is None:
            return []
        start, end = self.window
        kept: list[str] = []
        own = _OWN_LINE.encode()
        try:
            with open(self.path, "rb") as f:
                f.seek(start)
                left = None if end is None else max(0, end - start)
                rest = b""
                while left is None or left > 0:
                    block = f.read(_BLOCK if left is None else min(_BLOCK, left))
                    if not block:
                        break
                    if left is not None:
                        left -= len(block)
                    lines = (rest + block).split(b"\n")
                    rest = lines.pop()
                    kept += [line for raw in lines if _WINDOW_LINE.search(raw)
                             and not (line := raw.decode("utf-8", errors="replace")).startswith(_OWN_LINE)]
                if _WINDOW_LINE.search(rest) and not rest.startswith(own):
                    kept.append(rest.decode("utf-8", errors="replace"))
        except OSError:
            return []
        return kept


# -- what the window's lines say --------------------------------------------------------------------


def window_warnings(lines: Sequence[str], limit: int = 8) -> list[str]:
    """Distinct WARNING / ERROR lines (message text, with a count), in order of first appearance."""
    counts: dict[str, int] = {}
    for line in lines:
        if not _LEVEL.search(line) or "SpecDecoding metrics" in line:
            continue
        level = _LEVEL.search(line)
        assert level is not None
        message = _LOG_PREFIX.sub("", line).strip()[:300]
        key = f"{level.group(1)}: {message}"
        counts[key] = counts.get(key, 0) + 1
    out = [key + (f" (×{n})" if n > 1 else "") for key, n in counts.items()]
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more distinct lines (see the server log)"]
    return out


_SPEC_LOG = re.compile(r"SpecDecoding metrics:\s*(.*)$")
_KEY_SPLIT = re.compile(r",\s+(?=[A-Za-z][A-Za-z \-]*:\s)")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan", re.IGNORECASE)


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.strip().lower()).strip("_")


def parse_spec_log_line(line: str) -> dict[str, Any] | None:
    """vLLM's ``SpecDecoding metrics: Mean acceptance length: 3.79, Accepted throughput: 1.2 tokens/s,
    ..., Per-position acceptance rate: 0.958, 0.958, 0.873, Avg Draft acceptance rate: 93.5%`` as
    ``{"mean_acceptance_length": 3.79, ..., "per_position_acceptance_rate": [0.958, ...]}``, by key
    (so added, dropped or reordered fields do not break it); None for any other line."""
    m = _SPEC_LOG.search(line)
    if m is None:
        return None
    out: dict[str, Any] = {}
    for part in _KEY_SPLIT.split(m.group(1).strip()):
        key, sep, value = part.partition(":")
        if not sep:
            continue
        numbers = [float(x) for x in _NUMBER.findall(value)]
        name = _key(key)
        if name.startswith("per_position"):
            out[name] = numbers
        elif numbers:
            out[name] = numbers[0]
    return out


def _range(values: Iterable[float | None]) -> tuple[float, float] | None:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return (min(present), max(present)) if present else None


def spec_log_summary(lines: Iterable[str]) -> dict[str, Any] | None:
    """Sum and range of the "SpecDecoding metrics" lines of the window (each covers the time since the
    previous one, so their boundaries do not match the window's: a cross-check, not the figure)."""
    parsed = [p for p in (parse_spec_log_line(line) for line in lines) if p]
    if not parsed:
        return None
    accepted = sum(p.get("accepted", 0.0) for p in parsed)
    drafted = sum(p.get("drafted", 0.0) for p in parsed)
    return {
        "lines": len(parsed),
        "accepted_tokens": accepted,
        "drafted_tokens": drafted,
        # more accepted than drafted: the lines contradict themselves, no rate from them
        "acceptance_rate": accepted / drafted if drafted and accepted <= drafted else None,
        "mean_acceptance_length_range": _range(p.get("mean_acceptance_length") for p in parsed),
        "per_line": parsed,
    }


# -- what vLLM logs while loading -------------------------------------------------------------------

_FOOTPRINT = {
    "weights_gib": re.compile(r"Model loading took ([\d.]+) ?GiB"),
    "kv_cache_gib": re.compile(
        r"Available KV cache memory: ([\d.]+) ?GiB|(?:Explicitly|Auto) set \(([\d.]+)/[\d.]+\) GiB for KV cache"),
    "kv_cache_tokens": re.compile(r"KV cache size: ([\d,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
    "cuda_graph_gib": re.compile(r"Graph capturing finished in [\d.]+ secs?, took ([\d.]+) ?GiB"),
}


_ENGINE_CONFIG = re.compile(r"with config: (.*)")
_CONFIG_VALUE = r"\b{}=(?:torch\.)?'?([A-Za-z0-9_.-]+)"


def parse_vllm_precision(text: str) -> str | None:
    """"Quant / precision" from the engine-config line vLLM logs at start ("... with config: ...,
    dtype=torch.bfloat16, ..., quantization=modelopt_fp4, ..."): its quantization, with the dtype it
    computes in; None when no such line was logged. A checkpoint's own quantization (NVFP4, AWQ) is
    found there without --quantization on the command line."""
    for line in text.splitlines():
        config = _ENGINE_CONFIG.search(line)
        if config is None:
            continue
        quant = re.search(_CONFIG_VALUE.format("quantization"), config.group(1))
        dtype = re.search(_CONFIG_VALUE.format("dtype"), config.group(1))
        dtype_text = dtype.group(1) if dtype else None
        if quant and quant.group(1) != "None":
            return f"{quant.group(1)} ({dtype_text})" if dtype_text else quant.group(1)
        if dtype_text:
            return f"{dtype_text} (no quantization)"
    return None


def parse_vllm_device(text: str) -> str | None:
    """The device vLLM's engine-config line names ("... device_config=cpu, ..."): "cpu", "cuda", ...; None
    when no such line was logged."""
    for line in text.splitlines():
        config = _ENGINE_CONFIG.search(line)
        device = re.search(_CONFIG_VALUE.format("device_config"), config.group(1)) if config else None
        if device:
            return device.group(1)
    return None


def parse_vllm_footprint(text: str) -> dict[str, Any]:
    """Model weights, KV-cache size (GiB and tokens) and CUDA-graph memory from a vLLM log, per worker
    (one value per line that says it); absent keys were not logged."""
    out: dict[str, Any] = {}
    for key, pattern in _FOOTPRINT.items():
        values: list[Any] = []
        for m in pattern.finditer(text):
            if key == "max_concurrency":
                values.append({"tokens_per_request": int(m.group(1).replace(",", "")),
                               "concurrency": float(m.group(2))})
            elif key == "kv_cache_tokens":
                values.append(int(m.group(1).replace(",", "")))
            else:
                values.append(float(next(g for g in m.groups() if g is not None)))
        if values:
            out[key] = values
    return out
