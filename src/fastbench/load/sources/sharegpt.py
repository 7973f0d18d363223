"""The ``sharegpt`` dataset: the first human turn of each ShareGPT V3 conversation.

ShareGPT V3 JSON: a list of ``{"id", "conversations": [{"from": "human", "value"}, {"from": "gpt",
"value"}, ...]}``. The prompt is the first human turn; the output length is ``max_tokens`` when set,
else the length of the first gpt reply after it (at least 4). Conversations with fewer than two turns
are dropped first. Order ``random`` then follows vLLM: ``random.Random(seed).shuffle`` and vLLM's
length filter (prompt or reply under 4 tokens, prompt over 1024, prompt + output over 2048; the reply
check is skipped when ``max_tokens`` is set). Order ``file`` takes conversations in file order and
filters nothing more (as the harness behind the seed run cards did).

The file is one JSON array. It is not parsed whole (about four times its size in objects): the scan of
``jsonarray`` finds where each conversation lies, each is parsed once to tell which have two turns (and
dropped), and the conversations drawn are parsed again when sent. It costs the file's bytes and 16 bytes a
conversation while the workload is built. A file the scan cannot read as an array is parsed whole, for
orjson's own message of what is wrong.
"""

from __future__ import annotations

import array
import asyncio
import dataclasses
import os
import random
from typing import Any

import orjson

from fastbench.config import BenchConfig
from fastbench.exceptions import DatasetError
from fastbench.load.screening import Candidate
from fastbench.load.sources import Context, read_dataset_file
from fastbench.load.sources.jsonarray import element_bounds

# vLLM's ShareGPT filter (benchmarks/datasets.py, is_valid_sequence defaults).
_VLLM_MIN_LEN = 4
_VLLM_MAX_PROMPT_LEN = 1024
_VLLM_MAX_TOTAL_LEN = 2048
_MIN_OUTPUT_LEN = 4  # least output length taken from a ShareGPT reply


def check(config: BenchConfig) -> None:
    """The file parses, holds a list and a conversation of two turns (DatasetError if not); without a path,
    ``offer`` says so."""
    if config.dataset_path:
        _conversations(os.fspath(config.dataset_path))


@dataclasses.dataclass
class _Conversations:
    """The file's bytes and where its conversations of two turns or more lie (``raw[starts[i]:ends[i]]``)."""

    raw: bytes
    starts: array.array[int]
    ends: array.array[int]
    entries: int  # the array's elements

    def turns(self, i: int) -> list[Any]:
        entry = orjson.loads(memoryview(self.raw)[self.starts[i]:self.ends[i]])
        return list(entry["conversations"])


def _conversations(path: str) -> _Conversations:
    """What sampling needs of the file (see the module docstring): DatasetError for a file that is not
    ShareGPT's, or holds no conversation of two turns."""
    raw = read_dataset_file(path, "sharegpt")
    bounds = element_bounds(raw)
    if bounds is None:  # not one array to the scan: parsed whole, for orjson's word on what is wrong
        doc = _load_sharegpt(raw, path)
        raw = orjson.dumps(doc)
        bounds = element_bounds(raw)
        assert bounds is not None
    found = _Conversations(raw, array.array("q"), array.array("q"), 0)
    view = memoryview(raw)
    listed = False
    for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        item = view[start + 1:end]
        if found.entries == 0 and end == bounds[-1] and not bytes(item).strip():
            break  # "[]": no element
        found.entries += 1
        try:
            entry = orjson.loads(item)
        except orjson.JSONDecodeError:
            _load_sharegpt(raw, path)  # raises, with orjson's message for the whole file
            raise
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if isinstance(turns, list):
            listed = True
            if len(turns) >= 2:
                found.starts.append(start + 1)
                found.ends.append(end)
    if not found.entries:
        raise DatasetError(f"{path} holds an empty list: no conversations to send")
    if not listed:
        raise DatasetError(
            f"{path} is not a ShareGPT file: no entry has a 'conversations' list "
            "(expected [{'id': ..., 'conversations': [{'from': 'human', 'value': ...}, ...]}, ...])"
        )
    return found


