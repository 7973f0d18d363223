"""The whole product against the synthetic server's known schedule: the figures must be right."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from support.timing import until_a_round_passes
from fastbench import BenchConfig, SyntheticServer, arun, run
from fastbench.results.vllm_keys import to_vllm_keys


def bench(server: SyntheticServer, **options: Any) -> Any:
    base = dict(base_url=server.base_url, concurrency=8, num_prompts=16, random_input_len=64,
                random_output_len=24, ignore_eos=True)
    return run(BenchConfig(**{**base, **options}))


@pytest.fixture(scope="module")
def spec_server() -> Any:
    """TTFT 50 ms, 20 ms between chunks, 1..4 tokens per chunk as with speculative decoding."""
    with SyntheticServer("--ttft-ms", "50", "--itl-ms", "20", "--tokens-per-chunk", "1-4", "--seed", "3") as s:
        yield s


@pytest.mark.timing
def test_speculative_chunks_tpot_and_per_token_itl(spec_server: SyntheticServer) -> None:
    # A host stall (ASan on a loaded host: TTFT median 53.4 ms) fails one round; wrong counting fails every one.
    def one_round() -> None:
        result = bench(spec_server, num_prompts=24, random_output_len=40)
        d = result.distributions
        assert result.counts.completed == 24
        assert d["ttft"].median == pytest.approx(50, abs=3)
        # Chunks every 20 ms whatever they carry: the chunk-gap ITL is 20 ms...
        assert d["itl"].median == pytest.approx(20, abs=1.5)
        # ...while tokens arrive 2.5 per chunk on average, so TPOT is about 20 / 2.5 = 8 ms.
        assert result.mean_tokens_per_chunk == pytest.approx(2.5, abs=0.3)
        assert d["tpot"].median == pytest.approx(20 / result.mean_tokens_per_chunk, rel=0.12)
        # Per token, a k-token chunk adds k values of 20/k ms: weights 1,2,3,4 for 20,10,6.7,5 ms,
        # so the median token waited 6.7 ms.
        assert d["itl_token"].median == pytest.approx(20 / 3, abs=0.6)
        assert d["itl_token"].count == result.total_output_tokens - result.counts.completed
        assert result.usage.all_per_chunk
        assert d["skew"].p99 < 5.0  # loose: the machine is shared; bench/ measures this properly
        keys = to_vllm_keys(result)
        assert keys["completed"] == 24 and keys["median_tpot_ms"] == pytest.approx(d["tpot"].median)

    until_a_round_passes(one_round)


@pytest.mark.timing
def test_chat_with_reasoning_reports_ttft_and_ttfa() -> None:
    def one_round() -> None:
        with SyntheticServer("--ttft-ms", "30", "--itl-ms", "10", "--reasoning-tokens", "5") as server:
            result = bench(server, endpoint="/v1/chat/completions", num_prompts=18, concurrency=3)
        d = result.distributions
        assert result.counts.completed == 18
        assert d["ttft"].median == pytest.approx(30, abs=3)
        # The first answer token follows five reasoning tokens, 10 ms apart.
        assert d["ttfa"].median == pytest.approx(80, abs=4)
        assert d["tpot"].median == pytest.approx(10, abs=1)

    # Six rounds of three streams: one host stall moves only one of them (with two, it moved the
    # median to 91 ms); a wrong TTFA fails every round.
    until_a_round_passes(one_round)


def test_server_without_usage_falls_back_and_says_so() -> None:
    with SyntheticServer("--ttft-ms", "10", "--itl-ms", "5", "--no-usage") as server:
        result = bench(server, num_prompts=4, concurrency=2)
    assert result.counts.completed == 4
    assert result.usage.by_source.get("NONE") == 4
    assert not result.usage.all_per_chunk
    assert "chunk" in result.usage.statement
    assert result.total_output_tokens == 4 * 24


def test_open_loop_rate_and_time_cap(spec_server: SyntheticServer) -> None:
    result = bench(spec_server, request_rate=20.0, num_prompts=200, concurrency=64, max_seconds=1.5,
                   random_output_len=100)
    c = result.counts
    assert result.cap_hit
    assert result.duration_s == pytest.approx(1.5, abs=0.1)
    # ~30 requests arrived before the cap; each needs ~0.85 s, so the last ~15 were cancelled.
    assert 10 <= c.completed + c.cancelled <= 60
    assert c.cancelled > 0 and c.failed == 0
    assert c.completed + c.cancelled + c.not_started == 200
    assert any("time cap" in note for note in result.notes)


def test_open_loop_has_no_cap_unless_asked_and_says_when_one_held_requests_back() -> None:
    """As vllm bench serve without --max-concurrency: arrivals go out when they arrive. With a cap
    they wait for a slot, the wait is in TTFT (from the arrival), and a note says how much."""
    with SyntheticServer("--ttft-ms", "300", "--itl-ms", "5") as server:
        free = bench(server, request_rate=100.0, num_prompts=60, concurrency=None, random_output_len=8)
        capped = bench(server, request_rate=100.0, num_prompts=60, concurrency=4, random_output_len=8)
    assert free.counts.completed == capped.counts.completed == 60
    assert free.client.max_concurrent_requests > 16  # ~30 in flight: 100/s x 0.34 s
    assert free.distributions["ttft"].median == pytest.approx(300, abs=20)
    assert to_vllm_keys(free)["max_concurrency"] is None and to_vllm_keys(capped)["max_concurrency"] == 4
    assert not any("slots busy" in note for note in free.notes)
    assert capped.distributions["ttft"].median > 1000  # 60 arrivals in 0.6 s, 4 served every 0.34 s
    waited = [note for note in capped.notes if "slots busy and waited for one" in note]
    assert len(waited) == 1 and waited[0].startswith(tuple(f"{k} of 60 requests" for k in range(40, 57)))


def test_an_uncapped_open_loop_is_not_stopped_by_a_low_soft_fd_limit() -> None:
    """Every request in flight holds a socket: with no cap and a slow server, ~150 are in flight,
    past a soft limit of 64 open files (often 1,024 on real machines). The client raises its soft
    limit to the hard one; before, the extra requests failed as CONNECT, 'Too many open files'."""
    with SyntheticServer("--ttft-ms", "500", "--itl-ms", "5") as server:
        proc = subprocess.run(
            ["bash", "-c", f"ulimit -Sn 64 && exec {sys.executable} -m fastbench --base-url {server.base_url} "
             "--request-rate 1000 --num-prompts 150 --random-input-len 8 --random-output-len 4 --no-progress"],
            capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "150/150 completed, 0 errors" in proc.stdout


def test_tokens_per_chunk_leaves_out_usage_that_is_not_trusted() -> None:
    """Requests whose usage contradicts itself fall back to counting chunks (1 token each): the mean
    tokens per chunk, set beside the server's acceptance length, must not count them."""
    args = ("--tokens-per-chunk", "1-4", "--itl-ms", "2", "--ttft-ms", "2", "--seed", "4")
    with SyntheticServer(*args) as clean_server:
        clean = bench(clean_server, num_prompts=20, random_output_len=40)
    with SyntheticServer(*args, "--fault", "usage-contradictory", "--fault-every", "4") as faulty_server:
        faulty = bench(faulty_server, num_prompts=20, random_output_len=40)
    assert faulty.usage.by_source.get("INCONSISTENT", 0) >= 4
    assert clean.mean_tokens_per_chunk is not None and faulty.mean_tokens_per_chunk is not None
    assert faulty.mean_tokens_per_chunk == pytest.approx(clean.mean_tokens_per_chunk, abs=0.15)


