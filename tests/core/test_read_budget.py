"""The work of one wake-up is bounded: a drain reads at most WAKE_READ_BYTES in all, shared by the ready
connections (4 KiB each at least: a batch holds READY_EVENTS), and leaves the rest queued in the kernel for
the next one; the connections a drain did not reach come first in the next.
Judged by the bytes each connection took (its events, each of one known size), not by time."""

from __future__ import annotations

import array
import asyncio
import fcntl
import socket
import termios

import numpy as np

from fastbench._core import Recorder, RunState, StreamConnection
from fastbench.results.records import COL, COLUMNS, ErrorClass, new_histogram

WAKE_READ_BYTES = 1 << 20  # ready.pxd
READY_EVENTS = 256
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
EVENT = b'data: {"choices":[{"index":0,"text":"x","finish_reason":null}]}\n\n'


def _unread(sock: socket.socket) -> int:
    buf = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, buf)
    return buf[0]


def _fill(server: socket.socket, client: socket.socket, want: int) -> int:
    """Write a stream head and events into ``server`` until ``client`` holds ``want`` bytes unread (or the
    kernel takes no more); returns what it holds."""
    server.setblocking(False)
    block = EVENT * 256
    try:
        server.send(HEAD)
        while _unread(client) < want:
            server.send(block)
    except BlockingIOError:
        pass
    return _unread(client)


def _pairs(n: int) -> tuple[list[socket.socket], list[socket.socket]]:
    listener = socket.create_server(("127.0.0.1", 0))
    clients, servers = [], []
    for _ in range(n):
        client = socket.create_connection(listener.getsockname())
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        server, _ = listener.accept()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        clients.append(client)
        servers.append(server)
    listener.close()
    return clients, servers


def _drain(n: int, want: int, drains: int = 1) -> tuple[list[int], list[int]]:
    """``n`` connections, each with a request in flight and at least ``want`` bytes of stream waiting;
    ``drains`` drains. Returns the bytes each took (its head and whole events: a partial event is not counted, so
    at most len(EVENT) - 1 short) and what each still held unread after it."""
    async def main() -> tuple[list[int], list[int]]:
        loop = asyncio.get_running_loop()
        rows = np.zeros((n, len(COLUMNS)), dtype=np.int64)
        state = RunState(rows, *(Recorder(new_histogram()) for _ in range(3)))
        state.set_requests(b"POST / HTTP/1.1\r\nContent-Length: ", [b"{}"] * n)
        clients, servers = _pairs(n)
        conns = [StreamConnection(state, loop, c) for c in clients]
        futures = [conn.start(b"{}", i, 0) for i, conn in enumerate(conns)]
        before = [_fill(s, c, want) for s, c in zip(servers, clients, strict=True)]
        assert all(b >= want for b in before), before
        for _ in range(drains):
            state.drain()
        left = [_unread(c) for c in clients]
        for conn in conns:
            conn.abort(int(ErrorClass.CANCELLED), "test over")  # writes each row: its events so far
        await asyncio.gather(*futures)
        for s in servers:
            s.close()
        took = [len(HEAD) + int(k) * len(EVENT) for k in rows[:, COL["chunks"]]]
        assert sum(rows[:, COL["chunks"]]) == state.counters["output_events"]
        return took, left
    return asyncio.run(main())


def _about(took: int, budget: int) -> bool:
    return budget - len(EVENT) < took <= budget


def test_one_drain_of_one_flooding_connection_reads_at_most_the_budget() -> None:
    took, left = _drain(1, 2 * WAKE_READ_BYTES)
    assert _about(took[0], WAKE_READ_BYTES), took  # all of its budget, then back to the loop
    assert left[0] > 0  # and the rest stays for the next wake-up


def test_a_drain_shares_its_budget_among_the_ready_connections() -> None:
    n = 8
    share = WAKE_READ_BYTES // n
    took, left = _drain(n, 2 * share)
    assert all(_about(t, share) for t in took), took  # each its share, none more: none starves another
    assert all(x > 0 for x in left), left


def test_more_connections_than_a_batch_are_served_in_turn() -> None:
    n = READY_EVENTS + 44
    least = WAKE_READ_BYTES // READY_EVENTS  # 4 KiB
    took, left = _drain(n, 3 * least)
    reached = [t for t in took if t > len(HEAD)]
    assert len(reached) == READY_EVENTS and all(_about(t, least) for t in reached), took  # one batch, then back
    took, left = _drain(n, 3 * least, drains=2)
    # the 44 left out of the first drain came first in the second: after two, every connection read
    assert all(_about(t, least) or _about(t, 2 * least) for t in took), took
    assert 2 * WAKE_READ_BYTES - n * len(EVENT) < sum(took) <= 2 * WAKE_READ_BYTES  # each drain its 1 MiB
