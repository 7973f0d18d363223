"""OpenAI's Responses API, ``/v1/responses`` (``stream: true``), as vLLM serves it.

Request: ``input`` (the prompt as a text, or a conversation's messages), ``max_output_tokens``, and
``store: false`` as `vllm bench serve` sends (a server that stores every response grows over a long run).
Stream: ``event: <type>`` / ``data: {"type": <type>, ...}``; output arrives in ``response.output_text.delta``
(the answer), ``response.reasoning_text.delta`` and ``response.reasoning_summary_text.delta`` (reasoning),
``response.function_call_arguments.delta`` and its custom-tool and MCP kin (tool calls), each with its text
in a string ``delta``. No chunk carries usage: ``response.completed`` (or ``response.incomplete``, a
response cut at the output limit) ends the stream with ``response.usage``'s ``input_tokens``,
``output_tokens`` and ``input_tokens_details.cached_tokens``. ``error`` and ``response.failed`` are
failures. There is no ``[DONE]``.
"""

from __future__ import annotations

from typing import Any

from fastbench._core import OUT_ANSWER, OUT_END, OUT_ERROR, OUT_REASONING, OUT_TOOL
from fastbench.load.protocols.base import Prompt, Protocol, StreamEvents


def body(model: str, prompt: Prompt, max_tokens: int) -> dict[str, Any]:
    """A Responses body, as vllm bench serve's ``openai-responses`` makes it."""
    return {"model": model, "input": prompt, "max_output_tokens": max_tokens, "stream": True, "store": False}


EVENTS = StreamEvents(
    types={
        "response.output_text.delta": OUT_ANSWER,
        "response.reasoning_text.delta": OUT_REASONING,
        "response.reasoning_summary_text.delta": OUT_REASONING,
        "response.function_call_arguments.delta": OUT_TOOL,
        "response.custom_tool_call_input.delta": OUT_TOOL,
        "response.mcp_call_arguments.delta": OUT_TOOL,
        "response.code_interpreter_call_code.delta": OUT_TOOL,
        "response.completed": OUT_END,
        "response.incomplete": OUT_END,
        "response.failed": OUT_ERROR,
        "error": OUT_ERROR,
    },
    output_key="output_tokens",
    input_keys=("input_tokens",),
    end_event="response.completed",
    usage_holders=("response",),
    details=("input_tokens_details", "cached_tokens"),
)

PROTOCOL = Protocol(endpoint="/v1/responses", backends=("openai-responses",), body=body, events=EVENTS)
