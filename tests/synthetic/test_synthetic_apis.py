"""The synthetic server's Responses (/v1/responses) and Messages (/v1/messages) streams, read as the APIs' documents
describe them (an ``event:`` line naming each event's ``type``, the events in their order, the usage where each
API puts it), with a plain JSON reader, not the client's scanner."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from support.synthetic_helpers import Response, request
from fastbench.synthetic import SyntheticServer

N = 9  # output tokens asked for


@pytest.fixture(scope="module")
def srv() -> Iterator[SyntheticServer]:
    with SyntheticServer("--tokens-per-chunk", "1-3", ttft_ms=2, itl_ms=1, max_model_len=512) as s:
        yield s


@pytest.fixture(scope="module")
def thinking_srv() -> Iterator[SyntheticServer]:
    with SyntheticServer("--reasoning-tokens", "3", ttft_ms=2, itl_ms=1) as s:
        yield s


def post(server: SyntheticServer, path: str, body: dict[str, Any]) -> Response:
    return asyncio.run(request(server.base_url, "POST", path, body))


def events(r: Response) -> list[dict[str, Any]]:
    """Each event's data, after checking that its ``event:`` line names its type."""
    out = []
    for block in r.body.split(b"\n\n"):
        if not block.strip() or block.startswith(b":"):
            continue
        name, data = block.split(b"\n")
        obj = json.loads(data.removeprefix(b"data: "))
        assert name == b"event: " + obj["type"].encode(), block
        assert isinstance(obj["fb_sent_ns"], int)
        out.append(obj)
    return out


def responses_body(**extra: Any) -> dict[str, Any]:
    return {"model": "fastbench-synthetic", "input": "hello world", "max_output_tokens": N, "stream": True,
            "store": False, "ignore_eos": True, **extra}


def messages_body(**extra: Any) -> dict[str, Any]:
    return {"model": "fastbench-synthetic", "messages": [{"role": "user", "content": "hello world"}],
            "max_tokens": N, "stream": True, "ignore_eos": True, **extra}


def test_a_responses_stream(srv: SyntheticServer) -> None:
    r = post(srv, "/v1/responses", responses_body())
    assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
    evs = events(r)
    kinds = [e["type"] for e in evs]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    deltas = [e["delta"] for e in evs if e["type"] == "response.output_text.delta"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"} and len(deltas) >= N / 3
    assert "".join(deltas) == evs[-4]["text"] == evs[-3]["part"]["text"] and len("".join(deltas).split()) == N
    done = evs[-1]["response"]
    assert done["status"] == "incomplete"  # cut at max_output_tokens, as vLLM says it
    usage = done["usage"]
    assert usage["output_tokens"] == N and usage["input_tokens"] == 2 + 4  # one user message: 2 words + overhead
    assert usage["total_tokens"] == usage["input_tokens"] + N and usage["input_tokens_details"]["cached_tokens"] == 0
    assert done["output"][0]["content"][0]["text"] == evs[-4]["text"]
    assert b"[DONE]" not in r.body


def test_responses_input_as_messages_and_reasoning(thinking_srv: SyntheticServer) -> None:
    convo = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]
    evs = events(post(thinking_srv, "/v1/responses", responses_body(input=convo)))
    reasoning = [e["delta"] for e in evs if e["type"] == "response.reasoning_text.delta"]
    answer = [e["delta"] for e in evs if e["type"] == "response.output_text.delta"]
    assert len("".join(reasoning).split()) == 3 and len("".join(answer).split()) == N - 3
    first = [e["type"] for e in evs].index("response.output_text.delta")
    assert all(e["type"] != "response.reasoning_text.delta" for e in evs[first:])  # reasoning comes first
    usage = evs[-1]["response"]["usage"]
    assert usage["input_tokens"] == (2 + 4) + (2 + 4) and usage["output_tokens_details"]["reasoning_tokens"] == 3


def test_a_messages_stream(thinking_srv: SyntheticServer) -> None:
    r = post(thinking_srv, "/v1/messages", messages_body())
    assert b"[DONE]" not in r.body
    evs = events(r)
    kinds = [e["type"] for e in evs]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    start = evs[0]["message"]
    assert start["role"] == "assistant" and start["usage"] == {"input_tokens": 6, "output_tokens": 0}
    blocks, open_index, texts = [], None, {"thinking": "", "text": ""}
    for e in evs[1:-2]:
        if e["type"] == "content_block_start":
            assert open_index is None
            open_index = e["index"]
            blocks.append(e["content_block"]["type"])
        elif e["type"] == "content_block_stop":
            assert e["index"] == open_index
            open_index = None
        else:
            assert e["type"] == "content_block_delta" and e["index"] == open_index
            kind = e["delta"]["type"].removesuffix("_delta")
            assert kind == blocks[-1]
            texts[kind] += e["delta"][kind]
    assert blocks == ["thinking", "text"] and open_index is None
    assert len(texts["thinking"].split()) == 3 and len(texts["text"].split()) == N - 3
    assert evs[-2]["delta"]["stop_reason"] == "max_tokens" and evs[-2]["usage"]["output_tokens"] == N


def test_whole_responses(srv: SyntheticServer) -> None:
    r = post(srv, "/v1/responses", responses_body(stream=False))
    doc = r.json()
    assert r.status == 200 and doc["object"] == "response" and doc["usage"]["output_tokens"] == N
    assert len(doc["output"][0]["content"][0]["text"].split()) == N
    m = post(srv, "/v1/messages", messages_body(stream=False)).json()
    assert m["type"] == "message" and m["content"][0]["type"] == "text" and m["usage"]["output_tokens"] == N
    assert m["stop_reason"] == "max_tokens"


def test_messages_needs_max_tokens(srv: SyntheticServer) -> None:
    body = messages_body()
    del body["max_tokens"]
    r = post(srv, "/v1/messages", body)
    assert r.status == 400 and "max_tokens" in r.body.decode()


@pytest.mark.parametrize("path,body", [("/v1/responses", responses_body()), ("/v1/messages", messages_body())])
def test_faults_speak_each_api(path: str, body: dict[str, Any]) -> None:
    with SyntheticServer("--fault", "error-event", ttft_ms=1, itl_ms=1) as s:
        evs = events(post(s, path, body))
    assert evs[-1]["type"] == "error" and "synthetic fault" in json.dumps(evs[-1])
    with SyntheticServer("--fault", "no-done", ttft_ms=1, itl_ms=1) as s:
        kinds = [e["type"] for e in events(post(s, path, body))]
    assert not {"response.completed", "message_stop"} & set(kinds) and len(kinds) > 3
