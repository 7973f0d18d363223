"""The synthetic server's APIs answered whole: ``/v1/embeddings``, ``/pooling``, ``/score``, ``/rerank`` and
``/v1/rerank``, each with one JSON body in vLLM 0.32's shape, after ``--pooling-ms`` (default 5).

Part of the synthetic server (see ``fastbench.synthetic``); imports nothing from the fastbench client.

Its usage rule (``prompt_tokens`` = ``total_tokens``): an input's tokens are its whitespace words (the
token model's rule); a chat form's, per message, its words plus ``CHAT_MESSAGE_OVERHEAD``; a scored pair's
(rerank, score) the query's words + 1 separator + the document's, as a cross-encoder reads each pair.
Rerank's usage carries ``total_tokens`` only, as some servers' do, so that a client reading ``prompt_tokens``
alone is caught. Embeddings are 8 floats per input, the same for every input (their values carry nothing).
``--no-usage`` leaves usage out. Each answer to a request tagged ``fb_row`` is logged: when its request was
read and when its answer's bytes went to the socket (CLOCK_MONOTONIC ns), with the tokens counted, for
``/fb/answers``: what ``fastbench validate --backend openai-embeddings`` judges the client's E2E against.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import orjson

from fastbench.synthetic.model import CHAT_MESSAGE_OVERHEAD, count_text_tokens, message_text
from fastbench.synthetic.protocol import error_body

if TYPE_CHECKING:
    from fastbench.synthetic.contracts import Responder, ServerConfig

_MAX_LOGGED = 1_000_000
_EMBEDDING = [0.125, -0.25, 0.5, -1.0, 0.0625, 0.75, -0.375, 1.0]
_now = time.monotonic_ns


class WholeAnswers:
    """The whole-answer routes of one server process, and their send log."""

    def __init__(self, cfg: ServerConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg = cfg
        self.loop = loop
        self.delay_s = cfg.pooling_ms / 1e3
        self.answered = 0
        self.log: dict[int, tuple[int, int, int]] = {}  # fb_row -> (read_ns, sent_ns, prompt_tokens)

    def reset(self) -> None:
        self.log.clear()
        self.answered = 0

    def log_json(self) -> bytes:
        rows = list(self.log)
        return orjson.dumps({"rows": rows, "read_ns": [self.log[r][0] for r in rows],
                             "sent_ns": [self.log[r][1] for r in rows],
                             "prompt_tokens": [self.log[r][2] for r in rows]})

    # -- the routes ---------------------------------------------------------------------------------

    def embeddings(self, conn: Responder, body: bytes, t: int) -> None:
        self._answer(conn, body, t, self._embeddings)

    def pooling(self, conn: Responder, body: bytes, t: int) -> None:
        self._answer(conn, body, t, self._pooling)

    def score(self, conn: Responder, body: bytes, t: int) -> None:
        self._answer(conn, body, t, self._score)

    def rerank(self, conn: Responder, body: bytes, t: int) -> None:
        self._answer(conn, body, t, self._rerank)

    # -- the answers: (body without usage, tokens, whether usage carries prompt_tokens) ---------------

    def _embeddings(self, req: dict[str, Any]) -> tuple[dict[str, Any], int, bool]:
        if "messages" in req:
            messages = req["messages"]
            if not isinstance(messages, list) or not messages:
                raise ValueError("messages must be a non-empty list")
            tokens = sum(CHAT_MESSAGE_OVERHEAD + count_text_tokens(message_text(m.get("content")))
                         for m in messages if isinstance(m, dict))
            inputs = 1
        else:
            texts = _texts(req.get("input"), "input")
            tokens, inputs = sum(count_text_tokens(x) for x in texts), len(texts)
        data = [{"index": i, "object": "embedding", "embedding": _EMBEDDING} for i in range(inputs)]
        answer = {"id": f"embd-{self.answered}", "object": "list", "created": int(time.time()), "data": data}
        return answer, tokens, True

    def _pooling(self, req: dict[str, Any]) -> tuple[dict[str, Any], int, bool]:
        texts = _texts(req.get("input"), "input")
        data = [{"index": i, "object": "pooling", "data": _EMBEDDING} for i in range(len(texts))]
        return ({"id": f"pool-{self.answered}", "object": "list", "created": int(time.time()), "data": data},
                sum(count_text_tokens(x) for x in texts), True)

    def _score(self, req: dict[str, Any]) -> tuple[dict[str, Any], int, bool]:
        query = _texts(req.get("queries", req.get("text_1")), "queries")
        docs = _texts(req.get("documents", req.get("text_2")), "documents")
        data = [{"index": i, "object": "score", "score": 1.0 / (i + 1)} for i in range(len(docs))]
        return ({"id": f"score-{self.answered}", "object": "list", "created": int(time.time()), "data": data},
                _pair_tokens(query[0], docs), True)

    def _rerank(self, req: dict[str, Any]) -> tuple[dict[str, Any], int, bool]:
        query = req.get("query")
        if not isinstance(query, str):
            raise ValueError("query must be a string")
        docs = _texts(req.get("documents"), "documents")
        results = [{"index": i, "document": {"text": d}, "relevance_score": 1.0 / (i + 1)} for i, d in enumerate(docs)]
        return {"id": f"rerank-{self.answered}", "model": req.get("model"), "results": results}, _pair_tokens(
            query, docs), False

    def _answer(self, conn: Responder, body: bytes, t: int, make: Any) -> None:
        try:
            req = orjson.loads(body)
            if not isinstance(req, dict):
                raise TypeError("body must be a JSON object")
            if req.get("stream"):
                raise ValueError("this API does not stream")
            answer, tokens, with_prompt = make(req)
        except (ValueError, TypeError) as e:  # orjson.JSONDecodeError is a ValueError
            conn.respond(400, error_body(400, str(e)))
            return
        answer.setdefault("model", req.get("model") or self.cfg.model)
        if not self.cfg.no_usage:
            answer["usage"] = ({"prompt_tokens": tokens, "total_tokens": tokens} if with_prompt
                               else {"total_tokens": tokens})
        self.answered += 1
        row = req.get("fb_row")
        payload = orjson.dumps(answer)

        def send() -> None:
            if conn.transport is None:
                return
            sent = _now()
            conn.respond(200, payload)
            if type(row) is int and len(self.log) < _MAX_LOGGED:
                self.log[row] = (t, sent, tokens)

        if self.delay_s > 0:
            self.loop.call_at(self.loop.time() + self.delay_s, send)
        else:
            send()


def _texts(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
        return value
    raise ValueError(f"{name} must be a string or a non-empty list of strings")


def _pair_tokens(query: str, docs: list[str]) -> int:
    q = count_text_tokens(query)
    return sum(q + 1 + count_text_tokens(d) for d in docs)
