"""Trace replay: ``timed_trace`` (vllm bench serve's ``TimedTrace``, same flags) and ``mooncake`` (the
Mooncake traces' JSONL, as SGLang's ``bench_serving`` replays them).

A trace is a JSONL file, one request per line: when it arrived, its input and output lengths in tokens,
and the hash ids of its prompt's blocks: ``{"timestamp": 27482, "input_length": 6955, "output_length":
52, "hash_ids": [46, 47, ...]}``. Each hash id names one block of ``block`` tokens; two requests that
carry the same hash id share that block's tokens, so a server's prefix cache sees exactly the sharing the
trace recorded. The prompt is its hash ids' blocks in order, cut at ``input_length`` (a last block
cut short is its block's first tokens), then, where the blocks run out before ``input_length``, tokens
of its own. Each request asks for ``output_length`` tokens (``--max-tokens`` wins when given) and is
due at its timestamp: the first request sent at the start of the run, each later one as much later as
the trace says, times the scale. Requests are taken in file order, the first ``--num-prompts``; a trace
never cycles (a short one sends what it has, and the notes say so).

* ``timed_trace``: field names ``--timed-trace-label-{timestamp,input-length,output-length,hash-ids}``
  (default those above), ``--timed-trace-chunk-hash-size`` tokens per hash id (default 16, vLLM's),
  timestamps times ``--timed-trace-sec-multiplier`` are seconds (0.001 for milliseconds).
* ``mooncake``: the field names above, 512 tokens per hash id and timestamps in milliseconds, as the
  Mooncake traces define them; ``--mooncake-slowdown-factor`` (SGLang's) stretches the gaps (2: half
  the pace).

``--no-self-timed`` (vLLM's) drops the timestamps: the trace's prompts then go out by ``--request-rate``
or, without one, in closed loop.

Prompts: ``/v1/completions`` gets token ids, five-digit ids drawn from ``[10000, 30000)`` (inside every
common vocabulary), so that a block's first k tokens are the first ``6k - 1`` bytes of its JSON; the
chat endpoint gets random common words, one word taken as one token (the server's chat template adds
its own tokens before them, so the blocks no longer start at a cache block's edge, though the shared
runs stay shared). Each distinct block is drawn once (seeded by ``--seed``, in order of first
appearance) and serialised once, and every prompt is spliced from those bytes.

Bad input: a line that is not JSON, a field missing or of the wrong type, or a timestamp earlier than
the line before it stops the run with one line naming the file, the line and the field. A request whose
prompt and output do not fit the server's context is skipped, and counted in the result (screened out):
the others keep their times.

Where fastbench differs: vLLM makes a hash id's tokens from ``hash((id, size))``, so a block cut short
shares nothing with the same block whole, and fastbench's cut block is the whole block's start (what a
prefix cache would share); vLLM stops the prompt where the hash ids run out (a line without hash ids
sends an empty prompt), fastbench fills it to ``input_length`` with tokens of the request's own; vLLM
waits ``timestamp`` seconds from the start before the first request, fastbench sends the first at once
(a trace cut from the middle of a day does not idle for hours); vLLM asks for a tokenizer and sends ids
from its whole vocabulary, fastbench needs none. SGLang's ``mooncake`` dataset downloads its trace and
replays each as a multi-turn conversation whose prompts only name the hash ids as text (``id_46 id_47``),
so its sharing is approximate; fastbench reads the local file and replays each line once, sharing
exact blocks.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np
import orjson

from fastbench.config import BenchConfig
from fastbench.exceptions import DatasetError
from fastbench.load.screening import Candidate, JsonPrompt
from fastbench.load.sources import Context, read_dataset_file
from fastbench.load.sources.prefixed import WORDS
from fastbench.load.tokens import SOURCE_TOKEN_IDS, SOURCE_WORDS

MOONCAKE_BLOCK = 512  # tokens per hash id in the Mooncake traces
MOONCAKE_SECONDS_PER_UNIT = 0.001  # their timestamps are milliseconds
# Five digits each: a block's first k ids are the first 6k - 1 bytes of its JSON ("12345,23456").
TRACE_ID_LOW, TRACE_ID_HIGH = 10_000, 30_000
_ID_WIDTH = 6
_DRAW_ROWS = 4096  # blocks drawn per numpy call: bounds the int64 matrix held at once
_WORD_ARRAY = np.array(WORDS, dtype=object)
_NUMPY = orjson.OPT_SERIALIZE_NUMPY


@dataclasses.dataclass(frozen=True)
class TraceFormat:
    """How one trace dataset reads its file."""

    name: str
    block: int  # tokens per hash id
    seconds_per_unit: float  # a timestamp times this is seconds from the trace's start, scale included
    timestamp: str  # the field names
    input_length: str
    output_length: str
    hash_ids: str
    scale_flag: str  # the option that scales the timestamps, for the notes


def trace_format(config: BenchConfig) -> TraceFormat:
    if config.dataset_name == "mooncake":
        return TraceFormat("mooncake", MOONCAKE_BLOCK, MOONCAKE_SECONDS_PER_UNIT * config.mooncake_slowdown_factor,
                           "timestamp", "input_length", "output_length", "hash_ids",
                           f"--mooncake-slowdown-factor {config.mooncake_slowdown_factor:g}")
    return TraceFormat("timed_trace", config.timed_trace_chunk_hash_size, config.timed_trace_sec_multiplier,
                       config.timed_trace_label_timestamp, config.timed_trace_label_input_length,
                       config.timed_trace_label_output_length, config.timed_trace_label_hash_ids,
                       f"--timed-trace-sec-multiplier {config.timed_trace_sec_multiplier:g}")


@dataclasses.dataclass
class Trace:
    """A trace file's requests, in file order."""

    lines: list[int]  # each request's line number
    seconds: np.ndarray  # float64: its timestamp in seconds, scale included
    input_lengths: list[int]
    output_lengths: list[int]
    hash_ids: list[list[int]]


