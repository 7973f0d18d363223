"""Anthropic's Messages API, ``/v1/messages`` (``stream: true``), as vLLM serves it.

Request: ``messages`` (a text prompt is one user message), ``max_tokens`` (required by the API), with the
``anthropic-version`` header and the key in ``x-api-key`` (Anthropic's) as well as ``Authorization``
(vLLM's ``--api-key`` reads only that). Stream: ``event: <type>`` / ``data: {"type": <type>, ...}``;
``message_start`` carries ``message.usage`` (``input_tokens``, and the cache's ``cache_read_input_tokens``
and ``cache_creation_input_tokens``, which Anthropic counts apart from ``input_tokens``: the prompt is their
sum); output arrives in ``content_block_delta`` events whose ``delta`` holds ``text`` (``text_delta``, the
answer), ``thinking`` (``thinking_delta``) or ``partial_json`` (``input_json_delta``, a tool call's input);
``message_delta`` carries the final ``usage.output_tokens``; ``message_stop`` ends the stream; ``error``
is a failure. There is no ``[DONE]``.

`vllm bench serve` 0.32 has no backend for it; fastbench names it ``anthropic-messages``, as agent tools
name the API.
"""

from __future__ import annotations

from typing import Any

from fastbench._core import OUT_ANSWER, OUT_DELTA, OUT_END, OUT_ERROR, OUT_REASONING, OUT_TOOL
from fastbench.load.protocols.base import Prompt, Protocol, StreamEvents

ANTHROPIC_VERSION = "2023-06-01"  # the API version every Messages client sends


def body(model: str, prompt: Prompt, max_tokens: int) -> dict[str, Any]:
    """A Messages body: a text prompt is one user message."""
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    return {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": True}


def headers(api_key: str | None) -> dict[str, str]:
    """The API's version, and the key where Anthropic's clients put it."""
    fields = {"anthropic-version": ANTHROPIC_VERSION}
    if api_key:
        fields["x-api-key"] = api_key
    return fields


EVENTS = StreamEvents(
    types={"content_block_delta": OUT_DELTA, "message_stop": OUT_END, "error": OUT_ERROR},
    delta_keys={"text": OUT_ANSWER, "thinking": OUT_REASONING, "partial_json": OUT_TOOL},
    output_key="output_tokens",
    input_keys=("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"),
    end_event="message_stop",
    usage_holders=("message",),
    cached_key="cache_read_input_tokens",
)

PROTOCOL = Protocol(endpoint="/v1/messages", backends=("anthropic-messages",), body=body, events=EVENTS,
                    headers=headers)
