"""The agentic section (results.agentic) on hand-made request tables whose figures are worked out by hand:
trees and how far each got, agents, roles, TTFT against the context and the cached share, which source a
request's cached tokens came from, and the section in the result file, the console and the run card."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import pytest

from support.result_schema import DOC, undocumented
from fastbench.config import BenchConfig
from fastbench.results import agentic
from fastbench.results.agentic import agentic_figures
from fastbench.results.cache import prefix_cache_summary
from fastbench.results.card import render_card
from fastbench.results.definitions import DEFINITIONS
from fastbench.results.figures import PER_REQUEST_WORKLOAD_KEYS, summarize
from fastbench.results.records import COL, NCOLS, ErrorClass, RunData, TimestampSource, UsageSource
from fastbench.results.steady import steady_state
from fastbench.results.writers import render_console, result_to_json_dict

T0 = 10**12  # an arbitrary CLOCK_MONOTONIC origin, ns
MS = 1_000_000
OK, FAILED, CANCELLED = ErrorClass.OK, ErrorClass.HTTP_STATUS, ErrorClass.CANCELLED

# One call per row, in ms from T0 (the send; "scheduled" defaults to it): (tree, agent, role, turn, tool
# result tokens, sent, first, end, prompt tokens, output tokens, cached tokens, error); None: not started.
Call = tuple[int, int, int, int, int, float, float, float, int, int, int, ErrorClass]
CALLS: list[tuple[int, int, int, int] | Call] = [
    # tree 0, "alpha": a root of 3 calls, a subagent joined back (2 calls), a background one (1): completes
    (0, 0, 0, 0, 0, 0, 100, 300, 1000, 50, 0, OK),  # share 0
    (0, 0, 0, 1, 200, 400, 450, 600, 2000, 40, 1000, OK),  # 0.5
    (0, 1, 1, 0, 0, 310, 400, 500, 600, 30, 300, OK),  # 0.5
    (0, 1, 1, 1, 100, 510, 530, 720, 900, 20, 810, OK),  # 0.9
    (0, 2, 2, 0, 0, 320, 380, 900, 1500, 60, 1485, OK),  # 0.99
    (0, 0, 0, 2, 300, 710, 730, 1000, 3000, 10, 2970, OK),  # 0.99
    # tree 1, "beta": a root whose third call fails; its fourth is never sent
    (1, 0, 0, 0, 0, 50, 130, 250, 4000, 5, -1, OK),  # no cached_tokens in its usage: 0 cached (vLLM leaves it out)
    (1, 0, 0, 1, 150, 300, 320, 400, 5000, 5, 4000, OK),  # 0.8
    (1, 0, 0, 2, 50, 450, 0, 460, -1, 0, -1, FAILED),
    (1, 0, 0, 3),
    # tree 2, "alpha#2" (the trace again): never started
    (2, 0, 0, 0),
    # tree 3, "gamma": cut short by the run's end
    (3, 0, 0, 0, 0, 800, 820, 1100, 100, 3, -1, CANCELLED),
]
NAMES = ["alpha", "beta", "alpha#2", "gamma"]


def table(calls: Sequence[tuple[Any, ...]]) -> tuple[np.ndarray, dict[str, Any]]:
    """The request table and the workload's per-row maps of ``calls`` (rows as CALLS lays them out)."""
    rows = np.zeros((len(calls), NCOLS), dtype=np.int64)
    maps: dict[str, list[int]] = {k: [] for k in ("tree_of_row", "agent_of_row", "role_of_row", "agent_turn_of_row",
                                                   "tool_result_of_row")}
    for i, call in enumerate(calls):
        for key, value in zip(maps, (*call[:4], call[4] if len(call) > 4 else 0)):
            maps[key].append(value)
        if len(call) == 4:
            continue  # never started: the row stays all zero
        _, _, _, _, _, sent, first, end, prompt, output, cached, error = call
        row = rows[i]
        row[COL["index"]] = i
        row[COL["scheduled_ns"]] = T0 + round((sent - 5) * MS)  # 5 ms before the send: open loop counts it
        row[COL["sent_ns"]] = T0 + round(sent * MS)
        if first:
            row[COL["first_byte_ns"]] = row[COL["first_token_ns"]] = row[COL["first_answer_ns"]] = (
                T0 + round(first * MS))
        row[COL["end_ns"]] = T0 + round(end * MS)
        row[COL["prompt_tokens"]] = prompt
        row[COL["output_tokens"]] = output
        row[COL["cached_tokens"]] = cached
        row[COL["error"]] = error
        row[COL["http_status"]] = 500 if error == FAILED else 200
        row[COL["usage_source"]] = UsageSource.FINAL if prompt >= 0 else UsageSource.NONE
    info: dict[str, Any] = {key: np.asarray(values, dtype=np.int64) for key, values in maps.items()}
    info["trees"] = list(NAMES[:int(info["tree_of_row"].max()) + 1])
    return rows, info


