"""Trace replay (timed_trace, mooncake): prompts that share exactly the blocks their hash ids name, requests
sent at the trace's times (the lateness of each recorded), and bad traces refused with the line and field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from fastbench import BenchConfig, run
from fastbench.exceptions import ConfigError, DatasetError
from fastbench.load.datasets import build_workload_sync, check_inputs
from fastbench.synthetic import SyntheticServer

SERVER_BLOCK = 16  # the synthetic server's cache block
TRACE_BLOCK = 32  # tokens per hash id (--timed-trace-chunk-hash-size)

# (timestamp s, input tokens, hash ids), and the tokens the server's cache finds, worked out by hand from
# vLLM's rules (only full 16-token blocks hit; a block hits only when everything before it matched; the
# last prompt token is always computed): the requests arrive 50 ms apart, in this order.
TRACE = [
    (10.00, 96, [1, 2, 3], 0),  # all new
    (10.05, 96, [1, 2, 4], 64),  # blocks 1 and 2 (32 tokens each)
    (10.10, 90, [1, 2, 3], 80),  # 1 and 2, then block 3 cut at 26 tokens: its first 16 hit
    (10.15, 40, [5], 0),  # new block 5, then 8 tokens of its own
    (10.20, 128, [1, 2, 3, 6], 96),  # 1, 2, 3 hit; 6 is new
    (10.25, 50, [], 0),  # no hash ids: 50 tokens of its own
    (10.30, 64, [5, 7], 32),  # block 5 (seen whole in the 4th) hits, 7 is new
]


def _write_trace(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def _trace_file(tmp_path: Path) -> Path:
    return _write_trace(tmp_path / "trace.jsonl", [
        {"timestamp": ts, "input_length": n, "output_length": 3, "hash_ids": ids} for ts, n, ids, _ in TRACE])


def _config(path: Path, **changes: Any) -> BenchConfig:
    return BenchConfig(dataset_name="timed_trace", dataset_path=path, num_prompts=len(TRACE),
                       timed_trace_chunk_hash_size=TRACE_BLOCK, metrics_interval_s=0.2).replace(**changes)


def _prompts(config: BenchConfig) -> list[list[int]]:
    work = build_workload_sync(config, "m", max_model_len=None)
    return [orjson.loads(bytes(spec.body))["prompt"] for spec in work.requests]


def test_requests_sharing_hash_ids_share_exactly_those_blocks(tmp_path: Path) -> None:
    prompts = _prompts(_config(_trace_file(tmp_path)))
    assert [len(p) for p in prompts] == [n for _, n, _, _ in TRACE]

    def block(request: int, position: int) -> list[int]:
        return prompts[request][position * TRACE_BLOCK:(position + 1) * TRACE_BLOCK]

    assert block(0, 0) == block(1, 0) == block(2, 0) == block(4, 0)  # hash id 1
    assert block(0, 1) == block(1, 1) == block(4, 1)  # hash id 2
    assert block(0, 2) != block(1, 2)  # 3 against 4
    assert prompts[2][64:90] == block(0, 2)[:26]  # block 3 cut short: its first 26 tokens
    assert block(3, 0) == block(6, 0)  # hash id 5

    def elsewhere(tokens: list[int], owner: int) -> bool:
        return any(tokens == p[i:i + len(tokens)] for j, p in enumerate(prompts) if j != owner for i in range(len(p)))

    assert not elsewhere(prompts[3][32:], 3) and not elsewhere(prompts[5], 5)  # tokens past the blocks: its own


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("spread", [1, -10**15])  # ids dense (counted in a table), or sparse (sorted)
def test_a_random_trace_shares_blocks_by_hash_id_and_nothing_else(tmp_path: Path, endpoint: str, spread: int) -> None:
    """Many requests, built in bulk: every occurrence of a hash id carries the same tokens (a block cut
    short its first ones), distinct ids differ, and each prompt is exactly its input length. The trace
    repeats ids within a request, leaves some without ids, cuts blocks short and has an odd block size."""
    import numpy as np

    rng = np.random.default_rng(5)
    block = 7
    rows = []
    for t in range(300):
        ids = (rng.integers(0, 60, size=int(rng.integers(0, 6))) * spread).tolist()  # ids recur across requests
        rows.append({"timestamp": t, "input_length": int(rng.integers(1, 60)), "output_length": 2, "hash_ids": ids})
    path = _write_trace(tmp_path / "random.jsonl", rows)
    config = _config(path, num_prompts=len(rows), endpoint=endpoint, timed_trace_chunk_hash_size=block)
    work = build_workload_sync(config, "m", max_model_len=None)
    chat = endpoint == "/v1/chat/completions"
    seen: dict[int, list[Any]] = {}
    for row, spec in zip(rows, work.requests):
        body = orjson.loads(bytes(spec.body))
        tokens = body["messages"][0]["content"].split(" ") if chat else body["prompt"]
        assert len(tokens) == row["input_length"] == spec.prompt_len
        for k, hash_id in enumerate(row["hash_ids"][:-(-row["input_length"] // block)]):
            piece = tokens[k * block:(k + 1) * block]
            known = seen.setdefault(hash_id, piece)
            common = min(len(known), len(piece))
            assert known[:common] == piece[:common], (hash_id, known, piece)
            if len(piece) > len(known):
                seen[hash_id] = piece
    whole = [tuple(p) for p in seen.values() if len(p) == block]
    assert len(set(whole)) == len(whole) > 20  # distinct ids, distinct blocks


def _numpy_layout(hash_ids: list[list[int]], input_lengths: list[int], block: int, width: int) -> tuple[Any, ...]:
    """The layout as the numpy build computed it (before the native one), for comparison: (runs,
    first_run, tokens, distinct, shared)."""
    import itertools

    import numpy as np

    n = len(input_lengths)
    n_in = np.asarray(input_lengths, dtype=np.int64)
    n_used = np.minimum(np.fromiter(map(len, hash_ids), np.int64, n), -(-n_in // block))
    used = np.fromiter(itertools.chain.from_iterable(ids[:k] for ids, k in zip(hash_ids, n_used.tolist())),
                       np.int64, int(n_used.sum()))
    request_of = np.repeat(np.arange(n), n_used)
    distinct, first_at, which = np.unique(used, return_index=True, return_inverse=True)
    which = which.reshape(-1)
    shared = int(np.count_nonzero(np.bincount(which, minlength=len(distinct)) > 1))
    own = np.maximum(n_in - block * n_used, 0)
    ends = np.cumsum(n_used)
    at_block = np.arange(len(used)) + request_of
    at_own = ends + np.arange(n)
    size = np.zeros(len(used) + n, np.int64)
    size[at_block[first_at]] = block
    size[at_own] = own
    start = np.cumsum(size) - size
    length = np.full(len(used) + n, block, np.int64)
    length[at_own] = own
    last = at_block[ends[n_used > 0] - 1]
    length[last] = np.minimum(block, n_in[n_used > 0] - block * (n_used[n_used > 0] - 1))
    start[at_block] = start[at_block[first_at]][which]
    owner = np.empty(len(used) + n, np.int64)
    owner[at_block], owner[at_own] = request_of, np.arange(n)
    keep = length > 0
    start, length, owner = start[keep], length[keep], owner[keep]
    joins = np.zeros(len(start), bool)
    joins[1:] = (owner[1:] == owner[:-1]) & (start[1:] == start[:-1] + length[:-1])
    heads = np.flatnonzero(~joins)
    run_end = start[heads] + np.add.reduceat(length, heads)
    runs = np.empty(2 * len(heads), np.int64)
    runs[0::2], runs[1::2] = start[heads] * width, run_end * width
    first_run = np.searchsorted(owner[heads], np.arange(n + 1))
    runs[2 * first_run[1:] - 1] -= 1
    return runs.tolist(), first_run.tolist(), int(size.sum()), len(distinct), shared


@pytest.mark.parametrize("span", [50, 10**6, 2**62])  # dense ids (their own numbers), sparse (np.unique's)
@pytest.mark.parametrize("block", [1, 7, 16])
def test_the_native_layout_is_the_numpy_one(span: int, block: int) -> None:
    """The native layout lays every request's blocks and own tokens where the numpy build did (so a
    trace's prompts are the same bytes): ids recur across and within requests, blocks are cut short,
    some requests have no ids and some more ids than their input needs."""
    import numpy as np

    from fastbench.load.sources.trace import TokenBlocks

    rng = np.random.default_rng(span % 1000 + block)
    for size in (1, 2, 50, 3000):
        hash_ids = [rng.integers(-span, span, size=int(rng.integers(0, 8))).tolist() for _ in range(size)]
        if span == 50:  # few distinct ids: most blocks shared
            hash_ids = [[h % 9 for h in ids] for ids in hash_ids]
        inputs = rng.integers(1, 8 * block + 3, size=size).tolist()
        for words in (False, True):
            blocks = TokenBlocks(block, words, np.random.default_rng(0))
            counts = np.array([len(ids) for ids in hash_ids], np.int64)
            flat = np.array([h for ids in hash_ids for h in ids], np.int64)
            blocks.draw(flat, np.cumsum(counts) - counts, counts, np.array(inputs, np.int64))
            runs, first_run, tokens, distinct, shared = _numpy_layout(hash_ids, inputs, block, blocks.width)
            assert blocks._runs.tolist() == runs and blocks._first_run == first_run
            assert (len(blocks._buffer), blocks.distinct, blocks.shared) == (tokens * blocks.width, distinct, shared)


def test_arrivals_follow_the_trace_scaled_from_its_first_request(tmp_path: Path) -> None:
    path = _trace_file(tmp_path)
    work = build_workload_sync(_config(path), "m", max_model_len=None)
    expected = [round((ts - 10.0) * 1e9) for ts, *_ in TRACE]
    assert work.arrival_offsets_ns == pytest.approx(expected, abs=1)
    doubled = build_workload_sync(_config(path, timed_trace_sec_multiplier=2.0), "m", max_model_len=None)
    assert doubled.arrival_offsets_ns == pytest.approx([2 * e for e in expected], abs=2)
    # mooncake: milliseconds, 512 tokens per hash id, SGLang's slowdown factor stretches the gaps
    moon = _write_trace(tmp_path / "moon.jsonl", [
        {"timestamp": 1000, "input_length": 600, "output_length": 2, "hash_ids": [7, 8]},
        {"timestamp": 1250, "input_length": 512, "output_length": 2, "hash_ids": [7]}])
    mooncake = build_workload_sync(BenchConfig(dataset_name="mooncake", dataset_path=moon, num_prompts=2,
                                               mooncake_slowdown_factor=2.0), "m", max_model_len=None)
    assert mooncake.arrival_offsets_ns == [0, 500_000_000]
    first, second = (orjson.loads(bytes(spec.body))["prompt"] for spec in mooncake.requests)
    assert first[:512] == second and first[512:] != second[:88]
    untimed = build_workload_sync(_config(path, self_timed=False), "m", max_model_len=None)
    assert untimed.arrival_offsets_ns is None


def test_a_trace_replay_hits_exactly_the_shared_blocks_and_records_each_sends_lateness(tmp_path: Path) -> None:
    path = _trace_file(tmp_path)
    jsonl = tmp_path / "requests.jsonl"
    with SyntheticServer(enable_prefix_caching=True, block_size=SERVER_BLOCK, ttft_ms=1, itl_ms=1) as server:
        result = run(_config(path, base_url=server.base_url, save_detailed=jsonl))
        counted = server.stats()["prefix_cache"]
    stats = result.server_info["prefix_cache_stats"]
    assert counted["queries"] == sum(n for _, n, _, _ in TRACE)
    assert counted["hits"] == sum(hit for *_, hit in TRACE)  # the blocks the hash ids share, no more
    assert (stats["queries"], stats["hits"]) == (counted["queries"], counted["hits"])
    assert result.counts.completed == len(TRACE)
    records = sorted((orjson.loads(line) for line in jsonl.read_bytes().splitlines()), key=lambda r: r["id"])
    # each request was due at its time in the trace, and its send stamp beside it gives its lateness
    assert [r["scheduled_ms"] for r in records] == pytest.approx([(ts - 10.0) * 1e3 for ts, *_ in TRACE],
                                                                 abs=0.01)
    assert all(r["sent_ms"] >= r["scheduled_ms"] for r in records)
    notes = " ".join(result.notes)
    assert "trace replay at the trace's times" in notes
    assert "the trace's pace was kept" in notes or "could not keep the trace's pace" in notes


def test_a_client_that_falls_behind_the_trace_says_so(tmp_path: Path) -> None:
    """Eight requests due at once under --concurrency 1 with 100 ms each: at least seven are sent late."""
    path = _write_trace(tmp_path / "burst.jsonl", [
        {"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": []} for _ in range(8)])
    with SyntheticServer(ttft_ms=100, itl_ms=1) as server:
        result = run(_config(path, base_url=server.base_url, num_prompts=8, concurrency=1))
    note = next(n for n in result.notes if "trace's pace" in n)
    behind = re.match(r"the client could not keep the trace's pace: (\d) of 8 requests were sent more than 1 ms "
                      r"after their time in the trace", note)
    assert behind is not None and int(behind.group(1)) >= 7, note
    assert "--concurrency" in note


def test_bad_traces_are_refused_with_file_line_and_field(tmp_path: Path) -> None:
    good = {"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1]}
    cases = [
        ([good, {**good, "timestamp": 0.5}], "line 2: 'timestamp' 0.5 is earlier than line 1's 1"),
        ([good, b"{not json"], "line 2: not valid JSON"),
        ([good, {k: v for k, v in good.items() if k != "input_length"}], "line 2: no 'input_length' field"),
        ([{**good, "output_length": 0}], "line 1: 'output_length' must be an integer >= 1, got 0"),
        ([{**good, "hash_ids": [1, "x"]}], "line 1: 'hash_ids' must be a list of integers"),
        ([{**good, "timestamp": "noon"}], "line 1: 'timestamp' must be a number, got 'noon'"),
        ([[1, 2]], "line 1: expected a JSON object, found a list"),
        ([good, orjson.dumps(good) + b"," + orjson.dumps(good)], "line 2: not valid JSON"),  # two records in a line
        ([good, b'{"timestamp": 3, "input_length": 10,', b'"output_length": 2}'], "line 2: not valid JSON"),
        ([good, b"", b"   ", {**good, "timestamp": 0}], "line 4: 'timestamp' 0 is earlier than line 1's 1"),
        ([good, {**good, "timestamp": 0}, b""], "line 2: 'timestamp' 0 is earlier than line 1's 1"),
    ]
    for rows, message in cases:
        path = tmp_path / "bad.jsonl"
        path.write_bytes(b"\n".join(row if isinstance(row, bytes) else orjson.dumps(row) for row in rows))
        with pytest.raises(DatasetError) as info:
            check_inputs(_config(path))
        assert str(info.value) == f"{path} {message}" or str(info.value).startswith(f"{path} {message}"), info.value
        assert "\n" not in str(info.value)
    path.write_bytes(b"\r\n".join(orjson.dumps({**good, "timestamp": t}) for t in (2, 1)) + b"\r\n\r\n")
    with pytest.raises(DatasetError, match=r"line 2: 'timestamp' 1 is earlier than line 1's 2"):
        check_inputs(_config(path))  # CRLF line ends, a blank line at the end
    labelled = _write_trace(tmp_path / "labels.jsonl", [{"t": 0, "in": 10, "out": 2}])
    with pytest.raises(DatasetError, match="no 'timestamp' field .--timed-trace-label-timestamp names another"):
        check_inputs(_config(labelled))
    check_inputs(_config(labelled, timed_trace_label_timestamp="t", timed_trace_label_input_length="in",
                         timed_trace_label_output_length="out"))


@pytest.mark.parametrize("input_length", [10**12, 10**18, 2**62])
def test_prompts_beyond_the_machines_memory_are_refused_in_one_line_before_any_is_built(
        tmp_path: Path, input_length: int) -> None:
    rows = [{"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1]},
            {"timestamp": 2, "input_length": input_length, "output_length": 2, "hash_ids": [1, 2]}]
    path = _write_trace(tmp_path / "huge.jsonl", rows)
    with pytest.raises(DatasetError) as info:
        build_workload_sync(_config(path, num_prompts=2), "m", max_model_len=None)  # no context to screen it
    message = str(info.value)
    assert message.startswith(f"{path} line 2: the prompts of the 2 requests taken need ") and "\n" not in message
    assert f"asks for {input_length:,} tokens" in message and "--max-model-len" in message
    work = build_workload_sync(_config(path, num_prompts=2), "m", max_model_len=1000)  # screened out instead
    assert len(work.requests) == 1 and work.screened_out == 1

def test_a_request_longer_than_the_context_is_skipped_and_counted(tmp_path: Path) -> None:
    path = _trace_file(tmp_path)
    work = build_workload_sync(_config(path), "m", max_model_len=100)  # 128 + 3 tokens do not fit
    assert work.screened_out == 1 and len(work.requests) == len(TRACE) - 1
    kept = [ts for ts, n, _, _ in TRACE if n + 3 <= 100]
    assert work.arrival_offsets_ns == pytest.approx([round((ts - 10.0) * 1e9) for ts in kept], abs=1)
    assert any("the trace ran short" in note for note in work.notes)


def test_a_trace_paces_itself_unless_told_not_to(tmp_path: Path) -> None:
    path = _trace_file(tmp_path)
    with pytest.raises(ConfigError, match="--request-rate and the trace's times both pace the run"):
        build_workload_sync(_config(path, request_rate=5.0), "m", max_model_len=None)
    with pytest.raises(ConfigError, match="--self-timed/--no-self-timed is for the trace datasets"):
        build_workload_sync(BenchConfig(self_timed=True), "m", max_model_len=None)
    assert _config(path).open_loop and not _config(path, self_timed=False).open_loop


def test_two_workers_split_a_trace_and_keep_its_times(tmp_path: Path) -> None:
    """--workers 2: the trace's requests are dealt to both processes, and each is still due at its own time
    in the trace (the schedule is the trace's, not a rate's), as one process would send it."""
    import numpy as np

    rng = np.random.default_rng(3)
    stamps = np.sort(rng.uniform(0, 800, size=40)).round(3)  # ms, with bursts and gaps
    path = _write_trace(tmp_path / "split.jsonl", [
        {"timestamp": float(ts), "input_length": 24, "output_length": 2, "hash_ids": [i % 3]}
        for i, ts in enumerate(stamps)])
    jsonl = tmp_path / "requests.jsonl"
    config = _config(path, num_prompts=40, workers=2, concurrency=8, timed_trace_sec_multiplier=0.001,
                     save_detailed=jsonl, synthetic_args=("--ttft-ms", "2", "--itl-ms", "1"), progress=False)
    result = run(config)
    assert result.counts.completed == 40
    section = result.workers
    assert section is not None and section["count"] == 2
    assert all(w["requests"] > 0 for w in section["per_worker"])  # both sent part of the trace
    records = sorted((orjson.loads(line) for line in jsonl.read_bytes().splitlines()), key=lambda r: r["id"])
    assert [r["id"] for r in records] == list(range(40))
    assert [r["scheduled_ms"] for r in records] == pytest.approx((stamps - stamps[0]).tolist(), abs=0.01)
    assert all(r["sent_ms"] >= r["scheduled_ms"] for r in records)
