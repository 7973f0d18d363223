"""The workload of the APIs answered whole (load.pooling): each API's body in vLLM's shape, --random-batch-size
inputs a request with --num-prompts counting inputs, and random-rerank drawn as vLLM's RandomDatasetForReranking
draws it."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from fastbench.checks import check_config
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError
from fastbench.load.datasets import build_workload_sync, prompt_seed


def _work(**kw: Any) -> tuple[list[dict[str, Any]], list[int | None], list[int], Any]:
    config = BenchConfig(**kw)
    work = build_workload_sync(config, "m", max_model_len=None)
    bodies = [orjson.loads(bytes(spec.body)) for spec in work.requests]
    return bodies, [spec.prompt_len for spec in work.requests], work.inputs_per_request or [], work


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_embeddings_batch_inputs_and_count_each_word(batch: int) -> None:
    bodies, lens, inputs, work = _work(endpoint="/v1/embeddings", num_prompts=10, random_batch_size=batch,
                                       random_input_len=6, random_range_ratio=0.5, num_warmups=2)
    assert len(bodies) == math.ceil(10 / batch) and sum(inputs) == 10
    for body, n, k in zip(bodies, lens, inputs):
        assert set(body) == {"model", "input", "truncate_prompt_tokens"} and body["truncate_prompt_tokens"] == -1
        texts = [body["input"]] if batch == 1 else body["input"]
        assert isinstance(body["input"], str if batch == 1 else list) and len(texts) == k
        assert n == sum(len(t.split()) for t in texts)  # one word taken as one token, stated in the source
    assert work.input_length_source == "estimate (words)"
    assert len(work.warmups) == 2 and all(b'"input"' in bytes(w.body) for w in work.warmups)
    assert any("truncate_prompt_tokens -1" in note for note in work.notes)


def test_the_chat_form_and_pooling_bodies() -> None:
    chat, lens, _, _ = _work(endpoint="/v1/embeddings", backend="openai-embeddings-chat", num_prompts=3,
                             random_input_len=5)
    assert [set(b) for b in chat] == [{"model", "messages", "truncate_prompt_tokens"}] * 3
    assert chat[0]["messages"][0]["role"] == "user" and len(chat[0]["messages"][0]["content"].split()) == lens[0]
    pooled, _, inputs, _ = _work(endpoint="/pooling", num_prompts=4, random_batch_size=2, random_input_len=5)
    assert [len(b["input"]) for b in pooled] == inputs == [2, 2]


@pytest.mark.parametrize("reranker", [True, False])
def test_random_rerank_draws_as_vllm(reranker: bool) -> None:
    """One query for the run; documents in batches; each request counted as vLLM counts it."""
    kw: dict[str, Any] = dict(endpoint="/rerank", dataset_name="random-rerank", num_prompts=11, random_batch_size=4,
                              random_input_len=20, random_range_ratio=0.25, no_reranker=not reranker, seed=3)
    bodies, lens, inputs, work = _work(**kw)
    docs = 11 if reranker else 10
    per = 4 if reranker else 3
    assert sum(inputs) == docs and len(bodies) == math.ceil(docs / per)
    queries = {b["query"] for b in bodies}
    assert len(queries) == 1
    q = len(queries.pop().split())
    low, high = (math.floor(9 * 0.75), math.ceil(9 * 1.25)) if reranker else (15, 25)
    assert low <= q <= high
    for body, n in zip(bodies, lens):
        words = [len(d.split()) for d in body["documents"]]
        assert n == ((q + 1) * len(words) + sum(words) if reranker else q + sum(words))
    again, _, _, _ = _work(**kw)
    other, _, _, _ = _work(**(kw | {"seed": 4}))
    assert again == bodies and other != bodies  # seeded: a sweep's cell seed draws its own
    assert prompt_seed(BenchConfig(**kw))["varies_prompts"]
    score, _, _, _ = _work(**(kw | {"endpoint": "/score", "backend": "vllm-rerank"}))
    assert set(score[0]) == {"model", "queries", "documents", "truncate_prompt_tokens"}


def test_request_ids_and_extra_body_go_into_the_bodies() -> None:
    bodies, _, _, _ = _work(endpoint="/v1/embeddings", num_prompts=2, request_id_prefix="e-",
                            extra_body={"encoding_format": "base64", "dimensions": 8})
    assert [b["request_id"] for b in bodies] == ["e-0", "e-1"]
    assert all(b["encoding_format"] == "base64" and b["dimensions"] == 8 for b in bodies)


@pytest.mark.parametrize("kw,words", [
    (dict(endpoint="/v1/embeddings", dataset_name="random-rerank"), "random-rerank draws a query"),
    (dict(endpoint="/rerank"), "random-rerank draws a query"),
    (dict(random_batch_size=4), "--random-batch-size sets the inputs"),
    (dict(endpoint="/v1/embeddings", no_reranker=True), "--no-reranker is for --backend vllm-rerank"),
    (dict(endpoint="/v1/embeddings", backend="vllm-pooling"), "--backend vllm-pooling calls /pooling"),
    (dict(endpoint="/v1/completions", backend="openai-embeddings"), "--backend openai-embeddings calls"),
    (dict(endpoint="/v1/embeddings", multi_turn=True), "answers single requests"),
])
def test_options_that_cannot_work_are_one_line(kw: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        check_config(BenchConfig(**kw))


@pytest.mark.parametrize("kw,words", [
    (dict(extra_body={"encoding_format": "bytes"}), "answers in binary"),
    (dict(backend="openai-embeddings-chat", random_batch_size=2), "one message a request"),
])
def test_bodies_that_cannot_be_read_whole_are_refused(kw: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        _work(endpoint="/v1/embeddings", num_prompts=2, **kw)


def test_rerank_on_its_other_endpoints_is_accepted() -> None:
    for endpoint in ("/rerank", "/v1/rerank", "/score"):
        check_config(BenchConfig(endpoint=endpoint, backend="vllm-rerank", dataset_name="random-rerank"))
    assert BenchConfig(endpoint="/v1/rerank").api == "vllm-rerank" and BenchConfig(endpoint="/pooling").pooling
