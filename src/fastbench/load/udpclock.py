"""A node's clock offset from a direct UDP exchange: tens of microseconds where Ray's actor calls give
half a millisecond or more.

The offset is estimated as fastbench.load.clocks does (the exchange with the shortest round trip
bounds it); only the exchange is shorter. A :class:`ClockResponder` (one per ``--ray`` actor, on a
thread of its own) answers each ping with its node's CLOCK_MONOTONIC; :func:`udp_offset` sends
PINGS pings one after another, each with a token of its exchange and a sequence number, and keeps
the replies that echo the ping it is waiting for. A reply that is late (it echoes an earlier ping),
duplicated, garbled or from another exchange is ignored and counted; a ping left unanswered for
REPLY_TIMEOUT_S is counted and the next one sent. No valid reply within GIVE_UP_S (a firewalled
node, a responder that answers garbage) raises :class:`NoUdpReply`, and the caller falls back to the
slower estimate (fastbench.load.raypool: Ray actor calls), saying why; so it does when the valid
replies contradict each other (no one offset lies within every exchange's range: the responder's
clock readings are garbage).

Wire format, network byte order: a ping is MAGIC (4 bytes), the exchange's token (8) and the
sequence number (8); a reply is the ping echoed and the responder's clock in ns (8, signed).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

from fastbench._core import now_ns
from fastbench.load.clocks import ClockOffset, ClockSample, estimate_offset

__all__ = ("PINGS", "ClockResponder", "NoUdpReply", "udp_offset")

MAGIC = b"FBck"
_PING = struct.Struct("!4s8sQ")
_CLOCK = struct.Struct("!q")
REPLY_SIZE = _PING.size + _CLOCK.size

# Pings per estimate: the shortest of their round trips bounds it (on a loaded 2-core host a few
# exchanges in a hundred miss every scheduling delay; bench/udp_clock.py).
PINGS = 200
# Pause between one exchange and the next, so that a burst of pings does not queue behind itself.
SPACING_S = 0.0005
# How long one ping waits for its reply; a reply later than this is ignored when it comes.
REPLY_TIMEOUT_S = 0.05
# No valid reply within this: the node cannot be reached by UDP, and the caller falls back.
GIVE_UP_S = 0.5
# An estimate's whole budget: a lossy path stops here with the replies it has.
BUDGET_S = 2.0
# The most two clocks may drift apart during an estimate, as a fraction of its length, for its
# exchanges still to count as readings of one clock (crystals without NTP drift tens of ppm).
MAX_DRIFT = 500e-6
# How often the responder's thread looks whether it is closed.
_POLL_S = 0.1


class NoUdpReply(Exception):
    """The UDP exchange gave no estimate; the message says why (one line)."""


def _family(host: str, port: int) -> tuple[socket.AddressFamily, tuple[str, int]]:
    """The address family and socket address of ``host``: IPv4 or IPv6, as Ray reports a node's IP."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    return family, (str(address[0]), int(address[1]))


