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
appearance), its bytes made once, and every prompt is spliced from those bytes. Tokens are drawn two at
a time from 65,536 random pairs (made per run): a token's neighbour is one of a few it could have, which
no prefix cache sees, and it makes drawing tens of millions of tokens a fast numpy gather
(bench/bench_trace.py).

Reading: the core's scanner (csrc/fb_trace.c) reads the file straight into numpy columns where its lines
are plain (one flat object a line; any field besides the four a plain value); it gives up on anything
else, and then orjson parses the file, which names a bad line. Both read a file the same way
(tests/core/test_trace_scan.py).

Read as far as the run takes: requests are taken in file order, so only the file's first lines are read
(four times the requests the run needs, at least 1,024), and more, four times as many each time, while
fewer than it needs fit the context; a trace's columns cost about 40 bytes a request and 8 a hash id.

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
import itertools
import math
import os
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np
import orjson

from fastbench._core import TokenRuns, insert_literals, lay_out_blocks, scan_trace
from fastbench.config import BenchConfig
from fastbench.datasetoptions import MooncakeOptions, TimedTraceOptions
from fastbench.exceptions import DatasetError
from fastbench.load.screening import Candidate, JsonPrompt, PartsPrompt, Selector, screening_limit
from fastbench.load.sharing import SharedBlocks
from fastbench.load.sources import Context, gc_paused, open_dataset_file, read_dataset_file
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
_ID_TABLE = np.frombuffer(b"".join(b"%d," % i for i in range(TRACE_ID_LOW, TRACE_ID_HIGH)), np.uint8).reshape(-1, 6)
_PAIRS = 1 << 16  # pairs of tokens to draw from: indexed by a uint16
_DRAW_PAIRS = 1 << 22  # pairs drawn per numpy call: bounds the index array held at once


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
        slowdown = config.options(MooncakeOptions).slowdown_factor
        return TraceFormat("mooncake", MOONCAKE_BLOCK, MOONCAKE_SECONDS_PER_UNIT * slowdown,
                           "timestamp", "input_length", "output_length", "hash_ids",
                           f"--mooncake-slowdown-factor {slowdown:g}")
    timed = config.options(TimedTraceOptions)
    return TraceFormat("timed_trace", timed.chunk_hash_size, timed.sec_multiplier, timed.label_timestamp,
                       timed.label_input_length, timed.label_output_length, timed.label_hash_ids,
                       f"--timed-trace-sec-multiplier {timed.sec_multiplier:g}")


@dataclasses.dataclass
class Trace:
    """A trace file's requests, in file order: numpy columns, its hash ids one flat int64 array."""

    lines: np.ndarray  # int64: each request's line number
    seconds: np.ndarray  # float64: its timestamp in seconds, scale included
    input_lengths: np.ndarray  # int64
    output_lengths: np.ndarray  # int64
    ids_end: np.ndarray  # int64: where its hash ids end in hash_ids (they start where the one before's end)
    hash_ids: np.ndarray  # int64: every request's hash ids, in order
    whole: bool = True  # the file's every request (False: its first lines only)

    def ids_start(self) -> np.ndarray:
        return np.concatenate(([0], self.ids_end[:-1])).astype(np.int64)


_FIRST_READ = 1024  # lines read at least, and the factor over the requests needed
_MORE = 4


def check(config: BenchConfig) -> None:
    """The lines the run would read first parse and have the fields (DatasetError naming the line if not)."""
    if config.dataset_path:
        load_trace(os.fspath(config.dataset_path), trace_format(config),
                   lines=_first_lines(config.num_prompts + config.num_warmups))


def _first_lines(need: int) -> int:
    return max(_FIRST_READ, _MORE * need)


async def offer(ctx: Context) -> str:
    with gc_paused():  # no await inside
        return _offer(ctx)


