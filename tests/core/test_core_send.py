"""A request goes out as the run's head, its length line and its body, gathered by one sendmsg rather than
joined first: the server reads exactly the request that was meant, whether the socket takes it at once or
only in part (the rest then goes through the event loop, joined: debug builds count those)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
import uvloop

from support.scripted import ScriptedServer, stream_script
from fastbench._core import debug_counters
from fastbench.load.driver import LoadGenerator, LoadPlan, Target
from fastbench.results.records import COL

LOOPS = {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}
WARM_UP = b'{"warm":1}'
BIG = os.urandom(3_000_000).hex().encode()  # more than a loopback socket takes in one send


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_the_server_reads_each_request_whole(loop_name: str) -> None:
    bodies = [b"{}", b'{"n":1}', BIG, b'{"n":2}']

    async def main() -> tuple[Any, bytes, list[tuple[bytes, bytes]]]:
        async with ScriptedServer(lambda n, body: stream_script([1, 2])) as server:
            target = Target.parse(server.base_url, "/v1/completions")
            plan = LoadPlan(bodies=bodies, warmup_bodies=[WARM_UP], concurrency=1)
            data = await LoadGenerator(target, plan, "sk-secret").run()
            return data, target.request_head("sk-secret"), server.requests

    before = debug_counters()
    loop = LOOPS[loop_name]()
    try:
        data, head, received = loop.run_until_complete(main())
    finally:
        loop.close()
    after = debug_counters()
    assert list(data.rows[:, COL["error"]]) == [0] * len(bodies)
    assert [(got_head, got_body) for got_head, got_body in received] == [
        (head + b"%d\r\n\r\n" % len(body), body) for body in [WARM_UP, *bodies]
    ]
    if before is not None and after is not None:  # a debug build: only the big body's rest was joined
        assert after["requests_joined"] - before["requests_joined"] == 1
