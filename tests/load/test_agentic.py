"""Agentic replay (--dataset-name weka): Weka traces made here read into agent trees, their plan (each call's
dependencies and gap, the staggered start, screening, replays) checked exactly, and replays against the
synthetic server whose order, gaps and prefix-cache hits are the plan's."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from support.scripted import ScriptedServer, stream_script
from support.weka_traces import (
    BLOCK,
    read_records,
    tree_trace,
    weka_call,
    weka_config,
    weka_subagent,
    weka_trace,
    write_traces,
)
from fastbench import BenchConfig, Result, run
from fastbench.datasetoptions import AgenticOptions
from fastbench.exceptions import ConfigError, DatasetError
from fastbench.load import pacer
from fastbench.load.agentic import TreePlan
from fastbench.load.datasets import build_workload_sync, check_inputs
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target, session_header
from fastbench.load.sources.weka import BACKGROUND, JOINED, ROOT, read_corpus
from fastbench.synthetic import SyntheticServer

# -- reading ----------------------------------------------------------------------------------------------------


def test_a_trace_reads_into_its_agents_with_their_roles_spawns_and_joins(tmp_path: Path) -> None:
    doc = tree_trace()
    doc["requests"].insert(0, weka_subagent(0.0, [weka_call(0.0, [9])]))  # before any call: nothing spawned it
    doc["requests"].insert(3, weka_subagent(0.030, [weka_call(0.031, [70])], status="async_launched"))
    corpus = read_corpus(str(write_traces(tmp_path / "t.json", doc)))
    (trace,) = corpus.traces
    root, launched, joined, background = trace.agents  # in the order of their markers
    assert (trace.name, trace.block, trace.dropped_subagents) == ("tree", BLOCK, 1)
    assert root.calls == 4 and root.role == ROOT
    assert (joined.role, joined.parent, joined.spawn, joined.join) == (JOINED, 0, 1, 2)
    assert (launched.role, launched.spawn, launched.join) == (BACKGROUND, 1, -1)  # async_launched: nothing waits
    assert (background.role, background.spawn, background.join) == (BACKGROUND, 3, -1)  # no parent call after it
    assert joined.starts.tolist() == pytest.approx([0.035, 0.045])  # relative to the marker
    assert launched.starts.tolist() == [0.031]  # already absolute
    assert corpus.relative_subagents == 2
    assert root.tool_result.tolist() == [False, True, False, False]
    assert np.isnan(root.ends[2]) and root.ends[0] == pytest.approx(0.010)


def test_a_subagent_of_a_subagent_is_spawned_and_joined_by_its_own_parent(tmp_path: Path) -> None:
    inner = weka_subagent(0.012, [weka_call(0.013, [80])])
    child_calls = [weka_call(0.011, [70]), inner, weka_call(0.02, [70, 71])]
    doc = weka_trace("nested", [weka_call(0.0, [1]), weka_subagent(0.01, child_calls), weka_call(0.03, [1, 2])])
    root, child, grandchild = read_corpus(str(write_traces(tmp_path / "n.json", doc))).traces[0].agents
    assert (child.parent, child.spawn, child.join, child.role) == (0, 0, 1, JOINED)
    assert (grandchild.parent, grandchild.spawn, grandchild.join, grandchild.role) == (1, 0, 1, JOINED)
    assert grandchild.name == "nested/explore/explore"


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["requests"][1].update({"in": 0}), "requests[1].in: must be an integer >= 1 (tokens), got 0"),
    (lambda d: d["requests"][1].update({"t": -1}), "requests[1].t: must be a number >= 0"),
    (lambda d: d["requests"][3].update({"t": 0.01}), "requests[3].t: 0.01 is earlier than the call before's (0.02)"),
    (lambda d: d["requests"][2]["requests"][1].update({"out": "3"}), "requests[2].requests[1].out: must be an integer"),
    (lambda d: d["requests"][0].update({"type": "x"}), "requests[0].type: must be \"n\", \"s\" or \"subagent\""),
    (lambda d: d["requests"][0].update({"hash_ids": [1, -2]}), "requests[0].hash_ids: must be a list of integers"),
    (lambda d: d["requests"][2].pop("requests"), "requests[2].requests: a subagent marker must hold its calls"),
    (lambda d: d.pop("block_size"), "block_size: must be an integer >= 1"),
    (lambda d: d.update({"hash_id_scope": "cluster"}), "hash_id_scope: must be \"local\" or \"global\""),
])
def test_a_defect_in_a_single_trace_is_named_by_file_and_field(tmp_path: Path, change: Any, message: str) -> None:
    doc = tree_trace()
    change(doc)
    path = write_traces(tmp_path / "bad.json", doc)
    with pytest.raises(DatasetError) as caught:
        check_inputs(weka_config(path))
    assert str(caught.value).startswith(f"{path}: {message}"), caught.value
    assert "\n" not in str(caught.value)


def test_in_a_corpus_a_defective_trace_is_skipped_counted_and_its_defect_named(tmp_path: Path) -> None:
    bad = tree_trace("bad")
    bad["requests"][0]["in"] = -4
    path = write_traces(tmp_path / "corpus.jsonl", tree_trace("a"), bad, tree_trace("b"))
    path.write_bytes(path.read_bytes() + b"{not json\n")
    work = build_workload_sync(weka_config(path, num_prompts=2), "m", max_model_len=None)
    assert work.trees is not None and work.trees.trees == ["a", "b"]
    note = next(n for n in work.notes if "defective traces skipped" in n)
    assert note.startswith(f"weka: 2 defective traces skipped; the first: {path} line 2: requests[0].in: must be")
    (tmp_path / "dir").mkdir()
    write_traces(tmp_path / "dir" / "1.json", tree_trace("one"))
    write_traces(tmp_path / "dir" / "2.json", bad)
    assert [t.name for t in read_corpus(str(tmp_path / "dir")).traces] == ["one"]
    only_bad = write_traces(tmp_path / "only_bad.jsonl", bad, bad)
    with pytest.raises(DatasetError, match="no usable trace \\(2 skipped; the first: .*line 1: requests\\[0\\].in"):
        check_inputs(weka_config(only_bad))


# -- the plan ----------------------------------------------------------------------------------------------------


def test_each_call_waits_for_its_dependencies_and_its_recorded_gap(tmp_path: Path) -> None:
    path = write_traces(tmp_path / "t.json", tree_trace())
    work = build_workload_sync(weka_config(path, agentic_start="beginning"), "m", max_model_len=None)
    plan = work.trees
    assert plan is not None and work.warmups == []
    # rows in the order of their recorded starts: root 0, root 1, sub 0, sub 1, root 2, root 3, background 0
    assert list(zip(plan.agent_of_row.tolist(), plan.agent_turn_of_row.tolist())) == [
        (0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (2, 0)]
    assert plan.role_of_row.tolist() == [ROOT, ROOT, JOINED, JOINED, ROOT, ROOT, BACKGROUND]
    deps = [sorted(plan.deps[plan.deps_first[r]:plan.deps_first[r + 1]].tolist()) for r in range(7)]
    assert deps == [[], [0], [1], [2], [1, 3], [4], [5]]  # root 2 joins the subagent; nothing joins the last
    # think_time where recorded; else t minus the latest recorded end (t + api_time) of the dependencies
    assert plan.gap_ns.tolist() == [0, 10_000_000, 5_000_000, 4_000_000, 2_000_000, 0, 10_000_000]  # root 2: no end
    assert plan.tool_result_of_row.tolist() == [0, 13, 0, 0, 0, 0, 0]  # 53 in, 37 in + 3 out before it
    assert [spec.prompt_len for spec in work.requests] == [37, 53, 37, 53, 69, 85, 37]
    scaled = build_workload_sync(weka_config(path, agentic_start="beginning", agentic_time_scale=2.0,
                                             agentic_idle_gap_cap=0.015), "m", max_model_len=None).trees
    assert scaled is not None
    assert scaled.gap_ns.tolist() == [0, 15_000_000, 10_000_000, 8_000_000, 4_000_000, 0, 15_000_000]


def test_calls_sharing_hash_ids_share_exactly_their_blocks_and_replays_share_nothing(tmp_path: Path) -> None:
    path = write_traces(tmp_path / "t.json", tree_trace())
    work = build_workload_sync(weka_config(path, num_prompts=2, concurrency=1), "m", max_model_len=None)
    prompts = [orjson.loads(bytes(spec.body))["prompt"] for spec in work.requests]
    first, replay = prompts[:7], prompts[7:]
    assert [len(p) for p in first] == [37, 53, 37, 53, 69, 85, 37]
    assert first[1][:2 * BLOCK] == first[0][:2 * BLOCK] and first[1][32:37] != first[0][32:37]
    assert first[5][:4 * BLOCK] == first[4][:4 * BLOCK]
    assert first[2][:BLOCK] != first[0][:BLOCK]  # the subagent's blocks are its own
    assert not {tuple(p[:BLOCK]) for p in first} & {tuple(p[:BLOCK]) for p in replay}
    assert work.trees is not None and work.trees.trees == ["tree", "tree#2"]
    assert work.shared_prompt_tokens == [0, 32, 0, 32, 48, 64, 0] * 2
    assert any("replays carry blocks of their own" in n for n in work.notes)


def test_a_staggered_start_begins_part_way_with_a_warm_up_holding_the_context(tmp_path: Path) -> None:
    path = write_traces(tmp_path / "t.json", tree_trace())
    work = build_workload_sync(weka_config(path, num_prompts=3, concurrency=2), "m", max_model_len=None)
    plan = work.trees
    assert plan is not None and plan.slots == 2
    rows = np.diff(plan.tree_first).tolist()
    assert rows == [7, 3, 7]  # tree 1 starts at root call 4 * 1 // 2 = 2: root 2, root 3 and the background one
    assert len(work.warmups) == 1  # root call 1 of tree 1: the context its start point continues
    warm = orjson.loads(bytes(work.warmups[0].body))["prompt"]
    start = orjson.loads(bytes(work.requests[7].body))["prompt"]
    assert len(warm) == 53 and start[:3 * BLOCK] == warm[:3 * BLOCK]
    assert work.shared_prompt_tokens[7:10] == [48, 64, 0]  # the warm-up's blocks count as sent before
    assert plan.deps[plan.deps_first[7]:plan.deps_first[8]].tolist() == []  # its subagent was never sent


def test_a_call_past_the_context_cuts_its_agent_and_what_it_would_spawn(tmp_path: Path) -> None:
    path = write_traces(tmp_path / "t.json", tree_trace())
    work = build_workload_sync(weka_config(path, agentic_start="beginning", max_tokens=3), "m", max_model_len=60)
    plan = work.trees
    assert plan is not None
    # root 2 (69 + 3 > 60) is cut with root 3 and the background subagent root 3 spawns; the joined one stays
    assert list(zip(plan.agent_of_row.tolist(), plan.agent_turn_of_row.tolist())) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert work.screened_out == 3
    with pytest.raises(ConfigError, match="no call to send"):
        build_workload_sync(weka_config(path), "m", max_model_len=30)


def test_agentic_options_are_refused_where_they_mean_nothing(tmp_path: Path) -> None:
    path = write_traces(tmp_path / "t.json", tree_trace())
    with pytest.raises(ConfigError, match="--agentic-\\* options are for agent-tree replay"):
        build_workload_sync(BenchConfig(dataset_options=AgenticOptions(time_scale=2.0)), "m", max_model_len=None)
    for change, option in (({"num_warmups": 2}, "--num-warmups"), ({"workers": 2}, "--workers"),
                           ({"ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 2},
                            "--ramp-up-strategy")):
        with pytest.raises(ConfigError, match=f"{option} is not available with --dataset-name weka"):
            build_workload_sync(weka_config(path, **change), "m", max_model_len=None)


# -- replays against the synthetic server ------------------------------------------------------------------------


def _replay_on_two_slots(tmp_path: Path, trees: int) -> tuple[TreePlan, Result, list[dict[str, Any]]]:
    """``trees`` trees of three traces replayed on two slots against the synthetic server: (the plan, the
    result, each request's record)."""
    path = write_traces(tmp_path / "c.jsonl", tree_trace("a"), tree_trace("b"), tree_trace("c"))
    jsonl = tmp_path / "requests.jsonl"
    config = weka_config(path, num_prompts=trees, concurrency=2, save_detailed=jsonl,
                         synthetic_args=("--ttft-ms", "3", "--itl-ms", "2"))
    plan = build_workload_sync(config, "m", max_model_len=None).trees
    result = run(config)
    assert plan is not None
    return plan, result, read_records(jsonl)


def _tree_spans(plan: TreePlan, records: list[dict[str, Any]], unit: str) -> list[tuple[float, float]]:
    """Per tree: its first call's send and its last call's end (``unit``: "ms" or "ns")."""
    return [(min(r[f"sent_{unit}"] for r in records[a:b]), max(r[f"end_{unit}"] for r in records[a:b]))
            for a, b in zip(plan.tree_first[:-1].tolist(), plan.tree_first[1:].tolist())]


def test_a_replay_sends_each_call_its_gap_after_its_dependencies_ended(tmp_path: Path) -> None:
    plan, result, records = _replay_on_two_slots(tmp_path, 4)
    assert result.counts.completed == len(plan.gap_ns) == 7 + 3 + 7 + 7
    for row, rec in enumerate(records):
        deps = plan.deps[plan.deps_first[row]:plan.deps_first[row + 1]].tolist()
        if deps:  # due exactly its gap after the last of its dependencies' recorded ends
            due = max(records[d]["end_ms"] for d in deps) + plan.gap_ns[row] / 1e6
            assert rec["scheduled_ms"] == pytest.approx(due, abs=1e-3)
        assert rec["sent_ms"] >= rec["scheduled_ms"]
    spans = _tree_spans(plan, records, "ms")
    for when in [start for start, _ in spans]:  # two slots: never three trees at once
        assert sum(start <= when < end for start, end in spans) <= 2
    assert spans[2][0] >= min(spans[0][1], spans[1][1])  # the third tree took a slot a tree freed


def test_the_steady_interval_holds_every_slot_full_of_a_tree(tmp_path: Path) -> None:
    """Two slots, five trees: the interval opens when both slots first hold a tree (the later of the two
    staggered trees' first sends) and closes when, the pool dry, the first of the last two trees drains; its
    requests are exactly those sent and ended inside it."""
    plan, result, records = _replay_on_two_slots(tmp_path, 5)
    assert result.steady is not None and result.steady.reason is None
    assert all(r["status"] == "completed" for r in records)
    spans = sorted(_tree_spans(plan, records, "ns"))
    last_start = spans[-1][0]
    alongside = [end for start, end in spans[:-1] if start <= last_start < end]
    assert len(alongside) == 1  # the other slot's tree, running when the last tree took its slot
    assert (result.steady.start_ns, result.steady.end_ns) == (spans[1][0], min(spans[-1][1], alongside[0]))
    assert result.steady.basis == "agent trees in flight" and result.steady.target == 2
    a, b = result.steady.start_ns, result.steady.end_ns
    inside = [r for r in records if r["sent_ns"] >= a and r["end_ns"] <= b]
    assert 0 < len(inside) < len(records) and result.steady.requests == len(inside)
    e2el = result.steady.distributions["e2el"]
    assert e2el.count == len(inside) and e2el.max == pytest.approx(max(r["e2el_ms"] for r in inside))
    assert e2el.median == pytest.approx(float(np.median([r["e2el_ms"] for r in inside])))


def test_cached_tokens_are_exactly_the_blocks_the_trees_share(tmp_path: Path) -> None:
    path = write_traces(tmp_path / "c.jsonl", tree_trace("a"), tree_trace("b"))
    jsonl = tmp_path / "requests.jsonl"
    with SyntheticServer(enable_prefix_caching=True, enable_prompt_tokens_details=True, block_size=BLOCK, ttft_ms=1,
                         itl_ms=1) as server:
        config = weka_config(path, num_prompts=3, concurrency=2, base_url=server.base_url, save_detailed=jsonl)
        work = build_workload_sync(config, "m", max_model_len=None)
        result = run(config)
        counted = server.stats()["prefix_cache"]
    records = read_records(jsonl)
    assert [r["cached_tokens"] or 0 for r in records] == work.shared_prompt_tokens
    warm = sum(spec.prompt_len or 0 for spec in work.warmups)
    assert counted["queries"] == sum(r["prompt_tokens"] for r in records) + warm
    assert result.prefix_cache is not None
    assert result.prefix_cache.expected_prefix_share == pytest.approx(result.prefix_cache.cached_tokens_share)


def test_open_loop_starts_trees_at_the_rate(tmp_path: Path) -> None:
    path = write_traces(tmp_path / "t.json", tree_trace())
    jsonl = tmp_path / "requests.jsonl"
    config = weka_config(path, num_prompts=3, request_rate=20.0, concurrency=None, save_detailed=jsonl,
                         synthetic_args=("--ttft-ms", "2", "--itl-ms", "1"))
    plan = build_workload_sync(config, "m", max_model_len=None).trees
    result = run(config)
    assert plan is not None and plan.slots is None and result.counts.completed == 21
    records = read_records(jsonl)
    offsets = pacer.arrival_offsets_ns(3, 20.0, 1.0, config.seed)
    firsts = plan.tree_first[:-1].tolist()
    assert [records[r]["scheduled_ms"] for r in firsts] == pytest.approx((offsets / 1e6).tolist(), abs=1e-3)


def test_a_failed_call_ends_its_tree(tmp_path: Path) -> None:
    """The server fails its second answer (the root's call 1): nothing that would carry its context is sent."""
    path = write_traces(tmp_path / "t.json", tree_trace())
    jsonl = tmp_path / "requests.jsonl"
    faults = ("--fault", "http-500", "--fault-every", "2")
    result = run(weka_config(path, agentic_start="beginning", save_detailed=jsonl,
                             synthetic_args=("--ttft-ms", "2", "--itl-ms", "1", *faults)))
    assert [r["status"] for r in read_records(jsonl)] == ["completed", "failed"] + ["not_started"] * 5
    assert (result.counts.completed, result.counts.failed) == (1, 1)


def test_each_call_carries_its_agents_session_header_and_the_warm_ups_none(tmp_path: Path) -> None:
    path = write_traces(tmp_path / "c.jsonl", tree_trace("a"), tree_trace("b"))
    config = weka_config(path, num_prompts=2, concurrency=2, agentic_session_header="x-session-id")
    work = build_workload_sync(config, "m", max_model_len=None)
    assert work.trees is not None and len(work.warmups) == 1
    header = session_header(config, work)
    assert header is not None and header[1] == work.trees.session_ids()
    assert Counter(header[1]) == {"a": 4, "a::1": 2, "a::2": 1, "b": 2, "b::2": 1}  # b starts at root call 2

    async def replay() -> list[bytes]:
        async with ScriptedServer(lambda n, body: stream_script([1, 1])) as server:
            plan = LoadPlan(bodies=[spec.body for spec in work.requests], warmup_bodies=[s.body for s in work.warmups],
                            concurrency=2, trees=work.trees, row_header=header)
            data = await LoadGenerator(Target.parse(server.base_url, "/v1/completions"), plan).run()
            assert int((data.rows[:, 0] >= 0).sum()) == len(work.requests)
            return [head for head, _ in server.requests]

    heads = asyncio.run(replay())
    sent = [line.split(b": ", 1)[1].decode() for head in heads for line in head.split(b"\r\n")
            if line.lower().startswith(b"x-session-id:")]
    assert Counter(sent) == Counter(header[1])  # every call its agent's, once
    assert len(heads) == len(sent) + 1  # the warm-up carries none
    with pytest.raises(ConfigError, match="both set it"):
        session_header(config.replace(headers={"X-Session-Id": "pinned"}), work)
    with pytest.raises(ConfigError, match="must be an HTTP header name"):
        build_workload_sync(weka_config(path, agentic_session_header="x session"), "m", max_model_len=None)


# -- reading: the defects the fast paths hand to the call-by-call checks ----------------------------------------
@pytest.mark.parametrize(("ids", "named"), [
    ([0, True], "[0, True]"), ([1, 2.0], "[1, 2.0]"), ([3, 1 << 63], "[3, 9223372036854775808]"), (["3"], "['3']"),
    ([None], "[None]"), ([[1]], "[[1]]"),
])
def test_a_hash_id_not_an_integer_in_range_is_named_with_its_call(tmp_path: Path, ids: list[Any], named: str) -> None:
    doc = tree_trace()
    doc["requests"][2]["requests"][1]["hash_ids"] = ids
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))  # orjson writes no int past 64 bits
    with pytest.raises(DatasetError, match=r"requests\[2\]\.requests\[1\]\.hash_ids: must be a list of integers >= 0, "
                                           rf"got {re.escape(named)}$"):
        read_corpus(str(path))


