"""vLLM's pooling API (``/pooling``, the ``vllm-pooling`` backend): the pooler's raw output for each input,
``input`` a string or a batch of strings, truncated by the server past the model's context
(``truncate_prompt_tokens: -1``), as vllm bench serve sends it."""

from __future__ import annotations

from typing import Any


def body(model: str, inputs: str | list[str]) -> dict[str, Any]:
    """``input``: the one string, or the batch as a list."""
    return {"model": model, "truncate_prompt_tokens": -1, "input": inputs}
