"""The APIs of fastbench.load.protocols: the bodies and headers each sends, and, through the native core against
scripted servers, what each stream's events count for (output, usage, the end), stamped as chat's are; a server
that answers in another protocol than the one asked fails its requests as PROTOCOL, naming what it sent."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest

from support.core_runs import LOOPS, col, drive
from support.scripted import CHUNKED_END, STREAM_HEAD, chat_chunk, chunked, sse
from fastbench import BenchConfig
from fastbench.load import protocols
from fastbench.load.plan import Target
from fastbench.results.records import ErrorClass, UsageSource
from fastbench.results.vllm_keys import vllm_backend

GAP_S = 0.03  # between scripted events whose stamps a test tells apart


@pytest.fixture(params=sorted(LOOPS))
def loop_factory(request: pytest.FixtureRequest) -> Any:
    return LOOPS[request.param]


def typed(kind: str, **fields: Any) -> bytes:
    """One typed event as vLLM writes it: its ``event:`` line, then its data naming the same type."""
    return b"event: " + kind.encode() + b"\n" + sse({"type": kind, **fields})


def responses_stream(deltas: list[tuple[str, str]], usage: dict[str, Any] | None, end: str = "response.completed",
                     gap_s: float = GAP_S) -> list[Any]:
    """A /v1/responses stream: the opening events, one event per (type, delta), the closing ones."""
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "output": [], "usage": None}
    steps: list[Any] = [STREAM_HEAD, chunked(typed("response.created", sequence_number=0, response=response)
                                             + typed("response.in_progress", sequence_number=1, response=response))]
    for i, (kind, text) in enumerate(deltas):
        steps += [gap_s, chunked(typed(kind, item_id="msg_1", output_index=0, content_index=0, delta=text,
                                       logprobs=[], sequence_number=2 + i))]
    done = {**response, "status": "completed",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "the whole text"}]}],
            "usage": usage}
    closing = typed("response.output_text.done", text="the whole text")
    if end:
        closing += typed(end, response=done)
    return [*steps, chunked(closing) + CHUNKED_END]


def messages_stream(deltas: list[tuple[str, str]], input_usage: dict[str, int], output_tokens: int,
                    gap_s: float = GAP_S) -> list[Any]:
    """A /v1/messages stream: message_start with the input's usage, a block per delta kind, message_delta
    with the output's, message_stop."""
    message = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m",
               "stop_reason": None, "usage": {**input_usage, "output_tokens": 0}}
    steps: list[Any] = [STREAM_HEAD, chunked(typed("message_start", message=message))]
    for kind, text in deltas:
        key = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}[kind]
        steps += [gap_s, chunked(typed("content_block_delta", index=0, delta={"type": kind, key: text}))]
    closing = (typed("content_block_stop", index=0)
               + typed("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None},
                       usage={**input_usage, "output_tokens": output_tokens})
               + typed("message_stop"))
    return [*steps, chunked(closing) + CHUNKED_END]


# -- what each API sends ------------------------------------------------------------------------------------

def test_each_endpoint_and_backend_names_one_api() -> None:
    assert set(protocols.PROTOCOLS) == {"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages"}
    assert protocols.BACKENDS == {"openai": "/v1/completions", "vllm": "/v1/completions",
                                  "openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses",
                                  "anthropic-messages": "/v1/messages"}
    for endpoint, protocol in protocols.PROTOCOLS.items():
        # the result's backend key (results/vllm_keys.py, below this room) names the same API
        assert vllm_backend(BenchConfig(endpoint=endpoint)) == protocol.backend  # type: ignore[arg-type]


def test_bodies_as_vllm_bench_serve_sends_them() -> None:
    responses = protocols.by_endpoint("/v1/responses").body("m", "hi", 7)
    assert responses == {"model": "m", "input": "hi", "max_output_tokens": 7, "stream": True, "store": False}
    messages = protocols.by_endpoint("/v1/messages").body("m", "hi", 7)
    assert messages == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 7,
                        "stream": True}
    convo = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert protocols.by_endpoint("/v1/messages").body("m", convo, 3)["messages"] == convo
    assert protocols.by_endpoint("/v1/responses").body("m", convo, 3)["input"] == convo
    chat = protocols.by_endpoint("/v1/chat/completions").body("m", "hi", 7)
    assert list(chat) == ["model", "messages", "max_tokens", "stream", "stream_options"]
    assert protocols.by_endpoint("/v1/completions").body("m", "hi", 7)["prompt"] == "hi"


