"""The Weka trace format (kv-cache-tester's capture of coding-agent sessions, as aiperf, inference-perf and
guidellm replay it): one JSON object per conversation, read into agent trees (``fastbench.load.agentic``
replays them).

A trace is ``{"id": ..., "block_size": 64, "hash_id_scope": "local", "requests": [...]}``. Its ``requests``
interleave calls (``type`` ``"n"`` normal, ``"s"`` streaming; both are sent as fastbench sends every
request) and subagent markers (``type: "subagent"``, with ``agent_id``, ``status`` and the subagent's own
``requests``, which may hold markers in their turn). A call carries ``t`` (seconds from the conversation's
start), ``in`` and ``out`` (tokens), ``hash_ids`` (the blocks of ``block_size`` tokens its prompt begins
with: equal ids, equal tokens), and may carry ``think_time`` (the client's wait before it), ``api_time``
(the recorded server time), ``input_types`` and ``stop``; other keys (``model``, ``ttft``, ``totals``...)
are read past.

What a marker means (the format's own conventions): the subagent is spawned by the parent's call before
the marker and joined by the parent's call after it, which waits for the subagent's last call; with no
call after it, or ``status: "async_launched"``, it runs in the background (nothing waits for it); with no
call before it, nothing spawned it and it is dropped (counted). Raw kv-cache-tester captures give a
subagent's inner ``t`` relative to its marker, AgentX traces absolute: inner times that start before the
marker's are taken as relative. ``hash_id_scope`` ``"local"`` (the default) gives each trace its own
blocks; ``"global"`` shares equal ids across the traces of a corpus.

Files: one trace object (a ``.json``), JSON Lines of them (a line each), or a directory of such files
(read in name order). A defect in a single trace stops the run with one line naming the file and the
field (``requests[3].in``); in JSON Lines or a directory a defective trace is skipped and counted, the
first defect named in the notes, so that one bad capture does not lose a corpus.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
import os
import re
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import orjson

from fastbench.exceptions import DatasetError

__all__ = ("BACKGROUND", "JOINED", "ROOT", "Agent", "Corpus", "WekaTrace", "read_corpus")

ROOT, JOINED, BACKGROUND = 0, 1, 2  # an agent's role in its tree
ROLE_NAMES = ("root", "subagent", "background")
_CALL_TYPES = ("n", "s")
_KINDS = {"n", "s", "subagent"}
_DICT = {dict}
_INT = {int}
_LIST = {list}
_STR = {str}
_NUMBER = {int, float}
_MAYBE_NUMBER = {int, float, type(None)}
_FIELD_NAMES = ("t", "in", "out", "api_time", "think_time", "hash_ids", "stop", "input_types")
_FIELDS = operator.itemgetter(*_FIELD_NAMES)
_NO_CALL = np.empty(0)
_LINE_END = re.compile(rb"[\r\n]")
_NOT_JSON_SPACE = re.compile(rb"[^ \t\r\n]")
# an agent's calls as columns: starts, ends, think times, inputs, outputs, hash ids, each call's index, whether
# its input is a tool's result; and its markers (calls before each, where, the marker)
_Columns = tuple[np.ndarray, np.ndarray, np.ndarray, Sequence[int], Sequence[int], Sequence[list[int]], Sequence[int],
                 list[bool], list[tuple[int, str, dict[str, Any]]]]


@dataclasses.dataclass
class Agent:
    """One agent's calls, in order, as numpy columns (one entry per call)."""

    name: str
    role: int  # ROOT, JOINED or BACKGROUND
    parent: int  # the parent agent's index in its tree (-1: the root)
    spawn: int  # the parent's call that spawned it (-1: the root)
    join: int  # the parent's call that waits for its last call (-1: none)
    starts: np.ndarray  # float64 seconds from the conversation's start
    ends: np.ndarray  # float64: start + api_time; NaN where no api_time was recorded
    think: np.ndarray  # float64 think_time; NaN where none
    inputs: np.ndarray  # int64 ``in``
    outputs: np.ndarray  # int64 ``out``
    hash_ids: np.ndarray  # int64: every call's hash ids, in order
    ids_end: np.ndarray  # int64 per call: where its hash ids end in hash_ids (they start where the one before's end)
    tool_result: np.ndarray  # bool: the call's new input is a tool's result

    @property
    def calls(self) -> int:
        return len(self.inputs)


