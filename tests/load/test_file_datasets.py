"""vLLM's file datasets beside ShareGPT: burstgpt (its CSV), custom (prompt or messages, per-request output
length) and spec_bench (Spec-Bench's question.jsonl), each read from a small file the test writes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from fastbench import BenchConfig, run
from fastbench.exceptions import DatasetError
from fastbench.load.datasets import build_workload_sync, check_inputs
from fastbench.synthetic import SyntheticServer

CHAT = "/v1/chat/completions"

BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,100,20,120,Conversation log
10,GPT-4,30,7,37,Conversation log
12,GPT-4,40,0,40,Conversation log
20,GPT-4,12,5,17,API log
31,GPT-4,0,9,9,API log
"""


def _bodies(config: BenchConfig, max_model_len: int | None = None) -> list[dict[str, Any]]:
    work = build_workload_sync(config, "m", max_model_len=max_model_len)
    return [orjson.loads(spec.body) for spec in work.requests]


def test_burstgpt_keeps_gpt4_rows_with_a_response_and_sends_their_lengths(tmp_path: Path) -> None:
    path = tmp_path / "burst.csv"
    path.write_text(BURSTGPT)
    config = BenchConfig(dataset_name="burstgpt", dataset_path=path, num_prompts=2)
    work = build_workload_sync(config, "m", max_model_len=None)
    bodies = [orjson.loads(spec.body) for spec in work.requests]
    # the two GPT-4 rows with request and response tokens, in a seeded order
    assert sorted((len(b["prompt"]), b["max_tokens"]) for b in bodies) == [(12, 5), (30, 7)]
    assert [spec.prompt_len for spec in work.requests] == [len(b["prompt"]) for b in bodies]
    first = bodies[0]["prompt"]
    assert first == list(range(first[0], first[0] + len(first)))  # ids running on from the request's index
    note = next(n for n in work.notes if n.startswith("burstgpt:"))
    assert "skipped 1 rows of another model, 1 with 0 response tokens (failed), 1 with 0 request tokens" in note
    chat = _bodies(config.replace(endpoint=CHAT, max_tokens=3))
    assert all(b["max_tokens"] == 3 and len(b["messages"][0]["content"].split()) in (12, 30) for b in chat)


def test_burstgpt_refuses_a_csv_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "b.csv"
    for text, message in (("Timestamp,Model,Tokens\n1,GPT-4,3\n", "line 1: no 'Request tokens', 'Response tokens'"),
                          (BURSTGPT + "40,GPT-4,many,3,3,API log\n",
                           "line 7: 'Request tokens' must be a whole number, got 'many'")):
        path.write_text(text)
        with pytest.raises(DatasetError, match=message):
            check_inputs(BenchConfig(dataset_name="burstgpt", dataset_path=path))


def _custom(tmp_path: Path, rows: list[Any]) -> Path:
    path = tmp_path / "custom.jsonl"
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def test_custom_takes_prompts_or_whole_conversations_and_each_lines_output_length(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "You answer in one word."}, {"role": "user", "content": "Capital?"}]
    path = _custom(tmp_path, [{"prompt": "What is the capital of India?", "output_tokens": 10},
                              {"messages": messages, "output_tokens": 20}])
    config = BenchConfig(dataset_name="custom", dataset_path=path, num_prompts=2, dataset_order="file",
                         endpoint=CHAT)
    plain, conversation = _bodies(config.replace(custom_output_len=-1))
    assert plain["messages"] == [{"role": "user", "content": "What is the capital of India?"}]
    assert conversation["messages"] == messages  # sent whole
    assert (plain["max_tokens"], conversation["max_tokens"]) == (10, 20)
    assert {b["max_tokens"] for b in _bodies(config)} == {256}  # vLLM's default --custom-output-len
    assert {b["max_tokens"] for b in _bodies(config.replace(max_tokens=4))} == {4}
    with pytest.raises(DatasetError, match="line 2: 'messages' go to the chat endpoint only"):
        build_workload_sync(config.replace(endpoint="/v1/completions"), "m", max_model_len=None)


def test_a_custom_conversation_reaches_the_server_whole(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "one two three"}]
    path = _custom(tmp_path, [{"messages": messages}])
    with SyntheticServer(ttft_ms=1, itl_ms=1) as server:
        result = run(BenchConfig(base_url=server.base_url, dataset_name="custom", dataset_path=path, num_prompts=3,
                                 endpoint=CHAT, custom_output_len=4, concurrency=1))
    assert result.counts.completed == 3
    assert any("custom: 1 prompts in" in note for note in result.notes)


def test_custom_refuses_a_bad_line_naming_it(tmp_path: Path) -> None:
    cases = [
        ([{"prompt": "a", "output_tokens": 1}, b"{oops"], "line 2: not valid JSON"),
        ([{"text": "a"}], "line 1: needs a 'prompt' (a string) or 'messages'"),
        ([{"messages": [{"role": "wizard", "content": "x"}]}], "line 1: 'messages'[0] must be"),
        ([{"prompt": "a", "output_tokens": 0}], "line 1: 'output_tokens' must be an integer >= 1, got 0"),
        ([{"prompt": "a"}], "line 1: no 'output_tokens' field"),
    ]
    for rows, message in cases:
        path = tmp_path / "c.jsonl"
        path.write_bytes(b"\n".join(row if isinstance(row, bytes) else orjson.dumps(row) for row in rows))
        with pytest.raises(DatasetError, match=re.escape(f"{path} {message}")):
            check_inputs(BenchConfig(dataset_name="custom", dataset_path=path, custom_output_len=-1))


def test_spec_bench_takes_each_questions_first_turn_and_filters_by_category(tmp_path: Path) -> None:
    path = tmp_path / "question.jsonl"
    path.write_bytes(b"".join(orjson.dumps(q) + b"\n" for q in (
        {"question_id": 1, "category": "writing", "turns": ["Write a poem.", "Shorter."]},
        {"question_id": 2, "category": "math_reasoning", "turns": ["What is 2 + 2?"]},
        {"question_id": 3, "category": "writing", "turns": ["Write a letter."]},
    )))
    config = BenchConfig(dataset_name="spec_bench", dataset_path=path, num_prompts=2, spec_bench_category="writing")
    bodies = _bodies(config)
    assert sorted(b["prompt"] for b in bodies) == ["Write a letter.", "Write a poem."]
    assert {b["max_tokens"] for b in bodies} == {256}
    assert {b["max_tokens"] for b in _bodies(config.replace(spec_bench_output_len=9))} == {9}
    with pytest.raises(DatasetError, match="no question of --spec-bench-category 'coding'; the file has "
                                           "math_reasoning, writing"):
        check_inputs(config.replace(spec_bench_category="coding"))