def figures(open_loop: bool = False) -> dict[str, Any]:
    rows, info = table(CALLS)
    return agentic_figures(rows, info | {"agentic_slots": 2}, open_loop)


def test_trees_ending_each_way() -> None:
    s = figures()
    assert (s["slots"], s["trees"], s["completed"], s["ended_early"], s["ended_by_failure"], s["cut_short"],
            s["not_started"]) == (2, 4, 1, 2, 1, 1, 1)
    assert [(t["name"], t["state"]) for t in s["per_tree"]] == [
        ("alpha", "completed"), ("beta", "ended by failure"), ("alpha#2", "not started"), ("gamma", "cut short")]
    alpha, beta = s["per_tree"][:2]
    # alpha: its first call sent at 0, its last call's end at 1000 ms
    assert alpha == {"name": "alpha", "state": "completed", "agents": 3, "calls": 6, "calls_completed": 6,
                     "duration_s": pytest.approx(1.0), "input_tokens": 9000, "output_tokens": 210}
    assert beta == {"name": "beta", "state": "ended by failure", "agents": 1, "calls": 4, "calls_completed": 2,
                    "duration_s": None, "input_tokens": 9000, "output_tokens": 10}
    assert s["tree_duration_s"] == {"mean": pytest.approx(1.0), "median": pytest.approx(1.0),
                                    "p99": pytest.approx(1.0), "min": pytest.approx(1.0), "max": pytest.approx(1.0)}
    # 6, 4, 1 and 1 calls laid out: p99 interpolated between 4 and 6
    assert s["tree_calls"] == {"mean": 3.0, "median": 2.5, "p99": pytest.approx(4 + 0.97 * 2), "min": 1.0,
                               "max": 6.0}
    assert s["tree_calls_completed"]["mean"] == pytest.approx(8 / 3)  # trees that began: 6, 2 and 0 done
    assert s["tree_calls_completed"]["min"] == 0.0
    assert (s["tree_input_tokens"]["median"], s["tree_output_tokens"]["median"]) == (9000.0, 210.0)


def test_agents() -> None:
    a = figures()["agents"]
    assert (a["agents"], a["by_role"], a["completed"], a["ended_early"]) == (
        6, {"root": 4, "subagent": 1, "background": 1}, 3, 2)
    # the completed ones, alpha's: its root 0..1000 ms, its subagent 310..720, its background one 320..900
    assert a["duration_s"]["median"] == pytest.approx(0.58)
    assert (a["duration_s"]["min"], a["duration_s"]["max"]) == (pytest.approx(0.41), pytest.approx(1.0))
    assert a["turns"]["mean"] == 2.0 and a["turns"]["max"] == 4.0  # 3, 2, 1, 4, 1, 1 calls
    assert a["turns_completed"]["mean"] == pytest.approx(8 / 5)  # the 5 that began: 3, 2, 1, 2 and 0 done
    assert (a["input_tokens"]["median"], a["output_tokens"]["max"]) == (1500.0, 100.0)