class ClockResponder:
    """Answers every well-formed ping with this node's clock (plus ``shift_ns``: rayworker's test
    hook, a node whose clock reads that much later), on a daemon thread, until :meth:`close`."""

    def __init__(self, host: str, shift_ns: int = 0) -> None:
        family, address = _family(host, 0)
        self._sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            self._sock.bind(address)
            self._sock.settimeout(_POLL_S)
        except OSError:
            self._sock.close()
            raise
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self.ignored = 0  # datagrams that were not a ping (a scanner, garbage)
        self._shift_ns = shift_ns
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fastbench-clock-responder", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        sock = self._sock
        try:
            while not self._closed.is_set():
                try:
                    ping, peer = sock.recvfrom(64)
                except TimeoutError:
                    continue
                except OSError:  # e.g. an ICMP error of an earlier reply: the next ping is unaffected
                    continue
                # The clock is read as soon as the ping is in: anywhere between its sending and the
                # reply's arrival makes a valid exchange, and earlier keeps the round trip short.
                clock_ns = now_ns() + self._shift_ns
                if len(ping) != _PING.size or not ping.startswith(MAGIC):
                    self.ignored += 1
                    continue
                try:
                    sock.sendto(ping + _CLOCK.pack(clock_ns), peer)
                except OSError:  # the driver's address went away: its next ping will say where it is
                    continue
        finally:
            sock.close()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5 * _POLL_S)

    def __enter__(self) -> ClockResponder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def udp_offset(host: str, port: int, *, pings: int = PINGS, spacing_s: float = SPACING_S,
               reply_timeout_s: float = REPLY_TIMEOUT_S, give_up_s: float = GIVE_UP_S,
               budget_s: float = BUDGET_S) -> ClockOffset:
    """The offset of the clock of the responder at ``host:port`` to this one (see the module's
    docstring); :class:`NoUdpReply` when it gives no valid reply within ``give_up_s``."""
    family, address = _family(host, port)
    where = f"{address[0]}:{address[1]}"
    token = os.urandom(8)
    samples: list[ClockSample] = []
    unanswered = ignored = 0
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(address)  # only the responder's datagrams reach this socket
        except OSError as exc:
            raise NoUdpReply(f"cannot reach {where} by UDP ({exc})") from None
        began_ns = now_ns()
        for seq in range(pings):
            elapsed_s = (now_ns() - began_ns) / 1e9
            if not samples and elapsed_s > give_up_s:
                raise NoUdpReply(f"no valid UDP reply from {where} in {give_up_s:g} s "
                                 f"({unanswered} pings unanswered, {ignored} replies ignored)")
            if elapsed_s > budget_s:
                break
            ping = _PING.pack(MAGIC, token, seq)
            sent_ns = now_ns()
            try:
                sock.send(ping)
            except OSError as exc:
                raise NoUdpReply(f"cannot send to {where} by UDP ({exc})") from None
            reply, ignored_now = _reply_to(sock, ping, sent_ns + int(reply_timeout_s * 1e9))
            ignored += ignored_now
            if reply is None:
                unanswered += 1
            else:
                samples.append(ClockSample(sent_ns, reply[0], reply[1]))
            time.sleep(spacing_s)
    if not samples:
        raise NoUdpReply(f"no valid UDP reply from {where} ({unanswered} pings unanswered, {ignored} replies "
                         "ignored)")
    if not _consistent(samples):
        raise NoUdpReply(f"the UDP replies of {where} contradict each other: no one offset agrees with all "
                         f"{len(samples)} exchanges (the responder reads no steady clock)")
    return estimate_offset(samples, method="udp", unanswered=unanswered, ignored=ignored)


def _consistent(samples: list[ClockSample]) -> bool:
    """Whether one offset (drifting by at most MAX_DRIFT) lies within every exchange's range, as it
    does for a responder that reads a real clock: a garbled or stale clock reading breaks this."""
    first_ns = samples[0].sent_ns
    low, high = -(2**63), 2**63
    for s in samples:
        slack = int((s.received_ns - first_ns) * MAX_DRIFT) + 1
        low = max(low, s.remote_ns - s.received_ns - slack)
        high = min(high, s.remote_ns - s.sent_ns + slack)
    return low <= high


def _reply_to(sock: socket.socket, ping: bytes, deadline_ns: int) -> tuple[tuple[int, int] | None, int]:
    """The reply to ``ping`` as (the responder's clock, this clock at its arrival), or None if none
    came by ``deadline_ns``; and how many other datagrams were ignored meanwhile."""
    ignored = 0
    while True:
        left_ns = deadline_ns - now_ns()
        if left_ns <= 0:
            return None, ignored
        sock.settimeout(left_ns / 1e9)
        try:
            reply = sock.recv(64)
        except TimeoutError:
            return None, ignored
        except ConnectionRefusedError:  # ICMP port unreachable: nothing listens there (any more)
            time.sleep(left_ns / 1e9)  # wait the ping's time out, as a silent node makes us
            return None, ignored
        received_ns = now_ns()
        if len(reply) == REPLY_SIZE and reply.startswith(ping):
            return (_CLOCK.unpack_from(reply, _PING.size)[0], received_ns), ignored
        ignored += 1  # late (an earlier ping's), duplicated, garbled, or of another exchange
