"""A tiny raw-socket HTTP/1.1 + SSE client for testing the synthetic server, and a load check.

Independent of fastbench's client and of the server's own code: it parses responses by hand.

Load check (256 streams x 100 chunks at 20 ms, client in this process, server in its own)::

    PYTHONPATH=src .venv/bin/python tests/support/synthetic_helpers.py --streams 256 --chunks 100
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from typing_extensions import Self

_now = time.monotonic_ns


@dataclass
class Response:
    status: int
    reason: str
    headers: dict[str, str]
    body: bytes = b""
    events: list[tuple[int, bytes]] = field(default_factory=list)  # (receive ns, payload of "data:")
    first_byte_ns: int = 0
    end_ns: int = 0
    sent_ns: int = 0
    reads: int = 0

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def datas(self) -> list[bytes]:
        return [d for _, d in self.events]

    def chunks(self) -> list[dict[str, Any]]:
        """Parsed JSON of every data event except [DONE]."""
        return [json.loads(d) for d in self.datas if d != b"[DONE]"]


class RawConn:
    """One keep-alive connection."""

    def __init__(self, base_url: str) -> None:
        u = urlsplit(base_url)
        assert u.hostname is not None and u.port is not None
        self.host, self.port = u.hostname, u.port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.buf = b""
        self.eof = False

    async def connect(self) -> Self:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=1 << 24)
        return self

    async def __aenter__(self) -> Self:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    @staticmethod
    def build(method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> bytes:
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        h = {"Host": "test", "Content-Type": "application/json", "Content-Length": str(len(data))}
        if method == "GET" and body is None:
            h.pop("Content-Type")
            h.pop("Content-Length")
        h.update(headers or {})
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        return head.encode() + data

    async def send(self, raw: bytes, pieces: int = 1, gap_s: float = 0.0) -> int:
        """Write raw bytes, optionally in `pieces` writes gap_s apart; returns the send time (ns)."""
        assert self.writer is not None
        n = max(1, pieces)
        step = max(1, -(-len(raw) // n))
        t = 0
        for i in range(0, len(raw), step):
            t = _now()
            self.writer.write(raw[i:i + step])
            await self.writer.drain()
            if gap_s and i + step < len(raw):
                await asyncio.sleep(gap_s)
        return t

    async def _fill(self) -> int:
        assert self.reader is not None
        data = await self.reader.read(1 << 20)
        t = _now()
        if not data:
            self.eof = True
            raise EOFError("connection closed by server")
        self.buf += data
        return t

    async def request(self, method: str, path: str, body: Any = None,
                      headers: dict[str, str] | None = None, pieces: int = 1, gap_s: float = 0.0) -> Response:
        sent = await self.send(self.build(method, path, body, headers), pieces, gap_s)
        r = await self.read_response()
        r.sent_ns = sent
        return r

    async def read_response(self) -> Response:
        t = 0
        while True:
            while b"\r\n\r\n" not in self.buf:
                t = await self._fill()
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            _, status_s, reason = (lines[0].split(" ", 2) + [""])[:3]
            status = int(status_s)
            if status != 100:
                break
        headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
        r = Response(status, reason, headers, first_byte_ns=t)
        if headers.get("transfer-encoding", "").lower() == "chunked":
            payload = b""
            body = bytearray()
            while True:
                # consume every complete chunk in the buffer
                done = False
                while True:
                    nl = self.buf.find(b"\r\n")
                    if nl < 0:
                        break
                    size = int(self.buf[:nl].split(b";")[0], 16)
                    if len(self.buf) < nl + 2 + size + 2:
                        break
                    data = self.buf[nl + 2:nl + 2 + size]
                    assert self.buf[nl + 2 + size:nl + 4 + size] == b"\r\n", "bad chunk framing"
                    self.buf = self.buf[nl + 4 + size:]
                    if size == 0:
                        done = True
                        break
                    body += data
                    payload += data
                while b"\n\n" in payload:
                    ev, payload = payload.split(b"\n\n", 1)
                    for line in ev.split(b"\n"):
                        if line.startswith(b"data:"):
                            r.events.append((t, line[5:].strip()))
                if done:
                    break
                t = await self._fill()
                r.reads += 1
            r.body = bytes(body)
        elif "content-length" in headers:
            n = int(headers["content-length"])
            while len(self.buf) < n:
                t = await self._fill()
            r.body, self.buf = self.buf[:n], self.buf[n:]
        else:
            try:
                while True:
                    t = await self._fill()
            except EOFError:
                pass
            r.body, self.buf = self.buf, b""
        r.end_ns = t
        return r

    async def closed_by_server(self, timeout_s: float = 2.0) -> bool:
        """True when the server closes the connection (EOF or reset) within timeout_s."""
        assert self.reader is not None
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout_s)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except asyncio.TimeoutError:
            return False
        return data == b""


async def request(base_url: str, method: str, path: str, body: Any = None,
                  headers: dict[str, str] | None = None) -> Response:
    async with RawConn(base_url) as c:
        return await c.request(method, path, body, headers)


def stream_body(max_tokens: int, chat: bool = False, usage: bool = True, continuous: bool = True,
                prompt: str = "hello world", **extra: Any) -> dict[str, Any]:
    b: dict[str, Any] = {"model": "fastbench-synthetic", "max_tokens": max_tokens, "stream": True,
                         "ignore_eos": True}
    if chat:
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    if usage:
        b["stream_options"] = {"include_usage": True, "continuous_usage_stats": continuous}
    b.update(extra)
    return b


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


# --------------------------------------------------------------------------------------------------
# Load check


async def load(base_url: str, streams: int, chunks: int, stagger_ms: float = 0.0) -> dict[str, Any]:
    """`streams` concurrent streams of `chunks` one-token chunks; client-side view of the schedule."""
    conns = [await RawConn(base_url).connect() for _ in range(streams)]
    body = stream_body(chunks, usage=False)
    raw = RawConn.build("POST", "/v1/completions", body)

    async def one(i: int, c: RawConn) -> Response:
        if stagger_ms:
            await asyncio.sleep(stagger_ms / 1000.0 * i / streams)
        return await _go(c)

    async def _go(c: RawConn) -> Response:
        sent = await c.send(raw)
        r = await c.read_response()
        r.sent_ns = sent
        return r

    gc.collect()
    gc.disable()
    t0 = _now()
    try:
        rs = await asyncio.gather(*(one(i, c) for i, c in enumerate(conns)))
    finally:
        gc.enable()
    wall = (_now() - t0) / 1e9
    for c in conns:
        c.close()
    skew: list[float] = []
    ttft: list[float] = []
    itl: list[float] = []
    for r in rs:
        assert r.status == 200, r.status
        evs = [(t, json.loads(d)) for t, d in r.events if d != b"[DONE]"]
        assert len(evs) == chunks, len(evs)
        sents = [e["fb_sent_ns"] for _, e in evs]
        skew += [(t - s) / 1e6 for (t, _), s in zip(evs, sents)]
        ttft.append((evs[0][0] - r.sent_ns) / 1e6)
        itl += [(b - a) / 1e6 for a, b in itertools.pairwise(sents)]
    return {
        "streams": streams, "chunks": chunks, "wall_s": wall, "chunks_per_s": streams * chunks / wall,
        "client_skew_ms": {"p50": pct(skew, .5), "p99": pct(skew, .99), "max": max(skew)},
        "ttft_ms": {"p50": pct(ttft, .5), "p99": pct(ttft, .99)},
        "server_itl_ms": {"p50": pct(itl, .5), "p1": pct(itl, .01), "p99": pct(itl, .99)},
    }


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux)."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _main() -> int:
    sys.path.insert(0, "src")
    from fastbench.synthetic import SyntheticServer

    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--chunks", type=int, default=100)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--timer", default="auto")
    ap.add_argument("--stagger-ms", type=float, nargs="*", default=[0.0, 20.0])
    a = ap.parse_args()
    import uvloop

    with SyntheticServer(ttft_ms=50, itl_ms=a.itl_ms, timer=a.timer, max_model_len=100000) as srv:
        uvloop.run(load(srv.base_url, 8, 5))  # warm-up
        for stagger in a.stagger_ms:
            srv.reset_stats()
            cpu0 = _cpu_s(srv.pid)
            res = uvloop.run(load(srv.base_url, a.streams, a.chunks, stagger))
            cpu = _cpu_s(srv.pid) - cpu0
            st = srv.stats()
            print(json.dumps({"stagger_ms": stagger, "client": res,
                              "server_cpu_s": cpu, "server_cpu_us_per_chunk": cpu / st["chunks_sent"] * 1e6,
                              "server_lateness_ms": st["lateness"], "streams_max": st["streams_max"],
                              "chunks_sent": st["chunks_sent"], "timer": st["timer"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
