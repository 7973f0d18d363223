"""The plain-C readers in csrc/ (fb_http.c, fb_sse.c, fb_json.c), tested without the extension.

A session fixture compiles them with the shim tests/support/c/fb_test_shim.c into a temporary shared
library driven through ctypes (see tests/support/csrc.py). The SSE scanner is checked differentially
against the WHATWG transcription in tests/support/sse_reference.py, and the HTTP reader against
httptools, on every split of each fixture.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from support import sse_reference as ref
from support.csrc import (
    FB_ERR_CALLBACK,
    FB_ERR_HTTP_CHUNK,
    FB_ERR_HTTP_EOF,
    FB_ERR_HTTP_HEADER,
    FB_ERR_HTTP_LINE_TOO_LONG,
    FB_ERR_HTTP_STATUS_LINE,
    FB_ERR_JSON,
    FB_ERR_SSE_TOO_BIG,
    FBT_ERR_BODY_CAP,
    FBT_ERR_OUT_FULL,
    HTTP,
    HTTP_JSON,
    HTTP_SSE,
    LINE_MAX,
    S_BODY_EOF,
    S_DONE,
    SSE,
    Lib,
    build,
)


@pytest.fixture(scope="session")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Lib:
    try:
        path = build(tmp_path_factory.mktemp("csrc"))
    except RuntimeError as e:
        pytest.skip(str(e))
    return Lib(path)


# ---------------------------------------------------------------------------------------------
# Fixtures: recorded-style vLLM streams


def _data(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _chat_chunk(
    delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None
) -> bytes:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return _data(chunk)


def _usage(p: int, c: int) -> dict[str, int]:
    return {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c}


USAGE_ONLY = _data(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [],
        "usage": _usage(12, 3),
    }
)
DONE = b"data: [DONE]\n\n"

CHAT = (
    _chat_chunk({"role": "assistant", "content": ""}, usage=_usage(12, 0))
    + _chat_chunk({"content": "Hello"}, usage=_usage(12, 1))
    + _chat_chunk({"content": ' wor"ld\\n'}, usage=_usage(12, 2))
    + _chat_chunk({"content": "!"}, finish="stop", usage=_usage(12, 3))
    + USAGE_ONLY
    + DONE
)

COMPLETIONS = (
    b"".join(
        _data(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 1,
                "model": "m",
                "choices": [
                    {"index": 0, "text": t, "logprobs": None, "finish_reason": f, "stop_reason": None}
                ],
                "usage": _usage(12, i + 1),
            }
        )
        for i, (t, f) in enumerate([(" hello", None), (" there", None), ("", "length")])
    )
    + USAGE_ONLY
    + DONE
)

REASONING = (
    _chat_chunk({"role": "assistant", "content": ""})
    + _chat_chunk({"reasoning_content": "think"})
    + _chat_chunk({"reasoning": "more"})
    + _chat_chunk({"content": "answer"}, finish="stop")
    + USAGE_ONLY
    + DONE
)

ERROR_EVENT = (
    _data({"error": {"object": "error", "message": 'bad "input"', "type": "BadRequestError", "code": 400}})
    + DONE
)

SSE_FIXTURES: dict[str, bytes] = {
    "chat": CHAT,
    "completions": COMPLETIONS,
    "reasoning": REASONING,
    "usage_only": USAGE_ONLY + DONE,
    "error": ERROR_EVENT,
    "done_only": DONE,
    "comments": b": ping\n\n:\n" + _chat_chunk({"content": "a"}) + b": keep-alive\r\n\r\n" + DONE,
    "crlf": CHAT.replace(b"\n", b"\r\n"),
    "cr_only": COMPLETIONS.replace(b"\n", b"\r"),
    "mixed_eol": b"data: a\r\ndata: b\rdata: c\n\r\ndata:d\r\r\n\n",
    "bom": ref.BOM + CHAT,
    "bom_then_comment": ref.BOM + b":x\ndata: y\n\n",
    "bom_partial": b"\xef\xbbdata: x\n\ndata: y\n\n",
    "bom_twice": ref.BOM + ref.BOM + b"data: x\n\ndata: y\n\n",
    "multiline": b"data: line1\ndata: line2\ndata:line3\ndata\n\n" + DONE,
    "empty_data": b"data:\n\ndata\n\ndata: \n\ndata:  two spaces\n\n",
    "fields": (
        b"event: message\nid: 7\nretry: 100\ndata: x\nfoo: bar\n\n"
        b"event: other\n\nid\nretry\nnodata\n\n"
        b"data : not data\ndata\t: nor this\nDATA: nor\ndatax: no\n\n"
    ),
    "blank_lines": b"\n\n\r\n\r\rdata: x\n\n\n\n",
    "unterminated": b"data: a\n\ndata: b\n",
    "unterminated_cr": b"data: a\n\ndata: b\r",
    "no_event": b"data",
    "long_name": b"a_very_long_field_name_here: v\ndata: x\n\n",
    "binary": b"data: \x00\xff\xfe\x80\n\n",
    "colon_in_value": b"data: a: b: c\n\n",
}

SHORT = {k for k, v in SSE_FIXTURES.items() if len(v) <= 400}


def _expect_sse(stream: bytes) -> bytes:
    return ref.encode_events(ref.parse(stream))


def test_reference_sanity() -> None:
    # The reference itself, on spec examples (WHATWG 9.2.6 examples).
    assert ref.parse(b"data: YHOO\ndata: +2\ndata: 10\n\n") == [b"YHOO\n+2\n10"]
    assert ref.parse(b"data\n\ndata\ndata\n\ndata:") == [b"", b"\n"]
    assert ref.parse(b"data:test\n\ndata: test\n\n") == [b"test", b"test"]
    assert ref.parse(
        b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n"
    ) == [b"first event", b"second event", b" third event"]


# ---------------------------------------------------------------------------------------------
# SSE: differential against the reference, every split


@pytest.mark.parametrize("name", sorted(SSE_FIXTURES))
def test_sse_matches_reference(lib: Lib, name: str) -> None:
    stream = SSE_FIXTURES[name]
    want = _expect_sse(stream)
    whole = lib.run(SSE, stream)
    assert whole.res.rc == 0
    assert whole.events == ref.parse(stream)
    assert whole.out == want
    assert whole.res.events == len(ref.parse(stream))
    assert lib.run_bytewise(SSE, stream).out == want
    assert lib.run_bytewise(SSE, stream, cap0=0).out == want  # starts without a buffer: grows from NULL
    bad, cuts = lib.check_splits(SSE, stream, whole)
    assert bad == 0, f"split at {cuts[0]} differs"
    bad, cuts = lib.check_splits(SSE, stream, whole, cap0=1)
    assert bad == 0, f"split at {cuts[0]} differs (cap0=1)"
    if name in SHORT:
        bad, cuts = lib.check_splits(SSE, stream, whole, pieces=3)
        assert bad == 0, f"splits at {cuts} differ"


def test_sse_vllm_events(lib: Lib) -> None:
    events = lib.run(SSE, SSE_FIXTURES["crlf"]).events
    assert events[-1] == b"[DONE]"
    assert [json.loads(e)["usage"]["completion_tokens"] for e in events[:-1]] == [0, 1, 2, 3, 3]
    assert json.loads(events[2])["choices"][0]["delta"]["content"] == ' wor"ld\\n'
    assert lib.run(SSE, SSE_FIXTURES["multiline"]).events == [b"line1\nline2\nline3\n", b"[DONE]"]
    assert lib.run(SSE, SSE_FIXTURES["empty_data"]).events == [b"", b"", b"", b" two spaces"]
    assert lib.run(SSE, SSE_FIXTURES["bom"]).events == lib.run(SSE, CHAT).events
    assert lib.run(SSE, SSE_FIXTURES["bom_twice"]).events == [b"y"]  # the 2nd BOM is part of a name


def test_sse_grow(lib: Lib) -> None:
    big = b"x" * 100_000
    stream = b"data: " + big + b"\ndata: " + big + b"\n\n" + DONE
    want = ref.parse(stream)
    r = lib.run(SSE, stream, cap0=16)
    assert r.res.rc == 0 and r.events == want and len(r.events[0]) == 200_001
    assert r.res.grow_calls > 0
    assert lib.run_bytewise(SSE, stream, cap0=16).events == want
    # Refused: the event does not fit in cap_max.
    for run in (
        lib.run(SSE, stream, cap0=16, cap_max=4096),
        lib.run_bytewise(SSE, stream, cap0=16, cap_max=4096),
    ):
        assert run.res.rc == -FB_ERR_SSE_TOO_BIG
        assert run.events == []
    # Exactly at the limit: "x"*n + "\n" + "x"*n, no more.
    limit = 2 * len(big) + 1
    assert lib.run(SSE, stream, cap0=0, cap_max=limit).events == want
    assert lib.run(SSE, stream, cap0=0, cap_max=limit - 1).res.rc == -FB_ERR_SSE_TOO_BIG
    # Through HTTP: the SSE code comes back through the body callback.
    resp = http_chunked(stream, [1000, 77])
    assert lib.run(HTTP_SSE, resp, cap0=16, cap_max=4096).res.rc == -FB_ERR_SSE_TOO_BIG
    assert lib.run(HTTP_SSE, resp, cap0=16).events == want


def test_sse_one_line_events_in_place(lib: Lib) -> None:
    # An event whose one data line and blank line come in one read is dispatched from the read
    # itself, not copied. Events, limits and grow() calls must not depend on whether it was.
    big = b"y" * 50_000
    stream = b"data: " + big + b"\n\n" + b"data: small\n\n" + b": note\ndata: z\n\n" + DONE
    want = ref.parse(stream)
    before_blank = len(b"data: ") + len(big) + 1  # a read that ends between data line and blank line
    whole = lib.run(SSE, stream, cap0=16)
    split = lib.run(SSE, stream, [before_blank, before_blank + 3], cap0=16)
    for r in (whole, split, lib.run_bytewise(SSE, stream, cap0=16)):
        assert r.res.rc == 0 and r.events == want
    assert whole.res.grow_calls == split.res.grow_calls == 1
    for r in (
        lib.run(SSE, stream, cap0=16, cap_max=len(big) - 1),
        lib.run(SSE, stream, [before_blank], cap0=16, cap_max=len(big) - 1),
        lib.run_bytewise(SSE, stream, cap0=16, cap_max=len(big) - 1),
    ):
        assert r.res.rc == -FB_ERR_SSE_TOO_BIG and r.events == []
    assert lib.run(SSE, stream, cap0=16, cap_max=len(big)).events == want
    # A second data line after an in-place one: both joined, whatever the split.
    two = b"data: first\ndata: second\n\n"
    for cuts in ([], [12], [13], [len(two) - 1]):
        assert lib.run(SSE, two, cuts, cap0=0).events == [b"first\nsecond"]


def test_sse_callback_stop(lib: Lib) -> None:
    # The shim's event callback says stop when its output is full: one event fits, the second stops.
    stream = b"data: a\n\ndata: b\n\ndata: c\n\n"
    r = lib.run(SSE, stream, out_cap=4 + 1 + 3)
    assert r.res.reader_rc == -FB_ERR_CALLBACK and r.res.rc == FBT_ERR_OUT_FULL
    assert r.events == [b"a"]
    assert r.res.events == 2  # the stopping event was dispatched, the third never scanned


# ---------------------------------------------------------------------------------------------
# HTTP framing helpers


def _head(status: str, headers: list[tuple[str, str]], version: str = "1.1") -> bytes:
    lines = [f"HTTP/{version} {status}"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


SSE_HEADERS = [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache")]


def http_chunked(
    body: bytes,
    sizes: list[int],
    *,
    ext: bool | str = False,
    trailers: bytes = b"",
    version: str = "1.1",
    headers: list[tuple[str, str]] | None = None,
) -> bytes:
    """Chunked body with chunk sizes cycling through `sizes` (so chunks split events anywhere)."""
    out = [
        _head(
            "200 OK",
            (headers if headers is not None else SSE_HEADERS) + [("Transfer-Encoding", "chunked")],
            version,
        )
    ]
    i = k = 0
    while i < len(body):
        n = sizes[k % len(sizes)]
        k += 1
        piece = body[i : i + n]
        i += n
        e = f';name{k}="v;1";flag' if ext and k % 2 else ""
        if ext == "bws" and k % 2:
            e = f' ; name{k} = "v;1" ;flag'  # BWS around ";" and "=" (RFC 9112 7.1.1)
        out.append(f"{len(piece):x}{e}\r\n".encode() + piece + b"\r\n")
    out.append(b"0\r\n" + trailers + b"\r\n")
    return b"".join(out)


def http_length(body: bytes, *, version: str = "1.1", headers: list[tuple[str, str]] | None = None) -> bytes:
    hs = (headers if headers is not None else SSE_HEADERS) + [("Content-Length", str(len(body)))]
    return _head("200 OK", hs, version) + body


def http_close(body: bytes, *, version: str = "1.1") -> bytes:
    return _head("200 OK", SSE_HEADERS, version) + body


# ---------------------------------------------------------------------------------------------
# HTTP + SSE: every split, chunk boundaries inside events


HTTP_SSE_FIXTURES: dict[str, tuple[bytes, bool]] = {
    "chat_chunked_small": (http_chunked(CHAT, [7, 13, 1, 64]), False),
    "chat_chunked_per_event": (http_chunked(CHAT, [len(CHAT)]), False),
    "completions_chunked_ext_trailers": (
        http_chunked(COMPLETIONS, [5, 50], ext="bws", trailers=b"X-Trailer: 1\r\nX-Other: two\r\n"),
        False,
    ),
    "reasoning_length": (http_length(REASONING), False),
    "crlf_close": (http_close(SSE_FIXTURES["crlf"]), True),
    "cr_only_chunked": (http_chunked(SSE_FIXTURES["cr_only"], [3]), False),
    "bom_chunked_1": (http_chunked(SSE_FIXTURES["bom"], [1, 2]), False),
    "short_chunked": (http_chunked(SSE_FIXTURES["mixed_eol"], [2, 3]), False),
    "short_length": (http_length(SSE_FIXTURES["empty_data"]), False),
    "interim_then_chunked": (_head("100 Continue", []) + http_chunked(DONE, [4]), False),
    "lf_only_framing": (http_chunked(USAGE_ONLY + DONE, [9, 100]).replace(b"\r\n", b"\n"), False),
}


def _body_of(resp: bytes, lib: Lib, eof: bool) -> bytes:
    r = lib.run(HTTP, resp, eof=eof)
    assert r.res.rc == 0
    return r.out


@pytest.mark.parametrize("name", sorted(HTTP_SSE_FIXTURES))
def test_http_sse_every_split(lib: Lib, name: str) -> None:
    resp, eof = HTTP_SSE_FIXTURES[name]
    body = _body_of(resp, lib, eof)
    want = _expect_sse(body)
    whole = lib.run(HTTP_SSE, resp, eof=eof)
    assert whole.res.rc == 0 and whole.out == want
    assert whole.res.consumed == len(resp)
    assert whole.res.http_state == S_DONE or (eof and whole.res.eof_rc == 0)
    assert whole.res.event_stream == 1 and whole.res.status == 200
    assert lib.run_bytewise(HTTP_SSE, resp, eof=eof).out == want
    assert lib.run_bytewise(HTTP, resp, eof=eof).out == body
    bad, cuts = lib.check_splits(HTTP_SSE, resp, whole, eof=eof)
    assert bad == 0, f"split at {cuts[0]} differs"
    if len(resp) <= 400:
        bad, cuts = lib.check_splits(HTTP_SSE, resp, whole, pieces=3, eof=eof)
        assert bad == 0, f"splits at {cuts} differ"


def test_http_bodies(lib: Lib) -> None:
    body = CHAT
    for resp in (
        http_chunked(body, [7, 13]),
        http_chunked(body, [1000], ext=True, trailers=b"A: b\r\n"),
        http_length(body),
    ):
        r = lib.run(HTTP, resp)
        assert (r.res.rc, r.out, r.res.http_state, r.res.keep_alive) == (0, body, S_DONE, 1)
        assert r.res.body_bytes == len(body)
    r = lib.run(HTTP, http_chunked(body, [7]))
    assert r.res.chunked == 1 and r.res.content_length == -1
    r = lib.run(HTTP, http_length(body))
    assert r.res.chunked == 0 and r.res.content_length == len(body)
    # Close-delimited: complete only at EOF, never reusable.
    r = lib.run(HTTP, http_close(body))
    assert (r.res.rc, r.out, r.res.http_state, r.res.keep_alive) == (0, body, S_BODY_EOF, 0)
    assert lib.run(HTTP, http_close(body), eof=True).res.eof_rc == 0
    # EOF too early.
    for resp in (http_length(body)[:-1], http_chunked(body, [7])[:-2], _head("200 OK", [])[:-1], b""):
        assert lib.run(HTTP, resp, eof=True).res.eof_rc == -FB_ERR_HTTP_EOF
    # Empty bodies.
    r = lib.run(HTTP, http_length(b""))
    assert (r.res.http_state, r.out, r.res.keep_alive) == (S_DONE, b"", 1)
    r = lib.run(HTTP, http_chunked(b"", [1]))
    assert (r.res.http_state, r.out) == (S_DONE, b"")


@pytest.mark.parametrize(
    "version,conn,framing,want",
    [
        ("1.1", None, "length", 1),
        ("1.1", "close", "length", 0),
        ("1.1", "Close", "chunked", 0),
        ("1.1", "keep-alive", "chunked", 1),
        ("1.1", "Keep-Alive, CLOSE", "length", 0),
        ("1.1", "upgrade", "length", 1),
        ("1.0", None, "length", 0),
        ("1.0", "keep-alive", "length", 1),
        ("1.0", " Keep-Alive ", "length", 1),
        ("1.0", "keep-alive, close", "length", 0),
        ("1.1", None, "close", 0),
        ("1.0", "keep-alive", "close", 0),
    ],
)
def test_http_keep_alive(lib: Lib, version: str, conn: str | None, framing: str, want: int) -> None:
    headers = list(SSE_HEADERS) + ([("Connection", conn)] if conn is not None else [])
    body = b"data: x\n\n"
    if framing == "length":
        resp = http_length(body, version=version, headers=headers)
    elif framing == "chunked":
        resp = http_chunked(body, [3], version=version, headers=headers)
    else:
        resp = _head("200 OK", headers, version) + body
    r = lib.run(HTTP, resp, eof=framing == "close")
    assert r.res.rc == 0 and r.out == body
    assert r.res.keep_alive == want
    assert r.res.http_minor == int(version[-1])


def test_http_framing_edge_cases(lib: Lib) -> None:
    # Transfer-Encoding overrides Content-Length (RFC 9112 6.3 item 3) but the connection is not reused.
    resp = (
        _head("200 OK", [("Content-Length", "3"), ("Transfer-Encoding", "chunked")])
        + b"5\r\nhello\r\n0\r\n\r\n"
    )
    r = lib.run(HTTP, resp)
    assert (r.res.rc, r.out, r.res.http_state, r.res.keep_alive) == (0, b"hello", S_DONE, 0)
    # Transfer-Encoding not ending in chunked: read until close (RFC 9112 6.3 item 4).
    resp = _head("200 OK", [("Transfer-Encoding", "chunked, gzip")]) + b"raw"
    r = lib.run(HTTP, resp, eof=True)
    assert (r.res.rc, r.out, r.res.chunked, r.res.keep_alive, r.res.eof_rc) == (0, b"raw", 0, 0, 0)
    resp = (
        _head("200 OK", [("transfer-encoding", "gzip"), ("TRANSFER-ENCODING", "Chunked")])
        + b"1\r\nx\r\n0\r\n\r\n"
    )
    assert lib.run(HTTP, resp).out == b"x"
    # Identical Content-Length values, repeated or as a list (RFC 9110 8.6).
    resp = _head("200 OK", [("Content-Length", "2, 2"), ("content-length", "2")]) + b"okEXTRA"
    r = lib.run(HTTP, resp)
    assert (r.res.rc, r.out, r.res.consumed) == (0, b"ok", len(resp) - 5)
    # Content-Type matching.
    for ctype, want in [
        ("text/event-stream", 1),
        ("Text/Event-Stream;charset=utf-8", 1),
        ("text/event-stream ; x=y", 1),
        ("text/plain", 0),
        ("text/event-streamx", 0),
    ]:
        assert lib.run(HTTP, http_length(b"", headers=[("Content-Type", ctype)])).res.event_stream == want
    # Content-Encoding: any coding but identity means the body is not the text it seems.
    for codings, want in [([], 0), (["identity"], 0), (["gzip"], 1), (["Identity, br"], 1), (["", "identity"], 0),
                          (["identity", "deflate"], 1)]:
        headers = [("Content-Encoding", c) for c in codings]
        assert lib.run(HTTP, http_length(b"", headers=headers)).res.content_coded == want, codings
    # OWS around values, no reason phrase, header names of other lengths.
    resp = b"HTTP/1.1 200\r\nX: y\r\nContent-Length:\t 1 \t\r\n\r\nz"
    r = lib.run(HTTP, resp)
    assert (r.res.rc, r.res.status, r.out) == (0, 200, b"z")


def test_http_interim_and_no_body(lib: Lib) -> None:
    # 1xx interim responses are skipped, with their headers (RFC 9112 6.3 item 1).
    resp = (
        _head("100 Continue", [])
        + _head("103 Early Hints", [("Link", "</a>"), ("Content-Length", "99")])
        + http_length(b"data: x\n\n")
    )
    r = lib.run(HTTP, resp)
    assert (r.res.rc, r.res.status, r.out, r.res.content_length) == (0, 200, b"data: x\n\n", 9)
    r = lib.run_bytewise(HTTP, resp)
    assert (r.res.rc, r.res.status, r.out) == (0, 200, b"data: x\n\n")
    # Mid-interim, the final status is not known yet.
    assert lib.run(HTTP, _head("100 Continue", [])).res.status == 0
    # 204 and 304 have no body whatever the headers say; what follows is left unconsumed.
    for status in ("204 No Content", "304 Not Modified"):
        head = _head(status, [("Content-Length", "10")])
        r = lib.run(HTTP, head + b"HTTP/1.1 200 OK\r\n")
        assert (r.res.rc, r.res.http_state, r.res.consumed, r.out, r.res.keep_alive) == (
            0,
            S_DONE,
            len(head),
            b"",
            1,
        )


def test_http_back_to_back(lib: Lib) -> None:
    first = http_chunked(_chat_chunk({"content": "a"}) + DONE, [10])
    second = http_length(
        COMPLETIONS, headers=[("Content-Type", "text/event-stream"), ("Connection", "close")]
    )
    stream = first + second
    for run in (lib.run(HTTP_SSE, stream), lib.run_bytewise(HTTP_SSE, stream)):
        assert run.res.rc == 0 and run.res.consumed == len(first) and run.res.http_state == S_DONE
        assert run.res.keep_alive == 1
        assert run.events == ref.parse(_chat_chunk({"content": "a"}) + DONE)
    whole = lib.run(HTTP_SSE, stream)
    assert lib.check_splits(HTTP_SSE, stream, whole)[0] == 0
    rest = lib.run(HTTP_SSE, stream[whole.res.consumed :])
    assert rest.res.rc == 0 and rest.res.consumed == len(second) and rest.res.keep_alive == 0
    assert rest.events == ref.parse(COMPLETIONS)


BAD_HTTP: list[tuple[str, bytes, int]] = [
    ("http2", b"HTTP/2 200 OK\r\n\r\n", FB_ERR_HTTP_STATUS_LINE),
    ("http2.0", b"HTTP/2.0 200 OK\r\n\r\n", FB_ERR_HTTP_STATUS_LINE),
    ("short_code", b"HTTP/1.1 20 OK\r\n\r\n", FB_ERR_HTTP_STATUS_LINE),
    ("alpha_code", b"HTTP/1.1 2x0 OK\r\n\r\n", FB_ERR_HTTP_STATUS_LINE),
    ("code_099", b"HTTP/1.1 099 OK\r\n\r\n", FB_ERR_HTTP_STATUS_LINE),
    ("no_space", b"HTTP/1.1 200OK\r\n\r\n", FB_ERR_HTTP_STATUS_LINE),
    ("long_code", b"HTTP/1.1 2000 OK\r\n\r\n", FB_ERR_HTTP_STATUS_LINE),
    ("icy", b"ICY 200 OK\r\n\r\n", FB_ERR_HTTP_STATUS_LINE),
    ("lowercase", b"http/1.1 200 OK\r\n\r\n", FB_ERR_HTTP_STATUS_LINE),
    ("empty_line_first", b"\r\nHTTP/1.1 200 OK\r\n\r\n", FB_ERR_HTTP_STATUS_LINE),
    ("no_colon", b"HTTP/1.1 200 OK\r\nContent-Length 5\r\n\r\n", FB_ERR_HTTP_HEADER),
    ("empty_name", b"HTTP/1.1 200 OK\r\n: x\r\n\r\n", FB_ERR_HTTP_HEADER),
    ("space_before_colon", b"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n", FB_ERR_HTTP_HEADER),
    ("obs_fold", b"HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\n\r\n", FB_ERR_HTTP_HEADER),
    ("cl_alpha", b"HTTP/1.1 200 OK\r\nContent-Length: 5a\r\n\r\n", FB_ERR_HTTP_HEADER),
    ("cl_negative", b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", FB_ERR_HTTP_HEADER),
    ("cl_empty", b"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", FB_ERR_HTTP_HEADER),
    ("cl_differ", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", FB_ERR_HTTP_HEADER),
    ("cl_list_differ", b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n", FB_ERR_HTTP_HEADER),
    ("cl_overflow", b"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\n", FB_ERR_HTTP_HEADER),
    ("chunk_alpha", http_chunked(b"", [1])[:-5] + b"zz\r\n", FB_ERR_HTTP_CHUNK),
    ("chunk_empty", http_chunked(b"", [1])[:-5] + b"\r\n", FB_ERR_HTTP_CHUNK),
    ("chunk_space_first", http_chunked(b"", [1])[:-5] + b" 5\r\n", FB_ERR_HTTP_CHUNK),
    ("chunk_negative", http_chunked(b"", [1])[:-5] + b"-5\r\n", FB_ERR_HTTP_CHUNK),
    ("chunk_0x", http_chunked(b"", [1])[:-5] + b"0x5\r\n", FB_ERR_HTTP_CHUNK),
    ("chunk_overflow", http_chunked(b"", [1])[:-5] + b"10000000000000000\r\n", FB_ERR_HTTP_CHUNK),
    ("chunk_no_crlf", http_chunked(b"", [1])[:-5] + b"5\r\nhelloX\r\n", FB_ERR_HTTP_CHUNK),
    ("chunk_cr_only", http_chunked(b"", [1])[:-5] + b"5\r\nhello\rX", FB_ERR_HTTP_CHUNK),
    ("status_too_long", b"HTTP/1.1 200 " + b"x" * LINE_MAX + b"\r\n", FB_ERR_HTTP_LINE_TOO_LONG),
    ("header_too_long", b"HTTP/1.1 200 OK\r\nX: " + b"x" * LINE_MAX + b"\r\n", FB_ERR_HTTP_LINE_TOO_LONG),
    ("header_unterminated_too_long", b"HTTP/1.1 200 OK\r\nX: " + b"x" * LINE_MAX, FB_ERR_HTTP_LINE_TOO_LONG),
    ("chunk_ext_too_long", http_chunked(b"", [1])[:-5] + b"5;" + b"x" * LINE_MAX, FB_ERR_HTTP_LINE_TOO_LONG),
    (
        "trailer_too_long",
        http_chunked(b"", [1])[:-2] + b"X: " + b"x" * LINE_MAX + b"\r\n",
        FB_ERR_HTTP_LINE_TOO_LONG,
    ),
]


@pytest.mark.parametrize("name,resp,code", BAD_HTTP, ids=[b[0] for b in BAD_HTTP])
def test_http_errors(lib: Lib, name: str, resp: bytes, code: int) -> None:
    whole = lib.run(HTTP, resp)
    assert whole.res.rc == -code
    assert lib.run_bytewise(HTTP, resp).res.rc == -code
    assert lib.check_splits(HTTP, resp, whole)[0] == 0


def test_http_line_limit(lib: Lib) -> None:
    # A line of exactly LINE_MAX bytes is accepted with either line end, one more byte is not.
    for eol in (b"\r\n", b"\n"):
        for extra, ok in ((0, True), (1, False)):
            name_value = b"X: " + b"v" * (LINE_MAX - 3 + extra)
            resp = b"HTTP/1.1 200 OK" + eol + name_value + eol + b"Content-Length: 1" + eol + eol + b"z"
            want_rc = 0 if ok else -FB_ERR_HTTP_LINE_TOO_LONG
            whole = lib.run(HTTP, resp)
            assert whole.res.rc == want_rc, (eol, extra)
            assert lib.run_bytewise(HTTP, resp).res.rc == want_rc
            # Splits around the end of the long line, where line[] fills up.
            end = resp.index(name_value) + len(name_value)
            for a in range(end - 3, end + 3):
                for b in range(a, end + 4):
                    r = lib.run(HTTP, resp, [a, b])
                    assert (r.res.rc, r.out) == (whole.res.rc, whole.out), (eol, extra, a, b)
    # A CR that would be the (LINE_MAX+1)th byte but is not followed by LF.
    resp = b"HTTP/1.1 200 OK\r\nX: " + b"v" * (LINE_MAX - 3) + b"\rY\r\n\r\n"
    assert lib.run(HTTP, resp).res.rc == -FB_ERR_HTTP_LINE_TOO_LONG
    assert lib.run_bytewise(HTTP, resp).res.rc == -FB_ERR_HTTP_LINE_TOO_LONG


# ---------------------------------------------------------------------------------------------
# HTTP: differential against httptools (llhttp)


def _httptools_parse(resp: bytes, split: int | None = None) -> dict[str, Any]:
    import httptools as ht

    class P:
        def __init__(self) -> None:
            self.body = b""
            self.done = 0
            self.ka: bool | None = None

        def on_body(self, b: bytes) -> None:
            self.body += b

        def on_message_complete(self) -> None:
            self.done += 1
            self.ka = parser.should_keep_alive()

    proto = P()
    parser = ht.HttpResponseParser(proto)
    pieces = [resp] if split is None else [resp[:split], resp[split:]]
    for piece in pieces:
        parser.feed_data(piece)
    return {
        "status": parser.get_status_code(),
        "body": proto.body,
        "done": proto.done,
        "keep_alive": proto.ka,
        "version": parser.get_http_version(),
    }


HTTPTOOLS_CASES = {
    "chunked": http_chunked(CHAT, [7, 13, 64]),
    "chunked_ext_trailers": http_chunked(COMPLETIONS, [5, 50], ext=True, trailers=b"X-T: 1\r\n"),
    "length": http_length(REASONING),
    "length_close": http_length(DONE, headers=[("Connection", "close")]),
    "http10_keep_alive": http_length(DONE, version="1.0", headers=[("Connection", "keep-alive")]),
    "http10": http_length(DONE, version="1.0", headers=[]),
    "no_content": _head("204 No Content", []),
    "not_modified": _head("304 Not Modified", [("Content-Length", "5")]),
    "error_json": http_length(ERROR_EVENT, headers=[("Content-Type", "application/json")]),
    "status_400": _head("400 Bad Request", [("Content-Length", "2")]) + b"{}",
    "no_reason": b"HTTP/1.1 200 \r\nContent-Length: 1\r\n\r\nx",
}


@pytest.mark.parametrize("name", sorted(HTTPTOOLS_CASES))
def test_http_matches_httptools(lib: Lib, name: str) -> None:
    pytest.importorskip("httptools")
    resp = HTTPTOOLS_CASES[name]
    theirs = _httptools_parse(resp)
    assert theirs["done"] == 1
    for split in (None, len(resp) // 3, len(resp) - 1):
        ours = lib.run(HTTP, resp) if split is None else lib.run(HTTP, resp, [split])
        assert ours.res.rc == 0 and ours.res.http_state == S_DONE
        assert ours.res.status == theirs["status"]
        assert ours.out == theirs["body"]
        assert bool(ours.res.keep_alive) == theirs["keep_alive"]
        assert f"1.{ours.res.http_minor}" == theirs["version"]
        if split is not None:
            assert _httptools_parse(resp, split)["body"] == theirs["body"]


# Inputs that fb_http rejects but llhttp (httptools' defaults) lets through: a version other
# than 1.x, a status code under 100, an empty line before the status line, a Content-Length past
# int64, and lines over FB_HTTP_LINE_MAX (llhttp only bounds the whole header section, if asked).
STRICTER_THAN_LLHTTP = {"http2.0", "code_099", "empty_line_first", "cl_overflow"}


@pytest.mark.parametrize(
    "name,resp",
    [(n, r) for n, r, _ in BAD_HTTP if n not in STRICTER_THAN_LLHTTP and "too_long" not in n],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_http_rejects_like_httptools(name: str, resp: bytes) -> None:
    ht = pytest.importorskip("httptools")
    with pytest.raises(ht.HttpParserError):
        _httptools_parse(resp)


# ---------------------------------------------------------------------------------------------
# JSON chunk scanner


def _facts(**kw: int) -> dict[str, int]:
    base = {
        "completion_tokens": -1,
        "prompt_tokens": -1,
        "sent_ns": -1,
        "has_content": 0,
        "has_reasoning": 0,
        "has_error": 0,
        "has_finish": 0,
        "has_usage": 0,
        "n_choices": -1,
        "usage_invalid": 0,
        "cached_tokens": -1,
        "total_tokens": -1,
        "n_data": -1,
        "has_tool": 0,
        "has_end": 0,
    }
    base.update(kw)
    return base


JSON_CASES: list[tuple[str, bytes, dict[str, int] | None]] = [
    (
        "vllm_chat_role",
        (
            b'{"id":"cmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
            b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":12,'
            b'"total_tokens":12,"completion_tokens":0}}'
        ),
        _facts(completion_tokens=0, prompt_tokens=12, total_tokens=12, has_usage=1, n_choices=1),
    ),
    (
        "vllm_text",
        (
            b'{"id":"x","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" hello",'
            b'"logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":12,"total_tokens":15,'
            b'"completion_tokens":3}}'
        ),
        _facts(completion_tokens=3, prompt_tokens=12, total_tokens=15, has_content=1, has_usage=1, n_choices=1),
    ),
    (
        "usage_only",
        (
            b'{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
            b'"usage":{"prompt_tokens":12,"total_tokens":15,"completion_tokens":3}}'
        ),
        _facts(completion_tokens=3, prompt_tokens=12, total_tokens=15, has_usage=1, n_choices=0),
    ),
    ("reasoning", b'{"choices":[{"delta":{"reasoning":"think"}}]}', _facts(has_reasoning=1, n_choices=1)),
    (
        "reasoning_content",
        b'{"choices":[{"delta":{"reasoning_content":"think"},"finish_reason":"stop"}]}',
        _facts(has_reasoning=1, has_finish=1, n_choices=1),
    ),
    (
        "reasoning_empty",
        b'{"choices":[{"delta":{"reasoning_content":"","reasoning":null}}]}',
        _facts(n_choices=1),
    ),
    (
        "error",
        b'{"error":{"object":"error","message":"...","type":"BadRequestError","code":400}}',
        _facts(has_error=1),
    ),
    ("error_null", b'{"error":null}', _facts()),
    ("error_string", b'{"error":"boom"}', _facts(has_error=1)),
    ("error_nested_not_top", b'{"choices":[{"error":{"a":1}}]}', _facts(n_choices=1)),
    (
        "finish_null",
        b'{"choices":[{"finish_reason":null},{"finish_reason":"length"}]}',
        _facts(has_finish=1, n_choices=2),
    ),
    ("usage_null", b'{"usage":null,"choices":null}', _facts()),
    ("usage_tokens_null", b'{"usage":{"completion_tokens":null,"prompt_tokens":null}}', _facts(has_usage=1)),
    ("usage_tokens_float", b'{"usage":{"completion_tokens":3.0,"prompt_tokens":1e2}}',
     _facts(has_usage=1, usage_invalid=1)),
    ("usage_tokens_string", b'{"usage":{"completion_tokens":"3"}}', _facts(has_usage=1, usage_invalid=1)),
    ("usage_tokens_negative", b'{"usage":{"prompt_tokens":-1}}', _facts(has_usage=1, usage_invalid=1)),
    ("usage_other_keys_fine", b'{"usage":{"total_tokens":"x","prompt_tokens":4}}',
     _facts(has_usage=1, prompt_tokens=4)),
    (
        "usage_tokens_big",
        b'{"usage":{"completion_tokens":9223372036854775807,"prompt_tokens":9223372036854775808}}',
        _facts(has_usage=1, completion_tokens=2**63 - 1, usage_invalid=1),
    ),
    # The prefix cache's share of the prompt: vLLM's final usage chunk (--enable-prompt-tokens-details), SGLang's
    # (--enable-cache-report); only directly in usage's prompt_tokens_details, and never a usage fault.
    (
        "cached_tokens_vllm_final_usage",
        b'{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":'
        b'1040,"total_tokens":1056,"completion_tokens":16,"prompt_tokens_details":{"cached_tokens":1024}}}',
        _facts(completion_tokens=16, prompt_tokens=1040, total_tokens=1056, cached_tokens=1024, has_usage=1,
               n_choices=0),
    ),
    ("cached_tokens_zero", b'{"usage":{"prompt_tokens_details":{"cached_tokens":0}}}',
     _facts(has_usage=1, cached_tokens=0)),
    ("cached_tokens_details_first",
     b'{"usage":{"prompt_tokens_details":{"audio_tokens":null,"cached_tokens":7},"prompt_tokens":9}}',
     _facts(has_usage=1, cached_tokens=7, prompt_tokens=9)),
    ("cached_tokens_details_null", b'{"usage":{"prompt_tokens":9,"prompt_tokens_details":null}}',
     _facts(has_usage=1, prompt_tokens=9)),
    ("cached_tokens_null", b'{"usage":{"prompt_tokens_details":{"cached_tokens":null}}}', _facts(has_usage=1)),
    ("cached_tokens_not_a_count", b'{"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":"2"}}}',
     _facts(has_usage=1, prompt_tokens=3)),
    ("cached_tokens_negative", b'{"usage":{"prompt_tokens_details":{"cached_tokens":-5}}}', _facts(has_usage=1)),
    ("cached_tokens_float", b'{"usage":{"prompt_tokens_details":{"cached_tokens":5.0}}}', _facts(has_usage=1)),
    ("cached_tokens_too_big",
     b'{"usage":{"prompt_tokens_details":{"cached_tokens":9223372036854775808}}}', _facts(has_usage=1)),
    ("cached_tokens_directly_in_usage", b'{"usage":{"cached_tokens":5}}', _facts(has_usage=1)),
    ("cached_tokens_details_top_level", b'{"prompt_tokens_details":{"cached_tokens":5}}', _facts()),
    ("cached_tokens_details_deeper", b'{"usage":{"x":{"prompt_tokens_details":{"cached_tokens":5}}}}',
     _facts(has_usage=1)),
    ("cached_tokens_details_array", b'{"usage":{"prompt_tokens_details":[{"cached_tokens":5}]}}',
     _facts(has_usage=1)),
    ("cached_tokens_details_of_completion",
     b'{"usage":{"completion_tokens_details":{"cached_tokens":5,"prompt_tokens":4}}}', _facts(has_usage=1)),
    ("cached_tokens_in_a_choice", b'{"choices":[{"usage":{"prompt_tokens_details":{"cached_tokens":5}}}]}',
     _facts(n_choices=1)),
    ("cached_tokens_key_in_string", b'{"usage":{"prompt_tokens_details":{"x":"\\"cached_tokens\\":5"}}}',
     _facts(has_usage=1)),
    ("cached_tokens_escaped_key", b'{"usage":{"prompt_tokens_details":{"cached\\u005ftokens":5}}}',
     _facts(has_usage=1)),
    (
        "sent_ns",
        b'{"fb_sent_ns":1234567890123,"choices":[{"delta":{"content":"x"}}]}',
        _facts(sent_ns=1234567890123, has_content=1, n_choices=1),
    ),
    ("sent_ns_nested", b'{"choices":[{"fb_sent_ns":5}]}', _facts(n_choices=1)),
    ("content_null", b'{"choices":[{"delta":{"content":null}}]}', _facts(n_choices=1)),
    (
        "content_escaped_only",
        b'{"choices":[{"delta":{"content":"\\u0000"}}]}',
        _facts(has_content=1, n_choices=1),
    ),
    # Key text inside strings never counts.
    (
        "key_in_string",
        b'{"choices":[{"delta":{"role":"\\"content\\":\\"x\\", \\"usage\\":{\\"completion_tokens\\":9}"}}]}',
        _facts(n_choices=1),
    ),
    ("backslash_end", b'{"a":"\\\\","content":"y"}', _facts(has_content=1)),
    ("backslash_quote_seq", b'{"a":"\\\\\\"content\\":\\"","b":1}', _facts()),
    # Usage-like keys outside "usage".
    (
        "tokens_outside_usage",
        b'{"completion_tokens":5,"prompt_tokens":6,"choices":[{"usage":{"completion_tokens":7}}]}',
        _facts(n_choices=1),
    ),
    (
        "tokens_nested_in_usage",
        b'{"usage":{"details":{"completion_tokens":7},"prompt_tokens":1}}',
        _facts(has_usage=1, prompt_tokens=1),
    ),
    ("choices_nested", b'{"x":{"choices":[1,2,3]}}', _facts()),
    ("choices_mixed", b'{"choices":[1,"a",[],{},null,true,false,-1.5e+3]}', _facts(n_choices=8)),
    (
        "whitespace",
        b' \t\r\n{ "choices" : [ { "text" : "a" } ] , "usage" : { "completion_tokens" : 2 } }\n ',
        _facts(n_choices=1, has_content=1, has_usage=1, completion_tokens=2),
    ),
    ("empty_object", b"{}", _facts()),
    (
        "unicode",
        '{"choices":[{"delta":{"content":"héllo ☃ \\ud83d\\ude00"}}]}'.encode(),
        _facts(has_content=1, n_choices=1),
    ),
    ("depth_64", b'{"a":' + b"[" * 63 + b"]" * 63 + b"}", _facts()),
    # Malformed.
    ("depth_65", b'{"a":' + b"[" * 64 + b"]" * 64 + b"}", None),
    ("depth_huge", b'{"a":' + b"[" * 100000, None),
    ("done_marker", b"[DONE]", None),
    ("array_top", b"[]", None),
    ("string_top", b'"x"', None),
    ("empty", b"", None),
    ("spaces", b"   ", None),
    ("truncated", b'{"choices":[{"text":"a"}]', None),
    ("trailing", b'{"a":1} {}', None),
    ("trailing_comma", b'{"a":1,}', None),
    ("array_trailing_comma", b'{"a":[1,]}', None),
    ("missing_colon", b'{"a" 1}', None),
    ("missing_comma", b'{"a":1 "b":2}', None),
    ("single_quotes", b"{'a':1}", None),
    ("bare_key", b"{a:1}", None),
    ("bad_escape", b'{"a":"\\x"}', None),
    ("short_unicode", b'{"a":"\\u12"}', None),
    ("bad_unicode", b'{"a":"\\u12g4"}', None),
    ("raw_newline", b'{"a":"x\ny"}', None),
    ("unterminated_string", b'{"a":"xyz}', None),
    ("leading_zero", b'{"a":01}', None),
    ("plus_number", b'{"a":+1}', None),
    (
        "vllm_chat_tool_call",
        b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a"}}]},'
        b'"finish_reason":null}]}',
        _facts(n_choices=1, has_tool=1),
    ),
    (
        "tool_call_empty_arguments",
        b'{"choices":[{"delta":{"tool_calls":[{"id":"t","function":{"name":"","arguments":""}}]}}]}',
        _facts(n_choices=1),
    ),
    ("arguments_elsewhere", b'{"choices":[{"delta":{"function":{"arguments":"x"}}}],"arguments":"y"}',
     _facts(n_choices=1)),
    ("dot_number", b'{"a":1.}', None),
    ("exp_number", b'{"a":1e}', None),
    ("minus_only", b'{"a":-}', None),
    ("nan", b'{"a":NaN}', None),
    ("tru", b'{"a":tru}', None),
    ("nul", b'{"a":nul', None),
    ("nested_bad", b'{"choices":[{"delta":{"content":"x",}}]}', None),
    ("close_mismatch", b'{"a":[}', None),
]


@pytest.mark.parametrize("name,text,want", JSON_CASES, ids=[c[0] for c in JSON_CASES])
def test_json_scan(lib: Lib, name: str, text: bytes, want: dict[str, int] | None) -> None:
    rc, facts = lib.json(text)
    if want is None:
        assert rc == -FB_ERR_JSON
        assert facts == _facts()  # no half-read facts on error
    else:
        assert rc == 0
        assert facts == want
        assert _py_valid(text)


def test_json_examples_from_streams(lib: Lib) -> None:
    for stream in (CHAT, COMPLETIONS, REASONING, ERROR_EVENT):
        for ev in ref.parse(stream):
            rc, facts = lib.json(ev)
            if ev == b"[DONE]":
                assert rc == -FB_ERR_JSON
            else:
                assert rc == 0 and facts == _py_facts(json.loads(ev)), ev


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _py_valid(text: bytes) -> bool:
    try:
        obj = json.loads(text.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(obj, dict) and _depth(obj) <= 64


def _depth(v: Any) -> int:
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    return 0


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63


def _py_facts(obj: dict[str, Any]) -> dict[str, int]:
    """What fb_json_scan_chunk must report, computed on the decoded object (unique keys)."""
    f = _facts()
    usage = obj.get("usage")
    if isinstance(usage, dict):
        f["has_usage"] = 1
        for k in ("completion_tokens", "prompt_tokens"):
            if _is_count(usage.get(k)):
                f[k] = usage[k]
            elif usage.get(k) is not None:
                f["usage_invalid"] = 1
        if _is_count(usage.get("total_tokens")):
            f["total_tokens"] = usage["total_tokens"]
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and _is_count(details.get("cached_tokens")):
            f["cached_tokens"] = details["cached_tokens"]
    if _is_count(obj.get("fb_sent_ns")):
        f["sent_ns"] = obj["fb_sent_ns"]
    if obj.get("error") is not None:
        f["has_error"] = 1
    for key, value in obj.items():  # in the text's order: the later of "data" and "results" counts
        if key in ("data", "results") and isinstance(value, list):
            f["n_data"] = len(value)
    if isinstance(obj.get("choices"), list):
        f["n_choices"] = len(obj["choices"])
        for choice in obj["choices"]:  # a tool call's name or arguments, in a delta's tool_calls
            delta = choice.get("delta") if isinstance(choice, dict) else None
            calls = delta.get("tool_calls") if isinstance(delta, dict) else None
            for call in calls if isinstance(calls, list) else []:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict) and any(isinstance(function.get(k), str) and function[k]
                                                      for k in ("name", "arguments")):
                    f["has_tool"] = 1

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k in ("content", "text") and isinstance(x, str) and x:
                    f["has_content"] = 1
                if k in ("reasoning", "reasoning_content") and isinstance(x, str) and x:
                    f["has_reasoning"] = 1
                if k == "finish_reason" and x is not None:
                    f["has_finish"] = 1
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(obj)
    return f


# Hypothesis: the facts agree with a decode in Python, and validity agrees with json.loads.

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    HAVE_HYPOTHESIS = True
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    HAVE_HYPOTHESIS = False

needs_hypothesis = pytest.mark.skipif(not HAVE_HYPOTHESIS, reason="hypothesis not installed")

if HAVE_HYPOTHESIS:
    KEYS = st.sampled_from(
        [
            "content",
            "text",
            "reasoning",
            "reasoning_content",
            "finish_reason",
            "usage",
            "choices",
            "error",
            "fb_sent_ns",
            "completion_tokens",
            "prompt_tokens",
            "prompt_tokens_details",
            "cached_tokens",
            "delta",
            "tool_calls",
            "function",
            "arguments",
            "name",
            "index",
            "id",
            'q"uote',
            "back\\slash",
            "content ",
            "Content",
            "é",
        ]
    ) | st.text(max_size=6)
    SCALARS = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**64), max_value=2**64)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=8)
        | st.sampled_from(["", '"content":"x"', "\\", '\\"', "\u2028", "\x00"])
    )
    VALUES = st.recursive(
        SCALARS,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
        max_leaves=25,
    )
    OBJECTS = st.dictionaries(KEYS, VALUES, max_size=6)
    DUMPS = st.fixed_dictionaries(
        {
            "ensure_ascii": st.booleans(),
            "separators": st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]),
        }
    )

    @needs_hypothesis
    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(obj=OBJECTS, opts=DUMPS)
    def test_json_property_facts(lib: Lib, obj: dict[str, Any], opts: dict[str, Any]) -> None:
        text = json.dumps(obj, **opts).encode()
        rc, facts = lib.json(text)
        assert rc == 0
        assert facts == _py_facts(obj)

    CHOICE_LISTS = st.lists(st.dictionaries(KEYS, VALUES | st.dictionaries(KEYS, VALUES, max_size=4), max_size=4),
                            max_size=3)
    CHUNKS = st.builds(lambda extra, choices: {**extra, "choices": choices}, OBJECTS, CHOICE_LISTS)

    @needs_hypothesis
    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(obj=CHUNKS, opts=DUMPS)
    def test_json_property_answer(lib: Lib, obj: dict[str, Any], opts: dict[str, Any]) -> None:
        text = json.dumps(obj, **opts).encode()
        rc, facts, raw, _ = lib.json_answer(text)
        assert rc == 0 and facts == _py_facts(obj)
        assert _decoded(raw) == _py_answer(obj)

    @needs_hypothesis
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        obj=OBJECTS,
        cut=st.integers(min_value=0),
        junk=st.binary(max_size=3),
        pos=st.integers(min_value=0),
        mode=st.sampled_from(["cut", "insert", "replace", "delete"]),
    )
    def test_json_property_validity(
        lib: Lib, obj: dict[str, Any], cut: int, junk: bytes, pos: int, mode: str
    ) -> None:
        text = json.dumps(obj).encode()  # ensure_ascii: every byte is ASCII, so UTF-8 cannot be the issue
        junk = bytes(b & 0x7F for b in junk)
        i = pos % (len(text) + 1)
        if mode == "cut":
            text = text[: cut % (len(text) + 1)]
        elif mode == "insert":
            text = text[:i] + junk + text[i:]
        elif mode == "replace":
            text = text[:i] + junk + text[i + len(junk) :]
        else:
            text = text[:i] + text[i + 1 + cut % 3 :]
        rc, facts = lib.json(text)
        valid = _py_valid(text)
        assert (rc == 0) == valid, text
        # Duplicate keys: Python keeps the last one, the scanner may see either; compare only
        # when the edit left every object's keys unique.
        if valid and _keys_unique(text):
            assert facts == _py_facts(json.loads(text))


    # usage objects as servers shape them, with the keys that matter at the depth they matter: random
    # objects above seldom nest "prompt_tokens_details" inside "usage"
    COUNTS = st.integers(min_value=-3, max_value=2**63 + 3) | st.sampled_from([0, 1, 16, 1024])
    DETAILS = st.dictionaries(st.sampled_from(["cached_tokens", "audio_tokens", "prompt_tokens"]) | KEYS,
                              COUNTS | SCALARS | st.dictionaries(KEYS, COUNTS, max_size=2), max_size=3)
    USAGE = st.dictionaries(
        st.sampled_from(["prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
                         "completion_tokens_details", "cached_tokens"]),
        COUNTS | SCALARS | DETAILS, max_size=6)

    @needs_hypothesis
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(extra=OBJECTS, usage=USAGE, opts=DUMPS)
    def test_json_property_usage_details(lib: Lib, extra: dict[str, Any], usage: dict[str, Any],
                                         opts: dict[str, Any]) -> None:
        obj = {**extra, "usage": usage}
        text = json.dumps(obj, **opts).encode()
        rc, facts = lib.json(text)
        assert rc == 0
        assert facts == _py_facts(obj)


def _keys_unique(text: bytes) -> bool:
    ok = True

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal ok
        if len({k for k, _ in pairs}) != len(pairs):
            ok = False
        return dict(pairs)

    json.loads(text, object_pairs_hook=hook)
    return ok



# The answer's text (fb_json_scan_chunk_text): what a multi-turn session's history keeps of a reply.


def _py_answer_pieces(obj: Any) -> list[str]:
    """The answer's strings in one chunk, computed on the decoded object: each choice's "text", and its
    delta's "content", where they are strings, in the order the chunk has them."""
    pieces = []
    choices = obj.get("choices") if isinstance(obj, dict) else None
    for choice in choices if isinstance(choices, list) else ():
        for key, value in choice.items() if isinstance(choice, dict) else ():
            if key == "text" and isinstance(value, str):
                pieces.append(value)
            elif key == "delta" and isinstance(value, dict):
                pieces.extend(v for k, v in value.items() if k == "content" and isinstance(v, str))
    return pieces


