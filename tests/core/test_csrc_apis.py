"""The native scanner on the typed-event APIs' streams (Responses, Anthropic Messages), read with the tables of
fastbench.load.protocols exactly as a run gives them (csrc/fb_json.h, fb_api_t): vLLM-shaped streams survive
every 2- and 3-piece split of their HTTP framing, and each event's facts agree with a Python reading of the
same tables, on the streams and on generated events.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from support import sse_reference as ref
from support.csrc import FB_ERR_CALLBACK, FB_ERR_JSON, HTTP_SSE, JSON_FACTS, Lib, build
from fastbench._core import OUT_ANSWER, OUT_DELTA, OUT_END, OUT_ERROR, OUT_REASONING, OUT_TOOL
from fastbench.load.protocols import StreamEvents, messages, responses

RESPONSES, MESSAGES = responses.EVENTS, messages.EVENTS


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Lib:
    try:
        path = build(tmp_path_factory.mktemp("csrc_apis"))
    except RuntimeError as e:
        pytest.skip(str(e))
    return Lib(path)


def _event(kind: str, **fields: Any) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + json.dumps({"type": kind, **fields}).encode() + b"\n\n"


def _responses_stream(texts: list[str], reasoning: str = "") -> bytes:
    resp = {"id": "resp_1", "object": "response", "status": "in_progress", "output": [], "usage": None, "error": None}
    out = _event("response.created", sequence_number=0, response=resp)
    out += _event("response.output_item.added", output_index=0, item={"id": "msg_1", "type": "message", "content": []})
    if reasoning:
        out += _event("response.reasoning_text.delta", item_id="rs_1", output_index=0, delta=reasoning)
    for text in texts:
        out += _event("response.output_text.delta", item_id="msg_1", output_index=0, content_index=0, delta=text,
                      logprobs=[])
    whole = "".join(texts)
    out += _event("response.output_text.done", item_id="msg_1", text=whole)
    usage = {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 2}, "output_tokens": len(texts),
             "output_tokens_details": {"reasoning_tokens": 1}, "total_tokens": 9 + len(texts)}
    done = {**resp, "status": "completed", "usage": usage,
            "output": [{"type": "message", "content": [{"type": "output_text", "text": whole}]}]}
    return out + _event("response.completed", sequence_number=9, response=done)


def _messages_stream(texts: list[str], thinking: str = "", tool: str = "") -> bytes:
    start = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m",
             "usage": {"input_tokens": 6, "cache_read_input_tokens": 4, "output_tokens": 0}}
    out = _event("message_start", message=start)
    blocks = [("thinking", "thinking_delta", "thinking", [thinking] if thinking else []),
              ("text", "text_delta", "text", texts), ("tool_use", "input_json_delta", "partial_json",
                                                      [tool] if tool else [])]
    for index, (block, kind, key, pieces) in enumerate(b for b in blocks if b[3]):
        out += _event("content_block_start", index=index, content_block={"type": block, key: ""})
        out += b": ping\n\n"
        for piece in pieces:
            out += _event("content_block_delta", index=index, delta={"type": kind, key: piece})
        out += _event("content_block_stop", index=index)
    out += _event("message_delta", delta={"stop_reason": "end_turn", "stop_sequence": None},
                  usage={"input_tokens": 6, "cache_read_input_tokens": 4, "output_tokens": 7})
    return out + _event("message_stop")


STREAMS: dict[str, tuple[bytes, StreamEvents]] = {
    "responses": (_responses_stream(["Hel", 'lo "w\\o', "rld\u00e9"], reasoning="hm"), RESPONSES),
    "responses_short": (_event("response.output_text.delta", delta="Hi")
                        + _event("response.completed", response={"usage": {"output_tokens": 1}}), RESPONSES),
    "messages": (_messages_stream(["Hi", " there"], thinking="hmm", tool='{"a": 1'), MESSAGES),
    "messages_short": (_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"})
                       + _event("message_delta", usage={"output_tokens": 1}) + _event("message_stop"), MESSAGES),
}


def _chunked(body: bytes, sizes: list[int]) -> bytes:
    out, i, k = b"", 0, 0
    while i < len(body):
        n = sizes[k % len(sizes)]
        out += b"%x\r\n%s\r\n" % (len(body[i:i + n]), body[i:i + n])
        i, k = i + n, k + 1
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + out
            + b"0\r\n\r\n")


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_api_streams_survive_every_split(lib: Lib, name: str) -> None:
    body, _ = STREAMS[name]
    resp = _chunked(body, [11, 3, 64])
    want = ref.encode_events(ref.parse(body))
    whole = lib.run(HTTP_SSE, resp)
    assert whole.res.rc == 0 and whole.out == want and whole.res.consumed == len(resp)
    bad, cuts = lib.check_splits(HTTP_SSE, resp, whole)
    assert bad == 0, f"split at {cuts[0]} differs"
    if len(resp) <= 400:
        bad, cuts = lib.check_splits(HTTP_SSE, resp, whole, pieces=3)
        assert bad == 0, f"splits at {cuts} differ"


def _facts(**kw: int) -> dict[str, int]:
    base = dict.fromkeys(JSON_FACTS, 0)
    base.update(completion_tokens=-1, prompt_tokens=-1, sent_ns=-1, n_choices=-1, cached_tokens=-1,
                total_tokens=-1, n_data=-1)
    base.update(kw)
    return base


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63


def _plain(s: Any) -> bool:
    """A string the scanner's tables can match: one JSON writes without an escape."""
    return isinstance(s, str) and json.dumps(s, ensure_ascii=False)[1:-1] == s


