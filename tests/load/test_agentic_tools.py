"""Agentic replay with --agentic-tool-messages: each call sent as the turns of its history (user, assistant, tool
call, tool result) with a tools list; the messages cut exactly at the trace's offsets, each call's beginning with
the one before's, the tokens the plain prompts', and a server's prefix cache finding what the history shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from support.weka_traces import BLOCK, read_records, tree_trace, weka_call, weka_config, weka_trace, write_traces
from fastbench import run
from fastbench.exceptions import ConfigError
from fastbench.load.datasets import build_workload_sync, check_inputs
from fastbench.load.sources.trace import TokenBlocks
from fastbench.load.toolturns import TOOLS
from fastbench.synthetic import SyntheticServer
from fastbench.synthetic.model import tokenize_messages

SEPARATOR = " "


def _messages(body: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = orjson.loads(bytes(body))["messages"]
    return messages


def _words(message: dict[str, Any]) -> list[str]:
    """A message's tokens: its content's words, or its tool call's arguments' input."""
    if message.get("tool_calls"):
        return str(orjson.loads(message["tool_calls"][0]["function"]["arguments"])["input"]).split()
    return str(message["content"]).split()


def test_insert_puts_literals_in_place_of_the_separators_and_keeps_every_token() -> None:
    rng = np.random.default_rng(7)
    layout = TokenBlocks(4, True, np.random.default_rng(1))
    lengths = np.array([9, 13, 6], dtype=np.int64)
    ids = np.array([0, 1, 0, 1, 2, 3], dtype=np.int64)  # the second shares the first's two blocks
    layout.draw(ids, np.array([0, 2, 5]), np.array([2, 3, 1]), lengths, literals=b"<A><BB>")
    plain = [bytes(p.json)[1:-1].decode() for p in layout.prompts(lengths.tolist())]
    request, token, which = [], [], []
    for k, n in enumerate(lengths.tolist()):
        for t in sorted(rng.choice(np.arange(1, n), size=3, replace=True).tolist()):
            request.append(k)
            token.append(t)
            which.append(int(rng.integers(0, 2)))
    starts = np.array([0, 3])[which] + layout.literals_at
    ends = np.array([3, 7])[which] + layout.literals_at
    layout.insert(np.array(request), np.array(token), starts, ends)
    expected = []
    for k, text in enumerate(plain):
        words = text.split(SEPARATOR)
        out = []
        for t, word in enumerate(words):
            inserts = [("<A>", "<BB>")[w] for r, at, w in zip(request, token, which) if r == k and at == t]
            out.append(("".join(inserts) if inserts else (SEPARATOR if t else "")) + word)
        expected.append("".join(out))
    assert [bytes(p.json)[1:-1].decode() for p in layout.prompts(lengths.tolist())] == expected


def test_each_call_is_its_historys_turns_with_tool_calls_where_the_trace_marks_them(tmp_path: Path) -> None:
    path = write_traces(tmp_path / "t.json", tree_trace())
    plain = build_workload_sync(weka_config(path, endpoint="/v1/chat/completions", agentic_start="beginning"), "m",
                                max_model_len=None)
    config = weka_config(path, endpoint="/v1/chat/completions", agentic_start="beginning",
                         agentic_tool_messages=True)
    work = build_workload_sync(config, "m", max_model_len=None)
    assert work.trees is not None
    root = [row for row in range(len(work.requests)) if work.trees.agent_of_row[row] == 0]
    conversations = [_messages(work.requests[row].body) for row in root]
    # the root's calls: in 37, 53, 69, 85; out 3 each; call 1's input is a tool's result
    assert [[m["role"] for m in c] for c in conversations] == [
        ["user"], ["user", "assistant", "tool"], ["user", "assistant", "tool", "assistant", "user"],
        ["user", "assistant", "tool", "assistant", "user", "assistant", "user"]]
    assert [[len(_words(m)) for m in c] for c in conversations][-1] == [37, 3, 13, 3, 13, 3, 13]
    call, answer = conversations[1][1], conversations[1][2]
    assert call["content"] is None and call["tool_calls"][0]["id"] == answer["tool_call_id"]
    for before, after in zip(conversations, conversations[1:]):  # the history cut at the same offsets, call after call
        shape = [(m["role"], len(_words(m))) for m in before]
        assert [(m["role"], len(_words(m))) for m in after[:len(before)]] == shape
        # the blocks they share, the same tokens (past them, each call's own: the trace hashes full blocks only)
        assert _words(after[0])[:32] == _words(before[0])[:32]
    for spec, plain_spec in zip(work.requests, plain.requests):  # the trace's tokens, the plain prompts' own
        body = orjson.loads(bytes(spec.body))
        assert (body["tools"], body["tool_choice"]) == (TOOLS, "none")  # a server with no tool parser takes it
        assert [w for m in body["messages"] for w in _words(m)] == _messages(plain_spec.body)[0]["content"].split()
    assert any("as the turns" in note for note in work.notes)


def test_a_context_that_did_not_grow_opens_a_history_of_its_own(tmp_path: Path) -> None:
    """Ins 53, 69, 18 (compacted), 37, then 38: one token more than the call before's, which is the new input,
    its output (3 tokens) left out of the history. Each call's messages (role, tokens)."""
    compacted = weka_trace("c", [weka_call(0.0, [1, 2, 3]), weka_call(0.1, [1, 2, 3, 4]),
                                 weka_call(0.2, [7], extra=2), weka_call(0.3, [7, 8]),
                                 weka_call(0.4, [7, 8], extra=6)])
    path = write_traces(tmp_path / "t.json", compacted)
    work = build_workload_sync(weka_config(path, endpoint="/v1/chat/completions", agentic_start="beginning",
                                           agentic_tool_messages=True), "m", max_model_len=None)
    assert [[(m["role"], len(_words(m))) for m in _messages(spec.body)] for spec in work.requests] == [
        [("user", 53)], [("user", 53), ("assistant", 3), ("user", 13)], [("user", 18)],
        [("user", 18), ("assistant", 3), ("user", 16)],
        [("user", 18), ("assistant", 3), ("user", 16), ("assistant", 0), ("user", 1)]]