def _offer(ctx: Context) -> str:
    config, selector = ctx.config, ctx.selector
    fmt = trace_format(config)
    path = os.fspath(config.dataset_path or "")
    lines = _first_lines(selector.need)
    while True:  # the file's first lines, more while fewer than the run needs fit the context
        trace = load_trace(path, fmt, lines=lines)
        count = len(trace.lines)
        outputs = np.full(count, config.max_tokens, np.int64) if config.max_tokens else trace.output_lengths
        sent = _fitting(trace.input_lengths, outputs, selector)  # the requests the run takes, in file order
        if len(sent) >= selector.need or trace.whole:
            break
        lines *= _MORE
    words = ctx.chat
    _check_size(path, trace, sent, fmt.block, _WORD_WIDTH if words else _ID_WIDTH)
    blocks = TokenBlocks(fmt.block, words, np.random.default_rng(config.seed))
    starts = trace.ids_start()
    blocks.draw(trace.hash_ids, starts[sent], trace.ids_end[sent] - starts[sent], trace.input_lengths[sent])
    timed = config.self_timed is not False
    source = SOURCE_WORDS if words else SOURCE_TOKEN_IDS
    skipped = Candidate(JsonPrompt((b"[]",), 0), None, 1, source)  # stands for one the context cannot hold
    inputs, max_tokens = trace.input_lengths.tolist(), outputs.tolist()
    prompts = blocks.prompts(trace.input_lengths[sent].tolist())
    seconds = trace.seconds.tolist() if timed else [None] * count
    batch: list[Candidate] = []
    last = -1
    for prompt, i in zip(prompts, sent.tolist()):
        if i > last + 1:
            batch.extend(dataclasses.replace(skipped, prompt_len=inputs[j], max_tokens=max_tokens[j])
                         for j in range(last + 1, i))
        batch.append(Candidate(prompt, inputs[i], max_tokens[i], source, seconds[i],
                               SharedBlocks(trace.hash_ids[starts[i]:trace.ids_end[i]], fmt.block)))
        last = i
    if len(sent) < selector.need:
        batch.extend(dataclasses.replace(skipped, prompt_len=inputs[j], max_tokens=max_tokens[j])
                     for j in range(last + 1, count))
    selector.offer(batch)  # those the context cannot hold are screened out there, and counted
    taken = len(sent)
    ctx.notes.append(
        f"{fmt.name}: {len(trace.lines)} requests {'in' if trace.whole else 'read from the start of'} {path}, "
        f"the first {taken} taken in file order, "
        f"{fmt.block} tokens per hash id; {blocks.distinct} distinct blocks, {blocks.shared} of them carried by "
        "more than one request; "
        + (f"sent at the trace's times ({fmt.scale_flag}), the first at the start"
           if timed else "timestamps not used (--no-self-timed)")
        + ("; chat prompts are random common words, one word taken as one token" if words else
           f"; prompts sent as token-id lists, ids drawn from [{TRACE_ID_LOW}, {TRACE_ID_HIGH})")
    )
    return f"{fmt.name}:{path}"


def _check_size(path: str, trace: Trace, sent: np.ndarray, block: int, width: int) -> None:
    """DatasetError, before anything is allocated, where the prompts of the requests taken cannot be held:
    their token bytes (at most each input length plus a block cut short, ``width`` bytes a token) beyond
    this machine's memory. Without a context limit to screen them, one absurd input length would
    otherwise end the run in a MemoryError."""
    if not len(sent):
        return
    lengths = trace.input_lengths[sent]
    needed = (float(lengths.sum(dtype=np.float64)) + block * len(sent)) * width  # no int64 overflow
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if needed > memory:
        longest = int(sent[int(np.argmax(lengths))])
        raise DatasetError(f"{path} line {trace.lines[longest]}: the prompts of the {len(sent)} requests taken "
                           f"need {needed / 1e9:,.1f} GB of token bytes, more than this machine's "
                           f"{memory / 1e9:,.1f} GB (the longest, this line's, asks for "
                           f"{int(trace.input_lengths[longest]):,} tokens); give --max-model-len to screen "
                           "out what the server cannot take, or fewer --num-prompts")


def _fitting(inputs: np.ndarray, outputs: np.ndarray, selector: Selector) -> np.ndarray:
    """The first requests, in file order, whose prompt and output fit the context, as many as the run
    needs (their indices, int64): the selector's rule, applied before any prompt is made (with numpy:
    each distinct output length's limit computed once)."""
    mml = selector.max_model_len
    need = selector.need
    if mml is None:
        return np.arange(min(need, len(inputs)), dtype=np.int64)
    lengths, which = np.unique(outputs, return_inverse=True)
    limits = np.array([screening_limit(int(n), selector.extra_body) for n in lengths], dtype=np.int64)
    fits = inputs + limits[which.reshape(-1)] <= mml
    return np.flatnonzero(fits)[:need].astype(np.int64)


