"""vLLM's scoring APIs (the ``vllm-rerank`` backend): one query and its documents a request, drawn by the
``random-rerank`` dataset. ``/rerank`` and ``/v1/rerank`` (Jina and Cohere's shape) take ``query`` and
``documents``; ``/score`` takes ``queries`` and ``documents``. The server truncates past the model's context
(``truncate_prompt_tokens: -1``), as vllm bench serve asks."""

from __future__ import annotations

from typing import Any


def rerank_body(model: str, inputs: str | list[str]) -> dict[str, Any]:
    """``inputs``: the query first, then the documents."""
    return {"model": model, "query": inputs[0], "documents": list(inputs[1:]), "truncate_prompt_tokens": -1}


def score_body(model: str, inputs: str | list[str]) -> dict[str, Any]:
    return {"model": model, "queries": inputs[0], "documents": list(inputs[1:]), "truncate_prompt_tokens": -1}
