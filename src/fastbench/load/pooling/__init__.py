"""The workload of the APIs answered whole (embeddings, pooling, score, rerank): each request's inputs and
its body, serialised once, one module per API's body (``embeddings``, ``pooled``, ``scoring``).

As in vllm bench serve, ``--num-prompts`` counts inputs (documents for rerank) and ``--random-batch-size``
of them go in one request, so ``ceil(num_prompts / batch)`` requests are sent; a warm-up sends a batch
too. Inputs come from the run's dataset as text (random common words, one word taken as one token,
unless ``--tokenizer`` decodes random tokens), or from ``random-rerank`` (``sources.random_rerank``).
Nothing is screened against the model's context: the bodies ask the server to truncate, as vLLM's do,
and the input tokens figures count what its usage says it read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError
from fastbench.load.pooling import embeddings, pooled, scoring
from fastbench.load.screening import JsonPrompt, Messages, PartsPrompt, Selector
from fastbench.load.sources import Context, random_rerank
from fastbench.load.tokens import LocalTokenizer, TokenCounter

BodyFn = Callable[[str, "str | list[str]"], dict[str, Any]]
# vllm bench serve's backend -> the body it sends (the endpoint picks score's shape for vllm-rerank)
BODIES: dict[str, BodyFn] = {
    "openai-embeddings": embeddings.body,
    "openai-embeddings-chat": embeddings.chat_body,
    "vllm-pooling": pooled.body,
    "vllm-rerank": scoring.rerank_body,
}


def body_of(config: BenchConfig) -> BodyFn:
    return scoring.score_body if config.endpoint == "/score" else BODIES[config.api]


def check(config: BenchConfig) -> None:
    """What only these APIs refuse: a binary answer, and batches the chat form cannot carry."""
    fmt = config.extra_body.get("encoding_format")
    if fmt in embeddings.BINARY_FORMATS:
        raise ConfigError(f"--extra-body encoding_format {fmt} answers in binary; fastbench reads one JSON answer "
                          "(float or base64)")
    if config.api == "openai-embeddings-chat" and config.random_batch_size != 1:
        raise ConfigError("--backend openai-embeddings-chat sends one message a request; leave out --random-batch-size")


async def build(config: BenchConfig, model: str, counter: TokenCounter, local: LocalTokenizer | None,
                notes: list[str], datasets: dict[str, Any]) -> tuple[list[tuple[bytes, int | None, int]],
                                                                     list[bytes], str, str]:
    """The measured requests (body, input tokens, inputs), the warm-up bodies, the dataset's name and where the
    counts came from. ``datasets``: ``--dataset-name`` -> its functions (load.datasets.DATASETS)."""
    check(config)
    batch = config.random_batch_size
    groups: list[tuple[list[str], int | None, int]]  # a request's inputs, its tokens (None: unknown), its count
    if config.dataset_name == "random-rerank":
        drawn, source = random_rerank.draw(config, local)
        if not drawn:
            raise ConfigError("random-rerank drew no request: --num-prompts must exceed 1 with --no-reranker")
        groups = [(inputs, count, len(inputs) - 1) for inputs, count in drawn]
        warm = [groups[j % len(groups)][0] for j in range(config.num_warmups)]
        name = "random-rerank"
    else:
        selector = Selector(config.num_prompts + config.num_warmups * batch, None, config.extra_body)
        name = await datasets[config.dataset_name].offer(Context(config, True, selector, counter, local, notes))
        texts = [(_text(c.prompt), c.prompt_len) for c in selector.accepted]
        if not texts:
            raise ConfigError(f"{name}: no usable input")
        measured, rest = texts[:config.num_prompts], texts[config.num_prompts:]
        groups = [_group(measured[i:i + batch]) for i in range(0, len(measured), batch)]
        warm = [[t for t, _ in rest[i:i + batch]] for i in range(0, len(rest), batch)] or [
            groups[j % len(groups)][0] for j in range(config.num_warmups)]
        source = " + ".join(selector.sources) or counter.source
    make = body_of(config)

    def payload(inputs: list[str]) -> str | list[str]:  # a string where each request carries one, as vLLM's
        return inputs[0] if batch == 1 and config.api != "vllm-rerank" else inputs

    requests = [(_serialised(make(model, payload(inputs)), config, i), count, n)
                for i, (inputs, count, n) in enumerate(groups)]
    warmups = [_serialised(make(model, payload(inputs)), config, None) for inputs in warm[:config.num_warmups]]
    notes.append(f"{config.endpoint}: {_inputs_text(config)} a request, truncated by the server past the model's "
                 "context (truncate_prompt_tokens -1, as vllm bench serve); input tokens from the server's usage")
    return requests, warmups, name, source


def _group(part: list[tuple[str, int | None]]) -> tuple[list[str], int | None, int]:
    counts = [n for _, n in part]
    return [t for t, _ in part], None if None in counts else sum(n for n in counts if n is not None), len(part)


def _text(prompt: object) -> str:
    if isinstance(prompt, Messages):
        return prompt.text
    if isinstance(prompt, (JsonPrompt, PartsPrompt)):
        value = orjson.loads(prompt.json)
        return value if isinstance(value, str) else " ".join(map(str, value))
    return prompt if isinstance(prompt, str) else " ".join(map(str, prompt))  # type: ignore[call-overload]


def _serialised(body: dict[str, Any], config: BenchConfig, index: int | None) -> bytes:
    if config.request_id_prefix is not None:
        body["request_id"] = f"{config.request_id_prefix}{index if index is not None else 'warmup'}"
    body.update(config.extra_body)  # last: the user's keys win, as vllm bench serve's
    try:
        return orjson.dumps(body)
    except TypeError as exc:
        raise ConfigError(f"extra_body cannot be sent as JSON: {exc}") from None


def _inputs_text(config: BenchConfig) -> str:
    if config.api == "vllm-rerank":
        docs = config.random_batch_size - int(config.no_reranker)
        return f"one query and up to {docs} document{'s' if docs != 1 else ''}"
    n = config.random_batch_size
    return f"{n} input{'s' if n != 1 else ''}" if n != 1 else "one input"
