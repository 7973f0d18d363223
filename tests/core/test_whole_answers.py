"""The core's whole-answer mode (LoadPlan.whole_answers, _core/whole.pyx): a 2xx JSON answer to a non-streaming
request (embeddings, pooling, score, rerank) kept whole, scanned once at its end for usage, its end the receive
stamp of the read that held its last byte; what is not such an answer is a PROTOCOL error naming its first
bytes."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from support.core_runs import col, drive
from support.scripted import STREAM_HEAD, ScriptedServer, chunked, sse
from fastbench._core import BUILD_FLAVOUR, debug_counters
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
from fastbench.results.records import ErrorClass, RunData, UsageSource


def _json_response(obj: Any, framing: str = "length") -> bytes:
    body = orjson.dumps(obj)
    if framing == "chunked":  # cut into pieces, so that the answer arrives over several reads
        pieces = [body[i:i + 7] for i in range(0, len(body), 7)]
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"".join(chunked(p) for p in pieces) + b"0\r\n\r\n")
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def _embeddings(n: int, tokens: int) -> dict[str, Any]:
    return {"object": "list", "model": "m",
            "data": [{"index": i, "object": "embedding", "embedding": [0.5, -0.25] * 192} for i in range(n)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_an_answer_is_read_whole_with_its_usage(loop_factory: Any, framing: str) -> None:
    """Each request's row: the usage's prompt tokens (FINAL), no output and no first token, the end after the
    server's delay; one kept-alive connection serves them all."""
    delay = 0.02

    def script(n: int, body: bytes) -> list[Any]:
        answer = _json_response(_embeddings(1 + n % 3, 10 + n), framing)
        return [delay, answer[:40], 0.005, answer[40:]]  # the head first: the answer's last byte comes later

    data, server = drive(loop_factory, script, n=6, whole_answers=True)
    assert list(col(data, "error")) == [ErrorClass.OK] * 6
    assert list(col(data, "prompt_tokens")) == [10 + i for i in range(6)]
    assert list(col(data, "usage_source")) == [UsageSource.FINAL] * 6
    assert not col(data, "output_tokens").any() and not col(data, "chunks").any()
    assert not col(data, "first_token_ns").any()
    # the end is the last byte's read, not the head's: the server's 5 ms between them (its timer may fire ~1 ms
    # early) lies between the two stamps
    assert (col(data, "end_ns") - col(data, "first_byte_ns") >= 0.003 * 1e9).all()
    assert (col(data, "first_byte_ns") - col(data, "sent_ns") >= (delay - 0.002) * 1e9).all()
    assert server.connections == 1
    assert all(b"Accept: application/json\r\n" in head for head, _ in server.requests)


def test_a_rerank_answer_counts_its_total_tokens(loop_factory: Any) -> None:
    """A rerank answer's usage carries total_tokens alone: those are the input tokens."""
    answer = {"id": "r", "model": "m", "usage": {"total_tokens": 21},
              "results": [{"index": 0, "document": {"text": "a"}, "relevance_score": 0.5}]}
    data, _ = drive(loop_factory, lambda n, body: [_json_response(answer)], n=2, whole_answers=True)
    assert list(col(data, "prompt_tokens")) == [21, 21]
    assert list(col(data, "usage_source")) == [UsageSource.FINAL] * 2


def test_an_answer_without_usage_says_so(loop_factory: Any) -> None:
    answer = {"object": "list", "data": [{"index": 0, "embedding": [1.0]}]}
    data, _ = drive(loop_factory, lambda n, body: [_json_response(answer)], n=2, whole_answers=True)
    assert list(col(data, "error")) == [ErrorClass.OK] * 2
    assert list(col(data, "usage_source")) == [UsageSource.NONE] * 2
    assert list(col(data, "prompt_tokens")) == [-1, -1]  # the figures take the request's own count