def test_a_call_type_of_a_list_or_an_object_is_named_not_a_crash(tmp_path: Path) -> None:
    doc = tree_trace()
    doc["requests"][1]["type"] = ["s"]
    with pytest.raises(DatasetError, match=r"requests\[1\]\.type: must be \"n\", \"s\" or \"subagent\", got \['s'\]"):
        read_corpus(str(write_traces(tmp_path / "bad.json", doc)))


def test_json_lines_ending_in_crlf_and_a_trace_over_many_lines_read_alike(tmp_path: Path) -> None:
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(b"\r\n".join(orjson.dumps(tree_trace(name)) for name in ("a", "b")) + b"\r\n\r\n{bad\r\n")
    corpus = read_corpus(str(crlf))
    assert [t.name for t in corpus.traces] == ["a", "b"]
    assert corpus.first_defect is not None and corpus.first_defect.startswith(f"{crlf} line 4: not valid JSON")
    pretty = tmp_path / "pretty.json"
    pretty.write_bytes(orjson.dumps(tree_trace("p"), option=orjson.OPT_INDENT_2))
    agents = read_corpus(str(pretty)).traces[0].agents
    flat = read_corpus(str(write_traces(tmp_path / "flat.json", tree_trace("p")))).traces[0].agents
    for got, want in zip(agents, flat):
        assert np.array_equal(got.hash_ids, want.hash_ids) and np.array_equal(got.starts, want.starts)