@dataclasses.dataclass
class WekaTrace:
    name: str
    block: int  # tokens per hash id
    shared_scope: bool  # hash_id_scope "global": ids mean the same blocks in every trace
    agents: list[Agent]  # the root first, then subagents in the order their markers appear
    dropped_subagents: int  # markers with no parent call before them


@dataclasses.dataclass
class Corpus:
    traces: list[WekaTrace]
    skipped: int  # defective traces left out (JSON Lines, directories)
    first_defect: str | None
    relative_subagents: int  # subagents whose inner times were relative to their marker


class _Defect(Exception):
    """A trace's first defect: ``where`` names its field."""


def read_corpus(path: str) -> Corpus:
    """The traces at ``path`` (a file or a directory); DatasetError when none can be read."""
    if not path:
        raise DatasetError("--dataset-name weka needs --dataset-path (a Weka trace file, JSON Lines of them, or a "
                           "directory of them)")
    if os.path.isdir(path):
        files = sorted(os.path.join(path, name) for name in os.listdir(path) if name.endswith((".json", ".jsonl")))
        if not files:
            raise DatasetError(f"{path}: no .json or .jsonl trace file in this directory")
    else:
        files = [path]
    corpus = Corpus([], 0, None, 0)
    for file in files:
        _read_file(file, corpus, strict=len(files) == 1)
    if not corpus.traces:
        raise DatasetError(f"{path}: no usable trace ({corpus.skipped} skipped; the first: {corpus.first_defect})")
    return corpus


def _read_file(path: str, corpus: Corpus, strict: bool) -> None:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise DatasetError(f"dataset file not found: {path}") from None
    except OSError as exc:
        raise DatasetError(f"cannot read dataset file {path}: {exc.strerror}") from None
    stem = os.path.splitext(os.path.basename(path))[0]
    whole = _one_document(raw)
    if isinstance(whole, dict):  # one trace
        _add(corpus, path, stem, whole, strict)
        return
    del whole
    # JSON Lines: a trace a line; a bad one is skipped where a run can go on. Each line is read into its trace
    # as soon as it is parsed: its objects are then still in the cache, and freed for the next line's.
    for n, line in _lines(raw):
        where = f"{path} line {n}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if bytes(line).strip():  # a blank line is no trace
                _skip(corpus, f"{where}: not valid JSON ({exc})")
            continue
        _add(corpus, where, f"{stem}:{n}", obj, strict=False)


def _one_document(raw: bytes) -> Any:
    """The file as one JSON value; None where it is none (JSON Lines). Where its first line is a whole value
    and more than whitespace follows, it cannot be one: said without parsing the file whole (~80 ms for 63
    MB, most of it passing over the rest)."""
    first_end = _LINE_END.search(raw)
    if first_end and _NOT_JSON_SPACE.search(raw, first_end.start()):
        try:
            orjson.loads(memoryview(raw)[:first_end.start()])
            return None
        except orjson.JSONDecodeError:
            pass
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _lines(raw: bytes) -> Iterator[tuple[int, bytes | memoryview]]:
    """``raw``'s lines, numbered from 1 as ``raw.splitlines()`` would number them, each a view, not a copy."""
    if b"\r" in raw:  # a line may end in \r too: splitlines' own rules (and copies)
        yield from enumerate(raw.splitlines(), start=1)
        return
    view = memoryview(raw)
    start, n = 0, 1
    while start < len(raw):
        end = raw.find(b"\n", start)
        end = len(raw) if end < 0 else end
        yield n, view[start:end]
        start, n = end + 1, n + 1