async def offer(ctx: Context) -> str:
    config, selector, counter, notes = ctx.config, ctx.selector, ctx.counter, ctx.notes
    path = os.fspath(config.dataset_path or "")
    found = await asyncio.to_thread(_conversations, path)
    # As vLLM: keep entries with at least two turns, then shuffle with random.Random(seed).
    entries = array.array("q", range(len(found.starts)))
    short = found.entries - len(entries)
    if short:
        notes.append(f"sharegpt: skipped {short} entries without a conversation of at least 2 turns")
    vllm_order = config.dataset_order == "random"
    if vllm_order:
        random.Random(config.seed).shuffle(entries)
    filtered = unpaired = 0
    pos = 0
    while selector.remaining > 0 and pos < len(entries):
        chunk = entries[pos : pos + max(selector.remaining, 16)]
        pos += len(chunk)
        pairs = [p for p in (_human_and_reply(found.turns(i)) for i in chunk) if p is not None]
        unpaired += len(chunk) - len(pairs)
        prompt_lens = await counter.count([p for p, _ in pairs])
        if config.max_tokens is None:
            reply_lens = await counter.count([r for _, r in pairs])
        else:
            reply_lens = [config.max_tokens] * len(pairs)
        batch = []
        for (prompt, _), n_in, n_out in zip(pairs, prompt_lens, reply_lens):
            if vllm_order and not _vllm_valid(n_in, n_out, skip_output_check=config.max_tokens is not None):
                filtered += 1
                continue
            if config.max_tokens is None:
                n_out = max(n_out, _MIN_OUTPUT_LEN)
            batch.append(Candidate(prompt, n_in, n_out, counter.source))
        selector.offer(batch)
    if unpaired:
        notes.append(
            f"sharegpt: skipped {unpaired} conversations without a human turn followed by a gpt reply"
        )
    if filtered:
        notes.append(
            f"sharegpt: filtered {filtered} conversations as vllm bench serve does (prompt or reply under "
            f"{_VLLM_MIN_LEN} tokens, prompt over {_VLLM_MAX_PROMPT_LEN}, prompt + output over "
            f"{_VLLM_MAX_TOTAL_LEN}; lengths from {counter.source})"
        )
    if config.max_tokens is None:
        notes.append(
            f"sharegpt: max_tokens = length of the first gpt reply ({counter.source}), at least {_MIN_OUTPUT_LEN}"
        )
    order = f"random (vLLM's: random.Random({config.seed}).shuffle)" if vllm_order else "file"
    notes.append(f"sharegpt: order {order}")
    return f"sharegpt:{path}"


def _load_sharegpt(raw: bytes, path: str) -> list[Any]:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DatasetError(
            f"{path} is not valid JSON ({exc}); a file of one JSON object per line needs --dataset-name jsonl"
        ) from None
    if not isinstance(doc, list):
        raise DatasetError(
            f"{path} is not a ShareGPT file: expected a JSON list of {{'conversations': [...]}} objects, "
            f"found a JSON {type(doc).__name__}"
        )
    if not doc:
        raise DatasetError(f"{path} holds an empty list: no conversations to send")
    return doc


def _human_and_reply(turns: list[Any]) -> tuple[str, str] | None:
    """The first human turn and the first gpt turn after it, or None when there is no such pair."""
    prompt: str | None = None
    for turn in turns:
        if not isinstance(turn, dict):
            continue
        who, value = turn.get("from"), turn.get("value")
        if not isinstance(value, str):
            continue
        if prompt is None:
            if who in ("human", "user") and value.strip():
                prompt = value
        elif who in ("gpt", "assistant", "chatgpt", "bard"):
            return prompt, value
    return None


def _vllm_valid(prompt_len: int, output_len: int, *, skip_output_check: bool) -> bool:
    """vLLM's is_valid_sequence with its defaults."""
    return not (
        prompt_len < _VLLM_MIN_LEN
        or (not skip_output_check and output_len < _VLLM_MIN_LEN)
        or prompt_len > _VLLM_MAX_PROMPT_LEN
        or prompt_len + output_len > _VLLM_MAX_TOTAL_LEN
    )