@pytest.mark.timing
def test_coalesced_reads_keep_arrival_times(spec_server: SyntheticServer) -> None:
    """--coalesce-ms 5: the sockets are read every 5 ms, but each chunk's time is the kernel's
    receive stamp, so the figures stay the server's: each chunk's stamp is within a fraction of a
    millisecond of the server's own send stamp in it (skew), where a drain-time stamp would be late by
    up to the 5 ms between drains (a median of ~2.5 ms). Judged against the server's stamps, not the
    nominal TTFT and gap, which a loaded host's server misses by itself."""
    def one_round() -> None:
        result = bench(spec_server, request_rate=30.0, num_prompts=24, coalesce_ms=5.0)
        d = result.distributions
        assert result.counts.completed == 24
        assert d["skew"].count >= 24 * 5  # the chunks carried the server's stamps (24 tokens, at most 4 a chunk)
        assert d["skew"].median < 0.5 and d["skew"].p90 < 2.0
        coalesced = [n for n in result.notes if n.startswith("reads coalesced")]
        assert len(coalesced) == 1 and "at least every 5 ms" in coalesced[0]
        assert "over half" not in coalesced[0]  # 5 ms against 20 ms between chunks

    # A stall of this process can delay a stamp in one round; a drain-time stamp fails every round.
    until_a_round_passes(one_round)


def test_a_coalescing_window_too_wide_for_the_chunk_gap_is_noted(spec_server: SyntheticServer) -> None:
    result = bench(spec_server, num_prompts=4, concurrency=4, coalesce_ms=12.0)
    assert result.counts.completed == 4
    (note,) = [n for n in result.notes if n.startswith("reads coalesced")]
    # the run's own median gap, ~20 ms (21 ms and more on a busy host: not a fixed "20.")
    gap = result.distributions["itl"].median
    assert f"over half the median chunk gap ({gap:.1f} ms)" in note and "use a smaller window" in note


def test_arun_inside_a_plain_asyncio_loop(spec_server: SyntheticServer) -> None:
    async def main() -> Any:
        return await arun(BenchConfig(base_url=spec_server.base_url, concurrency=2, num_prompts=4,
                                      random_input_len=16, random_output_len=8))

    result = asyncio.run(main())
    assert result.counts.completed == 4


def test_warmups_are_not_counted(spec_server: SyntheticServer) -> None:
    """The warm-ups reach the server, before the window and outside every figure."""
    before = spec_server.stats()["generation_requests"]
    result = bench(spec_server, num_prompts=4, num_warmups=4, concurrency=4)
    assert spec_server.stats()["generation_requests"] - before == 8
    # its /metrics mimic vLLM's names, yet it is not named vLLM
    assert result.server_info["server_metrics"]["engine"] is None
    assert result.counts.completed == 4 and result.counts.warmups == 4
    assert result.distributions["ttft"].count == 4