def test_tool_messages_need_the_chat_endpoint(tmp_path: Path) -> None:
    path = write_traces(tmp_path / "t.json", tree_trace())
    with pytest.raises(ConfigError, match="--agentic-tool-messages sends chat messages: give --endpoint"):
        check_inputs(weka_config(path, agentic_tool_messages=True))


def _block_prefixes(ids: list[int]) -> list[tuple[int, ...]]:
    return [tuple(ids[:end]) for end in range(BLOCK, len(ids) + 1, BLOCK)]


def test_a_replay_of_turns_hits_the_prefix_cache_its_history_shares(tmp_path: Path) -> None:
    """Against the synthetic server, tool calls forced (tool_choice "required"): every answer is a tool call's
    deltas, counted as output; each call's cached tokens are the full blocks it shares with what was sent
    before it, computed here from the server's token model of the messages sent."""
    path = write_traces(tmp_path / "t.json", tree_trace())
    jsonl = tmp_path / "requests.jsonl"
    with SyntheticServer(enable_prefix_caching=True, enable_prompt_tokens_details=True, block_size=BLOCK, ttft_ms=1,
                         itl_ms=1) as server:
        config = weka_config(path, endpoint="/v1/chat/completions", agentic_start="beginning",
                             agentic_tool_messages=True, base_url=server.base_url, save_detailed=jsonl,
                             extra_body={"tool_choice": "required"})
        work = build_workload_sync(config, "m", max_model_len=None)
        result = run(config)
    assert result.counts.completed == len(work.requests) == 7
    records = read_records(jsonl)
    seen: set[tuple[int, ...]] = set()
    for row in sorted(range(len(records)), key=lambda r: records[r]["sent_ms"]):
        ids = tokenize_messages(_messages(work.requests[row].body))
        prefixes = _block_prefixes(ids)[:(len(ids) - 1) // BLOCK]
        shared = next((k for k, p in enumerate(prefixes) if p not in seen), len(prefixes))
        assert (records[row]["cached_tokens"] or 0, records[row]["prompt_tokens"]) == (shared * BLOCK, len(ids))
        seen.update(_block_prefixes(ids))
    assert sum(r["cached_tokens"] or 0 for r in records) > 0
    assert [r["output_tokens"] for r in records] == [3] * 7  # the tool calls' arguments, from the usage
    assert all(r["chunks"] == 3 for r in records)  # each delta of a tool call's arguments is output


def test_insert_refuses_entries_out_of_order_or_outside_their_prompts() -> None:
    layout = TokenBlocks(4, True, np.random.default_rng(1))
    lengths = np.array([6, 5], dtype=np.int64)
    layout.draw(np.zeros(0, np.int64), np.zeros(2, np.int64), np.zeros(2, np.int64), lengths, literals=b"<A>")
    at, to = layout.literals_at, layout.literals_at + 3

    def insert(request: list[int], token: list[int]) -> None:
        n = len(request)
        layout.insert(np.array(request), np.array(token), np.full(n, at), np.full(n, to))

    for request, token in (([0, 0], [3, 2]), ([1, 0], [1, 1]), ([0], [6]), ([0], [0]), ([2], [1])):
        with pytest.raises(ValueError, match="out of order, or outside their prompts"):
            insert(request, token)
    insert([0, 1], [5, 4])  # the last separators of each: taken
    assert [bytes(p.json).count(b"<A>") for p in layout.prompts(lengths.tolist())] == [1, 1]
