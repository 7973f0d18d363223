"""The synthetic server's APIs answered whole (synthetic.pooling): vLLM 0.32's shapes, usage by its stated rule
(whitespace words; a scored pair query + 1 + document; rerank's total_tokens only), the answer after --pooling-ms,
and the send log of /fb/answers."""

from __future__ import annotations

import time
import urllib.error
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from fastbench.synthetic import SyntheticServer


@pytest.fixture(scope="module")
def srv() -> Iterator[SyntheticServer]:
    with SyntheticServer(pooling_ms=30) as s:
        yield s


def _post(srv: SyntheticServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return orjson.loads(srv.post(path, body))  # type: ignore[no-any-return]


def test_embeddings_one_input_and_a_batch(srv: SyntheticServer) -> None:
    one = _post(srv, "/v1/embeddings", {"model": "m", "input": "the quick brown fox"})
    assert one["object"] == "list" and len(one["data"]) == 1 and one["data"][0]["object"] == "embedding"
    assert one["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    batch = _post(srv, "/v1/embeddings", {"model": "m", "input": ["a b", "c d e", "f"]})
    assert [d["index"] for d in batch["data"]] == [0, 1, 2] and batch["usage"]["prompt_tokens"] == 6
    chat = _post(srv, "/v1/embeddings", {"model": "m", "messages": [{"role": "user", "content": "a b c"}]})
    assert chat["usage"]["prompt_tokens"] == 3 + 4  # the words and the message's overhead, as the chat rule says


def test_pooling_score_and_rerank(srv: SyntheticServer) -> None:
    pooled = _post(srv, "/pooling", {"model": "m", "input": ["a b", "c"]})
    assert [d["object"] for d in pooled["data"]] == ["pooling"] * 2 and pooled["usage"]["prompt_tokens"] == 3
    score = _post(srv, "/score", {"model": "m", "queries": "q w", "documents": ["a", "b c"]})
    assert len(score["data"]) == 2 and score["usage"]["prompt_tokens"] == (2 + 1 + 1) + (2 + 1 + 2)
    for path in ("/rerank", "/v1/rerank"):
        rerank = _post(srv, path, {"model": "m", "query": "q w", "documents": ["a", "b c"]})
        assert rerank["usage"] == {"total_tokens": 9}  # total_tokens alone, as some servers send it
        assert [r["document"]["text"] for r in rerank["results"]] == ["a", "b c"]


def test_the_answer_waits_and_the_send_log_says_when(srv: SyntheticServer) -> None:
    srv.reset_stats()
    t0 = time.monotonic_ns()
    _post(srv, "/v1/embeddings", {"model": "m", "input": "one two", "fb_row": 7})
    t1 = time.monotonic_ns()
    log = orjson.loads(srv.get("/fb/answers"))
    assert log["rows"] == [7] and log["prompt_tokens"] == [2]
    read_ns, sent_ns = log["read_ns"][0], log["sent_ns"][0]
    assert t0 <= read_ns and sent_ns - read_ns >= 30e6 and sent_ns <= t1  # the server's own clock is the client's


@pytest.mark.parametrize("path,body,words", [
    ("/v1/embeddings", {"input": 5}, "input must be a string"),
    ("/v1/embeddings", {"input": "a", "stream": True}, "does not stream"),
    ("/rerank", {"query": "q"}, "documents must be"),
])
def test_bad_requests_are_400(srv: SyntheticServer, path: str, body: dict[str, Any], words: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as err:
        srv.post(path, body)
    assert err.value.code == 400 and words in err.value.read().decode()


def test_no_usage_leaves_it_out() -> None:
    with SyntheticServer("--no-usage", pooling_ms=0) as s:
        answer = _post(s, "/v1/embeddings", {"model": "m", "input": "a b"})
    assert "usage" not in answer and len(answer["data"]) == 1
