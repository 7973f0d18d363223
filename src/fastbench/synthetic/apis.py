"""The synthetic server's encoders for the typed-event APIs: OpenAI's Responses (``/v1/responses``) and
Anthropic's Messages (``/v1/messages``), streamed as vLLM 0.32 streams them.

Part of the synthetic server (see ``fastbench.synthetic``); imports nothing from the fastbench client: it
is the yardstick's own writing of these streams, from the APIs' documents and vLLM's serving code, so that
``fastbench validate --endpoint`` proves the client's reading of them (the client's side is
``fastbench.load.protocols`` and the native scanner's tables).

An encoder is made per request. Its events are bytes ``event: <type>\\ndata: {...`` left open before their
closing brace: the generation closes each with its ``fb_sent_ns`` stamp (``generation._TAIL``). ``template``
is a middle chunk's event up to that stamp, with ``%b`` where the text goes (the generation's fast path).
Texts are JSON-escaped already (``SyntheticEngine.text``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

# A text of output tokens a..b, JSON-escaped (SyntheticEngine.text).
TextFn = Callable[[int, int], bytes]


def _event(kind: bytes, fields: bytes) -> bytes:
    """``event: kind`` and its data, left open before the closing brace."""
    return b'event: %b\ndata: {"type":"%b"%b' % (kind, kind, fields)


class ResponsesEncoder:
    """``/v1/responses``: response.created, in_progress, the message item and its text part, one
    ``response.output_text.delta`` per chunk (``response.reasoning_text.delta`` for reasoning tokens), the
    done events (the text's, its part's, its item's: each with the whole text, as vLLM's), and
    ``response.completed`` with the usage (status ``incomplete`` when cut at the limit)."""

    path = "/v1/responses"
    in_text = True  # every chunk past the reasoning can go from the template

    def __init__(self, rid: bytes, model: str, prompt_tokens: int, cached_tokens: int, reasoning_tokens: int) -> None:
        self.rid, self.model = rid, model
        self.prompt_tokens, self.cached_tokens, self.reasoning_tokens = prompt_tokens, cached_tokens, reasoning_tokens
        self.created = int(time.time())
        self.item = b"msg_" + rid

    def _response(self, status: str, output: list[Any], usage: dict[str, Any] | None) -> bytes:
        return orjson.dumps({"id": "resp_" + self.rid.decode(), "object": "response", "created_at": self.created,
                             "model": self.model, "status": status, "output": output, "usage": usage,
                             "error": None})

    def _usage(self, completion: int) -> dict[str, Any]:
        return {"input_tokens": self.prompt_tokens, "input_tokens_details": {"cached_tokens": self.cached_tokens},
                "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": min(
                    self.reasoning_tokens, completion)}, "total_tokens": self.prompt_tokens + completion}

    def _message(self, text: str) -> dict[str, Any]:
        return {"id": self.item.decode(), "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}

    def opening(self) -> list[bytes]:
        item = orjson.dumps({"id": self.item.decode(), "type": "message", "role": "assistant",
                             "status": "in_progress", "content": []})
        return [
            _event(b"response.created", b',"sequence_number":0,"response":' + self._response("in_progress", [], None)),
            _event(b"response.in_progress", b',"sequence_number":1,"response":' + self._response("in_progress", [],
                                                                                                  None)),
            _event(b"response.output_item.added", b',"sequence_number":2,"output_index":0,"item":' + item),
            _event(b"response.content_part.added", b',"sequence_number":3,"item_id":"%b","output_index":0,'
                   b'"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}' % self.item),
        ]

    def template(self) -> bytes:
        return self.delta(b"%b", reasoning=False).replace(b"%", b"%%").replace(b"%%b", b"%b") + b',"fb_sent_ns":'

    def delta(self, text: bytes, reasoning: bool) -> bytes:
        if reasoning:
            return _event(b"response.reasoning_text.delta", b',"item_id":"rs_%b","output_index":0,"content_index":0,'
                          b'"delta":"%b"' % (self.rid, text))
        return _event(b"response.output_text.delta", b',"item_id":"%b","output_index":0,"content_index":0,'
                      b'"delta":"%b","logprobs":[]' % (self.item, text))

    def deltas(self, a: int, b: int, text: TextFn) -> list[bytes]:
        """The events of output tokens a..b: reasoning first, then answer."""
        r = self.reasoning_tokens
        out = []
        if a < r:
            out.append(self.delta(text(a, min(b, r)), reasoning=True))
        if b > r:
            out.append(self.delta(text(max(a, r), b), reasoning=False))
        return out

    def closing(self, completion: int, finish: str, text: TextFn, n_out: int, end: bool) -> list[bytes]:
        answer = text(min(self.reasoning_tokens, n_out), n_out)
        message = self._message(orjson.loads(b'"' + answer + b'"'))
        out = [
            _event(b"response.output_text.done", b',"item_id":"%b","output_index":0,"content_index":0,"text":"%b",'
                   b'"logprobs":[]' % (self.item, answer)),
            _event(b"response.content_part.done", b',"item_id":"%b","output_index":0,"content_index":0,"part":'
                   % self.item + orjson.dumps(message["content"][0])),
            _event(b"response.output_item.done", b',"output_index":0,"item":' + orjson.dumps(message)),
        ]
        if end:
            status = "incomplete" if finish == "length" else "completed"
            out.append(_event(b"response.completed", b',"response":' + self._response(status, [message],
                                                                                        self._usage(completion))))
        return out

    @staticmethod
    def error() -> bytes:
        return _event(b"error", b',"code":"server_error","message":"synthetic fault: error mid-stream","param":null')

    def whole(self, reasoning: str | None, answer: str, completion: int, finish: str) -> dict[str, Any]:
        output = [{"id": "rs_" + self.rid.decode(), "type": "reasoning", "content": [
            {"type": "reasoning_text", "text": reasoning}]}] if reasoning else []
        output.append(self._message(answer))
        return orjson.loads(self._response("incomplete" if finish == "length" else "completed", output,  # type: ignore[no-any-return]
                                           self._usage(completion)))


class MessagesEncoder:
    """``/v1/messages``: message_start with the input's usage, a content block per kind (thinking for the
    reasoning tokens, then text), one ``content_block_delta`` per chunk, ``message_delta`` with the stop
    reason and the output's usage, ``message_stop``."""

    path = "/v1/messages"

    def __init__(self, rid: bytes, model: str, prompt_tokens: int, cached_tokens: int, reasoning_tokens: int) -> None:
        self.rid, self.model = rid, model
        self.prompt_tokens, self.cached_tokens, self.reasoning_tokens = prompt_tokens, cached_tokens, reasoning_tokens
        self.block = b""  # the open block's kind: b"thinking", b"text" or none yet
        self.index = -1
        self.in_text = False  # the text block is open: a chunk can go from the template

    def _usage(self, completion: int) -> dict[str, int]:
        # Anthropic counts the cache's tokens apart from input_tokens (vLLM's _build_anthropic_usage)
        usage = {"input_tokens": self.prompt_tokens - self.cached_tokens, "output_tokens": completion}
        if self.cached_tokens:
            usage["cache_read_input_tokens"] = self.cached_tokens
        return usage

    def opening(self) -> list[bytes]:
        message: dict[str, Any] = {"id": "msg_" + self.rid.decode(), "type": "message", "role": "assistant",
                                   "content": [], "model": self.model, "stop_reason": None, "stop_sequence": None,
                                   "usage": self._usage(0)}
        return [_event(b"message_start", b',"message":' + orjson.dumps(message))]

    def template(self) -> bytes:
        return self._delta(b"text", b"%b").replace(b"%", b"%%").replace(b"%%b", b"%b") + b',"fb_sent_ns":'

    def _delta(self, kind: bytes, text: bytes) -> bytes:
        return _event(b"content_block_delta", b',"index":%d,"delta":{"type":"%b_delta","%b":"%b"}' % (
            self.index, kind, kind, text))

    def _switch(self, kind: bytes) -> list[bytes]:
        """Close the open block and open one of ``kind``."""
        out = [_event(b"content_block_stop", b',"index":%d' % self.index)] if self.block else []
        self.block = kind
        self.index += 1
        self.in_text = kind == b"text"
        out.append(_event(b"content_block_start", b',"index":%d,"content_block":{"type":"%b","%b":""}' % (
            self.index, kind, kind)))
        return out

    def deltas(self, a: int, b: int, text: TextFn) -> list[bytes]:
        r = self.reasoning_tokens
        out: list[bytes] = []
        for kind, lo, hi in ((b"thinking", a, min(b, r)), (b"text", max(a, r), b)):
            if lo < hi:
                if self.block != kind:
                    out += self._switch(kind)
                out.append(self._delta(kind, text(lo, hi)))
        return out

    def closing(self, completion: int, finish: str, text: TextFn, n_out: int, end: bool) -> list[bytes]:
        out = [_event(b"content_block_stop", b',"index":%d' % self.index)] if self.block else []
        stop = b"max_tokens" if finish == "length" else b"end_turn"
        out.append(_event(b"message_delta", b',"delta":{"stop_reason":"%b","stop_sequence":null},"usage":%b' % (
            stop, orjson.dumps(self._usage(completion)))))
        if end:
            out.append(_event(b"message_stop", b""))
        return out

    @staticmethod
    def error() -> bytes:
        return _event(b"error", b',"error":{"type":"api_error","message":"synthetic fault: error mid-stream"}')

    def whole(self, reasoning: str | None, answer: str, completion: int, finish: str) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "thinking", "thinking": reasoning}] if reasoning else []
        content.append({"type": "text", "text": answer})
        return {"id": "msg_" + self.rid.decode(), "type": "message", "role": "assistant", "content": content,
                "model": self.model, "stop_reason": "max_tokens" if finish == "length" else "end_turn",
                "stop_sequence": None, "usage": self._usage(completion)}


Encoder = ResponsesEncoder | MessagesEncoder
ENCODERS: dict[str, type[ResponsesEncoder] | type[MessagesEncoder]] = {
    ResponsesEncoder.path: ResponsesEncoder, MessagesEncoder.path: MessagesEncoder}