def _add(corpus: Corpus, where: str, default_name: str, obj: Any, strict: bool) -> None:
    try:
        corpus.traces.append(_trace(obj, default_name, corpus))
    except _Defect as exc:
        if strict:
            raise DatasetError(f"{where}: {exc}") from None
        _skip(corpus, f"{where}: {exc}")


def _skip(corpus: Corpus, defect: str) -> None:
    corpus.skipped += 1
    corpus.first_defect = corpus.first_defect or defect


def _trace(obj: Any, default_name: str, corpus: Corpus) -> WekaTrace:
    if not isinstance(obj, dict):
        raise _Defect(f"expected a trace object, found {_type_name(obj)}")
    block = obj.get("block_size")
    if type(block) is not int or block < 1:
        raise _Defect(f"block_size: must be an integer >= 1 (tokens per hash id), got {block!r}")
    scope = obj.get("hash_id_scope", "local")
    if scope not in ("local", "global"):
        raise _Defect(f"hash_id_scope: must be \"local\" or \"global\", got {scope!r}")
    requests = obj.get("requests")
    if not isinstance(requests, list) or not requests:
        raise _Defect("requests: must be a non-empty list of calls and subagent markers")
    name = obj.get("id")
    agents: list[Agent] = []
    counts = [0, 0]  # dropped subagents, relative subagents
    _agent(requests, "requests", str(name) if isinstance(name, (str, int)) else default_name, ROOT, -1, -1, -1, 0.0,
           agents, counts)
    if not agents[0].calls:
        raise _Defect("requests: the root agent makes no call (only subagent markers)")
    corpus.relative_subagents += counts[1]
    return WekaTrace(agents[0].name, block, scope == "global", agents, counts[0])


def _agent(items: list[Any], where: str, name: str, role: int, parent: int, spawn: int, join: int, offset: float,
           agents: list[Agent], counts: list[int]) -> None:
    """Read one agent's list (its calls, and its subagents' markers, recursively) into ``agents``."""
    index = len(agents)
    empty = np.empty(0)
    agents.append(Agent(name, role, parent, spawn, join, empty, empty, empty, empty, empty, empty, empty,
                        np.empty(0, bool)))
    columns = _columns_at_once(items, where, offset) or _columns_checked(items, where, offset)
    agent = agents[index]
    agent.starts, agent.ends, agent.think, inputs, outputs, hashes, at_call, tool, markers = columns
    agent.inputs, agent.outputs = np.array(inputs, dtype=np.int64), np.array(outputs, dtype=np.int64)
    agent.ids_end = np.cumsum(np.fromiter(map(len, hashes), np.int64, len(hashes)))
    agent.hash_ids = _packed_ids(hashes, at_call, items, where, offset)
    agent.tool_result = np.array(tool, dtype=bool)
    for before, at, marker in markers:
        inner = marker.get("requests")
        if not isinstance(inner, list):
            raise _Defect(f"{at}.requests: a subagent marker must hold its calls as a list")
        if before == 0:  # nothing spawned it
            counts[0] += 1
            continue
        background = before == len(inputs) or marker.get("status") == "async_launched"
        t = _number(marker, "t", at) + offset
        first = next((c for c in inner if isinstance(c, dict) and c.get("type") in _CALL_TYPES), None)
        relative = first is not None and isinstance(first.get("t"), (int, float)) and first["t"] < t
        counts[1] += relative
        sub_name = marker.get("agent_id")
        _agent(inner, f"{at}.requests", f"{agent.name}/{sub_name if isinstance(sub_name, str) else len(agents)}",
               BACKGROUND if background else JOINED, index, before - 1, -1 if background else before,
               t if relative else offset, agents, counts)


