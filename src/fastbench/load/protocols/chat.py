"""OpenAI's chat completions API, ``/v1/chat/completions``: messages, streamed chunks with
``choices[].delta`` (``content``, ``reasoning``/``reasoning_content``, ``tool_calls``), per-chunk usage asked
for, ``data: [DONE]`` at the end. Its events are the scanner's own grammar."""

from __future__ import annotations

from typing import Any

from fastbench.load.protocols.base import Prompt, Protocol


def body(model: str, prompt: Prompt, max_tokens: int) -> dict[str, Any]:
    """A chat body: a text prompt is one user message."""
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    return {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


PROTOCOL = Protocol(endpoint="/v1/chat/completions", backends=("openai-chat",), body=body, logprobs="chat")
