"""The run's connections, which every schedule sends on: resolving and connecting (TLS too), one send
with its retry on a kept-alive connection the server had closed, the idle ones kept for reuse (or, in
open loop, in the core's pool, topped up ahead of need), and the rows of requests that never reached
the server. And RunStop, the stop every part of a run looks at.
"""

from __future__ import annotations

import asyncio
import errno
import math
import os
import resource
import socket
import ssl
from collections.abc import Callable
from typing import Any

import numpy as np

from fastbench._core import BodyParts, Dispatcher, RunState, SharedDispatcher, StreamConnection, now_ns
from fastbench.exceptions import ServerError
from fastbench.load.plan import LoadPlan, Target
from fastbench.results.records import COL, ErrorClass

# The open loop's pool is filled before the window opens; a connect slower than this (an unreachable
# host) is left to the arrivals, which record it on their rows.
POOL_FILL_WAIT_S = 2.0

Spawn = Callable[[Any], None]  # starts a coroutine as a task the caller keeps


class RunStop:
    """Whether, why and when the run stopped; ``hooks`` wake what waits (a schedule's own timers)."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.stopping = False
        self.reason = "completed"
        self.at_ns = 0
        self.hooks: list[Callable[[], None]] = []
        self._future: asyncio.Future[None] | None = None

    def stop(self, reason: str, at_ns: int | None = None) -> None:
        """Stop sending; cancel what is in flight (it is counted as cancelled, not failed). ``at_ns``: the
        instant the run stopped, when it is not now (the time cap's, which the loop's timer passes by up to
        a millisecond): an arrival due after it never arrived."""
        if self.stopping:
            return
        self.stopping = True
        self.state.stopping = True
        self.reason = reason
        self.at_ns = now_ns() if at_ns is None else min(now_ns(), at_ns)
        for hook in self.hooks:
            hook()
        for conn in self.state.busy_connections():
            conn.abort(int(ErrorClass.CANCELLED), f"in flight when the run stopped ({reason})")

    def future(self) -> asyncio.Future[None]:
        """A future done once the run stops (now, if it has): what a schedule's timers wait on beside their
        time. One per run, made on the first call."""
        if self._future is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._future = done

            def stopped() -> None:
                if not done.done():
                    done.set_result(None)

            self.hooks.append(stopped)
            if self.stopping:
                stopped()
        return self._future

    async def sleep_until(self, due_ns: int) -> None:
        """Wait until ``due_ns`` or the stop, whichever comes first. The loop's timers have a millisecond's
        grain and may wake a little early: it waits again for what is left, so nothing goes out before it is
        due."""
        stopped = self.future()
        while (delay_ns := due_ns - now_ns()) > 0 and not stopped.done():
            await asyncio.wait([stopped], timeout=delay_ns / 1e9)

    def past_cap(self) -> bool:
        """Whether the run is stopping, stopping it at the time cap's instant first when that has passed and
        the loop's timer for it (up to a millisecond late) has not fired yet: no request begins after it."""
        cap_ns = self.state.send_until_ns
        if not self.stopping and now_ns() >= cap_ns:
            self.stop("time cap", cap_ns)
        return self.stopping