def _columns_checked(items: list[Any], where: str, offset: float) -> _Columns:
    """An agent's calls read one by one, each field checked: the first defect raised, naming its field."""
    starts: list[float] = []
    ends: list[float] = []
    think: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    hashes: list[list[int]] = []
    at_call: list[int] = []  # each call's index in ``items``, to name one whose ids are out of range
    tool: list[bool] = []
    markers: list[tuple[int, str, dict[str, Any]]] = []  # (calls before it, where, marker)
    last_stop = ""
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise _Defect(f"{at}: expected an object, found {_type_name(item)}")
        kind = item.get("type")
        t = _number(item, "t", at)
        if kind == "subagent":
            markers.append((len(inputs), at, item))
            continue
        if kind not in _CALL_TYPES:
            raise _Defect(f"{at}.type: must be \"n\", \"s\" or \"subagent\", got {kind!r}")
        t += offset
        if starts and t < starts[-1]:
            raise _Defect(f"{at}.t: {t - offset:g} is earlier than the call before's ({starts[-1] - offset:g}); an "
                          "agent's calls must be in time order")
        n_in, n_out = _count(item, "in", at, 1), _count(item, "out", at, 0)
        ids = item.get("hash_ids", [])
        if type(ids) is not list or not set(map(type, ids)) <= _INT:  # one C-level pass; the range is numpy's
            raise _Defect(f"{at}.hash_ids: must be a list of integers >= 0, got {str(ids)[:60]}")
        api = _optional(item, "api_time", at)
        types = item.get("input_types", [])
        stop = item.get("stop", "")
        starts.append(t)
        ends.append(t + api)  # NaN stays NaN
        think.append(_optional(item, "think_time", at))
        inputs.append(n_in)
        outputs.append(n_out)
        hashes.append(ids)
        at_call.append(i)
        tool.append(bool(inputs[:-1]) and ((isinstance(types, list) and "tool_result" in types)
                                           or last_stop == "tool_use"))
        last_stop = stop if isinstance(stop, str) else ""
    return (np.array(starts, dtype=np.float64), np.array(ends, dtype=np.float64), np.array(think, dtype=np.float64),
            inputs, outputs, hashes, at_call, tool, markers)


def _columns_at_once(items: list[Any], where: str, offset: float) -> _Columns | None:
    """An agent's calls read a field at a time, each column checked in one pass (a trace holds tens of thousands
    of calls); None where any check fails, for ``_columns_checked`` to name the defect. The hash ids' values
    are checked as they are packed (``_packed_ids``)."""
    if not set(map(type, items)) <= _DICT:
        return None
    kinds = _column(items, "type")
    if not set(map(type, kinds)) <= _STR or not set(kinds) <= _KINDS:  # a list or an object has no hash
        return None
    calls, at_call, markers = _calls_and_markers(items, kinds, where)
    if not calls:
        return _NO_CALL, _NO_CALL, _NO_CALL, [], [], [], [], [], markers
    try:  # every field there, as captures write them: one pass
        stamps, inputs, outputs, api, think, hashes, stops, input_types = zip(*map(_FIELDS, calls))
    except KeyError:  # some left out: each read with its default
        stamps, inputs, outputs, api, think, hashes, stops, input_types = (
            tuple(_column(calls, key, [] if key == "hash_ids" else None)) for key in _FIELD_NAMES)
    if not (set(map(type, stamps)) <= _NUMBER and set(map(type, inputs + outputs)) == _INT
            and set(map(type, hashes)) == _LIST and set(map(type, api + think)) <= _MAYBE_NUMBER
            and min(inputs) >= 1 and min(outputs) >= 0 and max(inputs) < 1 << 40 and max(outputs) < 1 << 40):
        return None
    numbers = np.array((stamps, api, think), dtype=np.float64)  # None -> NaN
    t, api_s, think_s = numbers
    t += offset
    times = numbers[1:]  # NaN where none, which fmin and fmax pass over
    if not (t[0] >= offset and t[-1] < math.inf and (t[1:] >= t[:-1]).all()
            and not np.fmin.reduce(times, axis=None) < 0 and not np.fmax.reduce(times, axis=None) == math.inf):
        return None
    if set(map(type, input_types)) <= _LIST:
        after_tool = list(map(operator.contains, input_types, itertools.repeat("tool_result")))
    else:
        after_tool = [type(kinds_in) is list and "tool_result" in kinds_in for kinds_in in input_types]
    # a call's new input is a tool's result if it says so or the call before stopped for a tool
    tool = [False, *map(operator.or_, after_tool[1:], map(operator.eq, stops, itertools.repeat("tool_use")))]
    return t, t + api_s, think_s, inputs, outputs, hashes, at_call, tool, markers


