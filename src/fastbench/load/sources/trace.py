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

import bisect
import collections
import dataclasses
import itertools
import math
import os
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np
import orjson

from fastbench.config import BenchConfig
from fastbench.exceptions import DatasetError
from fastbench.load.screening import Candidate, JsonPrompt, Selector, screening_limit
from fastbench.load.sources import Context, read_dataset_file
from fastbench.load.sources.prefixed import WORDS
from fastbench.load.tokens import SOURCE_TOKEN_IDS, SOURCE_WORDS

MOONCAKE_BLOCK = 512  # tokens per hash id in the Mooncake traces
MOONCAKE_SECONDS_PER_UNIT = 0.001  # their timestamps are milliseconds
# Five digits each: a block's first k ids are the first 6k - 1 bytes of its JSON ("12345,23456").
TRACE_ID_LOW, TRACE_ID_HIGH = 10_000, 30_000
_ID_WIDTH = 6
# Chat: four-letter common words, each and its space five bytes (one word taken as one token).
_FIXED_WORDS = np.array([list(f"{w} ".encode()) for w in WORDS if len(w) == 4], dtype=np.uint8)
_WORD_WIDTH = 5
_DRAW_TOKENS = 1 << 22  # tokens drawn per numpy call: bounds the int64 array held at once
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
    outputs = [config.max_tokens] * len(trace.lines) if config.max_tokens else trace.output_lengths
    sent = _fitting(trace.input_lengths, outputs, selector)  # the requests the run takes, in file order
    words = ctx.chat
    blocks = _Blocks(fmt.block, words, np.random.default_rng(config.seed))
    blocks.draw([trace.hash_ids[i] for i in sent], [trace.input_lengths[i] for i in sent])
    timed = config.self_timed is not False
    source = SOURCE_WORDS if words else SOURCE_TOKEN_IDS
    skipped = Candidate(JsonPrompt((b"[]",), 0), None, 1, source)  # stands for one the context cannot hold
    batch: list[Candidate] = []
    last = -1
    for k, i in enumerate(sent):
        n_in = trace.input_lengths[i]
        batch.extend(dataclasses.replace(skipped, prompt_len=trace.input_lengths[j], max_tokens=outputs[j])
                     for j in range(last + 1, i))
        batch.append(Candidate(blocks.prompt(k, trace.hash_ids[i], n_in), n_in, outputs[i], source,
                               float(trace.seconds[i]) if timed else None))
        last = i
    if len(sent) < selector.need:
        batch.extend(dataclasses.replace(skipped, prompt_len=trace.input_lengths[j], max_tokens=outputs[j])
                     for j in range(last + 1, len(trace.lines)))
    selector.offer(batch)  # those the context cannot hold are screened out there, and counted
    taken = len(sent)
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


