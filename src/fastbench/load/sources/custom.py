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
line the run draws that is not JSON or lacks its field stops the run, naming the file, the line and the
field. The file is read as far as the run draws from it (``lines``; ``--spec-bench-category`` parses every
line to find its questions).

Where fastbench differs: vLLM reads the file with pandas (a missing ``prompt`` column is found only
for the whole file) and, with a tokenizer, applies the model's chat template to the prompt on the
client before sending it to /v1/completions (``--skip-chat-template`` to not); fastbench sends the prompt
as it is and leaves templates to the server's chat endpoint. Without a tokenizer vLLM asks for one
output token and counts the prompt as one token; fastbench counts the prompt (``--tokenizer``, the
server's /tokenize, or an estimate) and asks for the output length given. vLLM 0.32's ``custom`` takes
``prompt`` only; ``messages`` is fastbench's, for conversations sent whole.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator
from typing import Any

import orjson

from fastbench.config import BenchConfig
from fastbench.datasetoptions import CustomOptions, SpecBenchOptions
from fastbench.exceptions import DatasetError
from fastbench.load.screening import Candidate, Messages
from fastbench.load.sources import Context
from fastbench.load.sources.lines import JsonLinesFile, drawn_chunks

_ROLES = ("system", "user", "assistant", "developer", "tool")


@dataclasses.dataclass
class _Line:
    lineno: int
    prompt: str | Messages
    text: str  # what is counted: the prompt, or the messages' contents joined
    output_tokens: int


def check(config: BenchConfig) -> None:
    """The lines the run will draw first (``num_prompts`` + warm-ups of them) parse and have their field
    (DatasetError naming the line if not)."""
    if config.dataset_path:
        with _open(config) as file:
            if not list(itertools.islice(_lines(config, file), config.num_prompts + config.num_warmups)):
                _nothing_to_send(config, file)


async def offer(ctx: Context) -> str:
    config, selector, counter = ctx.config, ctx.selector, ctx.counter
    path = os.fspath(config.dataset_path or "")
    name = config.dataset_name
    output = _output_option(config)
    with _open(config) as file:
        drawn = _lines(config, file)
        shuffled = config.dataset_order == "random"
        read = 0
        async for chunk in drawn_chunks(drawn, lambda: selector.remaining):
            read += len(chunk)
            conversation = next((line for line in chunk if isinstance(line.prompt, Messages)), None)
            if conversation is not None and not ctx.chat:
                raise DatasetError(f"{path} line {conversation.lineno}: 'messages' go to the chat endpoint only; "
                                   "give --endpoint /v1/chat/completions (the server applies its chat template)")
            counts = await counter.count([line.text for line in chunk])
            selector.offer([Candidate(line.prompt, n, line.output_tokens, counter.source)
                            for line, n in zip(chunk, counts)])
        if not read:
            _nothing_to_send(config, file)
        found = f"{file.count()} prompts in {path}, shuffled (--seed {config.seed})" if shuffled else \
            f"{read} prompts read from {path} in file order"
    ctx.notes.append(
        f"{name}: {found}"
        + (f", each asking for {output} tokens" if output != -1 else ", each asking for its line's output_tokens")
        + ("" if config.max_tokens is None else f" (--max-tokens {config.max_tokens} wins)")
        + "; prompts sent as written, templates left to the server (vLLM applies the chat template on the client)"
    )
    return f"{name}:{path}"


def _output_option(config: BenchConfig) -> int:
    if config.dataset_name == "spec_bench":
        return config.options(SpecBenchOptions).output_len
    return config.options(CustomOptions).output_len


def _open(config: BenchConfig) -> JsonLinesFile:
    category = config.options(SpecBenchOptions).category
    keep = None
    if config.dataset_name == "spec_bench" and category is not None:
        def keep(obj: dict[str, Any]) -> bool:
            return bool(obj.get("category") == category)
    return JsonLinesFile(os.fspath(config.dataset_path or ""), config.dataset_name, keep=keep)


def _nothing_to_send(config: BenchConfig, file: JsonLinesFile) -> None:
    category = config.options(SpecBenchOptions).category
    if config.dataset_name == "spec_bench" and category is not None:
        file.keep = None
        categories = {str(obj.get("category")) for _, _, obj in file.drawn("file", 0)}
        raise DatasetError(f"{file.path}: no question of --spec-bench-category {category!r}; the file has "
                           f"{', '.join(sorted(categories)) or 'none'}")
    raise DatasetError(f"{file.path} has no prompts (only blank lines)")


def _lines(config: BenchConfig, file: JsonLinesFile) -> Iterator[_Line]:
    """Each line the run draws, its prompt and output length checked (a DatasetError naming the line)."""
    fixed = config.max_tokens if config.max_tokens is not None else _output_option(config)
    for lineno, where, obj in file.drawn(config.dataset_order, config.seed):
        prompt = _first_turn(obj, where) if config.dataset_name == "spec_bench" else _prompt(obj, where)
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
        yield _Line(lineno, prompt, text, out)


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