def check(config: BenchConfig) -> None:
    """The file parses and every line has the fields (DatasetError naming the line if not)."""
    if config.dataset_path:
        load_trace(os.fspath(config.dataset_path), trace_format(config))


async def offer(ctx: Context) -> str:
    config, selector = ctx.config, ctx.selector
    fmt = trace_format(config)
    path = os.fspath(config.dataset_path or "")
    trace = load_trace(path, fmt)
    taken = min(selector.need, len(trace.lines))
    words = ctx.chat
    blocks = _Blocks(fmt.block, words, np.random.default_rng(config.seed))
    blocks.draw(trace.hash_ids[:taken], trace.input_lengths[:taken])
    own = np.random.default_rng([config.seed, 1])  # the tokens past a request's blocks
    out_fixed = config.max_tokens
    timed = config.self_timed is not False
    start = 0
    while selector.remaining > 0 and start < len(trace.lines):
        stop = min(len(trace.lines), start + max(selector.remaining, 256))
        batch = []
        for i in range(start, stop):
            n_in = trace.input_lengths[i]
            prompt = blocks.prompt(trace.hash_ids[i], n_in, own)
            batch.append(Candidate(prompt, n_in, out_fixed or trace.output_lengths[i],
                                   SOURCE_WORDS if words else SOURCE_TOKEN_IDS,
                                   float(trace.seconds[i]) if timed else None))
        selector.offer(batch)
        start = stop
    ctx.notes.append(
        f"{fmt.name}: {len(trace.lines)} requests in {path}, the first {taken} taken in file order, "
        f"{fmt.block} tokens per hash id; {len(blocks.index)} distinct blocks, {blocks.shared} of them carried by "
        "more than one request; "
        + (f"sent at the trace's times ({fmt.scale_flag}), the first at the start"
           if timed else "timestamps not used (--no-self-timed)")
        + ("; chat prompts are random common words, one word taken as one token" if words else
           f"; prompts sent as token-id lists, ids drawn from [{TRACE_ID_LOW}, {TRACE_ID_HIGH})")
    )
    return f"{fmt.name}:{path}"


def load_trace(path: str, fmt: TraceFormat) -> Trace:
    """The trace's requests; DatasetError naming the file, line and field for the first bad one."""
    raw = read_dataset_file(path, fmt.name)
    lines = [(n, line) for n, line in enumerate(raw.splitlines(), start=1) if line.strip()]
    if not lines:
        raise DatasetError(f"{path} has no requests (only blank lines)")
    try:  # one parse for the whole file; line by line only to name a bad line
        objs = orjson.loads(b"[" + b",".join(line for _, line in lines) + b"]")
    except orjson.JSONDecodeError:
        objs = [_parse_line(path, n, line) for n, line in lines]
    numbers = [n for n, _ in lines]
    stamps: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    hashes: list[list[int]] = []
    ts_key, in_key, out_key, hash_key = fmt.timestamp, fmt.input_length, fmt.output_length, fmt.hash_ids
    for n, obj in zip(numbers, objs):
        if type(obj) is not dict:
            raise DatasetError(f"{path} line {n}: expected a JSON object, found a {_type_name(obj)}")
        ts: Any = obj.get(ts_key)
        n_in: Any = obj.get(in_key)
        n_out: Any = obj.get(out_key)
        ids: Any = obj.get(hash_key, [])
        if type(ts) not in (int, float) or type(n_in) is not int or type(n_out) is not int or type(ids) is not list:
            _refuse_record(path, n, obj, fmt)
        if not (n_in >= 1 and n_out >= 1 and math.isfinite(ts)) or not all(type(h) is int for h in ids):
            _refuse_record(path, n, obj, fmt)
        stamps.append(ts)
        inputs.append(n_in)
        outputs.append(n_out)
        hashes.append(ids)
    seconds = np.array(stamps, dtype=np.float64)
    back = np.flatnonzero(seconds[1:] < seconds[:-1])
    if back.size:
        i = int(back[0]) + 1
        raise DatasetError(f"{path} line {numbers[i]}: '{ts_key}' {stamps[i]:g} is earlier than line "
                           f"{numbers[i - 1]}'s {stamps[i - 1]:g}; a trace must be in time order (sort it by "
                           f"'{ts_key}')")
    return Trace(numbers, seconds * fmt.seconds_per_unit, inputs, outputs, hashes)


