"""The ``burstgpt`` dataset: vllm bench serve's (``BurstGPTDataset``): request and response lengths from the
BurstGPT trace's CSV, given locally (``BurstGPT_without_fails_2.csv`` and the like).

The CSV's columns: ``Timestamp, Model, Request tokens, Response tokens, Total tokens, Log Type``. As
vLLM: only rows of Model ``GPT-4`` with more than 0 response tokens are kept (the others are another
model's, or failed), ``--num-prompts`` of them drawn at random (seeded by ``--seed``), and request ``i``'s
prompt is ``Request tokens`` token ids ``(s + i + j)`` running on from ``s + i`` (``s``: the seed modulo the
ids' span, 0 for seed 0), asking for ``Response tokens``
tokens (``--max-tokens`` wins when given). The trace's timestamps are not used (vLLM's meaning):
arrivals follow ``--request-rate``; for a replay at recorded times, see ``timed_trace``.

Where fastbench differs: vLLM draws the rows with pandas (``DataFrame.sample``, with replacement when the
file has fewer), decodes the ids over its tokenizer's vocabulary and takes the decoded text's length as
the row's; fastbench draws with numpy, reuses rows in order when the file runs short, and sends the ids
themselves to ``/v1/completions`` (ids ``1000 + (s + i + j) mod 29000``, counted exactly) or, on the chat
endpoint, common words in the same running order (one word taken as one token). vLLM's prompts start at
id ``i`` whatever the seed, so two runs' request ``i`` share their first tokens and a prefix cache serves
the second; fastbench's start where the seed says (a sweep's cells draw their own). Rows with 0 request
tokens (an empty prompt in vLLM) are skipped and counted in the notes. A row whose numbers do not parse
stops the run, naming the file, the line and the column.

The CSV is read a line at a time and its usable rows kept as two int64 columns (16 bytes a row: the draw
is over all of them); a token-id prompt is serialised at once, so a request costs its body.
"""

from __future__ import annotations

import array
import csv
import io
import math
import os
from typing import Any

import numpy as np
import orjson

from fastbench.config import BenchConfig
from fastbench.exceptions import DatasetError
from fastbench.load.screening import Candidate, JsonPrompt, Prompt
from fastbench.load.sources import Context, open_dataset_file
from fastbench.load.sources.prefixed import TOKEN_ID_HIGH, TOKEN_ID_LOW, WORDS
from fastbench.load.tokens import SOURCE_TOKEN_IDS, SOURCE_WORDS

MODEL = "GPT-4"  # the rows vLLM keeps
_COLUMNS = ("Model", "Request tokens", "Response tokens")


def check(config: BenchConfig) -> None:
    """The CSV parses and has the columns (DatasetError naming the line if not)."""
    if config.dataset_path:
        _load(os.fspath(config.dataset_path))


async def offer(ctx: Context) -> str:
    config, selector = ctx.config, ctx.selector
    path = os.fspath(config.dataset_path or "")
    rows, other_model, failed, empty = _load(path)
    if not len(rows):
        raise DatasetError(f"{path}: no usable row (Model {MODEL}, request and response tokens > 0): "
                           f"{other_model} of another model, {failed} with 0 response tokens, {empty} with 0 "
                           "request tokens")
    rng = np.random.default_rng(config.seed)
    order = rng.permutation(len(rows))
    words = ctx.chat
    skipped = [f"{other_model} rows of another model", f"{failed} with 0 response tokens (failed)"]
    if empty:
        skipped.append(f"{empty} with 0 request tokens")
    ctx.notes.append(
        f"burstgpt: {len(rows)} {MODEL} rows in {path} (skipped {', '.join(skipped)}), drawn in a seeded random "
        "order; the trace's timestamps are not used (vLLM's meaning); "
        + ("chat prompts are common words in a running order, one word taken as one token" if words else
           f"prompts sent as token-id lists, ids {TOKEN_ID_LOW} + (s + i + j) mod {TOKEN_ID_HIGH - TOKEN_ID_LOW}, "
           "s from the seed")
    )
    span = TOKEN_ID_HIGH - TOKEN_ID_LOW
    start = config.seed % (len(WORDS) if words else span)  # where the running prompts start: the seed's
    source = SOURCE_WORDS if words else SOURCE_TOKEN_IDS
    i = 0
    while selector.remaining > 0 and i < len(order):
        batch = []
        for row in order[i:i + max(selector.remaining, 16)]:
            n_in, n_out = (int(n) for n in rows[row])
            prompt: Prompt
            if words:
                prompt = " ".join(WORDS[(start + i + j) % len(WORDS)] for j in range(n_in))
            else:  # the ids' JSON at once (exact-size bytes), not a list of Python ints
                ids = TOKEN_ID_LOW + (start + i + np.arange(n_in)) % span
                prompt = JsonPrompt((bytes(memoryview(orjson.dumps(ids, option=orjson.OPT_SERIALIZE_NUMPY))),), 0)
            batch.append(Candidate(prompt, n_in, config.max_tokens or n_out, source))
            i += 1
        selector.offer(batch)
    return f"burstgpt:{path}"


def _load(path: str) -> tuple[np.ndarray, int, int, int]:
    """The usable rows' (request tokens, response tokens), one row of int64 each; and how many rows were of
    another model, had 0 response tokens, had 0 request tokens."""
    with io.TextIOWrapper(open_dataset_file(path, "burstgpt"), encoding="utf-8-sig", newline="") as text:
        reader = csv.reader(text)
        try:
            return _rows(path, reader)
        except UnicodeDecodeError as exc:
            raise DatasetError(f"{path}: not a UTF-8 CSV file ({exc.reason})") from None


def _rows(path: str, reader: Any) -> tuple[np.ndarray, int, int, int]:
    header = next(reader, None)
    if header is None:
        raise DatasetError(f"{path} is empty; expected BurstGPT's CSV with a header line")
    header = [name.strip() for name in header]
    missing = [name for name in _COLUMNS if name not in header]
    if missing:
        raise DatasetError(f"{path} line 1: no {', '.join(repr(m) for m in missing)} column (the header has "
                           f"{', '.join(header)}); expected BurstGPT's CSV")
    model_at, in_at, out_at = (header.index(name) for name in _COLUMNS)
    rows = array.array("q")  # request and response tokens, a pair a row
    other_model = failed = empty = 0
    for row in reader:
        if not row:
            continue
        lineno = reader.line_num
        if len(row) < len(header):
            raise DatasetError(f"{path} line {lineno}: {len(row)} columns, the header has {len(header)}")
        if row[model_at].strip() != MODEL:
            other_model += 1
            continue
        n_in, n_out = (_count(path, lineno, name, row[at]) for name, at in (("Request tokens", in_at),
                                                                             ("Response tokens", out_at)))
        if n_out <= 0:
            failed += 1
        elif n_in <= 0:
            empty += 1
        else:
            rows.extend((n_in, n_out))
    return np.frombuffer(rows, dtype=np.int64).reshape(-1, 2), other_model, failed, empty


def _count(path: str, lineno: int, column: str, value: str) -> int:
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not (math.isfinite(number) and number == int(number)):
        raise DatasetError(f"{path} line {lineno}: '{column}' must be a whole number, got {value!r}")
    return int(number)
