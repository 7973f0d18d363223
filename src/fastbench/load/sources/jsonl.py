"""The ``jsonl`` dataset: one JSON object per line, a prompt and its output length.

Each line holds ``"prompt"`` (a string, or a list of token ids) and optionally ``"max_tokens"`` or
``"output_len"``. Blank lines are skipped. Order ``random`` shuffles with ``random.Random(seed)``;
``file`` keeps file order. A token-id prompt goes to the chat endpoint only decoded by ``--tokenizer``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from typing import Any

from fastbench.config import BenchConfig
from fastbench.exceptions import DatasetError
from fastbench.load.screening import Candidate, Prompt
from fastbench.load.sources import Context, json_lines, read_dataset_file
from fastbench.load.tokens import SOURCE_TOKEN_IDS


def check(config: BenchConfig) -> None:
    """Every line parses and has the expected shape (DatasetError if not); without a path, ``offer``
    says so."""
    if config.dataset_path:
        _load_jsonl(os.fspath(config.dataset_path), config.max_tokens)


async def offer(ctx: Context) -> str:
    config, selector, counter, local, chat = ctx.config, ctx.selector, ctx.counter, ctx.local, ctx.chat
    path = os.fspath(config.dataset_path or "")
    lines = await asyncio.to_thread(_load_jsonl, path, config.max_tokens)
    if config.dataset_order == "random":
        random.Random(config.seed).shuffle(lines)
    pos = 0
    while selector.remaining > 0 and pos < len(lines):
        chunk = lines[pos : pos + max(selector.remaining, 16)]
        pos += len(chunk)
        prompts: list[Prompt] = []
        for item in chunk:
            if isinstance(item.prompt, list) and chat:
                if local is None:
                    raise DatasetError(
                        f"{path} line {item.lineno}: a token-id prompt cannot go to a chat endpoint; "
                        "use --endpoint /v1/completions or give --tokenizer to decode it"
                    )
                prompts.append(local.decode(item.prompt))
            else:
                prompts.append(item.prompt)
        texts = [p for p in prompts if isinstance(p, str)]
        text_lens = iter(await counter.count(texts))
        batch = []
        for item, prompt in zip(chunk, prompts):
            if isinstance(prompt, str):
                batch.append(Candidate(prompt, next(text_lens), item.max_tokens, counter.source))
            else:
                batch.append(Candidate(prompt, len(prompt), item.max_tokens, SOURCE_TOKEN_IDS))
        selector.offer(batch)
    return f"jsonl:{path}"


@dataclasses.dataclass
class _JsonlLine:
    lineno: int
    prompt: Prompt
    max_tokens: int


def _load_jsonl(path: str, max_tokens: int | None) -> list[_JsonlLine]:
    raw = read_dataset_file(path, "jsonl")
    lines: list[_JsonlLine] = []
    for lineno, where, obj in json_lines(raw, path, "a JSON object with a 'prompt'"):
        prompt = obj.get("prompt")
        if isinstance(prompt, str):
            if not prompt:
                raise DatasetError(f"{where}: 'prompt' is empty")
        elif isinstance(prompt, list):
            if not prompt or not all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt
            ):
                raise DatasetError(
                    f"{where}: a list 'prompt' must be a non-empty list of token ids (ints >= 0)"
                )
        else:
            raise DatasetError(f"{where}: needs a 'prompt' that is a string or a list of token ids")
        out = obj.get("max_tokens", obj.get("output_len"))
        if out is not None and not _positive_int(out):
            raise DatasetError(f"{where}: 'max_tokens'/'output_len' must be an integer >= 1, got {out!r}")
        if max_tokens is not None:
            out = max_tokens
        elif out is None:
            raise DatasetError(
                f"{where}: no 'max_tokens' or 'output_len'; add one to each line or pass --max-tokens"
            )
        lines.append(_JsonlLine(lineno, prompt, out))
    if not lines:
        raise DatasetError(f"{path} has no prompts (only blank lines)")
    return lines


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