def test_roles() -> None:
    roles = figures()["per_role"]
    root, sub, background = roles["root"], roles["subagent"], roles["background"]
    assert (root["requests"], root["started"], root["completed"], root["failed"]) == (9, 7, 5, 1)
    # TTFT from the send (closed loop): 100, 50, 20, 80, 20 ms; E2E 300, 200, 290, 200, 100 ms
    assert root["ttft_ms_p50"] == pytest.approx(50.0)
    assert root["ttft_ms_p99"] == pytest.approx(80 + 0.96 * 20)
    assert root["e2el_ms_p50"] == pytest.approx(200.0)
    assert root["mean_prompt_tokens"] == 3000.0 and root["mean_tool_result_tokens"] == 130.0
    assert root["mean_cached_share"] == pytest.approx((0 + 0.5 + 0.99 + 0 + 0.8) / 5)
    assert (sub["requests"], sub["completed"], sub["failed"]) == (2, 2, 0)
    assert sub["ttft_ms_p50"] == pytest.approx(55.0) and sub["ttft_ms_p99"] == pytest.approx(20 + 0.99 * 70)
    assert sub["e2el_ms_p50"] == pytest.approx(200.0)  # 190 and 210
    assert (sub["mean_prompt_tokens"], sub["mean_tool_result_tokens"]) == (750.0, 50.0)
    assert sub["mean_cached_share"] == pytest.approx(0.7)
    assert background == {"requests": 1, "started": 1, "completed": 1, "failed": 0,
                          "ttft_ms_p50": pytest.approx(60.0), "ttft_ms_p99": pytest.approx(60.0),
                          "e2el_ms_p50": pytest.approx(580.0), "mean_prompt_tokens": 1500.0,
                          "mean_tool_result_tokens": 0.0, "mean_cached_share": pytest.approx(0.99)}


def test_open_loop_counts_from_the_arrival() -> None:
    closed, opened = figures()["per_role"]["background"], figures(open_loop=True)["per_role"]["background"]
    assert opened["ttft_ms_p50"] == pytest.approx(closed["ttft_ms_p50"] + 5)  # arrived 5 ms before its send
    assert opened["e2el_ms_p50"] == pytest.approx(closed["e2el_ms_p50"] + 5)


def test_ttft_by_context_in_powers_of_two() -> None:
    bins = figures()["ttft_by_context"]
    # prompts 1000, 600, 900 | 2000, 1500 | 3000, 4000 | 5000; TTFTs 100, 90, 20 | 50, 60 | 20, 80 | 20
    assert [(b["min_prompt_tokens"], b["max_prompt_tokens"], b["requests"]) for b in bins] == [
        (512, 1023, 3), (1024, 2047, 2), (2048, 4095, 2), (4096, 8191, 1)]
    assert [b["ttft_ms_p50"] for b in bins] == pytest.approx([90.0, 55.0, 50.0, 20.0])
    assert [b["ttft_ms_p99"] for b in bins] == pytest.approx([90 + 0.98 * 10, 50 + 0.99 * 10, 20 + 0.99 * 60, 20.0])


def test_ttft_by_cached_share_from_the_servers_usage() -> None:
    s = figures()
    bins = s["ttft_by_cached_share"]
    assert [(b["min_share"], b["max_share"]) for b in bins] == list(zip(agentic.CACHED_SHARE_EDGES[:-1],
                                                                        agentic.CACHED_SHARE_EDGES[1:]))
    # shares 0 (twice: one count left out of the usage), 0.5, 0.5, 0.8, 0.9, 0.99, 0.99 (the last bin holds 1)
    assert [b["requests"] for b in bins] == [2, 0, 2, 1, 1, 0, 2]
    assert [b["ttft_ms_p50"] for b in bins] == pytest.approx([90.0, None, 70.0, 20.0, 20.0, None, 40.0])
    assert [b["ttft_ms_p99"] for b in bins] == pytest.approx([80 + 0.99 * 20, None, 50 + 0.99 * 40, 20.0, 20.0,
                                                              None, 20 + 0.99 * 40])
    assert (s["cached_share_source"], s["cached_share_requests"]) == ("server_usage",
                                                                      {"server_usage": 8, "workload": 0})
    assert s["cached_share"] == pytest.approx(10565 / 18000)


def test_the_workloads_sharing_where_the_server_never_said() -> None:
    """No request's usage carried cached_tokens: the workload's shared tokens, with the chat template's tokens
    as shared, as the prefix_cache section's expected share counts them."""
    calls = [(0, 0, 0, turn, 0, 100.0 * turn, 100.0 * turn + 10 * (turn + 1), 100.0 * turn + 50, prompt, 5, -1, OK)
             for turn, prompt in enumerate((1000, 2000, 3000))]
    rows, info = table(calls)
    info |= {"shared_prompt_tokens": [0, 600, 900], "prompt_lens": [990, 1990, 2990]}  # 10 template tokens each
    s = agentic_figures(rows, info, False)
    assert (s["cached_share_source"], s["cached_share_requests"]) == ("workload", {"server_usage": 0, "workload": 3})
    assert s["cached_share"] == pytest.approx((10 + 610 + 910) / 6000)
    expected = prefix_cache_summary(rows, np.ones(3, dtype=bool), rows[:, COL["prompt_tokens"]],
                                    BenchConfig(dataset_name="weka"), info, {}).expected_prefix_share
    assert s["cached_share"] == pytest.approx(expected)
    # shares 0.01, 0.305, 0.303: TTFTs 10, 20, 30 ms
    assert [b["requests"] for b in s["ttft_by_cached_share"]] == [1, 2, 0, 0, 0, 0, 0]
    assert s["ttft_by_cached_share"][1]["ttft_ms_p50"] == pytest.approx(25.0)