def test_the_workload_builds_each_apis_bodies() -> None:
    from fastbench.load.datasets import build_workload_sync

    for endpoint, limit in (("/v1/responses", "max_output_tokens"), ("/v1/messages", "max_tokens")):
        config = BenchConfig(endpoint=endpoint, num_prompts=3, random_input_len=4, random_output_len=5,  # type: ignore[arg-type]
                             ignore_eos=True, temperature=0.5, extra_body={"top_k": 3})
        work = build_workload_sync(config, "m", max_model_len=None)
        for spec in work.requests:
            body = orjson.loads(bytes(spec.body))
            assert body[limit] == 5 and body["stream"] is True and "stream_options" not in body
            assert body["ignore_eos"] is True and body["temperature"] == 0.5 and body["top_k"] == 3
            assert isinstance(body["input"] if endpoint == "/v1/responses" else body["messages"][0]["content"], str)


def test_messages_headers_carry_the_key_and_version_and_header_wins() -> None:
    target = Target.parse("http://h:1", "/v1/messages")
    head = protocols.request_head(target, "sk-1", {}, "/v1/messages").decode()
    assert "\r\nanthropic-version: 2023-06-01\r\n" in head and "\r\nx-api-key: sk-1\r\n" in head
    assert "\r\nAuthorization: Bearer sk-1\r\n" in head  # vLLM's --api-key reads this one
    head = protocols.request_head(target, None, {"Anthropic-Version": "2024-01-01"}, "/v1/messages").decode()
    assert "anthropic-version: 2023-06-01" not in head and "Anthropic-Version: 2024-01-01" in head
    assert "x-api-key" not in head
    assert "anthropic" not in protocols.request_head(target, "k", {}, "/v1/responses").decode()


# -- what each stream counts for, through the core ------------------------------------------------------------

def test_a_responses_stream_is_stamped_and_counted_from_its_final_usage(loop_factory: Any) -> None:
    deltas = [("response.reasoning_text.delta", "think"), ("response.output_text.delta", "Hel"),
              ("response.output_text.delta", "lo"), ("response.function_call_arguments.delta", '{"a":1}')]
    usage = {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 9,
             "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 20}
    data, _ = drive(loop_factory, lambda n, b: responses_stream(deltas, usage), n=2, endpoint="/v1/responses",
                    keep_chunk_stamps=True)
    assert col(data, "error").tolist() == [ErrorClass.OK] * 2, data.error_messages
    assert col(data, "chunks").tolist() == [4, 4]  # every delta, tool call's included; no other event
    assert col(data, "output_tokens").tolist() == [9, 9]  # response.usage, not a count of the chunks
    assert col(data, "prompt_tokens").tolist() == [11, 11] and col(data, "cached_tokens").tolist() == [4, 4]
    assert col(data, "usage_source").tolist() == [UsageSource.FINAL] * 2
    for row in range(2):
        stamps = np.frombuffer(data.extra["chunk_stamps"][row], dtype=np.int64)
        # TTFT at the reasoning delta, the answer at the first text delta: each a read GAP_S after the last
        assert col(data, "first_token_ns")[row] == stamps[0] and col(data, "first_answer_ns")[row] == stamps[1]
        assert np.all(np.diff(stamps) > GAP_S * 0.5e9)
        assert col(data, "end_ns")[row] >= stamps[-1]


def test_a_messages_stream_counts_every_block_and_adds_the_cache_to_the_prompt(loop_factory: Any) -> None:
    deltas = [("thinking_delta", "hmm"), ("text_delta", "Hi"), ("text_delta", " there"),
              ("input_json_delta", '{"city": "P')]
    script = lambda n, b: messages_stream(deltas, {"input_tokens": 5, "cache_read_input_tokens": 3}, 6)  # noqa: E731
    data, server = drive(loop_factory, script, endpoint="/v1/messages", api_key="sk-test", keep_chunk_stamps=True)
    assert col(data, "error").tolist() == [ErrorClass.OK], data.error_messages
    assert col(data, "chunks").tolist() == [4] and col(data, "output_tokens").tolist() == [6]
    assert col(data, "prompt_tokens").tolist() == [8] and col(data, "cached_tokens").tolist() == [3]
    stamps = np.frombuffer(data.extra["chunk_stamps"][0], dtype=np.int64)
    assert col(data, "first_token_ns")[0] == stamps[0] < col(data, "first_answer_ns")[0] == stamps[1]
    head = server.requests[0][0].decode()
    assert "x-api-key: sk-test\r\n" in head and "anthropic-version: 2023-06-01\r\n" in head


def test_chat_tool_call_deltas_are_output(loop_factory: Any) -> None:
    def script(n: int, body: bytes) -> list[Any]:
        chunks = [chat_chunk({"role": "assistant", "content": ""}, None),
                  chat_chunk({"tool_calls": [{"index": 0, "id": "t1", "type": "function",
                                              "function": {"name": "get_weather", "arguments": ""}}]}, None),
                  chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}, None),
                  chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "Paris"}'}}]}, None,
                             finish="tool_calls")]
        return [STREAM_HEAD, *[chunked(sse(c)) for c in chunks], chunked(sse("[DONE]")) + CHUNKED_END]

    data, _ = drive(loop_factory, script, endpoint="/v1/chat/completions")
    assert col(data, "error").tolist() == [ErrorClass.OK], data.error_messages
    assert col(data, "chunks").tolist() == [3]  # the name, then two pieces of arguments; not the role chunk
    assert col(data, "first_answer_ns").tolist() == [0]  # a tool call is output, not the answer's text


