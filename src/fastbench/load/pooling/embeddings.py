"""The OpenAI embeddings API (``/v1/embeddings``), as vllm bench serve's ``openai-embeddings`` and
``openai-embeddings-chat`` backends send it: ``input`` a string, or a batch of strings
(``--random-batch-size``); the chat form ``messages``, one user message a request. Both ask the server to
truncate what is longer than the model takes (``truncate_prompt_tokens: -1``, vLLM's choice: embedding
models often have short contexts). ``encoding_format`` is the server's default (``float``) unless
``--extra-body`` sets it; ``bytes`` and ``bytes_only`` answer in binary, which is refused before the run."""

from __future__ import annotations

from typing import Any

BINARY_FORMATS = ("bytes", "bytes_only")  # answers that are not one JSON object


def body(model: str, inputs: str | list[str]) -> dict[str, Any]:
    """``input``: the one string, or the batch as a list (a run's last batch too, however short)."""
    return {"model": model, "input": inputs, "truncate_prompt_tokens": -1}


def chat_body(model: str, inputs: str | list[str]) -> dict[str, Any]:
    """The chat form: the input as one user message (vLLM applies the model's chat template)."""
    text = inputs if isinstance(inputs, str) else inputs[0]
    return {"model": model, "messages": [{"role": "user", "content": text}], "truncate_prompt_tokens": -1}
