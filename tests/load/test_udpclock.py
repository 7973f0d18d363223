"""The UDP clock exchange of --ray (fastbench.load.udpclock) without Ray: a responder on a thread, one
with a shifted clock, one that never answers (the caller falls back to Ray calls, saying why), and
responders that answer garbage, late, twice or out of order, none of which may crash the exchange or
bend its estimate. The exchange over a real Ray cluster is in tests/load/test_ray.py."""

from __future__ import annotations

import random
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from fastbench._core import now_ns
from fastbench.load import udpclock
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.raypool import CLOCK_SAMPLES, RayPool, RayWorkerLink, _Node
from fastbench.load.udpclock import ClockResponder, NoUdpReply, udp_offset
from fastbench.load.workers import Share

# Few pings keep the tests quick; the estimate's logic is the same at 200.
PINGS = 40


def _holds(estimate: Any, truth_ns: int) -> None:
    """The NTP bound: the true offset lies within half the shortest round trip of the estimate."""
    assert estimate.agrees_with(truth_ns), (estimate, truth_ns)
    assert estimate.uncertainty_ns == (estimate.min_round_trip_ns + 1) // 2
    assert estimate.min_round_trip_ns <= estimate.median_round_trip_ns


@pytest.mark.parametrize("shift_ns", [0, 1_500_000_123, -7_000_000_000_000])
def test_a_responder_on_a_thread_gives_its_clock_within_the_estimates_uncertainty(shift_ns: int) -> None:
    with ClockResponder("127.0.0.1", shift_ns) as responder:
        estimate = udp_offset(*responder.address, pings=PINGS)
    _holds(estimate, shift_ns)
    assert (estimate.method, estimate.samples, estimate.unanswered, estimate.ignored) == ("udp", PINGS, 0, 0)


@contextmanager
def _fake_responder(answer: Callable[[bytes, int], list[bytes]]) -> Iterator[tuple[str, int]]:
    """A UDP socket on a thread that sends back ``answer(ping, n)`` for the n-th datagram it gets
    (n from 0), in order; yields its address."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        n = 0
        while not stop.is_set():
            try:
                ping, peer = sock.recvfrom(64)
            except TimeoutError:
                continue
            for reply in answer(ping, n):
                sock.sendto(reply, peer)
            n += 1

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()
    finally:
        stop.set()
        thread.join()
        sock.close()


def _clock(shift_ns: int) -> bytes:
    return struct.pack("!q", now_ns() + shift_ns)


def test_a_silent_node_gives_no_estimate_and_says_so() -> None:
    with _fake_responder(lambda ping, n: []) as (host, port):
        began = now_ns()
        with pytest.raises(NoUdpReply, match=rf"^no valid UDP reply from 127.0.0.1:{port} in 0.2 s \(\d+ pings "
                                             r"unanswered, 0 replies ignored\)$"):
            udp_offset(host, port, pings=PINGS, reply_timeout_s=0.02, give_up_s=0.2)
        assert now_ns() - began >= 0.2e9  # it waited for a reply that long, no longer than its pings' time out


def test_a_port_nobody_listens_on_gives_no_estimate() -> None:
    with ClockResponder("127.0.0.1") as responder:
        host, port = responder.address
    with pytest.raises(NoUdpReply, match="no valid UDP reply"):  # the kernel's ICMP "port unreachable"
        udp_offset(host, port, pings=PINGS, reply_timeout_s=0.02, give_up_s=0.1)


@pytest.mark.parametrize("garbage", [
    lambda ping, n: [b""],  # empty
    lambda ping, n: [b"\xff" * 28],  # the right length, nothing right
    lambda ping, n: [ping],  # the ping echoed without a clock
    lambda ping, n: [ping + b"\x00" * 9],  # one byte too many
    lambda ping, n: [ping[:4] + b"\x00" * 8 + ping[12:] + _clock(0)],  # another exchange's token
    lambda ping, n: [ping[:-8] + struct.pack("!Q", n + 1) + _clock(0)],  # a sequence number never sent
], ids=["empty", "noise", "echo", "long", "token", "sequence"])
def test_a_responder_answering_garbage_gives_no_estimate_and_no_crash(garbage: Callable[[bytes, int], list[bytes]]
                                                                      ) -> None:
    with _fake_responder(garbage) as (host, port):
        with pytest.raises(NoUdpReply, match=r"no valid UDP reply .*\(\d+ pings unanswered, [1-9]\d* replies ignored"):
            udp_offset(host, port, pings=PINGS, reply_timeout_s=0.01, give_up_s=0.1)


def test_late_duplicated_and_garbled_replies_are_ignored_and_the_estimate_holds() -> None:
    """Each ping answered right, but after garbage, a duplicate of the previous reply (late: it echoes
    the previous ping) and a reply to a ping never sent, then again twice: every sample is the right
    one's, and the ignored ones are counted."""
    shift_ns = 2_000_000_000
    previous: list[bytes] = []

    def messy(ping: bytes, n: int) -> list[bytes]:
        good = ping + _clock(shift_ns)
        replies = [b"garbage", *previous[-1:], ping[:-8] + struct.pack("!Q", 10**6) + _clock(0), good, good]
        previous.append(good)
        return replies

    with _fake_responder(messy) as (host, port):
        estimate = udp_offset(host, port, pings=PINGS)
    _holds(estimate, shift_ns)
    assert estimate.samples == PINGS and estimate.unanswered == 0
    # Per ping: the garbage, the reply to a ping never sent and the previous ping's duplicate (from the
    # second on) are read while it waits; the duplicate of its own reply is read while the next waits.
    assert estimate.ignored == 3 * PINGS + (PINGS - 1) - 1