def load_trace(path: str, fmt: TraceFormat, *, lines: int | None = None) -> Trace:
    """The trace's requests (of its first ``lines`` lines where given; ``Trace.whole`` says whether they are
    the file's all); DatasetError naming the file, line and field for the first bad one."""
    if lines is None or not os.path.isfile(path):  # a pipe is read once: whole
        raw, whole = read_dataset_file(path, fmt.name), True
    else:
        raw, whole = _first_bytes(path, fmt.name, lines)
    trace = _scanned(raw, fmt) or _parsed(path, raw, fmt)
    trace.whole = whole
    return trace


def _first_bytes(path: str, name: str, lines: int) -> tuple[bytes, bool]:
    """The bytes of the file's first ``lines`` lines (to their last newline), and whether they are all of it."""
    with open_dataset_file(path, name) as f:
        blocks: list[bytes] = []
        newlines = 0
        while True:
            block = f.read(1 << 20)
            if not block:
                return b"".join(blocks), True
            count = block.count(b"\n")
            if newlines + count >= lines:
                cut = -1
                for _ in range(lines - newlines):
                    cut = block.index(b"\n", cut + 1)
                blocks.append(block[:cut + 1])
                whole = not block[cut + 1:] and not f.read(1)
                return b"".join(blocks), whole
            blocks.append(block)
            newlines += count


def _scanned(raw: bytes, fmt: TraceFormat) -> Trace | None:
    """The trace read straight into its columns by the core's scanner, which takes the plain lines trace
    writers make (one flat object a line, plain values) as orjson would read them; None where it does not
    take a line, or where the times go back: then the parse reads the file and names the line."""
    keys = (fmt.timestamp.encode(), fmt.input_length.encode(), fmt.output_length.encode(), fmt.hash_ids.encode())
    if len(set(keys)) < len(keys):
        return None
    rows = raw.count(b"\n") + 1
    lines, inputs, outputs, ids_end = (np.empty(rows, np.int64) for _ in range(4))
    stamps = np.empty(rows, np.float64)
    ids = np.empty(raw.count(b",") + rows, np.int64)  # a list's ids but its first follow a comma
    scanned = scan_trace(raw, keys, lines, stamps, inputs, outputs, ids_end, ids)
    if scanned is None:
        return None
    n, n_ids = scanned
    stamps = stamps[:n]
    if np.any(stamps[1:] < stamps[:-1]):
        return None
    return Trace(lines[:n], stamps * fmt.seconds_per_unit, inputs[:n], outputs[:n], ids_end[:n], ids[:n_ids])


def _parsed(path: str, raw: bytes, fmt: TraceFormat) -> Trace:
    """The trace parsed by orjson, each field checked; DatasetError for the first bad line."""
    numbers, objs = _records(path, raw)
    ts_key, in_key, out_key, hash_key = fmt.timestamp, fmt.input_length, fmt.output_length, fmt.hash_ids
    # Checked column by column; line by line only to name a bad line.
    if set(map(type, objs)) != {dict}:
        _refuse_bad_record(path, numbers, objs, fmt)
    stamps: list[Any] = [obj.get(ts_key) for obj in objs]
    inputs: list[Any] = [obj.get(in_key) for obj in objs]
    outputs: list[Any] = [obj.get(out_key) for obj in objs]
    hashes: list[Any] = [obj.get(hash_key, []) for obj in objs]
    if not (set(map(type, stamps)) <= {int, float} and set(map(type, inputs)) == {int}
            and set(map(type, outputs)) == {int} and set(map(type, hashes)) == {list}
            and min(inputs) >= 1 and min(outputs) >= 1 and all(map(math.isfinite, stamps))):
        _refuse_bad_record(path, numbers, objs, fmt)
    return _checked_trace(path, numbers, objs, stamps, inputs, outputs, hashes, fmt)