def _py_api_facts(obj: dict[str, Any], ev: StreamEvents) -> tuple[dict[str, int], str]:
    """What fb_json_scan_event must report for ``obj`` with ``ev``'s tables, and the answer it hands over."""
    f = _facts()
    kind = ev.types.get(obj["type"], 0) if _plain(obj.get("type")) else 0
    usages = []
    for k, v in obj.items():  # in the text's order: a later count wins, the input's add up
        if k == "usage" and isinstance(v, dict):
            usages.append(v)
        elif k in ev.usage_holders and isinstance(v, dict) and isinstance(v.get("usage"), dict):
            usages.append(v["usage"])
    for usage in usages:
        f["has_usage"] = 1
        for k, v in usage.items():
            if k == ev.output_key:
                if _is_count(v):
                    f["completion_tokens"] = v
                elif v is not None:
                    f["usage_invalid"] = 1
            elif k in ev.input_keys:
                if _is_count(v):
                    total = max(f["prompt_tokens"], 0) + v
                    if total < 2**63:
                        f["prompt_tokens"] = total
                    else:
                        f["usage_invalid"] = 1
                    if k == ev.cached_key:
                        f["cached_tokens"] = v
                elif v is not None:
                    f["usage_invalid"] = 1
            elif k == ev.cached_key and ev.cached_key and _is_count(v):
                f["cached_tokens"] = v
            elif k == ev.details[0] and ev.details[0] and isinstance(v, dict) and _is_count(v.get(ev.details[1])):
                f["cached_tokens"] = v[ev.details[1]]
    if _is_count(obj.get("fb_sent_ns")):
        f["sent_ns"] = obj["fb_sent_ns"]
    if obj.get("error", None) is not None:
        f["has_error"] = 1
    delta = obj.get("delta")
    answer = ""
    text = delta if isinstance(delta, str) and delta else ""
    if kind in (OUT_ANSWER, OUT_REASONING, OUT_TOOL) and text:
        f[{OUT_ANSWER: "has_content", OUT_REASONING: "has_reasoning", OUT_TOOL: "has_tool"}[kind]] = 1
        answer = text if kind == OUT_ANSWER else ""
    elif kind == OUT_DELTA and isinstance(delta, dict):
        for k, v in delta.items():
            if isinstance(v, str) and v and k in ev.delta_keys:
                out = ev.delta_keys[k]
                f[{OUT_ANSWER: "has_content", OUT_REASONING: "has_reasoning", OUT_TOOL: "has_tool"}[out]] = 1
                if out == OUT_ANSWER and not answer:
                    answer = v
    elif kind == OUT_END:
        f["has_end"] = f["has_finish"] = 1
    elif kind == OUT_ERROR:
        f["has_error"] = 1
    return f, answer


def _decoded(raw: bytes) -> str:
    return json.loads(b'"' + raw + b'"') if raw else ""


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_each_event_reads_as_its_tables_say(lib: Lib, name: str) -> None:
    body, ev = STREAMS[name]
    outputs, ends, answer = 0, 0, ""
    for data in ref.parse(body):
        rc, facts, raw, _ = lib.json_api(data, ev)
        want, text = _py_api_facts(json.loads(data), ev)
        assert rc == 0 and facts == want, data
        assert _decoded(raw) == text
        outputs += facts["has_content"] | facts["has_reasoning"] | facts["has_tool"]
        ends += facts["has_end"]
        answer += text
    assert ends == 1
    if name == "responses":
        assert outputs == 4 and answer == 'Hello "w\\orld\u00e9'
    if name == "messages":
        assert outputs == 4 and answer == "Hi there"


def test_the_last_usage_is_the_totals(lib: Lib) -> None:
    completed = STREAMS["responses"][0].split(b"data: ")[-1].strip()
    rc, facts, _, _ = lib.json_api(completed, RESPONSES)
    assert rc == 0 and facts == _facts(completion_tokens=3, prompt_tokens=9, cached_tokens=2, has_usage=1,
                                       has_end=1, has_finish=1)
    stop = b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":6,' \
           b'"cache_read_input_tokens":4,"cache_creation_input_tokens":1,"output_tokens":7}}'
    rc, facts, _, _ = lib.json_api(stop, MESSAGES)
    assert rc == 0 and facts == _facts(completion_tokens=7, prompt_tokens=11, cached_tokens=4, has_usage=1)