def test_pings_left_unanswered_are_counted_and_the_rest_make_the_estimate() -> None:
    with _fake_responder(lambda ping, n: [] if n % 3 == 0 else [ping + _clock(-5_000)]) as (host, port):
        estimate = udp_offset(host, port, pings=30, reply_timeout_s=0.01)
    _holds(estimate, -5_000)
    assert (estimate.samples, estimate.unanswered) == (20, 10)


@pytest.mark.parametrize("reading", [
    lambda: 123_456,  # a stale clock, always the same
    lambda: now_ns() // 2,  # one running at half speed
    lambda: now_ns() + random.randrange(-10**9, 10**9),  # noise
], ids=["stale", "slow", "noise"])
def test_replies_whose_clock_readings_contradict_each_other_give_no_estimate(reading: Callable[[], int]) -> None:
    """Well-formed replies to the right pings, but no one offset lies within every exchange's range:
    a garbled clock, refused (the caller falls back) rather than made into an estimate."""
    with _fake_responder(lambda ping, n: [ping + struct.pack("!q", reading())]) as (host, port):
        with pytest.raises(NoUdpReply, match=rf"^the UDP replies of {host}:{port} contradict each other: no one "
                                             rf"offset agrees with all {PINGS} exchanges"):
            udp_offset(host, port, pings=PINGS)


def test_the_responder_survives_garbage_and_answers_the_next_ping() -> None:
    with ClockResponder("127.0.0.1") as responder:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as junk:
            for noise in (b"", b"x" * 60, b"FBck" + b"\x00" * 40, b"\x00" * 20):
                junk.sendto(noise, responder.address)
        estimate = udp_offset(*responder.address, pings=5)
        assert responder.ignored == 4
    _holds(estimate, 0)


def test_a_responder_on_an_address_it_cannot_take_raises_oserror() -> None:
    with pytest.raises(OSError):
        ClockResponder("192.0.2.1")  # TEST-NET-1: no interface of this host has it


class _FakeActor:
    """What RayPool calls on an actor for the Ray-call estimate, without Ray: ``clock.remote()``
    gives the reference that ``_FakeRay.get`` resolves."""

    def __init__(self, shift_ns: int) -> None:
        self.calls = 0
        self.clock = self
        self._shift_ns = shift_ns

    def remote(self) -> int:
        self.calls += 1
        return now_ns() + self._shift_ns


class _FakeRay:
    @staticmethod
    def get(ref: int, timeout: float) -> int:
        return ref


def _pool_and_worker(clock_udp: list[Any], shift_ns: int) -> tuple[RayPool, RayWorkerLink, _Node]:
    plan = LoadPlan(bodies=[b"{}"], warmup_bodies=[], concurrency=1)
    pool = RayPool(Target.parse("http://127.0.0.1:9", "/v1/completions"), plan, address="auto")
    pool._ray = _FakeRay()
    share = Share(rows=np.zeros(1, dtype=np.int64), slots=1, warmups=[], offsets=None)
    worker = RayWorkerLink(share, 0, actor=_FakeActor(shift_ns), identity={"node_id": "n1", "clock_udp": clock_udp})
    return pool, worker, _Node("n1", "h", same_kernel=False)


def test_the_pool_uses_udp_when_the_responder_answers() -> None:
    with ClockResponder("127.0.0.1", 3_000) as responder:
        pool, worker, node = _pool_and_worker(list(responder.address), 3_000)
        estimate, fallback = pool._sample_clock(worker, node)
    assert fallback is None and estimate.method == "udp" and estimate.samples == udpclock.PINGS
    assert node.clock_udp == f"127.0.0.1:{responder.address[1]}" and worker.actor.calls == 0
    _holds(estimate, 3_000)


def test_the_pool_falls_back_to_ray_calls_when_no_udp_reply_comes_and_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with _fake_responder(lambda ping, n: []) as (host, port):
        pool, worker, node = _pool_and_worker([host, port], 9_000)
        monkeypatch.setattr("fastbench.load.raypool.udp_offset",  # a quicker give-up than the default 0.5 s
                            lambda h, p: udp_offset(h, p, give_up_s=0.1, reply_timeout_s=0.02))
        estimate, fallback = pool._sample_clock(worker, node)
    assert fallback is not None and fallback.startswith(f"no valid UDP reply from {host}:{port} in 0.1 s")
    assert estimate.method == "ray-call" and estimate.samples == CLOCK_SAMPLES == worker.actor.calls
    _holds(estimate, 9_000)
    # An actor that could not open its socket says why, and the Ray calls are made at once.
    pool, worker, node = _pool_and_worker([None, "the actor could not open a UDP socket on 10.0.0.9: boom"], 0)
    estimate, fallback = pool._sample_clock(worker, node)
    assert fallback == "the actor could not open a UDP socket on 10.0.0.9: boom" and estimate.method == "ray-call"
    assert node.clock_udp is None