@pytest.mark.parametrize("kind,error,words", [
    ("event-stream", ErrorClass.PROTOCOL, "event stream where one JSON answer was asked"),
    ("html", ErrorClass.PROTOCOL, "not one JSON object; its first bytes: <html>bad gateway"),
    ("cut", ErrorClass.PROTOCOL, 'not one JSON object; its first bytes: {"data":[{"embedding":[1.0,'),
    ("empty", ErrorClass.PROTOCOL, "the answer is empty"),
    ("error-object", ErrorClass.SERVER_ERROR, "2xx with an error object"),
])
def test_what_is_not_one_json_answer_is_classified(loop_factory: Any, kind: str, error: ErrorClass,
                                                    words: str) -> None:
    def script(n: int, body: bytes) -> list[Any]:
        if kind == "event-stream":
            return [STREAM_HEAD, chunked(sse({"choices": [{"text": "hi"}]})), chunked(sse("[DONE]")) + b"0\r\n\r\n"]
        raw = {"html": b"<html>bad gateway</html>", "cut": b'{"data":[{"embedding":[1.0,', "empty": b"",
               "error-object": b'{"error":{"message":"pooling failed","code":500}}'}[kind]
        return [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(raw), raw)]

    data, _ = drive(loop_factory, script, n=2, whole_answers=True)
    assert list(col(data, "error")) == [error] * 2
    assert words in data.error_messages[0], data.error_messages[0]
    if kind == "event-stream":
        assert "data: {" in data.error_messages[0]  # its first bytes named


def test_json_where_a_stream_was_asked_names_its_first_bytes(loop_factory: Any) -> None:
    data, _ = drive(loop_factory, lambda n, body: [_json_response(_embeddings(1, 3))], n=1)
    assert col(data, "error")[0] == ErrorClass.PROTOCOL
    message = data.error_messages[0]
    assert "not an event stream" in message and '{"object":"list"' in message, message


def _run_with_cap(loop_factory: Any, cap: int, answer_bytes: bytes, n: int) -> RunData:
    async def main() -> RunData:
        async with ScriptedServer(lambda i, body: [answer_bytes]) as server:
            plan = LoadPlan(bodies=[b"{}"] * n, warmup_bodies=[], concurrency=1, whole_answers=True)
            generator = LoadGenerator(Target.parse(server.base_url, "/v1/embeddings"), plan, None)
            generator.state.max_answer_bytes = cap
            return await generator.run()

    loop = loop_factory()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_an_answer_over_the_cap_is_refused_and_the_buffer_serves_the_next(loop_factory: Any) -> None:
    big = _json_response(_embeddings(40, 5))  # ~40 KiB of floats: the buffer grows past its first 4 KiB
    body_len = len(big) - big.index(b"\r\n\r\n") - 4
    data = _run_with_cap(loop_factory, body_len - 1, big, 2)
    assert list(col(data, "error")) == [ErrorClass.PROTOCOL] * 2
    assert "exceeded the whole-answer cap" in data.error_messages[0]
    data = _run_with_cap(loop_factory, body_len, big, 8)  # exactly the cap: every answer read whole
    assert list(col(data, "error")) == [ErrorClass.OK] * 8
    assert (col(data, "prompt_tokens") == 5).all()


def test_a_stream_run_is_unchanged_by_the_mode_being_off(loop_factory: Any) -> None:
    """The flag is the run's: off, an SSE stream is read as before (its chunks counted, TTFT stamped)."""
    from support.scripted import stream_script

    data, _ = drive(loop_factory, lambda n, body: stream_script([1, 2, 1]), n=2)
    assert list(col(data, "error")) == [ErrorClass.OK] * 2
    assert (col(data, "chunks") == 3).all() and (col(data, "first_token_ns") > 0).all()
    assert np.array_equal(col(data, "output_tokens"), [4, 4])


def test_the_mode_is_plain_data_of_the_plan() -> None:
    assert LoadPlan(bodies=[], warmup_bodies=[], concurrency=1).accept == "text/event-stream"
    assert LoadPlan(bodies=[], warmup_bodies=[], concurrency=1, whole_answers=True).accept == "application/json"


@pytest.mark.skipif(BUILD_FLAVOUR == "release", reason="the debug build's counters (FASTBENCH_DEBUG=1, make debug)")
def test_the_answer_buffer_grows_to_the_largest_and_is_reused(loop_factory: Any) -> None:
    """No allocation per request in steady state: 8 or 80 answers of the same largest size on one connection
    grow its buffer the same few times (once per doubling from 4 KiB), not once per answer."""
    sizes = [1, 40, 3, 40, 2]  # embeddings per answer: ~0.1 and ~40 KiB

    def grows(n: int) -> int:
        before = debug_counters()["answer_grows"]
        data, _ = drive(loop_factory, lambda i, body: [_json_response(_embeddings(sizes[i % len(sizes)], 3))],
                        n=n, whole_answers=True)
        assert (col(data, "error") == ErrorClass.OK).all()
        return int(debug_counters()["answer_grows"] - before)

    few, many = grows(8), grows(80)
    assert few == many and 1 <= few <= 5  # 4 KiB -> 64 KiB: the doublings, then reuse