def _parse_line(path: str, n: int, line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise DatasetError(f"{path} line {n}: not valid JSON ({exc})") from None


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _refuse_record(path: str, n: int, obj: dict[str, Any], fmt: TraceFormat) -> NoReturn:
    """Raise the one-line error for the first field of ``obj`` that is missing or wrong."""
    where = f"{path} line {n}"
    label_flag = "" if fmt.name == "mooncake" else " (--timed-trace-label-{} names another field)"
    for key, what, option in ((fmt.timestamp, "a number", "timestamp"),
                              (fmt.input_length, "an integer >= 1", "input-length"),
                              (fmt.output_length, "an integer >= 1", "output-length")):
        value = obj.get(key)
        if value is None:
            raise DatasetError(f"{where}: no '{key}' field{label_flag.format(option)}; it has "
                               f"{', '.join(repr(k) for k in obj) or 'no field'}")
        number = type(value) in (int, float)
        if what == "a number" and not (number and math.isfinite(value)):
            raise DatasetError(f"{where}: '{key}' must be {what}, got {value!r}")
        if what != "a number" and not (type(value) is int and value >= 1):
            raise DatasetError(f"{where}: '{key}' must be {what}, got {value!r}")
    ids = obj.get(fmt.hash_ids, [])
    if type(ids) is not list or not all(type(h) is int for h in ids):
        raise DatasetError(f"{where}: '{fmt.hash_ids}' must be a list of integers, got {str(ids)[:60]}")
    raise DatasetError(f"{where}: not a trace record: {str(obj)[:80]}")  # not reached: one check above fails


class _Blocks:
    """Each distinct hash id's block, drawn once and serialised once; prompts spliced from them."""

    def __init__(self, block: int, words: bool, rng: np.random.Generator) -> None:
        self.block = block
        self.words = words
        self.rng = rng
        self.index: dict[int, int] = {}  # hash id -> its row
        self.rows: list[bytes] = []  # each block's JSON inside the brackets or quotes: b"12345,23456" / b"a b"
        self.word_rows: list[np.ndarray] = []  # chat: each block's word indices (a cut block is rebuilt)
        self.shared = 0  # blocks that more than one request carries

    def draw(self, hash_ids: Sequence[list[int]], input_lengths: Sequence[int]) -> None:
        """Draw the blocks these requests use (in order of first appearance), and count those more than one carries."""
        block, index = self.block, self.index
        seen_with: dict[int, int] = {}  # hash id -> how many requests carry it
        for ids, n_in in zip(hash_ids, input_lengths):
            for h in ids[:-(-n_in // block)]:
                if h not in index:
                    index[h] = len(index)
                seen_with[h] = seen_with.get(h, 0) + 1
        self.shared = sum(1 for count in seen_with.values() if count > 1)
        for first in range(0, len(index), _DRAW_ROWS):
            rows = min(_DRAW_ROWS, len(index) - first)
            if self.words:
                drawn = self.rng.integers(0, len(WORDS), size=(rows, block))
                self.word_rows.extend(drawn)
                self.rows.extend(" ".join(_WORD_ARRAY[r].tolist()).encode() for r in drawn)
            else:
                drawn = self.rng.integers(TRACE_ID_LOW, TRACE_ID_HIGH, size=(rows, block))
                self.rows.extend(orjson.dumps(drawn, option=_NUMPY)[2:-2].split(b"],["))

    def prompt(self, hash_ids: list[int], n_in: int, own: np.random.Generator) -> JsonPrompt:
        """The prompt of ``n_in`` tokens: its hash ids' blocks, the last cut short where needed, then
        tokens of its own."""
        block, rows, index = self.block, self.rows, self.index
        sep = b" " if self.words else b","
        parts: list[bytes] = [b'"' if self.words else b"["]
        left = n_in
        for h in hash_ids:
            if left <= 0:
                break
            row = index[h]
            if left >= block:
                parts.append(rows[row])
                left -= block
            else:
                parts.append(self._cut(row, left))
                left = 0
            parts.append(sep)
        if left > 0:
            parts.append(self._own(own, left))
        else:
            parts.pop()  # the separator after the last block
        parts.append(b'"' if self.words else b"]")
        chars = sum(map(len, parts)) - 2 if self.words else 0
        return JsonPrompt(tuple(parts), chars)

    def _cut(self, row: int, tokens: int) -> bytes:
        if self.words:
            return " ".join(_WORD_ARRAY[self.word_rows[row][:tokens]].tolist()).encode()
        return self.rows[row][:_ID_WIDTH * tokens - 1]

    def _own(self, rng: np.random.Generator, tokens: int) -> bytes:
        if self.words:
            return " ".join(_WORD_ARRAY[rng.integers(0, len(WORDS), size=tokens)].tolist()).encode()
        return orjson.dumps(rng.integers(TRACE_ID_LOW, TRACE_ID_HIGH, size=tokens), option=_NUMPY)[1:-1]
