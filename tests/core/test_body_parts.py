"""A trace's request bodies go out from parts (``BodyParts``: a head, runs of the one token buffer the
bodies share, a tail) in one sendmsg, never joined into a bytes object per body: what the server reads
is, byte for byte, the body those parts make, and that body is the one orjson writes for the request
whole. Checked on every path that holds a body: the send, a send the socket takes only in part, a body of
more parts than one sendmsg takes, the stale-connection retry, warm-ups, TLS (joined there), --workers
(shipped to the worker processes, the shared buffer pickled once) and ``--request-id-prefix``."""

from __future__ import annotations

import asyncio
import os
import pickle
import ssl
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import uvloop

from support.scripted import ScriptedServer, stream_script
from fastbench._core import BodyParts, Recorder, RunState, TokenRuns, debug_counters
from fastbench.config import BenchConfig
from fastbench.load.datasets import build_workload_sync
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.workers import WorkerPool
from fastbench.results.records import COL, new_histogram

ENDPOINT = "/v1/completions"


def _trace(tmp_path: Path, n: int = 40) -> Path:
    """A small Mooncake-shaped trace: sessions sharing leading blocks, each turn carrying its history."""
    rng = np.random.default_rng(1)
    lines, history = [], {s: [s] for s in range(5)}
    next_id = 10
    for i in range(n):
        s = int(rng.integers(0, 5))
        history[s].append(next_id)
        next_id += 1
        n_in = 16 * (len(history[s]) - 1) + int(rng.integers(1, 17))
        lines.append(orjson.dumps({"timestamp": i, "input_length": n_in, "output_length": 3,
                                   "hash_ids": history[s]}))
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _workload(tmp_path: Path, endpoint: str = ENDPOINT, **options: Any) -> Any:
    config = BenchConfig(dataset_name="timed_trace", dataset_path=_trace(tmp_path), num_prompts=30, num_warmups=2,
                         endpoint=endpoint, **options)
    return build_workload_sync(config, "m", max_model_len=None)


def _runs(pieces: list[bytes]) -> tuple[TokenRuns, bytes]:
    """A buffer holding ``pieces`` one after the other, with a run for each."""
    ends = np.cumsum([0] + [len(p) for p in pieces])
    runs = np.stack([ends[:-1], ends[1:]], axis=1).astype(np.int64).ravel()
    buffer = b"".join(pieces)
    return TokenRuns(np.frombuffer(buffer, np.uint8), runs), buffer


def test_parts_make_the_body_they_name_and_pickle_their_buffer_once() -> None:
    source, _ = _runs([b"11111,", b"22222,", b"33333"])
    body = BodyParts(b'{"prompt":[', source, 1, 3, b"]}")
    assert bytes(body) == body.joined() == b'{"prompt":[22222,33333]}' and len(body) == len(bytes(body))
    assert bytes(BodyParts(b"{", source, 2, 2, b"}")) == b"{}"  # no run at all
    twins = pickle.loads(pickle.dumps([body, BodyParts(b"[", source, 0, 1, b"]")]))
    assert [bytes(b) for b in twins] == [bytes(body), b"[11111,]"]
    assert twins[0].source is twins[1].source  # one buffer for all the bodies, as sent
    with pytest.raises(ValueError, match="outside the buffer"):
        TokenRuns(np.zeros(4, np.uint8), np.array([0, 5], np.int64))
    with pytest.raises(ValueError, match="outside the 3 runs"):
        BodyParts(b"", source, 2, 4, b"")
    runs = np.array([0, 2], np.int64)
    kept = TokenRuns(np.frombuffer(b"abcd", np.uint8), runs)
    runs[1] = 1 << 40  # the caller's array, changed after: the runs were copied when checked
    assert bytes(BodyParts(b"", kept, 0, 1, b"")) == b"ab"


def test_a_body_that_is_neither_bytes_nor_parts_is_refused() -> None:
    state = RunState(np.zeros((1, len(COL)), np.int64), *(Recorder(new_histogram()) for _ in range(3)))
    with pytest.raises(TypeError, match="bytes or BodyParts, not str"):
        state.set_requests(b"POST / HTTP/1.1\r\nContent-Length: ", ["{}"])


def test_a_trace_body_is_the_one_orjson_writes_for_the_request_whole(tmp_path: Path) -> None:
    for endpoint in (ENDPOINT, "/v1/chat/completions"):
        work = _workload(tmp_path, endpoint)
        for spec in work.requests + work.warmups:
            assert isinstance(spec.body, BodyParts)
            body = bytes(spec.body)
            assert orjson.dumps(orjson.loads(body)) == body
        # With a request id spliced into the head, the parts stay parts and the id comes first.
        named = _workload(tmp_path, endpoint, request_id_prefix="r-")
        for i, (spec, plain) in enumerate(zip(named.requests, work.requests)):
            assert isinstance(spec.body, BodyParts)
            assert bytes(spec.body) == b'{"request_id":"r-%d",' % i + bytes(plain.body)[1:]