def _records(path: str, raw: bytes) -> tuple[list[int], list[Any]]:
    """Each record's line number and its parsed JSON. One parse for the whole file, its lines made one
    JSON array by turning each newline into a comma (no copy per line), and a record for every line;
    else (blank lines, a line that is not one JSON value) line by line, which names a bad line."""
    body = raw.rstrip()
    count = body.count(b"\n") + 1
    try:
        objs: list[Any] = orjson.loads(b"[%b]" % body.replace(b"\n", b","))
    except orjson.JSONDecodeError:
        pass
    else:
        if len(objs) == count:
            return list(range(1, count + 1)), objs
    lines = [(n, line) for n, line in enumerate(raw.splitlines(), start=1) if line.strip()]
    if not lines:
        raise DatasetError(f"{path} has no requests (only blank lines)")
    try:
        objs = orjson.loads(b"[" + b",".join(line for _, line in lines) + b"]")
    except orjson.JSONDecodeError:
        objs = []
    if len(objs) != len(lines):  # a bad line, or one holding two records ("{...},{...}")
        objs = [_parse_line(path, n, line) for n, line in lines]
    return [n for n, _ in lines], objs


def _refuse_bad_record(path: str, numbers: list[int], objs: list[Any], fmt: TraceFormat) -> None:
    """Raise the one-line error for the first bad record (returns only if there is none)."""
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


def _checked_trace(path: str, numbers: list[int], objs: list[Any], stamps: list[float], inputs: list[int],
                   outputs: list[int], hashes: list[list[int]], fmt: TraceFormat) -> Trace:
    """The trace from its checked columns, once its hash ids and its time order are checked too."""
    ts_key, hash_key = fmt.timestamp, fmt.hash_ids
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
    try:
        columns = [np.array(column, np.int64) for column in (numbers, inputs, outputs)]
        ids = np.fromiter(itertools.chain.from_iterable(hashes), np.int64, sum(map(len, hashes)))
    except OverflowError:
        n = next(n for n, n_in, n_out, ids in zip(numbers, inputs, outputs, hashes)
                 if not all(-1 << 63 <= v < 1 << 63 for v in (n_in, n_out, *ids)))
        raise DatasetError(f"{path} line {n}: a number does not fit in 64 bits") from None
    ids_end = np.cumsum(np.fromiter(map(len, hashes), np.int64, len(hashes)))
    return Trace(columns[0], seconds * fmt.seconds_per_unit, columns[1], columns[2], ids_end, ids)


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


def _numbered(ids: np.ndarray) -> tuple[np.ndarray, int, int]:
    """The hash ids as numbers in a span the layout's table covers: (numbers, low, span). Traces number
    their blocks densely (Mooncake's from 0), so where the ids span at most a few times their count they
    are their own numbers; any other ids are numbered by np.unique (a sort)."""
    if not len(ids):
        return ids, 0, 1
    low = int(ids.min())
    span = int(ids.max()) - low + 1
    if span <= 4 * len(ids) + (1 << 16):
        return ids, low, span
    distinct, which = np.unique(ids, return_inverse=True)
    return which.reshape(-1).astype(np.int64), 0, len(distinct)  # numpy 2.0 and 2.1 shape it like the input