def _py_answer(obj: Any) -> str:
    return "".join(_py_answer_pieces(obj))


def _decoded(raw: bytes) -> str:
    text: str = json.loads(b'"' + raw + b'"')
    return text


ANSWER_CASES = [
    ("chat", {"choices": [{"index": 0, "delta": {"content": 'a "b"\n\\ \t\u00e9\U0001f600'}}]},
     'a "b"\n\\ \t\u00e9\U0001f600'),
    ("completions", {"choices": [{"index": 0, "text": " wor\"ld", "logprobs": None}]}, ' wor"ld'),
    ("reasoning_left_out", {"choices": [{"delta": {"reasoning_content": "r", "reasoning": "s", "content": "c"}}]},
     "c"),
    ("reasoning_only", {"choices": [{"delta": {"reasoning_content": "r"}}]}, ""),
    ("logprobs_content",
     {"choices": [{"delta": {"content": "x"}, "logprobs": {"content": [{"token": "x", "text": "t"}]}}]}, "x"),
    ("message_not_delta", {"choices": [{"message": {"content": "m"}}]}, ""),
    ("top_level_content", {"content": "t", "text": "u", "choices": []}, ""),
    ("delta_under_delta", {"choices": [{"delta": {"delta": {"content": "no"}, "content": "yes"}}]}, "yes"),
    ("content_not_a_string", {"choices": [{"delta": {"content": {"content": "no"}}}]}, ""),
    ("two_choices",
     {"choices": [{"index": 0, "delta": {"content": "a"}}, {"index": 1, "delta": {"content": "b"}}]}, "ab"),
    ("choices_under_usage", {"usage": {"choices": [{"text": "no"}]}, "choices": [{"text": "yes"}]}, "yes"),
    ("empty", {"choices": [{"delta": {"content": ""}}]}, ""),
]


