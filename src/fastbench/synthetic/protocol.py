"""The synthetic server's HTTP/1.1 protocol: one client connection, its requests read one after another.

Part of the synthetic server (see ``fastbench.synthetic``); imports nothing from the fastbench client.

``Connection`` parses each request (request line, headers, a Content-Length body, ``Expect:
100-continue``), hands it to the engine, and writes the response: keep-alive, sequential requests, reads
split anywhere, ``Connection: close`` and HTTP/1.0 honoured, chunked request bodies refused (501). The
``trickle`` fault writes through it one byte at a time; ``reset()`` aborts with a TCP RST.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import TYPE_CHECKING, cast

import orjson

if TYPE_CHECKING:
    from fastbench.synthetic.contracts import ConnectionHost, Request

_now = time.monotonic_ns

_MAX_HEAD = 65536
_MAX_BODY = 64 * 1024 * 1024

_STATUS: dict[int, bytes] = {
    100: b"100 Continue",
    200: b"200 OK",
    400: b"400 Bad Request",
    404: b"404 Not Found",
    405: b"405 Method Not Allowed",
    413: b"413 Content Too Large",
    429: b"429 Too Many Requests",
    431: b"431 Request Header Fields Too Large",
    500: b"500 Internal Server Error",
    501: b"501 Not Implemented",
}
_ERROR_TYPE: dict[int, str] = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    413: "BadRequestError",
    429: "RateLimitError",
    431: "BadRequestError",
    500: "InternalServerError",
    501: "NotImplementedError",
}


def error_body(status: int, message: str) -> bytes:
    """An error body in vLLM's shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return orjson.dumps(
        {"error": {"message": message, "type": _ERROR_TYPE.get(status, "Error"), "param": None, "code": status}}
    )


class Connection(asyncio.Protocol):
    """One client connection: parses requests one after another, hands each to the engine."""

    def __init__(self, eng: ConnectionHost) -> None:
        self.eng = eng
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.in_process = False
        self.close_after = False
        self.eof = False
        self.paused = False
        self.sent_continue = False
        self.gen: Request | None = None
        self.trickle = False
        self.tq = bytearray()
        self.trickling = False
        self.finish_pending = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TCPTransport is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.eng.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.eng.conns.discard(self)
        self.transport = None  # breaks the transport <-> protocol cycle (the collector is off)
        g = self.gen
        if g is not None:
            g.end("abort")
        self.gen = None
        self.tq.clear()

    def eof_received(self) -> bool:
        self.eof = True
        return self.busy  # True: keep writing the response in progress, close after it

    def data_received(self, data: bytes) -> None:
        t = _now()
        self.buf += data
        if not self.busy:
            self.process(t)
        elif len(self.buf) > _MAX_HEAD and not self.paused and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True

    # -- output -----------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        tr = self.transport
        if tr is None:
            return
        if self.trickle:
            self.tq += data
            if not self.trickling:
                self.trickling = True
                self.eng.sched.push(_now(), self._trickle_tick)
            return
        tr.write(data)

    def _trickle_tick(self, due: int) -> None:
        tr = self.transport
        if tr is None:
            self.trickling = False
            return
        tr.write(bytes(self.tq[:1]))
        del self.tq[:1]
        if self.tq:
            self.eng.sched.push(due + self.eng.cfg.trickle_us * 1000, self._trickle_tick)
            return
        self.trickling = False
        if self.finish_pending:
            self.finish_pending = False
            self.trickle = False
            self.response_done()

    def respond(self, status: int, body: bytes, ctype: bytes = b"application/json",
                extra: bytes = b"") -> None:
        self.write(b"HTTP/1.1 %b\r\nserver: fastbench-synthetic\r\ncontent-type: %b\r\ncontent-length: %d\r\n"
                   b"%b%b\r\n%b" % (_STATUS[status], ctype, len(body), extra,
                                    b"connection: close\r\n" if self.close_after else b"", body))
        self.response_done()

    def reset(self) -> None:
        """Abort the connection with a TCP RST."""
        tr = self.transport
        if tr is None:
            return
        sock = tr.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        g = self.gen
        if g is not None:
            g.end("abort")
        tr.abort()

    def response_done(self) -> None:
        """The current response is complete: close, or go on with the next buffered request."""
        if self.trickle and (self.trickling or self.tq):
            self.finish_pending = True
            return
        self.trickle = False
        self.busy = False
        self.gen = None
        tr = self.transport
        if tr is None:
            return
        if self.close_after or (self.eof and not self.buf):
            tr.close()
            self.transport = None
            return
        if self.paused:
            self.paused = False
            tr.resume_reading()
        if self.buf and not self.in_process:
            self.process(_now())

    # -- input ------------------------------------------------------------------------------------

    def _fail(self, status: int, message: str) -> None:
        self.close_after = True
        self.busy = True
        self.respond(status, error_body(status, message))

    def process(self, t: int) -> None:
        self.in_process = True
        try:
            while not self.busy and self.transport is not None and self.buf:
                buf = self.buf
                while buf[:2] == b"\r\n":
                    del buf[:2]
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > _MAX_HEAD:
                        self._fail(431, "request head too large")
                    return
                lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    self._fail(400, "malformed request line")
                    return
                method, target, version = parts
                headers: dict[str, str] = {}
                for ln in lines[1:]:
                    k, sep, v = ln.partition(":")
                    if not sep:
                        self._fail(400, "malformed header line")
                        return
                    headers[k.strip().lower()] = v.strip()
                if "transfer-encoding" in headers:
                    self._fail(501, "chunked request bodies are not supported; send Content-Length")
                    return
                try:
                    cl = int(headers.get("content-length", "0"))
                    if cl < 0:
                        raise ValueError
                except ValueError:
                    self._fail(400, "bad Content-Length")
                    return
                if cl > _MAX_BODY:
                    self._fail(413, "request body too large")
                    return
                total = end + 4 + cl
                if len(buf) < total:
                    if not self.sent_continue and headers.get("expect", "").lower() == "100-continue":
                        self.sent_continue = True
                        if self.transport is not None:
                            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    return
                body = bytes(buf[end + 4:total])
                del buf[:total]
                self.sent_continue = False
                ch = headers.get("connection", "").lower()
                self.close_after = "close" in ch or (version == "HTTP/1.0" and "keep-alive" not in ch)
                self.busy = True
                self.eng.dispatch(self, method, target, body, t)
                t = _now()
        finally:
            self.in_process = False

