"""The hostile server: an HTTP/1.1 server on loopback that answers every request the way a broken or
hostile server does, one mode per run. Its own process (a flood must not share the client's loop or
GIL) and its own code: it shares nothing with fastbench.

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
import socket
import sys
import threading
import time

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


def read_request(conn: socket.socket, pending: bytearray) -> bool:
    """One request's head and body out of ``pending`` (read more as needed); False at the peer's close."""
    while b"\r\n\r\n" not in pending:
        data = conn.recv(65536)
        if not data:
            return False
        pending += data
    head, _, rest = bytes(pending).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return False
        rest += data
    pending[:] = rest[length:]
    return True


def answer(mode: str, conn: socket.socket, gap_s: float, events: int) -> bool:
    """Answer one request; False when the connection is to end (the mode closes it)."""
    if mode == "flood":
        conn.sendall(CHUNKED)
        block = chunk(FLOOD_BLOCK)
        while True:
            conn.sendall(block)
    if mode == "huge-lines":
        conn.sendall(CHUNKED)
        block = chunk(HUGE_LINE)
        while True:
            conn.sendall(block)
    if mode == "endless":
        conn.sendall(CHUNKED)
        while True:
            conn.sendall(chunk(EVENT))
            time.sleep(gap_s)
    if mode == "slow-loris":
        head = CHUNKED[:-2] + b"X-Slow: " + b"z" * 100000
        for i in range(len(head)):
            conn.sendall(head[i:i + 1])
            time.sleep(gap_s)
        return False
    if mode == "silent":
        time.sleep(3600)
        return False
    if mode == "overrun":
        conn.sendall(whole_stream(events))
        time.sleep(gap_s)
        conn.sendall(OVERRUN)
        return True
    if mode == "close-keepalive":
        conn.sendall(whole_stream(events))
        time.sleep(gap_s)
        return False
    conn.sendall(whole_stream(events))
    return True


def serve(conn: socket.socket, mode: str, gap_s: float, events: int) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pending = bytearray()
    try:
        while read_request(conn, pending) and answer(mode, conn, gap_s, events):
            pass
    except OSError:
        pass  # the client closed its end: what a hostile server's client does
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["flood", "huge-lines", "endless", "slow-loris", "silent", "overrun",
                                         "close-keepalive", "normal"])
    parser.add_argument("--gap-ms", type=float, default=1.0)
    parser.add_argument("--events", type=int, default=8)
    args = parser.parse_args()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, args.mode, args.gap_ms / 1000, args.events), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