@pytest.mark.parametrize("name,obj,answer", ANSWER_CASES, ids=[c[0] for c in ANSWER_CASES])
@pytest.mark.parametrize("ascii_only", [True, False])
def test_json_answer_pieces(lib: Lib, name: str, obj: dict[str, Any], answer: str, ascii_only: bool) -> None:
    text = json.dumps(obj, ensure_ascii=ascii_only).encode()
    rc, facts, raw, pieces = lib.json_answer(text)
    assert rc == 0 and facts == lib.json(text)[1] == _py_facts(obj)  # the facts are the plain scan's
    assert _decoded(raw) == answer == _py_answer(obj)
    assert pieces == sum(1 for piece in _py_answer_pieces(obj) if piece)  # an empty string is no piece


def test_json_answer_key_spelled_with_an_escape_is_no_answer(lib: Lib) -> None:
    rc, facts, raw, _ = lib.json_answer(b'{"choices":[{"delta":{"\\u0063ontent":"x"}}]}')
    assert rc == 0 and raw == b"" and facts["has_content"] == 0


def test_json_answer_callback_stops_the_scan(lib: Lib) -> None:
    text = json.dumps({"choices": [{"delta": {"content": "abcdef"}}], "usage": {"completion_tokens": 3}}).encode()
    rc, facts, raw, pieces = lib.json_answer(text, cap=3)
    assert rc == -FB_ERR_CALLBACK and raw == b"" and pieces == 0
    assert facts == _facts()  # no half-read facts
    assert lib.json_answer(text, cap=6)[0] == 0