def test_each_request_its_own_source() -> None:
    """The server's count where its usage came (0 where it left cached_tokens out), else the workload's; a request
    with neither is not counted."""
    calls = [(0, 0, 0, 0, 0, 0, 10, 20, 1000, 5, 500, OK),
             (0, 0, 0, 1, 0, 30, 40, 50, -1, 5, -1, OK),  # no usage at all: the workload's 400 of its 800
             (0, 0, 0, 2, 0, 60, 70, 80, 1000, 5, -1, OK),  # usage without cached_tokens: 0
             (0, 0, 0, 3, 0, 90, 100, 110, -1, 5, -1, OK)]  # no usage, nothing known of its sharing
    rows, info = table(calls)
    info |= {"shared_prompt_tokens": [0, 400, 0, None], "prompt_lens": [1000, 800, 1000, 700]}
    s = agentic_figures(rows, info, False)
    assert s["cached_share_source"] == "server usage, else workload"
    assert s["cached_share_requests"] == {"server_usage": 2, "workload": 1}
    assert s["cached_share"] == pytest.approx(900 / 2800)
    assert s["per_role"]["root"]["mean_cached_share"] == pytest.approx((0.5 + 0.5 + 0) / 3)
    assert s["per_role"]["root"]["mean_prompt_tokens"] == pytest.approx(3500 / 4)  # the workload's where no usage


def test_nothing_known_of_the_sharing() -> None:
    rows, info = table([(0, 0, 0, 0, 0, 0, 10, 20, 1000, 5, -1, OK)])
    s = agentic_figures(rows, info, False)
    assert (s["cached_share"], s["cached_share_source"]) == (None, None)
    assert all(b["requests"] == 0 and b["ttft_ms_p50"] is None for b in s["ttft_by_cached_share"])
    assert s["per_role"]["root"]["mean_cached_share"] is None
    assert s["per_role"]["subagent"] == {"requests": 0, "started": 0, "completed": 0, "failed": 0,
                                         "ttft_ms_p50": None, "ttft_ms_p99": None, "e2el_ms_p50": None,
                                         "mean_prompt_tokens": None, "mean_tool_result_tokens": None,
                                         "mean_cached_share": None}


# -- the section in the result ------------------------------------------------------------------------------


def run_data(rows: np.ndarray) -> RunData:
    ends = rows[:, COL["end_ns"]]
    return RunData(rows=rows, error_messages={8: "HTTP 500"}, histograms={}, start_ns=T0, end_ns=int(ends.max()),
                   cap_hit=True, stopped_reason="time cap", timestamp_source=TimestampSource.KERNEL, reads=1,
                   multi_event_reads=0, output_events=1, kernel_stamped_reads=1, connections_opened=1,
                   concurrency_samples=np.zeros((0, 2)), mean_in_flight=1.0, client_cpu_ns=0, warmups=0)


def weka_result(server_info: dict[str, Any] | None = None) -> tuple[Any, BenchConfig]:
    rows, info = table(CALLS)
    config = BenchConfig(dataset_name="weka", concurrency=2, num_prompts=4)
    info |= {"dataset": "weka", "agentic_slots": 2, "prompt_lens": [None] * len(rows)}
    return summarize(run_data(rows), config, workload_info=info, server_info=server_info or {}), config