class Connections:
    """The connections of one run over one RunState, and the sends on them."""

    def __init__(self, target: Target, plan: LoadPlan, state: RunState, rows: np.ndarray, stop: RunStop) -> None:
        self.target = target
        self.plan = plan
        self.state = state
        self.rows = rows
        self.stop = stop
        self.idle: list[StreamConnection] = []
        # open loop: the core's sender, while it runs; it holds the idle connections (state.pool) then
        self.dispatcher: Dispatcher | None = None
        self.stale_retries = 0
        self._addr: tuple[Any, ...] | None = None
        self._family = socket.AF_INET
        self._ssl_context: ssl.SSLContext | None = None
        self._warming = 0  # pool connections being opened
        self._warm_paused_until = 0

    async def resolve(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(self.target.host, self.target.port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ServerError(f"cannot resolve {self.target.host}: {exc.strerror or exc}") from None
        family, _, _, _, addr = infos[0]
        self._family, self._addr = family, addr
        if self.target.scheme == "https":
            ctx = ssl.create_default_context()
            if not self.plan.verify_tls:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["http/1.1"])
            self._ssl_context = ctx

    async def connect(self) -> StreamConnection:
        loop = asyncio.get_running_loop()
        sock = socket.socket(self._family, socket.SOCK_STREAM)
        sock.setblocking(False)
        assert self._addr is not None, "resolved in run() before any connection"
        try:
            await loop.sock_connect(sock, self._addr)
            if self._ssl_context is None:
                return StreamConnection(self.state, loop, sock)
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = self._ssl_context.wrap_bio(incoming, outgoing, server_hostname=self.target.host)
            await _handshake(loop, sock, tls, incoming, outgoing)
            return StreamConnection(self.state, loop, sock, tls, incoming, outgoing)
        except BaseException:
            sock.close()
            raise

    async def send_one(self, body: bytes | BodyParts, row: int, scheduled_ns: int,
                       sent: tuple[StreamConnection, asyncio.Future[int]] | None = None,
                       reserved: bool = False, retried: int | None = None) -> int:
        """Send one request on an idle or new connection; returns the ErrorClass value of the
        last request of its chain (the core chains further requests itself: in closed loop the next
        one, in open loop the next one already due).
        ``sent``: the request already went out on this connection (the opening burst).
        ``reserved``: it holds a slot in the core's count (open loop) until it is sent or given up.
        ``retried``: the row already met a stale connection once; it is sent on a new connection."""
        # --workers' shared cap: a reserved send holds one of the run's slots (claim_due_with_slot, or a
        # stale retry's), kept through its retries and given back at its end
        shared = self.dispatcher if reserved and isinstance(self.dispatcher, SharedDispatcher) else None
        # a retry goes out on a connection of its own: an idle one may be as stale as the one that failed
        fresh = retried is not None
        try:
            while True:
                if sent is not None:
                    conn, pending = sent
                    sent = None
                else:
                    connect_ns = 0
                    idle = None if fresh else self.take_idle()
                    if idle is not None:
                        conn = idle
                    else:
                        t0 = now_ns()
                        try:
                            conn = await self.connect()
                        except (OSError, ssl.SSLError, ConnectionError) as exc:
                            self.record_connect_failure(row, scheduled_ns, t0, exc)
                            return int(ErrorClass.CONNECT)
                        connect_ns = now_ns() - t0
                    if self.stop.stopping:  # warm-ups too: a stop during their connect sends nothing
                        conn.close()
                        return int(ErrorClass.CANCELLED)
                    if reserved:  # the slot is the request's now (the core counts it in flight)
                        self.state.reserved -= 1
                        reserved = False
                    pending = conn.start(body, row, scheduled_ns, connect_ns)
                error = await pending
                # A kept-alive connection the server had already closed fails before any byte of a
                # response: that is the connection's fault, not the request's, so try once more.
                if (error == ErrorClass.CONNECT and conn.last_was_reused and conn.row != retried
                        and not self.stop.stopping):
                    row = retried = conn.row
                    fresh = True
                    if row >= 0:  # a measured request (a warm-up's re-send is not counted)
                        scheduled_ns = int(self.rows[row, COL["scheduled_ns"]])
                        self.undo_failure(row)
                        body = self.state.body(row)
                        self.stale_retries += 1
                    if self.dispatcher is not None:  # the slot stays held while it connects again
                        self.state.reserved += 1
                        reserved = True
                    continue
                if conn.is_usable:
                    if self.dispatcher is not None:
                        self.state.park(conn)
                    else:
                        self.idle.append(conn)
                return int(error)
        finally:
            if reserved:
                self.state.reserved -= 1
            if shared is not None:
                shared.give_slot()

    def take_idle(self) -> StreamConnection | None:
        """A kept-alive connection to reuse. One the server closed while it sat idle (its end of
        stream was read then) is dropped here, not sent on."""
        if self.dispatcher is not None:
            return self.state.pool.take_idle()
        while self.idle:
            conn = self.idle.pop()
            if conn.is_usable:
                return conn
        return None

    def close_idle(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()

    # -- the open loop's pool of connections opened ahead of need -----------------------------

    def pool_target(self) -> int:
        """Idle connections the open loop keeps ready: enough for the arrivals of ~20 ms (a connect
        takes ~0.1 ms on loopback, a TLS handshake a few ms), and a few for bursts."""
        rate = float(self.plan.request_rate or 0.0)
        return min(self.plan.concurrency, math.ceil(rate * 0.02) + 8)

    @property
    def warming(self) -> int:
        """Pool connections being opened."""
        return self._warming

    async def fill_pool(self) -> None:
        """Open loop, before the window opens: the warm-ups' connections into the pool, and the pool
        filled, so that the first arrivals (Poisson gaps can be microseconds) find connections ready
        instead of racing the top-up for a handshake. A connect still going after POOL_FILL_WAIT_S is
        given up; the arrivals then connect for themselves and record what happened on their rows."""
        for conn in self.idle:
            self.state.park(conn)
        self.idle.clear()
        connects: set[asyncio.Future[None]] = set()
        self.top_up(self.pool_target(), lambda coro: connects.add(asyncio.ensure_future(coro)))
        if connects:
            _, late = await asyncio.wait(connects, timeout=POOL_FILL_WAIT_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*connects, return_exceptions=True)

    def top_up(self, target: int, spawn: Spawn) -> None:
        """Open connections ahead of need, so that an arrival never waits for a handshake: up to
        ``target`` idle ones, and never more connections than the concurrency limit (in flight,
        held for a send, idle and connecting together). After a failed connect, none for 0.1 s (the
        arrivals then connect for themselves and record the failure on their rows)."""
        state = self.state
        room = self.plan.concurrency - (state.in_flight + state.reserved + len(state.pool) + self._warming)
        want = min(target - len(state.pool) - self._warming, room)
        # Below half the target the core asks for more (on_wake); none when no room is left.
        state.pool.low = target // 2 + 1 if room > 0 else 0
        if self.stop.stopping or now_ns() < self._warm_paused_until:
            return
        for _ in range(max(0, want)):
            self._warming += 1
            spawn(self._warm_one())

    async def _warm_one(self) -> None:
        try:
            conn = await self.connect()
        except (OSError, ssl.SSLError, ConnectionError):
            self._warm_paused_until = now_ns() + 100_000_000
            return
        finally:
            self._warming -= 1
        if self.stop.stopping:
            conn.close()
            return
        self.state.park(conn)

    # -- rows of requests that never reached the server ---------------------------------------

    def record_connect_failure(self, row: int, scheduled_ns: int, t0: int, exc: BaseException) -> None:
        if row < 0:
            return
        end = now_ns()
        r = self.rows[row]
        r[COL["index"]] = row
        r[COL["scheduled_ns"]] = scheduled_ns
        r[COL["sent_ns"]] = t0
        r[COL["end_ns"]] = end
        r[COL["prompt_tokens"]] = -1
        r[COL["cached_tokens"]] = -1
        r[COL["error"]] = int(ErrorClass.CONNECT)
        r[COL["connect_ns"]] = end - t0
        errno_ = getattr(exc, "errno", None)
        reason = (os.strerror(errno_) if isinstance(errno_, int) and not isinstance(exc, ssl.SSLError)
                  else str(exc) or type(exc).__name__)
        if errno_ in (errno.EMFILE, errno.ENFILE):  # the client's limit, not the server's failure
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            reason += (f" in the client (one socket per request in flight, limit {soft}): give --concurrency "
                       "a cap, or raise the hard limit (ulimit -Hn, limits.conf, docker run --ulimit nofile=)")
        self.state.error_messages[row] = f"connect to {self.target.host}:{self.target.port} failed: {reason}"
        self.state.failed += 1
        self.state.check_error_rate()

    def undo_failure(self, row: int) -> None:
        if row >= 0:
            self.rows[row] = 0
            self.state.error_messages.pop(row, None)
            self.state.failed -= 1

    def cancel_waiting(self, row: int, due: int) -> None:
        """A request that was due before the run stopped and still waited for a slot: cancelled, with
        its wait (it is part of what the load did), not "not started"."""
        r = self.rows[row]
        r[COL["index"]] = row
        r[COL["scheduled_ns"]] = due
        r[COL["end_ns"]] = self.stop.at_ns
        r[COL["prompt_tokens"]] = -1
        r[COL["cached_tokens"]] = -1
        r[COL["error"]] = int(ErrorClass.CANCELLED)
        self.state.error_messages[row] = (
            f"arrived {(self.stop.at_ns - due) / 1e6:.1f} ms before the run stopped ({self.stop.reason}) "
            f"and was still waiting for one of the {self.plan.concurrency} slots")


async def _handshake(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, tls: ssl.SSLObject,
    incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO,
) -> None:
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            pending = outgoing.read()
            if pending:
                await loop.sock_sendall(sock, pending)
            data = await loop.sock_recv(sock, 65536)
            if not data:
                raise ConnectionError("the server closed the connection during the TLS handshake") from None
            incoming.write(data)
    pending = outgoing.read()
    if pending:
        await loop.sock_sendall(sock, pending)
