"""A scripted HTTP server for client-core tests: each request is answered by a script of
(bytes, delay) steps, so a test controls framing, splits, timing and faults exactly.

It shares no code with fastbench (it is the yardstick of these tests).
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import Callable, Iterable

Step = bytes | float | str  # bytes: write them; float: sleep seconds; "close"/"reset": end the connection
Script = Callable[[int, bytes], Iterable[Step]]  # (request number, request body) -> steps


def sse(obj: object) -> bytes:
    text = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return b"data: " + text.encode() + b"\n\n"


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CHUNKED_END = b"0\r\n\r\n"


def completion_chunk(text: str, completion_tokens: int | None, prompt_tokens: int = 7,
                     finish: str | None = None, **extra: object) -> dict:
    chunk: dict = {
        "id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
    }
    if completion_tokens is not None:
        chunk["usage"] = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                          "completion_tokens": completion_tokens}
    chunk.update(extra)
    return chunk


def chat_chunk(delta: dict, completion_tokens: int | None, prompt_tokens: int = 7,
               finish: str | None = None) -> dict:
    chunk: dict = {
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if completion_tokens is not None:
        chunk["usage"] = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                          "completion_tokens": completion_tokens}
    return chunk


def stream_script(tokens_per_chunk: Iterable[int], ttft_s: float = 0.0, gap_s: float = 0.0,
                  usage: str = "per-chunk") -> list[Step]:
    """A vLLM-like completions stream: one chunk per entry of tokens_per_chunk."""
    steps: list[Step] = [STREAM_HEAD, ttft_s]
    total = 0
    counts = list(tokens_per_chunk)
    for i, k in enumerate(counts):
        total += k
        last = i == len(counts) - 1
        ct = total if usage == "per-chunk" or (usage == "final" and last) else None
        steps.append(chunked(sse(completion_chunk("w" * k, ct, finish="length" if last else None))))
        if not last:
            steps.append(gap_s)
    if usage != "none":
        final = completion_chunk("", total)
        final["choices"] = []
        steps.append(chunked(sse(final)))
    steps.append(chunked(sse("[DONE]")) + CHUNKED_END)
    return steps


class ScriptedServer:
    """Answers every request on every connection with ``script(n, body)``; n counts requests."""

    def __init__(self, script: Script, close_after_each: bool = False, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.close_after_each = close_after_each
        self.tls = tls
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body) as received
        self.connections = 0
        self._server: asyncio.base_events.Server | None = None

    async def __aenter__(self) -> ScriptedServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"https://localhost:{port}" if self.tls else f"http://127.0.0.1:{port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                n = len(self.requests)
                self.requests.append((head, body))
                for step in self.script(n, body):
                    if isinstance(step, bytes):
                        writer.write(step)
                        await writer.drain()
                    elif isinstance(step, float):
                        if step > 0:
                            await asyncio.sleep(step)
                    elif step == "close":
                        writer.close()
                        return
                    elif step == "reset":
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                        writer.transport.abort()
                        return
                if self.close_after_each:
                    writer.close()
                    return
        except ConnectionError:
            return