# -- another protocol than the one asked ------------------------------------------------------------------------

def _one_error(data: Any) -> tuple[int, str]:
    return int(col(data, "error")[0]), data.error_messages.get(0, "")


def test_messages_events_on_the_chat_endpoint_fail_naming_them(loop_factory: Any) -> None:
    script = lambda n, b: messages_stream([("text_delta", "Hi")], {"input_tokens": 5}, 1, gap_s=0.0)  # noqa: E731
    data, _ = drive(loop_factory, script, endpoint="/v1/chat/completions")
    error, message = _one_error(data)
    assert error == ErrorClass.PROTOCOL
    assert "without data: [DONE]" in message and "b'event: message_start\\ndata: {" in message, message


def test_chat_chunks_on_the_responses_endpoint_fail_naming_them(loop_factory: Any) -> None:
    def script(n: int, body: bytes) -> list[Any]:
        return [STREAM_HEAD, chunked(sse(chat_chunk({"content": "Hi"}, None, finish="stop"))),
                chunked(sse("[DONE]")) + CHUNKED_END]

    data, _ = drive(loop_factory, script, endpoint="/v1/responses")
    error, message = _one_error(data)
    assert error == ErrorClass.PROTOCOL and col(data, "chunks")[0] == 0
    assert "without its end event (response.completed)" in message and 'b\'data: {"id":"chatcmpl-1"' in message, message


def test_json_where_a_stream_was_asked_fails_with_its_text(loop_factory: Any) -> None:
    body = json.dumps({"type": "message", "content": [{"type": "text", "text": "Hi"}]}).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    data, _ = drive(loop_factory, lambda n, b: [head + body], endpoint="/v1/messages")
    error, message = _one_error(data)
    assert error == ErrorClass.PROTOCOL
    assert "not an event stream" in message and '{"type": "message"' in message, message


@pytest.mark.parametrize("endpoint,event", [
    ("/v1/responses", {"type": "error", "code": "server_error", "message": "boom", "param": None}),
    ("/v1/responses", {"type": "response.failed", "response": {"status": "failed", "error": {"code": "x"}}}),
    ("/v1/messages", {"type": "error", "error": {"type": "overloaded_error", "message": "boom"}}),
])
def test_an_error_event_is_a_server_error(loop_factory: Any, endpoint: str, event: dict[str, Any]) -> None:
    def script(n: int, body: bytes) -> list[Any]:
        first = (typed("response.output_text.delta", delta="Hi") if endpoint == "/v1/responses"
                 else typed("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}))
        return [STREAM_HEAD, chunked(first), chunked(typed(event["type"], **{k: v for k, v in event.items()
                                                                                 if k != "type"})) + CHUNKED_END]

    data, _ = drive(loop_factory, script, endpoint=endpoint)
    error, message = _one_error(data)
    assert error == ErrorClass.SERVER_ERROR and "error event" in message, message


def test_a_responses_stream_cut_before_its_end_is_not_complete(loop_factory: Any) -> None:
    script = lambda n, b: responses_stream([("response.output_text.delta", "Hi")], None, end="")  # noqa: E731
    data, _ = drive(loop_factory, script, endpoint="/v1/responses")
    error, message = _one_error(data)
    assert error == ErrorClass.PROTOCOL and "without its end event (response.completed)" in message, message
