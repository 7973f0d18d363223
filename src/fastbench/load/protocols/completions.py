"""OpenAI's completions API, ``/v1/completions``: a prompt, streamed chunks with ``choices[].text``, per-chunk
usage asked for (vLLM's ``continuous_usage_stats``), ``data: [DONE]`` at the end. Its events are the
scanner's own grammar."""

from __future__ import annotations

from typing import Any

from fastbench.load.protocols.base import Prompt, Protocol


def body(model: str, prompt: Prompt, max_tokens: int) -> dict[str, Any]:
    """A completions body; a conversation (custom's ``messages``) goes as ``messages``, as vLLM takes it, and
    token ids as the ``prompt``."""
    fields: dict[str, Any] = {"model": model}
    conversation = isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], dict)
    fields["messages" if conversation else "prompt"] = prompt
    fields["max_tokens"] = max_tokens
    fields["stream"] = True
    fields["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return fields


PROTOCOL = Protocol(endpoint="/v1/completions", backends=("openai", "vllm"), body=body, chat_form=False,
                    logprobs="completions")