def test_json_answer_of_a_bad_chunk_is_an_error(lib: Lib) -> None:
    # The pieces before the fault may have been given: the caller (events.pyx) drops them on the error.
    rc, facts, _, _ = lib.json_answer(b'{"choices":[{"delta":{"content":"x"}}],')
    assert rc == -FB_ERR_JSON and facts == _facts()


def test_json_answer_joined_over_a_stream(lib: Lib) -> None:
    """A reply's pieces, joined over its events, decode once to the joined texts, a surrogate pair split
    over two events included."""
    events = [{"choices": [{"delta": {"role": "assistant", "content": ""}}]},
              {"choices": [{"delta": {"reasoning_content": "hmm"}}]},
              {"choices": [{"delta": {"content": "caf\u00e9 "}}]},
              {"choices": [{"delta": {"content": "\\n\"q\""}}]}]
    joined = b"".join(lib.json_answer(json.dumps(e).encode())[2] for e in events)
    split_pair = lib.json_answer(b'{"choices":[{"text":"\\ud83d"}]}')[2] + lib.json_answer(
        b'{"choices":[{"text":"\\ude00!"}]}')[2]
    assert _decoded(joined) == "caf\u00e9 \\n\"q\""
    assert _decoded(split_pair) == "\U0001f600!"