def _fitting(inputs: list[int], outputs: list[int], selector: Selector) -> list[int]:
    """The first requests, in file order, whose prompt and output fit the context, as many as the run
    needs: the selector's rule, applied before any prompt is made."""
    mml = selector.max_model_len
    need = selector.need
    if mml is None:
        return list(range(min(need, len(inputs))))
    limits: dict[int, int] = {}
    out = []
    for i, (n_in, n_out) in enumerate(zip(inputs, outputs)):
        limit = limits.get(n_out)
        if limit is None:
            limit = limits[n_out] = screening_limit(n_out, selector.extra_body)
        if n_in + limit <= mml:
            out.append(i)
            if len(out) == need:
                break
    return out


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
        if not (n_in >= 1 and n_out >= 1 and math.isfinite(ts)):
            _refuse_record(path, n, obj, fmt)
        stamps.append(ts)
        inputs.append(n_in)
        outputs.append(n_out)
        hashes.append(ids)
    if not set(map(type, itertools.chain.from_iterable(hashes))) <= {int}:  # one pass; the line found after
        n, obj = next((n, obj) for n, obj in zip(numbers, objs) if not all(type(h) is int for h in obj[hash_key]))
        _refuse_record(path, n, obj, fmt)
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
    """Every token a fixed-width run of bytes in a few large buffers: a token id is five digits and a comma
    (ids in [10000, 30000)), a chat word four letters and a space. A block, a block cut short and a
    request's own tokens are then slices of a buffer: each distinct block is drawn and serialised once,
    with the run's other tokens, in a handful of numpy and orjson calls, and its bytes are shared by every
    prompt that carries it. Slices are bytes, not memoryviews: those are tracked by the garbage
    collector, whose passes over 700,000 of them took seconds."""

    def __init__(self, block: int, words: bool, rng: np.random.Generator) -> None:
        self.block = block
        self.words = words
        self.rng = rng
        self.width = _WORD_WIDTH if words else _ID_WIDTH
        self.index: dict[int, int] = {}  # hash id -> the token its block starts at
        self.own: list[int] = []  # per request, the token its own tokens start at (-1: none)
        self.shared = 0  # blocks that more than one request carries
        self._buffers: list[tuple[int, bytes]] = []  # (first token, the tokens from it), in order
        self._starts: list[int] = []
        self.full: dict[int, bytes] = {}  # hash id -> its whole block

    def draw(self, hash_ids: Sequence[list[int]], input_lengths: Sequence[int]) -> None:
        """Draw every block these requests carry (in order of first appearance) and each one's own tokens."""
        block = self.block
        used = [ids[:-(-n_in // block)] for ids, n_in in zip(hash_ids, input_lengths)]
        carried = collections.Counter(itertools.chain.from_iterable(used))  # hash id -> requests carrying it
        self.shared = sum(1 for count in carried.values() if count > 1)
        starts = range(0, block * len(carried), block)
        self.index = dict(zip(carried, starts))  # Counter keeps the order of first appearance
        blocks_end = block * len(carried)
        in_blocks = block * np.fromiter(map(len, used), np.int64, len(used))
        own = np.maximum(np.asarray(input_lengths, dtype=np.int64) - in_blocks, 0)  # tokens past the blocks
        own_starts = blocks_end + np.cumsum(own) - own
        self.own = np.where(own > 0, own_starts, -1).tolist()
        tokens = blocks_end + int(own.sum())
        # buffers of about _DRAW_TOKENS each, cut only where a block or a request's own tokens start
        cuts = np.concatenate((np.arange(0, blocks_end, block), own_starts[own > 0], [tokens]))
        first = 0
        while first < tokens:
            at = int(np.searchsorted(cuts, first + _DRAW_TOKENS))
            cut = int(cuts[at]) if at < len(cuts) else tokens
            self._buffers.append((first, self._tokens(cut - first)))
            self._starts.append(first)
            first = cut
        step = block * self.width
        full: list[bytes] = []
        for first, buffer in self._buffers:  # the blocks lie one after another from token 0
            if first >= blocks_end:
                break
            end = min(len(buffer), (blocks_end - first) * self.width)
            full.extend(buffer[at:at + step] for at in range(0, end, step))
        self.full = dict(zip(self.index, full))

    def _tokens(self, count: int) -> bytes:
        if self.words:
            return bytes(_FIXED_WORDS[self.rng.integers(0, len(_FIXED_WORDS), size=count)].tobytes())
        return orjson.dumps(self.rng.integers(TRACE_ID_LOW, TRACE_ID_HIGH, size=count), option=_NUMPY)[1:-1] + b","

    def _slice(self, token: int, count: int) -> bytes:
        """``count`` tokens from ``token``, each with its separator after it."""
        first, buffer = self._buffers[bisect.bisect_right(self._starts, token) - 1]
        at = (token - first) * self.width
        return buffer[at:at + count * self.width]

    def prompt(self, request: int, hash_ids: list[int], n_in: int) -> JsonPrompt:
        """Request ``request``'s prompt of ``n_in`` tokens: its hash ids' blocks, the last cut short where
        needed, then its own tokens."""
        block = self.block
        used = hash_ids[:-(-n_in // block)]
        parts: list[bytes] = [b'"' if self.words else b"["]
        parts.extend(map(self.full.__getitem__, used))
        cut = n_in - block * (len(used) - 1) if used else 0
        if 0 < cut < block:  # the last block cut short: its first tokens
            parts[-1] = parts[-1][:cut * self.width]
        elif n_in > block * len(used):
            parts.append(self._slice(self.own[request], n_in - block * len(used)))
        parts[-1] = parts[-1][:-1]  # the last token's separator
        parts.append(b'"' if self.words else b"]")
        return JsonPrompt(tuple(parts), n_in * self.width - 1 if self.words else 0)