def _calls_and_markers(items: list[Any], kinds: list[Any],
                       where: str) -> tuple[list[Any], Sequence[int], list[tuple[int, str, dict[str, Any]]]]:
    """An agent's calls, each one's index in ``items``, and its markers (calls before each, where, the marker)."""
    marks: list[int] = []
    try:
        while True:
            marks.append(kinds.index("subagent", marks[-1] + 1 if marks else 0))
    except ValueError:
        pass
    if not marks:
        return items, range(len(items)), []
    calls: list[Any] = []
    at_call: list[int] = []
    markers = []
    for start, end in zip([-1, *marks], [*marks, len(items)]):
        calls += items[start + 1:end]
        at_call += range(start + 1, end)
        if end < len(items):
            markers.append((len(calls), f"{where}[{end}]", items[end]))
    return calls, at_call, markers


def _column(items: list[dict[str, Any]], key: str, default: Any = None) -> list[Any]:
    return list(map(dict.get, items, itertools.repeat(key), itertools.repeat(default)))


def _packed_ids(hashes: Sequence[list[int]], at_call: Sequence[int], items: list[Any], where: str,
                offset: float) -> np.ndarray:
    """An agent's calls' hash ids, one after another, as int64. struct packs them in one pass (a third of
    numpy's or array's time per id) and refuses any value not an int in range but a bool: only where an id
    is 0 or 1 can it be a bool, or, with any negative, a defect."""
    flat: list[Any] = []
    for ids in hashes:
        flat += ids
    packed = np.empty(len(flat), np.int64)
    try:
        struct.pack_into(f"{len(flat)}q", packed.data, 0, *flat)
    except struct.error:
        raise _ids_defect(hashes, at_call, items, where, offset) from None
    low = np.flatnonzero(packed <= 1).tolist()
    if low and (packed[low].min() < 0 or not set(map(type, map(flat.__getitem__, low))) <= _INT):
        raise _ids_defect(hashes, at_call, items, where, offset)
    return packed


def _ids_defect(hashes: Sequence[list[int]], at_call: Sequence[int], items: list[Any], where: str,
                offset: float) -> _Defect:
    """The first defect in an agent's hash ids, as the checks call by call name it: a value not an integer (or
    any defect before it), else the first call with an id out of range."""
    if not set(map(type, itertools.chain.from_iterable(hashes))) <= _INT:
        try:
            _columns_checked(items, where, offset)
        except _Defect as defect:
            return defect
    bad = next(k for k, ids in enumerate(hashes) if ids and not (0 <= min(ids) and max(ids) < 1 << 63))
    return _Defect(f"{where}[{at_call[bad]}].hash_ids: must be a list of integers >= 0, got {str(hashes[bad])[:60]}")


def _number(item: dict[str, Any], key: str, at: str) -> float:
    value: Any = item.get(key)
    if not (type(value) in (int, float) and math.isfinite(value) and value >= 0):
        raise _Defect(f"{at}.{key}: must be a number >= 0 (seconds), got {value!r}")
    return float(value)


def _optional(item: dict[str, Any], key: str, at: str) -> float:
    if item.get(key) is None:
        return math.nan
    return _number(item, key, at)


def _count(item: dict[str, Any], key: str, at: str, least: int) -> int:
    value = item.get(key)
    if type(value) is not int or value < least or value >= 1 << 40:
        raise _Defect(f"{at}.{key}: must be an integer >= {least} (tokens), got {value!r}")
    return value


def _type_name(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__}"
