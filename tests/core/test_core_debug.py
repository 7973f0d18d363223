"""The debug build's leak counters (src/fastbench/_core/debug.pyx), built by FASTBENCH_DEBUG=1 and by the
ASan build (`make asan`, CI's sanitizer step): after real load against the synthetic server, every
connection, C buffer, fd and request the core made is unmade once its runs are gone. A release build
compiles the counters out, and says so."""

from __future__ import annotations

import gc
from pathlib import Path

import orjson
import pytest
import uvloop

from fastbench import BenchConfig
from fastbench._core import BUILD_FLAVOUR, debug_counters
from fastbench.load.datasets import build_workload_sync
from fastbench.load.driver import LoadGenerator, LoadPlan, Target
from fastbench.results.records import COL, ErrorClass
from fastbench.synthetic import SyntheticServer

# (made, unmade): equal at rest
PAIRS = [
    ("connections_made", "connections_freed"),
    ("runs_made", "runs_freed"),
    ("buffers_allocated", "buffers_freed"),
    ("fds_opened", "fds_closed"),
    ("requests_begun", "requests_ended"),
]
RELEASE = BUILD_FLAVOUR == "release"


def _body(tokens: int) -> bytes:
    return orjson.dumps({
        "model": "fastbench-synthetic", "prompt": "hello world", "max_tokens": tokens, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    })


def _plans(tmp_path: Path) -> list[LoadPlan]:
    """The core's paths: a closed loop with warm-ups and coalesced reads that watch the streams' ends,
    an open loop whose time cap cancels requests in flight, requests cut by their timeout, and multi-turn
    sessions whose history keeps the server's answers."""
    n = 96
    conversations = tmp_path / "c.jsonl"
    conversations.write_bytes(b"".join(orjson.dumps({"messages": [
        {"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"},
        {"role": "user", "content": "more"}, {"role": "assistant", "content": "b"}]}) + b"\n" for i in range(6)))
    work = build_workload_sync(BenchConfig(dataset_name="jsonl", dataset_path=conversations, multi_turn=True,
                                           max_tokens=40, num_prompts=6, num_warmups=0),
                               "fastbench-synthetic", max_model_len=None)
    assert work.sessions is not None and work.sessions.server_history
    return [
        LoadPlan(bodies=[_body(24)] * n, warmup_bodies=[_body(2)] * 8, concurrency=16, coalesce_s=0.002,
                 expected_output_tokens=[24] * n),
        LoadPlan(bodies=[_body(48)] * n, warmup_bodies=[], concurrency=64, request_rate=400.0, max_seconds=0.2),
        LoadPlan(bodies=[_body(200)] * 8, warmup_bodies=[], concurrency=4, request_timeout_s=0.1),
        LoadPlan(bodies=[spec.body for spec in work.requests], warmup_bodies=[], concurrency=3, sessions=work.sessions),
    ]


@pytest.mark.skipif(not RELEASE, reason=f"the {BUILD_FLAVOUR} build counts: see the load test")
def test_a_release_build_says_it_counts_nothing() -> None:
    assert debug_counters() is None


@pytest.mark.skipif(RELEASE, reason="a release build has no counters (FASTBENCH_DEBUG=1 or `make asan` builds them)")
def test_all_the_core_makes_under_load_is_unmade(tmp_path: Path) -> None:
    errors: list[set[int]] = []
    sent = 0
    with SyntheticServer(ttft_ms=2, itl_ms=2, tokens_per_chunk="1-4") as server:
        target = Target.parse(server.base_url, "/v1/completions")
        gc.collect()
        before = debug_counters()
        assert before is not None
        for plan in _plans(tmp_path):
            data = uvloop.run(LoadGenerator(target, plan).run())
            errors.append(set(data.rows[:, COL["error"]][data.rows[:, COL["sent_ns"]] > 0].tolist()))
            sent += int((data.rows[:, COL["sent_ns"]] > 0).sum()) + len(plan.warmup_bodies)
            del data
        gc.collect()
        after = debug_counters()
    assert after is not None
    delta = {name: after[name] - before[name] for name in after}
    # the runs took the paths they were meant to: whole streams, a cap, timeouts, sessions' turns
    assert errors[0] == {ErrorClass.OK}
    assert ErrorClass.CANCELLED in errors[1]
    assert errors[2] == {ErrorClass.TIMEOUT}
    assert errors[3] == {ErrorClass.OK}
    for made, unmade in PAIRS:
        assert delta[made] > 0 and delta[made] == delta[unmade], (made, unmade, delta)
    assert delta["requests_begun"] >= sent
    assert delta["runs_made"] == 4
    # Plain TCP and bodies the socket takes whole: every request went out from its parts, none joined.
    assert delta["requests_joined"] == 0, delta