@pytest.mark.parametrize("text,ev,want", [
    # the type may follow the delta
    (b'{"delta":"x","type":"response.output_text.delta"}', RESPONSES, _facts(has_content=1)),
    (b'{"type":"response.output_text.delta","delta":""}', RESPONSES, _facts()),
    (b'{"type":"response.output_text.delta","delta":{"text":"x"}}', RESPONSES, _facts()),
    # a type spelled with an escape, or one not in the table, means nothing
    (b'{"type":"response.output_text\\u002edelta","delta":"x"}', RESPONSES, _facts()),
    (b'{"type":"response.output_text.done","text":"whole"}', RESPONSES, _facts()),
    # only the top-level type and delta count: not those nested (an item's content, a response's output)
    (b'{"type":"x","item":{"type":"response.output_text.delta","delta":"x"}}', RESPONSES, _facts()),
    (b'{"type":"response.created","response":{"usage":null,"error":null}}', RESPONSES, _facts()),
    (b'{"type":"response.failed","response":{"error":{"code":"x"}}}', RESPONSES, _facts(has_error=1)),
    (b'{"type":"error","code":"e","message":"m"}', RESPONSES, _facts(has_error=1)),
    (b'{"type":"response.completed","response":{"usage":{"output_tokens":1.5}}}', RESPONSES,
     _facts(has_usage=1, usage_invalid=1, has_end=1, has_finish=1)),
    (b'{"type":"content_block_delta","delta":{"type":"thinking_delta","thinking":"t"}}', MESSAGES,
     _facts(has_reasoning=1)),
    (b'{"type":"content_block_delta","delta":{"type":"input_json_delta","partial_json":"{"}}', MESSAGES,
     _facts(has_tool=1)),
    (b'{"type":"content_block_delta","delta":"x"}', MESSAGES, _facts()),
    (b'{"type":"content_block_start","content_block":{"type":"text","text":"x"}}', MESSAGES, _facts()),
    (b'{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}', MESSAGES,
     _facts(has_usage=1, prompt_tokens=3, completion_tokens=1)),
    (b'{"type":"message_start","message":{"usage":{"input_tokens":"3"}}}', MESSAGES,
     _facts(has_usage=1, usage_invalid=1)),
    (b'{"type":"error","error":{"type":"overloaded_error"}}', MESSAGES, _facts(has_error=1)),
    (b'{"choices":[{"delta":{"content":"x"}}]}', MESSAGES, _facts()),  # a chat chunk is no Messages output
])
def test_typed_events(lib: Lib, text: bytes, ev: StreamEvents, want: dict[str, int]) -> None:
    rc, facts, _, _ = lib.json_api(text, ev)
    assert rc == 0 and facts == want
    if b"\\u" not in text:  # the reference reads the decoded object, where an escape is gone
        assert (facts, _decoded(lib.json_api(text, ev)[2])) == _py_api_facts(json.loads(text), ev)


def test_bad_events_and_a_refused_answer(lib: Lib) -> None:
    for text in (b"[DONE]", b'{"type":"response.output_text.delta","delta":"x"', b""):
        rc, facts, raw, _ = lib.json_api(text, RESPONSES)
        assert rc == -FB_ERR_JSON and facts == _facts() and raw == b""
    rc, facts, raw, pieces = lib.json_api(b'{"type":"response.output_text.delta","delta":"xyz"}', RESPONSES, cap=2)
    assert rc == -FB_ERR_CALLBACK and facts == _facts() and pieces == 0


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    st = None

if st is not None:
    TYPES = st.sampled_from([*RESPONSES.types, *MESSAGES.types, "response.output_text.done", "message_start"])
    KEYS = st.sampled_from(["type", "delta", "usage", "response", "message", "error", "fb_sent_ns", "text",
                            "thinking", "partial_json", "input_tokens", "output_tokens", "cached_tokens",
                            "cache_read_input_tokens", "cache_creation_input_tokens", "input_tokens_details",
                            'q"uote', "choices"]) | st.text(max_size=5)
    SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**64), max_value=2**64) | st.floats(
        allow_nan=False, allow_infinity=False) | st.text(max_size=6) | TYPES)
    VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner,
                                                                                                 max_size=5),
                          max_leaves=20)
    EVENTS = st.builds(lambda t, rest: {"type": t, **rest}, TYPES | st.text(max_size=4),
                       st.dictionaries(KEYS, VALUES, max_size=6))

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(obj=EVENTS, which=st.booleans(), ascii_only=st.booleans())
    def test_generated_events_read_as_their_tables_say(lib: Lib, obj: dict[str, Any], which: bool,
                                                       ascii_only: bool) -> None:
        ev = RESPONSES if which else MESSAGES
        text = json.dumps(obj, ensure_ascii=ascii_only).encode()
        rc, facts, raw, _ = lib.json_api(text, ev)
        want, answer = _py_api_facts(obj, ev)
        assert rc == 0 and facts == want
        assert _decoded(raw) == answer  # the raw bytes hold the escapes as sent
