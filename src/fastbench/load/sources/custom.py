"""vllm bench serve's ``custom`` and ``spec_bench`` datasets (``CustomDataset``, ``SpecBench``), same flags.

``custom``: a JSONL file, one request per line: ``{"prompt": "What is the capital of India?",
"output_tokens": 10}``, or ``{"messages": [{"role": "system", "content": ...}, {"role": "user",
"content": ...}], "output_tokens": 10}`` for a whole conversation (chat endpoint only). Each request asks
for ``--custom-output-len`` tokens (default 256); with ``--custom-output-len -1`` every line's
``output_tokens`` (then required); ``--max-tokens`` wins over both.

``spec_bench``: Spec-Bench's ``question.jsonl`` (``{"question_id", "category", "turns": [...]}``), given
locally: each question's first turn is the prompt, ``--spec-bench-category`` keeps one category's,
each asks for ``--spec-bench-output-len`` tokens (default 256).

Both are shuffled with ``random.Random(--seed)`` unless ``--disable-shuffle`` (``--dataset-order file``),
and reused in order when the run needs more (vLLM oversamples at random). Blank lines are skipped; a
line that is not JSON or lacks its field stops the run, naming the file, the line and the field.

Where fastbench differs: vLLM reads the file with pandas (a missing ``prompt`` column is found only
for the whole file) and, with a tokenizer, applies the model's chat template to the prompt on the
client before sending it to /v1/completions (``--skip-chat-template`` to not); fastbench sends the prompt
as it is and leaves templates to the server's chat endpoint. Without a tokenizer vLLM asks for one
output token and counts the prompt as one token; fastbench counts the prompt (``--tokenizer``, the
server's /tokenize, or an estimate) and asks for the output length given. vLLM 0.32's ``custom`` takes
``prompt`` only; ``messages`` is fastbench's, for conversations sent whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from typing import Any

import orjson

from fastbench.config import BenchConfig
from fastbench.datasetoptions import CustomOptions, SpecBenchOptions
from fastbench.exceptions import DatasetError
from fastbench.load.screening import Candidate, Messages
from fastbench.load.sources import Context, json_lines, read_dataset_file

_ROLES = ("system", "user", "assistant", "developer", "tool")


@dataclasses.dataclass
class _Line:
    lineno: int
    prompt: str | Messages
    text: str  # what is counted: the prompt, or the messages' contents joined
    output_tokens: int


def check(config: BenchConfig) -> None:
    """Every line parses and has its field (DatasetError naming the line if not)."""
    if config.dataset_path:
        _load(config)


async def offer(ctx: Context) -> str:
    config, selector, counter = ctx.config, ctx.selector, ctx.counter
    path = os.fspath(config.dataset_path or "")
    lines = await asyncio.to_thread(_load, config)
    if any(isinstance(line.prompt, Messages) for line in lines) and not ctx.chat:
        first = next(line for line in lines if isinstance(line.prompt, Messages))
        raise DatasetError(f"{path} line {first.lineno}: 'messages' go to the chat endpoint only; give --endpoint "
                           "/v1/chat/completions (the server applies its chat template)")
    if config.dataset_order == "random":
        random.Random(config.seed).shuffle(lines)
    name = config.dataset_name
    output = _output_option(config)
    ctx.notes.append(
        f"{name}: {len(lines)} prompts in {path}"
        + ("" if config.dataset_order == "file" else f", shuffled (--seed {config.seed})")
        + (f", each asking for {output} tokens" if output != -1 else ", each asking for its line's output_tokens")
        + ("" if config.max_tokens is None else f" (--max-tokens {config.max_tokens} wins)")
        + "; prompts sent as written, templates left to the server (vLLM applies the chat template on the client)"
    )
    pos = 0
    while selector.remaining > 0 and pos < len(lines):
        chunk = lines[pos:pos + max(selector.remaining, 16)]
        pos += len(chunk)
        counts = await counter.count([line.text for line in chunk])
        selector.offer([Candidate(line.prompt, n, line.output_tokens, counter.source)
                        for line, n in zip(chunk, counts)])
    return f"{name}:{path}"


def _output_option(config: BenchConfig) -> int:
    if config.dataset_name == "spec_bench":
        return config.options(SpecBenchOptions).output_len
    return config.options(CustomOptions).output_len


def _load(config: BenchConfig) -> list[_Line]:
    path = os.fspath(config.dataset_path or "")
    name = config.dataset_name
    raw = read_dataset_file(path, name)
    fixed = config.max_tokens if config.max_tokens is not None else _output_option(config)
    category = config.options(SpecBenchOptions).category
    lines: list[_Line] = []
    categories: set[str] = set()
    for lineno, where, obj in json_lines(raw, path):
        if name == "spec_bench":
            categories.add(str(obj.get("category")))
            if category is not None and obj.get("category") != category:
                continue
            prompt: str | Messages = _first_turn(obj, where)
        else:
            prompt = _prompt(obj, where)
        if fixed == -1:
            out = obj.get("output_tokens")
            if out is None:
                raise DatasetError(f"{where}: no 'output_tokens' field; add one to each line, or give "
                                   "--custom-output-len N (or --max-tokens N)")
            if not (isinstance(out, int) and not isinstance(out, bool) and out >= 1):
                raise DatasetError(f"{where}: 'output_tokens' must be an integer >= 1, got {out!r}")
        else:
            out = fixed
        text = prompt if isinstance(prompt, str) else prompt.text
        lines.append(_Line(lineno, prompt, text, out))
    if not lines:
        if category is not None:
            raise DatasetError(f"{path}: no question of --spec-bench-category {category!r}; the file has "
                               f"{', '.join(sorted(categories)) or 'none'}")
        raise DatasetError(f"{path} has no prompts (only blank lines)")
    return lines


def _prompt(obj: dict[str, Any], where: str) -> str | Messages:
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if prompt is not None and messages is not None:
        raise DatasetError(f"{where}: has both 'prompt' and 'messages'; give one")
    if isinstance(prompt, str) and prompt:
        return prompt
    if prompt is not None:
        raise DatasetError(f"{where}: 'prompt' must be a non-empty string, got {str(prompt)[:60]!r}")
    if messages is None:
        raise DatasetError(f"{where}: needs a 'prompt' (a string) or 'messages' (a list of {{role, content}})")
    if not isinstance(messages, list) or not messages:
        raise DatasetError(f"{where}: 'messages' must be a non-empty list of {{role, content}} objects")
    for i, message in enumerate(messages):
        if not (isinstance(message, dict) and message.get("role") in _ROLES
                and isinstance(message.get("content"), str)):
            raise DatasetError(f"{where}: 'messages'[{i}] must be {{\"role\": one of {', '.join(_ROLES)}, "
                               f"\"content\": a string}}, got {str(message)[:60]}")
    text = "\n".join(message["content"] for message in messages)
    return Messages(orjson.dumps(messages), text)


def _first_turn(obj: dict[str, Any], where: str) -> str:
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0]:
        raise DatasetError(f"{where}: 'turns' must be a list whose first item is the question (a string), got "
                           f"{str(turns)[:60]}")
    return turns[0]