def test_a_prompt_replaced_by_extra_body_makes_a_whole_body(tmp_path: Path) -> None:
    work = _workload(tmp_path, extra_body={"prompt": "x"})
    assert all(type(s.body) is bytes and orjson.loads(s.body)["prompt"] == "x" for s in work.requests)


LOOPS = {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}


def _drive(loop_name: str, bodies: list[Any], warmups: list[Any], **server: Any) -> tuple[Any, list[bytes]]:
    script = server.pop("script", lambda n, body: stream_script([1, 2]))

    async def main() -> tuple[Any, list[bytes]]:
        async with ScriptedServer(script, **server) as srv:
            target = Target.parse(srv.base_url, ENDPOINT)
            plan = LoadPlan(bodies=bodies, warmup_bodies=warmups, concurrency=1, verify_tls=False)
            data = await LoadGenerator(target, plan).run()
            return data, [body for _, body in srv.requests]

    loop = LOOPS[loop_name]()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_the_server_reads_each_body_its_parts_make(tmp_path: Path, loop_name: str) -> None:
    """A trace's bodies, one too big for one send (the rest joined and sent by the loop) and one of more
    runs than one sendmsg takes (joined): each read whole, in order; debug builds count the two joins."""
    work = _workload(tmp_path)
    big_source, big = _runs([os.urandom(3_000_000).hex().encode(), b"x"])  # more than a loopback send takes
    many_source, _ = _runs([b"%d," % i for i in range(600)])
    bodies = [s.body for s in work.requests] + [BodyParts(b"{", big_source, 0, 2, b"}"),
                                                BodyParts(b"[", many_source, 0, 600, b"]")]
    before = debug_counters()
    data, received = _drive(loop_name, bodies, [s.body for s in work.warmups])
    after = debug_counters()
    assert list(data.rows[:, COL["error"]]) == [0] * len(bodies)
    assert received == [bytes(b) for b in [*(s.body for s in work.warmups), *bodies]]
    assert received[-2] == b"{" + big + b"}"
    if before is not None and after is not None:
        assert after["requests_joined"] - before["requests_joined"] == 2


def test_a_stale_connection_resends_the_same_parts(tmp_path: Path) -> None:
    """The server drops each connection 50 ms after answering: every request after the first goes out on
    the dropped one first, then again, from its parts, on a new connection."""
    work = _workload(tmp_path)
    bodies = [s.body for s in work.requests[:3]]
    data, received = _drive("uvloop", bodies, [], script=lambda n, body: stream_script([1, 1]) + [0.05, "close"])
    assert list(data.rows[:, COL["error"]]) == [0, 0, 0] and data.stale_retries == 2
    assert received == [bytes(b) for b in bodies]


def test_tls_sends_the_joined_parts(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("localhost").configure_cert(server_ctx)
    work = _workload(tmp_path)
    bodies = [s.body for s in work.requests[:5]]
    data, received = _drive("uvloop", bodies, [s.body for s in work.warmups], tls=server_ctx)
    assert list(data.rows[:, COL["error"]]) == [0] * 5
    assert received == [bytes(b) for b in [*(s.body for s in work.warmups), *bodies]]


class DealtPool(WorkerPool):
    """Local workers dealt their requests up front, as --ray's are."""

    SHARED_MEMORY = False


@pytest.mark.parametrize("pool_class", [WorkerPool, DealtPool])
@pytest.mark.parametrize("rate", [None, 200.0])
def test_workers_send_the_bodies_their_parts_make(tmp_path: Path, pool_class: type[WorkerPool],
                                                  rate: float | None) -> None:
    """Two worker processes, closed loop (one shared table, or dealt) and open loop (a share each): the
    parts travel to them (the buffer pickled once per worker) and every body reaches the server whole."""
    work = _workload(tmp_path)
    bodies = [s.body for s in work.requests]

    async def main() -> tuple[Any, list[bytes]]:
        async with ScriptedServer(lambda n, body: stream_script([1, 2])) as srv:
            plan = LoadPlan(bodies=bodies, warmup_bodies=[], concurrency=4, request_rate=rate)
            data = await pool_class(Target.parse(srv.base_url, ENDPOINT), plan, workers=2).run()
            return data, [body for _, body in srv.requests]

    data, received = uvloop.run(main())
    assert list(data.rows[:, COL["error"]]) == [0] * len(bodies)
    assert sorted(received) == sorted(bytes(b) for b in bodies)
