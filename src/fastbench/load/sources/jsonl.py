"""The ``jsonl`` dataset: one JSON object per line, a prompt and its output length.

Each line holds ``"prompt"`` (a string, or a list of token ids) and optionally ``"max_tokens"`` or
``"output_len"``. Blank lines are skipped. Order ``random`` shuffles with ``random.Random(seed)``;
``file`` keeps file order. A token-id prompt goes to the chat endpoint only decoded by ``--tokenizer``.

The file is read as far as the run draws from it (``lines``): each line is parsed and checked when drawn,
so a defect names its line when the run reaches it, and lines never drawn cost nothing but, in random
order, the scan for where they start.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from typing import Any

from fastbench.config import BenchConfig
from fastbench.exceptions import DatasetError
from fastbench.load.screening import Candidate, Prompt
from fastbench.load.sources import Context
from fastbench.load.sources.lines import JsonLinesFile, drawn_chunks
from fastbench.load.tokens import SOURCE_TOKEN_IDS

_EXPECTED = "a JSON object with a 'prompt'"


def check(config: BenchConfig) -> None:
    """The lines the run will draw first (``num_prompts`` + warm-ups of them) parse and have the expected
    shape (DatasetError if not); without a path, ``offer`` says so."""
    if config.dataset_path:
        with JsonLinesFile(os.fspath(config.dataset_path), "jsonl", expected=_EXPECTED) as file:
            drawn = _lines(file.drawn(config.dataset_order, config.seed), config.max_tokens)
            if not list(itertools.islice(drawn, config.num_prompts + config.num_warmups)):
                raise DatasetError(f"{file.path} has no prompts (only blank lines)")


async def offer(ctx: Context) -> str:
    config, selector, counter, local, chat = ctx.config, ctx.selector, ctx.counter, ctx.local, ctx.chat
    path = os.fspath(config.dataset_path or "")
    with JsonLinesFile(path, "jsonl", expected=_EXPECTED) as file:
        drawn = _lines(file.drawn(config.dataset_order, config.seed), config.max_tokens)
        read = 0
        async for chunk in drawn_chunks(drawn, lambda: selector.remaining):
            read += len(chunk)
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
        if not read:
            raise DatasetError(f"{path} has no prompts (only blank lines)")
    return f"jsonl:{path}"


@dataclasses.dataclass
class _JsonlLine:
    lineno: int
    prompt: Prompt
    max_tokens: int


def _lines(drawn: Iterator[tuple[int, str, dict[str, Any]]], max_tokens: int | None) -> Iterator[_JsonlLine]:
    """Each drawn line's prompt and output length; a DatasetError naming the line for one without them."""
    for lineno, where, obj in drawn:
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
        yield _JsonlLine(lineno, prompt, out)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