class TokenBlocks:
    """Every token a fixed-width run of bytes in one buffer (a token id five digits and a comma, a chat
    word four letters and a space), laid out request by request: the blocks a request carries first, in
    its order, then its own tokens. A request whose blocks are new is then one run of the buffer, and one
    that shares a leading block or two a run for those and one for the rest, so that a prompt is a few
    slices of the buffer however many blocks it has. The layout is computed for all requests in one native
    pass (the core's ``lay_out_blocks``; no per-block Python), the tokens are drawn in bulk, two at a time
    from a table of random pairs (``_tokens``), and a prompt is its first and last run: its request's body
    is sent from the buffer as it lies (the core's ``BodyParts``), never copied into a body of its own."""

    def __init__(self, block: int, words: bool, rng: np.random.Generator) -> None:
        self.block = block
        self.words = words
        self.rng = rng
        self.width = _WORD_WIDTH if words else _ID_WIDTH
        self.distinct = 0  # distinct blocks the requests carry
        self.shared = 0  # of them, blocks that more than one request carries
        self._buffer = np.empty(0, np.uint8)
        self._runs = np.zeros(0, np.int64)  # per run: its first byte, then its end, flat
        self._first_run: list[int] = []  # per request, its first run (and the next request's is its end)
        self.literals_at = 0  # where ``draw``'s literals lie in the buffer

    def draw(self, ids: np.ndarray, starts: np.ndarray, counts: np.ndarray, input_lengths: np.ndarray,
             literals: bytes = b"") -> None:
        """Lay out and draw every block these requests carry (each distinct one once) and their own tokens:
        request k's hash ids are ``ids[starts[k]:starts[k] + counts[k]]`` (int64 arrays), its input length
        ``input_lengths[k]``. ``literals``: bytes laid after the tokens, from ``literals_at`` (for ``insert``)."""
        block = self.block
        n = len(input_lengths)
        if n == 0:
            return
        n_in = np.ascontiguousarray(input_lengths, dtype=np.int64)
        n_used = np.minimum(counts, -(-n_in // block))
        numbers, low, span = _numbered(ids)
        runs = np.empty(2 * (int(n_used.sum()) + n), np.int64)  # a run per block and one for its own, at most
        first_run = np.empty(n + 1, np.int64)
        # Native, one pass over the requests in order (numpy took ~20 passes over arrays of every block used,
        # most of the time in first touches of their fresh memory; bench/RESULTS.md "tracescan")
        n_runs, total, self.distinct, self.shared = lay_out_blocks(numbers, np.ascontiguousarray(starts, np.int64),
                                                                   n_used, n_in, block, self.width, low, span, runs,
                                                                   first_run)
        self._runs = runs[:2 * n_runs]
        self._first_run = first_run.tolist()
        self._buffer = self._tokens(total, literals)
        self.literals_at = total * self.width

    def insert(self, request: np.ndarray, token: np.ndarray, first: np.ndarray, end: np.ndarray) -> None:
        """Put bytes ``first[i]:end[i]`` of the buffer (``draw``'s literals) in request ``request[i]``'s prompt in
        place of the separator before its token ``token[i]`` (0 < token < its input length), rewriting the runs;
        the entries ordered by request, then token; inserts at one separator go in their order. The tokens stay
        where they lie: a prompt is its runs cut around the separators, the literals' runs between (the core's
        ``insert_literals``, one pass: numpy's searches over millions of cuts took seconds)."""
        if not len(request):
            return
        i64 = np.int64
        out_runs = np.empty(len(self._runs) + 4 * len(request), dtype=i64)
        out_first = np.empty(len(self._first_run), dtype=i64)
        request, token, first, end = (np.ascontiguousarray(column, i64) for column in (request, token, first, end))
        written = insert_literals(self._runs, np.asarray(self._first_run, dtype=i64), request, token, first, end,
                                  self.width, out_runs, out_first)
        self._runs = out_runs[:2 * written]
        self._first_run = out_first.tolist()

    def _tokens(self, count: int, literals: bytes = b"") -> np.ndarray:
        """``count`` random tokens' bytes, each with its separator. Drawn two at a time, from a table of
        65,536 random pairs of tokens made here: one numpy gather of 10- or 12-byte items per pair, from a
        table that stays in the CPU's cache, and a 16-bit draw per pair with no rejection (a range of
        2**16), several times faster than drawing each token's id and printing it."""
        table = _FIXED_WORDS if self.words else _ID_TABLE
        pairs = table[self.rng.integers(0, len(table), size=(_PAIRS, 2))].reshape(_PAIRS, -1)
        items = pairs.view(f"V{pairs.shape[1]}").ravel()
        half = -(-count // 2)
        out = np.empty(half + -(-len(literals) // items.dtype.itemsize), items.dtype)
        for first in range(0, half, _DRAW_PAIRS):
            rows = self.rng.integers(0, _PAIRS, size=min(_DRAW_PAIRS, half - first), dtype=np.uint16)
            # mode="clip": a uint16 row is always in range, and numpy buffers ``out`` in the default
            # mode="raise" (each byte written twice): 0.5-0.7 s, not 0.9-1.2, for 70.7 M tokens here
            np.take(items, rows, out=out[first:first + len(rows)], mode="clip")
        buffer = out.view(np.uint8)[:count * self.width + len(literals)]
        buffer[count * self.width:] = np.frombuffer(literals, np.uint8)
        return buffer

    def prompts(self, input_lengths: Sequence[int]) -> list[PartsPrompt]:
        """The prompts of the requests given to ``draw`` (of these input lengths), in order: each its runs
        of the buffer, the last token's separator left out. Their bodies are sent from those runs."""
        source = TokenRuns(self._buffer, self._runs)
        first = self._first_run
        quote = b'"' if self.words else None
        open_, close = (quote, quote) if quote else (b"[", b"]")
        width = self.width
        return [PartsPrompt(source, first[k], first[k + 1], open_, close, n_in * width - 1 if quote else 0)
                for k, n_in in enumerate(input_lengths)]