def test_summarize_adds_the_section_and_keeps_the_maps_out_of_the_workload() -> None:
    result, _ = weka_result()
    assert result.agentic == figures()
    # every count the server's: the share is the prefix_cache section's cached_tokens_share
    assert result.prefix_cache is not None
    assert result.agentic["cached_share"] == pytest.approx(result.prefix_cache.cached_tokens_share)
    assert set(agentic.AGENTIC_WORKLOAD_KEYS) <= set(PER_REQUEST_WORKLOAD_KEYS)
    assert result.workload_info == {"dataset": "weka", "agentic_slots": 2}
    assert result.sessions is None


def test_the_result_file_holds_it_documented_and_it_round_trips() -> None:
    result, config = weka_result()
    doc = orjson.loads(orjson.dumps(result_to_json_dict(result, config, environment={})))
    assert doc["fastbench"]["agentic"] == result.agentic
    assert undocumented({"agentic": doc["fastbench"]["agentic"]}, ("fastbench",)) == []
    assert undocumented({"workload": doc["fastbench"]["workload"]}, ("fastbench",)) == []
    assert doc["fastbench"]["steady"]["basis"] == "agent trees in flight"
    assert (doc["steady_start_s"], doc["steady_end_s"]) == (pytest.approx(0.050), pytest.approx(1.0))


def test_every_figure_named_has_its_definition() -> None:
    """The module names its figures' definitions, and the schema's section refers to them: each one exists."""
    in_module = set(re.findall(r"``(\w+)``", agentic.__doc__ or "")) - {"prefix_cache"}
    section = DOC.read_text().split("### `fastbench.agentic`", 1)[1].split("\n### ", 1)[0]
    in_doc = set(re.findall(r"definition `(\w+)`", section))
    assert len(in_module) == 12 and in_doc <= in_module | {"ttft"}
    assert [name for name in sorted(in_module | in_doc) if not DEFINITIONS.get(name)] == []
    assert "agent trees" in DEFINITIONS["steady_interval"]


def test_card_and_console_show_the_block() -> None:
    result, config = weka_result()
    card = render_card(result, config)
    block = card.split("## Agent trees", 1)[1].split("\n## ", 1)[0]
    assert ("| Trees | 4 (1 completed, 1 ended by a failed call, 1 cut short by the run's end, 1 not started; 2 at "
            "once) |") in block
    assert "| Agents | 6 (root 4, subagent 1, background 1) |" in block
    assert "| root | 5/9 | 50.0 | 99.2 | 200.0 | 3,000 | 45.8 % |" in block
    assert "| 99-100 % | 2 | 40.0 | 59.6 |" in block
    assert ("| Cached share | 58.7 % (server usage); the server's /metrics hit rate n/a (fastbench.prefix_cache) |"
            in block)
    console = render_console(result)
    assert "-Agent trees-" in console
    assert re.search(r"^Cached share \(%\): +58\.7 \(server usage\)$", console, re.MULTILINE)
    assert re.search(r"^subagent\s+2\s+55\.0\s+89\.3$", console, re.MULTILINE)
    assert re.search(r"^0-25 %\s+2\s+90\.0\s+99\.8$", console, re.MULTILINE)


def test_steady_state_holds_the_slots_full_of_trees() -> None:
    """Trees in flight (first send to last end): alpha 0..1000 ms, beta 50..460 (its failure ends it), gamma
    800..1100 (cut short, its end stamp the cut); alpha#2 never started. Two at once from 50 ms; the last fall
    below two is alpha's end at 1000."""
    rows, info = table(CALLS)
    config = BenchConfig(dataset_name="weka", concurrency=2)
    steady = steady_state(run_data(rows), config, info["tree_of_row"])
    assert steady.reason is None and steady.target == 2
    assert (steady.start_ns, steady.end_ns) == (T0 + 50 * MS, T0 + 1000 * MS)
    # completed, sent from 50 ms and ended by 1000: all but alpha's first call, beta's failed one and gamma's
    assert steady.requests == 7
    assert steady == weka_result()[0].steady  # summarize hands it the workload's tree map


def test_the_servers_hit_rate_stands_beside_the_cached_share() -> None:
    result, config = weka_result({"prefix_cache_stats": {"hit_rate": 0.625, "hits": 625, "queries": 1000}})
    assert "hit_rate" not in result.agentic  # the prefix_cache section's figure, not repeated
    assert "the server's /metrics hit rate 62.5 % (fastbench.prefix_cache)" in render_card(result, config)
    assert re.search(r"^Server prefix cache hit rate \(%\): +62\.5$", render_console(result), re.MULTILINE)