def test_json_sse_events_roundtrip(lib: Lib) -> None:
    """Events taken out of an HTTP stream by C feed the JSON scanner unchanged."""
    resp = http_chunked(CHAT, [11])
    events = lib.run(HTTP_SSE, resp).events
    got = [lib.json(e) for e in events]
    assert [rc for rc, _ in got] == [0, 0, 0, 0, 0, -FB_ERR_JSON]
    assert [f["has_content"] for _, f in got[:-1]] == [0, 1, 1, 1, 0]
    assert [f["has_finish"] for _, f in got[:-1]] == [0, 0, 0, 1, 0]
    assert [f["n_choices"] for _, f in got[:-1]] == [1, 1, 1, 1, 0]
    assert struct.calcsize("=I") == 4


def test_cached_tokens_survive_every_split_of_the_stream(lib: Lib) -> None:
    """The final usage chunk's prompt_tokens_details, cut anywhere by the reads and the chunk framing:
    the same events come out of every split, and the scan reads the cached tokens from each whole."""
    details = {**_usage(1040, 3), "prompt_tokens_details": {"cached_tokens": 1024}}
    stream = (_chat_chunk({"role": "assistant", "content": ""}, usage=_usage(1040, 0))
              + _chat_chunk({"content": "Hi"}, usage=_usage(1040, 1))
              + _chat_chunk({"content": "!"}, finish="stop", usage=_usage(1040, 3))
              + _data({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": [], "usage": details})
              + DONE)
    for resp in (http_chunked(stream, [7, 3, 13]), http_length(stream)):
        whole = lib.run(HTTP_SSE, resp)
        assert whole.res.rc == 0
        facts = [lib.json(e)[1] for e in whole.events[:-1]]
        assert [f["cached_tokens"] for f in facts] == [-1, -1, -1, 1024]
        assert facts[-1] == _facts(completion_tokens=3, prompt_tokens=1040, total_tokens=1043, cached_tokens=1024,
                                   has_usage=1, n_choices=0)
        bad, cuts = lib.check_splits(HTTP_SSE, resp, whole)
        assert bad == 0, f"split at {cuts[0]} differs"
        assert lib.run_bytewise(HTTP_SSE, resp).events == whole.events
    bad, cuts = lib.check_splits(SSE, stream, lib.run(SSE, stream), pieces=3, cap0=1)
    assert bad == 0, f"splits at {cuts} differ"


# ---------------------------------------------------------------------------------------------
# Whole JSON answers (embeddings, pooling, score, rerank): the body kept whole, scanned once at its end


JSON_HEADERS = [("Content-Type", "application/json")]
# The answers as vLLM 0.32 shapes them (entrypoints/pooling/*/protocol.py), floats and all.
WHOLE_ANSWERS: dict[str, tuple[dict[str, Any], dict[str, int]]] = {
    "embeddings": ({"id": "embd-1", "object": "list", "created": 1, "model": "m",
                    "data": [{"index": 0, "object": "embedding", "embedding": [0.125, -1.5e-3, 3.0]},
                             {"index": 1, "object": "embedding", "embedding": [1.0, 2.0, -0.0]}],
                    "usage": {"prompt_tokens": 9, "total_tokens": 9, "completion_tokens": 0,
                              "prompt_tokens_details": None}},
                   {"prompt_tokens": 9, "total_tokens": 9, "completion_tokens": 0, "has_usage": 1, "n_data": 2}),
    "pooling": ({"id": "pool-1", "object": "list", "created": 1, "model": "m",
                 "data": [{"index": 0, "object": "pooling", "data": [[0.5, 0.25], [1.0, 2.0]]}],
                 "usage": {"prompt_tokens": 4, "total_tokens": 4}},
                {"prompt_tokens": 4, "total_tokens": 4, "has_usage": 1, "n_data": 1}),
    "score": ({"id": "score-1", "object": "list", "created": 1, "model": "m",
               "data": [{"index": 0, "object": "score", "score": 0.9}, {"index": 1, "object": "score", "score": 0.1},
                        {"index": 2, "object": "score", "score": 0.5}],
               "usage": {"prompt_tokens": 30, "total_tokens": 30}},
              {"prompt_tokens": 30, "total_tokens": 30, "has_usage": 1, "n_data": 3}),
    "rerank": ({"id": "rerank-1", "model": "m", "usage": {"total_tokens": 21},
                "results": [{"index": 1, "document": {"text": "b"}, "relevance_score": 0.9},
                            {"index": 0, "document": {"text": "a"}, "relevance_score": 0.2}]},
               {"total_tokens": 21, "has_usage": 1, "n_data": 2, "has_content": 1}),
    "no_usage": ({"object": "list", "data": [{"index": 0, "embedding": [1.0]}]}, {"n_data": 1}),
}


@pytest.mark.parametrize("name", WHOLE_ANSWERS)
def test_whole_answer_every_split(lib: Lib, name: str) -> None:
    """A whole answer, Content-Length or chunked, cut anywhere into 2 or 3 pieces: kept whole, its usage and its
    results counted by the one scan at its end, the same for every split."""
    obj, want = WHOLE_ANSWERS[name]
    body = json.dumps(obj, separators=(",", ":")).encode()
    for resp in (http_length(body, headers=JSON_HEADERS), http_chunked(body, [5, 17, 1], headers=JSON_HEADERS)):
        whole = lib.run(HTTP_JSON, resp)
        assert whole.res.rc == 0 and whole.res.http_state == S_DONE and not whole.res.event_stream
        assert lib.whole_json(whole) == (0, _facts(**want))
        assert lib.whole_json(lib.run_bytewise(HTTP_JSON, resp)) == (0, _facts(**want))
        bad, cuts = lib.check_splits(HTTP_JSON, resp, whole)
        assert bad == 0, f"split at {cuts[0]} differs"
        bad, cuts = lib.check_splits(HTTP_JSON, resp, whole, pieces=3)
        assert bad == 0, f"splits at {cuts} differ"


def test_whole_answer_grows_once_and_stops_at_its_cap(lib: Lib) -> None:
    """The buffer grows to the body (any split) and no further; a body over the cap is refused, not cut."""
    body = json.dumps({"data": [{"embedding": [0.1] * 300}], "usage": {"prompt_tokens": 3}}).encode()
    resp = http_length(body, headers=JSON_HEADERS)
    assert lib.whole_json(lib.run(HTTP_JSON, resp, [40, 900], cap_max=len(body)))[1]["prompt_tokens"] == 3
    over = lib.run(HTTP_JSON, resp, [40, 900], cap_max=len(body) - 1)
    assert over.res.rc == FBT_ERR_BODY_CAP and over.out == b""


@pytest.mark.parametrize(("name", "body"), [
    ("sse_in_json", b'data: {"choices":[]}\n\n'),
    ("cut", b'{"data":[{"embedding":[1.0,'),
    ("two_objects", b'{"usage":{"prompt_tokens":1}}{"usage":{}}'),
    ("html", b"<html>502 Bad Gateway</html>"),
])
def test_whole_answer_not_one_object_is_an_error_with_no_facts(lib: Lib, name: str, body: bytes) -> None:
    """What is not exactly one JSON object reads as an error and no half-read facts, whatever the split."""
    resp = http_length(body, headers=JSON_HEADERS)
    whole = lib.run(HTTP_JSON, resp)
    assert lib.whole_json(whole) == (-FB_ERR_JSON, _facts())
    assert lib.check_splits(HTTP_JSON, resp, whole)[0] == 0


@pytest.mark.parametrize(("harness", "sources", "seeds_dir"), [
    ("fuzz_http_sse.c", ["fb_http.c", "fb_sse.c", "fb_json.c"], "seeds"),
    ("fuzz_trace.c", ["fb_trace.c"], "seeds_trace"),
])
def test_fuzz_seeds_replay(tmp_path: Path, harness: str, sources: list[str], seeds_dir: str) -> None:
    """Each fuzz harness (fuzz/) builds as a plain driver and passes on its seeds."""
    import shutil
    import subprocess

    from support.csrc import CSRC, ROOT

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "fuzz_driver"
    srcs = [ROOT / "fuzz" / harness, *(CSRC / name for name in sources)]
    subprocess.run(
        [
            cc,
            "-std=c99",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-DFB_FUZZ_STANDALONE",
            f"-I{CSRC}",
            *map(str, srcs),
            "-lm",
            "-o",
            str(exe),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    seeds = sorted((ROOT / "fuzz" / seeds_dir).iterdir())
    assert seeds
    subprocess.run([str(exe), *map(str, seeds)], check=True, timeout=60)
