"""Write the seed corpora for fuzz_http_sse into fuzz/seeds/ and for fuzz_trace into fuzz/seeds_trace/ (run once;
the files are committed)."""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def data(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def chunked(body: bytes, n: int) -> bytes:
    out = b""
    for i in range(0, len(body), n):
        piece = body[i : i + n]
        out += b"%x;e=1\r\n" % len(piece) + piece + b"\r\n"
    return out + b"0\r\nX-T: 1\r\n\r\n"


chat = (
    data(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
            "usage": {"prompt_tokens": 12, "total_tokens": 12, "completion_tokens": 0},
        }
    )
    + data({"choices": [{"index": 0, "delta": {"reasoning_content": 'think "q" \\'}}]})
    + data({"choices": [{"index": 0, "text": " hello", "finish_reason": "stop"}], "fb_sent_ns": 123})
    + data({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3,
                                     "prompt_tokens_details": {"cached_tokens": 8}}})
    + b": ping\r\n\r\ndata: a\rdata:b\r\n\r\n"
    + data({"error": {"object": "error", "message": "x", "type": "BadRequestError", "code": 400}})
    + b"data: [DONE]\n\n"
)
# The typed-event APIs' streams (Responses, Anthropic Messages) as vLLM writes them: an event line, then data.


def typed(kind: str, **fields: object) -> bytes:
    return b"event: " + kind.encode() + b"\n" + data({"type": kind, **fields})


responses = (
    typed("response.created", response={"id": "r", "status": "in_progress", "usage": None, "error": None})
    + typed("response.reasoning_text.delta", item_id="rs", delta="hm")
    + typed("response.output_text.delta", item_id="m", delta='Hel"lo\\', logprobs=[], fb_sent_ns=7)
    + typed("response.function_call_arguments.delta", delta='{"a":')
    + typed("response.completed", response={"usage": {"input_tokens": 9, "output_tokens": 3,
                                                      "input_tokens_details": {"cached_tokens": 2}}})
)
messages = (
    typed("message_start", message={"id": "m", "usage": {"input_tokens": 5, "cache_read_input_tokens": 3,
                                                         "output_tokens": 0}})
    + typed("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "t"})
    + typed("content_block_delta", index=1, delta={"type": "text_delta", "text": "Hi"})
    + typed("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": "{"})
    + typed("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3})
    + typed("error", error={"type": "overloaded_error", "message": "x"})
    + typed("message_stop")
)
head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
seeds = {
    "raw_chunked": b"\x00\x01\x00" + head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(chat, 17),
    "raw_length_pipelined": b"\x00\x07\x01"
    + b"HTTP/1.1 100 Continue\r\n\r\n"
    + head
    + b"Content-Length: %d\r\n\r\n" % len(chat)
    + chat
    + b"HTTP/1.0 204 No Content\r\nConnection: keep-alive\r\n\r\n"
    + head
    + b"\r\n"
    + chat[:50],
    "chunk_framing": b"\x01\x02\x00" + chunked(chat, 5),
    "close_body": b"\x02\x03\x00" + b"\xef\xbb\xbf" + chat,
    "sse_only": b"\x33\x00\x00" + chat.replace(b"\n", b"\r\n"),
    # An empty event ("data" with no colon) before the reader has any buffer: CI's fuzzer found that
    # it reached the event callback as a NULL pointer (undefined arithmetic in a callback's data + len).
    "sse_empty_event_unbuffered": b"\x33\x64\x00" + b"data\r\n\r\n" + chat,
    "responses_chunked": b"\x00\x05\x00" + head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(responses, 23),
    "messages_sse_only": b"\x33\x09\x00" + messages,
}
# Whole JSON answers (embeddings, rerank), kept and scanned once: Content-Length, then chunked, then a stream on
# the same connection; cap_max 1 MiB (byte 0's bits 4-5).
embeddings = json.dumps({"object": "list", "data": [{"index": 0, "object": "embedding", "embedding": [0.5, -1e-3]}],
                         "usage": {"prompt_tokens": 7, "total_tokens": 7}}, separators=(",", ":")).encode()
rerank = json.dumps({"id": "r", "results": [{"index": 0, "relevance_score": 0.5}], "usage": {"total_tokens": 9}},
                    separators=(",", ":")).encode()
json_head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
seeds["raw_whole_json"] = (b"\x30\x05\x00" + json_head + b"Content-Length: %d\r\n\r\n" % len(embeddings) + embeddings
                           + json_head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(rerank, 11)
                           + head + b"Content-Length: %d\r\n\r\n" % len(chat) + chat)
# What a hostile server sends (tests/support/hostile): bytes past a response's Content-Length, which must read as
# a malformed next response whatever the split; long lines with no data field (never stored); a flood of events.
seeds["raw_length_overrun"] = (b"\x00\x0b\x02" + head + b"Content-Length: %d\r\n\r\n" % len(chat) + chat
                               + b"these bytes lie past the response's Content-Length" * 200)
seeds["close_huge_nodata_lines"] = b"\x02\x0d\x01" + (b"x" * 12000 + b"\n") * 2 + b"event" + b"y" * 12000 + b"\n" + chat
seeds["chunked_event_flood"] = (b"\x01\x11\x03" + chunked(
    data({"choices": [{"index": 0, "text": "x", "finish_reason": None}]}) * 300, 4093))
for name, blob in seeds.items():
    (HERE / "seeds" / name).write_bytes(blob)

# fuzz_trace: byte 0 is the block size less one (bits 0-5) and the token width (bit 6: 5 bytes, else 6).
trace = (b'{"timestamp": 0, "input_length": 40, "output_length": 8, "hash_ids": [1, 2, 3]}\n'
         b'{"timestamp": 12.5, "input_length": 100, "output_length": 3, "hash_ids": [1, 2, 4, 5, 6, 7, 8]}\n'
         b'{"timestamp": 1.25e1, "input_length": 5, "output_length": 1, "hash_ids": []}\n')
trace_seeds = {
    "plain": b"\x0f" + trace,
    "crlf_blank_lines_chat_width": b"\x4f" + trace.replace(b"\n", b"\r\n") + b"\r\n  \r\n",
    "keys_shuffled_extra_fields": b"\x03"
    + b'{"hash_ids":[7,7,9],"session":"a-b","meta":{"x":[1,2.5,true,null]},"output_length":2,'
      b'"input_length":9,"timestamp":-3}\n'
    + b'{"timestamp":-3,"output_length":1,"input_length":1,"hash_ids":[9]}',
}
(HERE / "seeds_trace").mkdir(exist_ok=True)
for name, blob in trace_seeds.items():
    (HERE / "seeds_trace" / name).write_bytes(blob)
