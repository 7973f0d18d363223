"""The hostile server: an HTTP/1.1 server on loopback that answers every request the way a broken or
hostile server does, one mode per run. Its own process (a flood must not share the client's loop or
GIL), on asyncio's own loop, and its own code: it shares nothing with fastbench.

    python server.py MODE [--gap-ms G] [--events N]   (prints its port on the first line of stdout)

Modes:
  flood            a stream of output events written as fast as the socket takes them, never ending
  huge-lines       a stream of 1 MiB lines with no field the client keeps (no ``data:``), never ending
  endless          a stream of one output event every --gap-ms, never ending (no [DONE])
  slow-loris       the response head one byte every --gap-ms, never finished
  silent           reads the request and never answers
  overrun          a complete stream (Content-Length), then bytes past that length after --gap-ms
  close-keepalive  a complete stream (Content-Length, no ``Connection: close``), then closes after
                   --gap-ms without reading another request
  normal           a complete stream of --events events, kept alive (the control)
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys

EVENT = b'data: {"choices":[{"index":0,"text":"x","finish_reason":null}]}\n\n'
DONE = b"data: [DONE]\n\n"
STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
CHUNKED = STREAM_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
FLOOD_BLOCK = EVENT * 1024
HUGE_LINE = b"x" * (1 << 20) + b"\n"
OVERRUN = b"these bytes lie past the response's Content-Length and answer nothing"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def whole_stream(events: int) -> bytes:
    """A complete stream with usage on its last event, framed by Content-Length."""
    body = EVENT * (events - 1) + (
        b'data: {"choices":[{"index":0,"text":"x","finish_reason":"length"}],'
        b'"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (events, events + 3)) + DONE
    return STREAM_HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body


async def read_request(reader: asyncio.StreamReader) -> bool:
    """One request's head and body; False at the peer's close."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await reader.readexactly(length)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        return False
    return True


async def answer(mode: str, writer: asyncio.StreamWriter, gap_s: float, events: int) -> bool:
    """Answer one request; False when the connection is to end (the mode closes it)."""
    if mode in ("flood", "huge-lines"):  # as fast as the socket takes them: each write waits for room only
        writer.write(CHUNKED)
        block = chunk(FLOOD_BLOCK if mode == "flood" else HUGE_LINE)
        while True:
            writer.write(block)
            await writer.drain()
    if mode == "endless":
        writer.write(CHUNKED)
        while True:
            writer.write(chunk(EVENT))
            await writer.drain()
            await asyncio.sleep(gap_s)
    if mode == "slow-loris":
        head = CHUNKED[:-2] + b"X-Slow: " + b"z" * 100000
        for i in range(len(head)):
            writer.write(head[i:i + 1])
            await writer.drain()
            await asyncio.sleep(gap_s)
        return False
    if mode == "silent":
        await asyncio.sleep(3600)
        return False
    writer.write(whole_stream(events))
    await writer.drain()
    if mode == "overrun":
        await asyncio.sleep(gap_s)
        writer.write(OVERRUN)
    elif mode == "close-keepalive":
        await asyncio.sleep(gap_s)
        return False
    return True


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mode: str, gap_s: float,
                events: int) -> None:
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while await read_request(reader) and await answer(mode, writer, gap_s, events):
            pass
    except OSError:
        pass  # the client closed its end: what a hostile server's client does
    finally:
        writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["flood", "huge-lines", "endless", "slow-loris", "silent", "overrun",
                                         "close-keepalive", "normal"])
    parser.add_argument("--gap-ms", type=float, default=1.0)
    parser.add_argument("--events", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(listen(args.mode, args.gap_ms / 1000, args.events))


async def listen(mode: str, gap_s: float, events: int) -> None:
    # One thread for every connection: a flood of 256 streams is one runnable thread, not 256 fighting for
    # the CPUs the client runs on.
    server = await asyncio.start_server(lambda r, w: serve(r, w, mode, gap_s, events), "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
