"""Multi-turn sessions: conversations read and checked turn by turn, think times, the bodies each turn
sends (the server's replies or the dataset's in the history), the per-turn and per-session figures, and
the TTFT effect of a growing history and of the prefix cache against the synthetic server."""

from __future__ import annotations

import asyncio
import json
import pathlib
import time

import numpy as np
import orjson
import pytest

from support.scripted import CHUNKED_END, STREAM_HEAD, ScriptedServer, chunked
from support.timing import until_a_round_passes
from fastbench import BenchConfig, run
from fastbench._core import now_ns
from fastbench.exceptions import ConfigError, DatasetError
from fastbench.load.conversations import read_conversations
from fastbench.load.datasets import build_workload
from fastbench.load.driver import LoadGenerator
from fastbench.load.outputs import decode_answer, decode_outputs
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.sessions import load_template, start_on_arrival, think_times_ns
from fastbench.results.card import render_card
from fastbench.results.records import COL
from fastbench.results.writers import render_console
from fastbench.synthetic import SyntheticServer

OVERHEAD = 4  # the synthetic server's tokens per chat message


def _write_jsonl(path: pathlib.Path, conversations: list[list[dict[str, str]]]) -> pathlib.Path:
    path.write_text("".join(json.dumps({"id": str(i), "messages": m}) + "\n" for i, m in enumerate(conversations)))
    return path


def _conversation(words: int, turns: int, reply_words: int, tag: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "be brief"}]
    for t in range(turns):
        messages.append({"role": "user", "content": " ".join([f"{tag}{t}"] * words)})
        messages.append({"role": "assistant", "content": " ".join(["reply"] * reply_words)})
    return messages


# -- reading conversations --------------------------------------------------------------------------------


@pytest.mark.parametrize(("messages", "field"), [
    ([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "messages[1].role: user after user"),
    ([{"role": "assistant", "content": "a"}], "messages[0].role: assistant without a user"),
    ([{"role": "user"}], "messages[0].content: missing"),
    ([{"role": "user", "content": "  "}], "messages[0].content: empty"),
    ([{"role": "user", "content": "a"}, {"role": "system", "content": "s"}], "messages[1].role: a system message"),
    ([{"role": "tool", "content": "a"}], "messages[0].role: expected system, user or assistant, got 'tool'"),
])
def test_a_malformed_jsonl_turn_is_one_line_naming_file_line_and_field(
        tmp_path: pathlib.Path, messages: list[dict[str, str]], field: str) -> None:
    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(2, 1, 1, "q"), messages])
    with pytest.raises(DatasetError) as err:
        read_conversations(str(path), "jsonl")
    message = str(err.value)
    assert message.startswith(f"{path} line 2: {field}") and "\n" not in message


def test_a_jsonl_line_that_is_no_conversation_is_one_line_naming_it(tmp_path: pathlib.Path) -> None:
    good = json.dumps({"messages": _conversation(2, 1, 1, "q")})
    path = tmp_path / "c.jsonl"
    # CRLF line ends and a blank line are read as lines; the line numbers count every line
    path.write_bytes(f"{good}\r\n\r\n{good}\r\n".encode())
    assert len(read_conversations(str(path), "jsonl")[0]) == 2
    for line, why in [("{not json", "not valid JSON"), ('{"turns": []}', "messages: expected an object with a"),
                      ('{"messages": ["hi"]}', "messages[0]: expected an object, found a str")]:
        path.write_text(f"{good}\n\n{line}\n")
        with pytest.raises(DatasetError) as err:
            read_conversations(str(path), "jsonl")
        assert str(err.value).startswith(f"{path} line 3: {why}") and "\n" not in str(err.value)


def test_malformed_sharegpt_conversations_are_skipped_and_counted(tmp_path: pathlib.Path) -> None:
    good = {"id": "a", "conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "hello"},
                                         {"from": "human", "value": "more"}]}
    doubled = {"id": "b", "conversations": [{"from": "human", "value": "x"}, {"from": "human", "value": "y"}]}
    empty = {"id": "c", "conversations": [{"from": "human", "value": ""}]}
    converted = {"id": "d", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}]}
    path = tmp_path / "sg.json"
    path.write_bytes(orjson.dumps([good, doubled, empty, converted, "junk"]))
    conversations, skipped = read_conversations(str(path), "sharegpt")
    assert skipped == 3
    assert [c.ident for c in conversations] == ["a", "d"]
    assert conversations[0].turns == [("hi there", "hello"), ("more", None)]


@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("extra_body", [{}, {"max_tokens": 9}])
def test_each_body_holds_the_conversation_so_far_as_a_whole_build_would(
        tmp_path: pathlib.Path, endpoint: str, extra_body: dict[str, int]) -> None:
    # texts that JSON escapes (quotes, backslash, control and non-ASCII characters, U+2028) and a
    # template placeholder in a message; with max_tokens in --extra-body each body is built whole
    odd = 'say "hi" \\ {role} \u00e9\u2028\t'
    conversations = [[{"role": "system", "content": odd}] + _conversation(3, 3, 2, f"s{i}-{odd}")[1:]
                     for i in range(3)]
    path = _write_jsonl(tmp_path / "c.jsonl", conversations)
    config = BenchConfig(endpoint=endpoint, dataset_name="jsonl", dataset_path=path, dataset_order="file",
                         multi_turn=True, multi_turn_history="dataset", num_prompts=3, max_turns=2,
                         extra_body=extra_body)
    work = asyncio.run(build_workload(config, "m", max_model_len=None))
    template = load_template(None)
    expected = []
    for messages in conversations:
        for user in (1, 3):  # the first two turns: history up to each user message
            sent = messages[:user + 1]
            prompt = "".join(template.render(m["role"], m["content"]) for m in sent) + template.generation_prompt
            expected.append(sent if endpoint == "/v1/chat/completions" else prompt)
    key = "messages" if endpoint == "/v1/chat/completions" else "prompt"
    bodies = [orjson.loads(r.body) for r in work.requests]
    assert [b[key] for b in bodies] == expected
    # the dataset's reply "reply reply" is (11 + 3) // 4 = 3 tokens by the estimate
    assert [b["max_tokens"] for b in bodies] == [extra_body.get("max_tokens", 3)] * 6


def test_the_chat_template_file_is_checked(tmp_path: pathlib.Path) -> None:
    assert load_template(None).render("user", "hi {role}") == "<|user|>\nhi {role}\n"
    bad = tmp_path / "t.json"
    bad.write_text('{"message": "no placeholder"}')
    with pytest.raises(DatasetError, match="message: expected a string holding {content}"):
        load_template(str(bad))


# -- think times --------------------------------------------------------------------------------------------


def test_think_times_follow_their_distribution_and_the_seed() -> None:
    n = 200_000
    assert (think_times_ns(5, 1.5, "constant", 0) == 1_500_000_000).all()
    uniform = think_times_ns(n, 2.0, "uniform", 3) / 1e9
    assert uniform.min() >= 0 and uniform.max() <= 4.0 and abs(uniform.mean() - 2.0) < 0.02
    exponential = think_times_ns(n, 2.0, "exponential", 3) / 1e9
    # an exponential's standard deviation equals its mean; a uniform's is mean / sqrt(3)
    assert abs(exponential.mean() - 2.0) < 0.03 and abs(exponential.std() - 2.0) < 0.05
    assert abs(uniform.std() - 2.0 / np.sqrt(3)) < 0.02
    assert (think_times_ns(100, 2.0, "exponential", 3) == think_times_ns(100, 2.0, "exponential", 3)).all()
    assert (think_times_ns(100, 2.0, "exponential", 3) != think_times_ns(100, 2.0, "exponential", 4)).any()
    assert not think_times_ns(10, 0.0, "exponential", 3).any()


def test_multi_turn_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="--think-time is for multi-turn sessions: give --multi-turn"):
        run(BenchConfig(think_time_s=1.0))
    with pytest.raises(ConfigError, match="give --dataset-name sharegpt or jsonl, not random"):
        run(BenchConfig(multi_turn=True))
    with pytest.raises(ConfigError, match="--workers is not available with --multi-turn"):
        run(BenchConfig(multi_turn=True, dataset_name="jsonl", dataset_path="c.jsonl", workers=2))


def test_a_reply_kept_is_read_as_the_saved_outputs_read_it() -> None:
    # decode_answer reads what the core keeps of a reply (its answer strings' raw bytes, joined); a text
    # that cannot be read is "", as decode_outputs then finds the row unreadable (its answer None)
    pieces = [b"caf\xc3\xa9 ", b"\\\"q\\\"\\n", b"\\ud83d", b"\\ude00"]
    assert decode_answer(b"".join(pieces)) == "caf\u00e9 \"q\"\n\U0001f600"
    assert decode_answer(b"plain") == "plain" and decode_answer(b"") == "" and decode_answer(None) == ""
    for unreadable in (b"\\ud800", b"\xff\xfe", b"\\x"):
        blob = b'{"choices":[{"text":"%b"}]}\0' % unreadable
        (answer, _), = decode_outputs({0: blob})[0].values()
        assert answer is None and decode_answer(unreadable) == ""


# A reply with what a history must carry exactly: JSON escapes, raw UTF-8 and escaped non-BMP
# characters, reasoning (left out), a logprobs entry (left out), and an empty first delta.
_REPLY_PIECES = ["", "H\u00e9 \"quoted\"\n\\ tab\t", "\u65e5\u672c\u8a9e \U0001f600", " \U0001f680 ok", "!"]
_REPLY = "".join(_REPLY_PIECES)


def _reply_stream(chat: bool) -> bytes:
    """The first turn's answer: each piece in its own event, the first raw UTF-8, the rest escaped."""
    def chunk(piece: str, reasoning: str | None, n: int) -> dict[str, object]:
        choice: dict[str, object] = {"index": 0, "finish_reason": None}
        if chat:
            choice["delta"] = {"reasoning_content": reasoning} if reasoning else {"content": piece}
        else:
            choice["text"] = piece
        if n == 4:
            choice["logprobs"] = {"content": [{"token": "!", "logprob": -0.1, "text": "not the answer"}]}
        return {"id": "x", "choices": [choice],
                "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}}

    events = [(chunk(piece, None, n), n != 2) for n, piece in enumerate(_REPLY_PIECES)]  # (event, escaped)
    if chat:
        events.insert(1, (chunk("", "I think \"so\" \u65e5", 1), True))
    data = b"".join(b"data: " + json.dumps(e, ensure_ascii=escaped).encode() + b"\n\n" for e, escaped in events)
    return data + b"data: [DONE]\n\n"


@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/completions"])
def test_the_history_carries_the_server_reply_exactly(tmp_path: pathlib.Path, endpoint: str) -> None:
    """The core keeps the answer's strings as it scans each event; the reply in the next turn's history
    is the answer exactly, with a stream split in reads mid-event and mid-character, and the reasoning
    left out."""
    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(3, 2, 4, "q")])
    config = BenchConfig(endpoint=endpoint, dataset_name="jsonl", dataset_path=path, multi_turn=True,  # type: ignore[arg-type]
                         max_tokens=8, num_prompts=1, num_warmups=0)
    stream = _reply_stream(endpoint == "/v1/chat/completions")
    cut = stream.index("\u65e5".encode()) + 1  # a read ends inside a character's UTF-8
    reads = [stream[:cut], *(stream[k:k + 7] for k in range(cut, len(stream), 7))]

    def script(n: int, body: bytes) -> list[object]:
        steps: list[object] = [STREAM_HEAD]
        for piece in reads if n == 0 else [_reply_stream(False)]:
            steps += [chunked(piece), 0.001]
        return [*steps, CHUNKED_END]

    async def main() -> list[tuple[bytes, bytes]]:
        work = await build_workload(config, "m", max_model_len=None)
        assert work.sessions is not None and work.sessions.server_history
        async with ScriptedServer(script) as server:
            plan = LoadPlan(bodies=[r.body for r in work.requests], warmup_bodies=[], concurrency=1,
                            sessions=work.sessions)
            data = await LoadGenerator(Target.parse(server.base_url, endpoint), plan, None).run()
            assert list(data.rows[:, COL["error"]]) == [0, 0]
            return server.requests

    requests = asyncio.run(main())
    second = orjson.loads(requests[1][1])
    if endpoint == "/v1/chat/completions":
        assert second["messages"][-2] == {"role": "assistant", "content": _REPLY}
    else:
        assert f"<|assistant|>\n{_REPLY}\n<|user|>\n" in second["prompt"]


# -- the open loop's session starts ------------------------------------------------------------------------


def test_sessions_start_as_they_arrive_holding_few_tasks() -> None:
    # 20,000 sessions all due at once, 8 slots: each holds a slot for its first turn, then takes one again
    # for a second. Tasks exist only for started sessions: at most the 8 in a turn, the 8 queued for
    # their second turn and the one being started, not 20,000 waiting ones.
    n, slots_n = 20_000, 8
    started: list[int] = []
    alive = 0
    most_alive = 0

    async def main() -> int:
        slots = asyncio.Semaphore(slots_n)
        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def session(s: int, due: int) -> None:
            nonlocal alive, most_alive
            alive += 1
            most_alive = max(most_alive, alive)
            assert due == dues[s] and now_ns() >= due
            started.append(s)
            await asyncio.sleep(0)  # the first turn, in the slot given
            slots.release()
            async with slots:  # the second turn
                await asyncio.sleep(0)
            alive -= 1

        dues = np.full(n, now_ns(), dtype=np.int64)
        return await start_on_arrival(dues, slots, stop, session)

    peak = asyncio.run(main())
    assert started == list(range(n)) and alive == 0
    assert peak == most_alive and 1 < most_alive <= 2 * slots_n + 1


def test_a_session_starts_at_its_due_time_and_none_after_the_stop() -> None:
    async def main() -> tuple[list[tuple[int, int, int]], int]:
        slots = asyncio.Semaphore(4)
        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        runs: list[tuple[int, int, int]] = []

        async def session(s: int, due: int) -> None:
            runs.append((s, due, now_ns()))
            slots.release()
            if s == 5:
                stop.set_result(None)

        start = now_ns()
        dues = start + np.arange(50, dtype=np.int64) * 2_000_000  # one every 2 ms
        await start_on_arrival(dues, slots, stop, session)
        return runs, start

    runs, start = asyncio.run(main())
    # the stop came from the session at index 5: none after it started (each waited for its own due time)
    assert [s for s, _, _ in runs] == list(range(6))
    assert all(due == start + s * 2_000_000 and began >= due for s, due, began in runs)


def test_sessions_due_together_behind_a_late_loop_do_not_begin_after_the_stop() -> None:
    """The first session holds the loop 12 ms, so the next ones (due every 2 ms) come due together and their
    tasks are made before any runs; the second one stops the run: those after it do not begin, and their
    slots go back."""
    async def main() -> tuple[list[int], int]:
        slots = asyncio.Semaphore(4)
        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        began: list[int] = []

        async def session(s: int, due: int) -> None:
            began.append(s)
            if s == 0:
                time.sleep(0.012)  # a stall of the loop, not a wait on it
            if s == 1:
                stop.set_result(None)
            slots.release()

        dues = now_ns() + np.arange(50, dtype=np.int64) * 2_000_000
        await start_on_arrival(dues, slots, stop, session)
        return began, slots._value

    began, free = asyncio.run(main())
    assert began == [0, 1]
    assert free == 4  # every slot back, those of the sessions that did not begin too


# -- runs against the synthetic server ----------------------------------------------------------------------


def _prompt_tokens_per_turn(system: int, users: list[int], replies: list[int]) -> list[int]:
    """What the synthetic server counts for each turn of a chat session: every message's words plus 4."""
    out, history = [], system + OVERHEAD
    for user, reply in zip(users, replies):
        out.append(history + user + OVERHEAD)
        history += user + OVERHEAD + reply + OVERHEAD
    return out


@pytest.mark.parametrize("history", ["server", "dataset"])
def test_each_turn_carries_the_history_so_far(tmp_path: pathlib.Path, history: str) -> None:
    # dataset replies of 7 words; the server answers max_tokens (--max-tokens 3) words: the prompt
    # lengths tell whose replies the history held
    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(10 + i, 3, 7, f"s{i}-") for i in range(4)])
    with SyntheticServer(ttft_ms=1, itl_ms=1) as server:
        result = run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                                 dataset_path=path, dataset_order="file", multi_turn=True, multi_turn_history=history,
                                 max_tokens=3, num_prompts=4, concurrency=2, think_time_s=0.01))
    sessions = result.sessions
    assert sessions is not None and result.counts.completed == 12
    assert (sessions["sessions"], sessions["completed"], sessions["ended_early"]) == (4, 4, 0)
    reply = 3 if history == "server" else 7
    expected = [np.mean([_prompt_tokens_per_turn(2, [10 + i] * 3, [reply] * 3)[t] for i in range(4)])
                for t in range(3)]
    assert [t["mean_prompt_tokens"] for t in sessions["per_turn"]] == expected
    assert [t["completed"] for t in sessions["per_turn"]] == [4, 4, 4]
    assert sessions["turns_completed"]["mean"] == 3.0
    # a session takes at least its two think times of 10 ms
    assert sessions["duration_s"]["min"] >= 0.02


def test_completions_render_the_history_with_the_template(tmp_path: pathlib.Path) -> None:
    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(5, 2, 6, "q")])
    with SyntheticServer(ttft_ms=1, itl_ms=1) as server:
        result = run(BenchConfig(base_url=server.base_url, dataset_name="jsonl", dataset_path=path,
                                 multi_turn=True, multi_turn_history="dataset", num_prompts=1, concurrency=1))
    # the default template: "<|role|>\n" + content + "\n" per message, then "<|assistant|>\n"; the synthetic
    # server counts words, so each message is its words + 1 and the generation prompt 1
    first = (1 + 2) + (1 + 5) + 1
    second = (1 + 2) + (1 + 5) + (1 + 6) + (1 + 5) + 1
    assert result.sessions is not None
    assert [t["mean_prompt_tokens"] for t in result.sessions["per_turn"]] == [first, second]
    # max_tokens from the dataset's reply: 6 words, as the synthetic server counts them (estimate: chars / 4)
    assert result.counts.completed == 2


@pytest.mark.timing
def test_ttft_grows_with_the_history_and_the_prefix_cache_cuts_it(tmp_path: pathlib.Path) -> None:
    # 300-word user turns, 50-word replies: turn 4 carries ~4.5x turn 1's prompt. At 20,000 prompt tok/s
    # turn 1 takes ~16 ms of prefill and turn 4 ~70 ms; with the cache, turn 4 computes only its new
    # tokens (~18 ms). Judged as ratios within each run, over up to three rounds.
    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(300, 4, 50, f"s{i}-") for i in range(4)])

    def per_turn(caching: bool) -> list[float]:
        with SyntheticServer(prefill_tok_s=20000, itl_ms=1, enable_prefix_caching=caching, block_size=16) as server:
            result = run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                                     dataset_path=path, multi_turn=True, max_tokens=50, num_prompts=4,
                                     concurrency=1))
        assert result.sessions is not None and result.counts.completed == 16
        return [t["ttft_ms_p50"] for t in result.sessions["per_turn"]]

    def one_round() -> None:
        cold, cached = per_turn(False), per_turn(True)
        assert cold[0] < cold[1] < cold[2] < cold[3] and cold[3] > 3 * cold[0]
        assert cached[3] < 0.5 * cold[3]

    until_a_round_passes(one_round)


def test_a_failed_turn_ends_its_session_and_the_figures_say_so(tmp_path: pathlib.Path) -> None:
    # the synthetic server answers every 5th request with HTTP 500
    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(4, 3, 2, f"s{i}-") for i in range(5)])
    with SyntheticServer(ttft_ms=1, itl_ms=1, fault="http-500", fault_every=5) as server:
        result = run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                                 dataset_path=path, multi_turn=True, max_tokens=2, num_prompts=5, concurrency=1))
    sessions = result.sessions
    assert sessions is not None
    assert result.counts.failed >= 1 and sessions["ended_early"] == result.counts.failed
    assert sessions["ended_by_failure"] == sessions["ended_early"] and sessions["cut_short"] == 0
    assert result.counts.not_started == 15 - result.counts.completed - result.counts.failed
    assert sessions["completed"] == 5 - sessions["ended_early"]


def test_open_loop_sessions_arrive_at_the_rate_and_the_cap_stops_their_think_time(tmp_path: pathlib.Path) -> None:
    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(4, 3, 2, f"s{i}-") for i in range(6)])
    with SyntheticServer(ttft_ms=1, itl_ms=1) as server:
        result = run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                                 dataset_path=path, multi_turn=True, max_tokens=2, num_prompts=6, request_rate=200,
                                 think_time_s=60, max_seconds=1.0))
    sessions = result.sessions
    assert sessions is not None
    # every session sent its first turn, then thought for a minute: the cap ended the run, not the sleep
    assert [t["completed"] for t in sessions["per_turn"]] == [6, 0, 0]
    assert result.stopped_reason == "time cap" and result.duration_s < 60  # not the think time's end
    assert sessions["ended_early"] == sessions["cut_short"] == 6 and sessions["ended_by_failure"] == 0
    assert result.counts.not_started == 12


def test_many_sessions_at_a_high_rate_all_run_their_turns(tmp_path: pathlib.Path) -> None:
    # 3,000 two-turn sessions arriving at 100,000/s, through the driver: started as they arrive (the
    # scheduler's own test above takes 20,000), every turn sent once
    n = 3_000
    path = _write_jsonl(tmp_path / "c.jsonl", [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"},
                                               {"role": "user", "content": "q2"}]] * n)
    with SyntheticServer(ttft_ms=0, itl_ms=0) as server:
        result = run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                                 dataset_path=path, multi_turn=True, max_tokens=1, num_prompts=n,
                                 request_rate=100_000, concurrency=32))
    sessions = result.sessions
    assert sessions is not None
    assert result.counts.completed == 2 * n and result.counts.failed == 0
    assert (sessions["completed"], sessions["ended_early"]) == (n, 0)
    assert [t["completed"] for t in sessions["per_turn"]] == [n, n]


def test_the_card_and_console_show_turns_and_sessions(tmp_path: pathlib.Path) -> None:
    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(3, 2, 2, "q")])
    with SyntheticServer(ttft_ms=1, itl_ms=1) as server:
        config = BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                             dataset_path=path, multi_turn=True, max_tokens=2, num_prompts=1, concurrency=1)
        result = run(config)
    card = render_card(result, config)
    assert "## Multi-turn sessions" in card and "| 2 | 1/1 |" in card
    console = render_console(result)
    assert "Multi-turn sessions" in console and "Sessions completed / failed / cut short: 1 / 0 / 0" in console
    assert "(1 completed, 0 ended by a failed turn, 0 cut short by the run's end, 0 not started)" in card


def test_every_key_of_a_multi_turn_result_is_documented(tmp_path: pathlib.Path) -> None:
    from support.result_schema import undocumented

    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(3, 2, 2, "q")])
    with SyntheticServer(ttft_ms=1, itl_ms=1) as server:
        run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                        dataset_path=path, multi_turn=True, max_tokens=2, num_prompts=1, concurrency=1,
                        result_json=tmp_path / "r.json"))
    doc = orjson.loads((tmp_path / "r.json").read_bytes())
    assert doc["fastbench"]["sessions"]["per_turn"][1]["turn"] == 2
    assert undocumented(doc["fastbench"]["sessions"], ("fastbench", "sessions")) == []
    assert undocumented(doc) == []


def test_server_replies_count_at_their_max_tokens_against_the_context(tmp_path: pathlib.Path) -> None:
    """History from the server's replies: each may run to its max_tokens (40 here, the dataset's are one
    word), so the turns that could pass the 200-token context are left out before the run, never sent
    to fail."""
    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(4, 8, 1, f"s{i}-") for i in range(2)])
    with SyntheticServer(ttft_ms=1, itl_ms=1, max_model_len=200) as server:
        result = run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                                 dataset_path=path, multi_turn=True, max_tokens=40, ignore_eos=True,
                                 num_prompts=2, concurrency=2, num_warmups=0))
    sessions = result.sessions
    assert sessions is not None
    assert result.counts.failed == 0 and sessions["ended_by_failure"] == 0
    assert sessions["completed"] == 2 and len(sessions["per_turn"]) < 8
    assert any("turns not sent: their history + max_tokens passes max_model_len 200" in n for n in result.notes)


def test_warm_ups_that_repeat_measured_sessions_are_noted(tmp_path: pathlib.Path) -> None:
    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(4, 2, 2, f"s{i}-") for i in range(2)])
    with SyntheticServer(ttft_ms=1, itl_ms=1) as server:
        result = run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                                 dataset_path=path, multi_turn=True, max_tokens=2, num_prompts=2, concurrency=2,
                                 num_warmups=1))
    assert any("warm-ups' first turns are measured sessions' first turns too" in n for n in result.notes)


def test_open_loop_turns_waiting_for_a_slot_at_the_cap_are_cancelled_not_unsent(tmp_path: pathlib.Path) -> None:
    """20 sessions arrive within ~1 s for 1 slot held ~0.5 s a turn; the cap at 2 s: the first turns that
    had arrived and waited are cancelled (their wait is what the load did), as single-turn arrivals are."""
    path = _write_jsonl(tmp_path / "c.jsonl", [_conversation(2, 2, 1, f"s{i}-") for i in range(20)])
    with SyntheticServer(ttft_ms=500, itl_ms=1) as server:
        result = run(BenchConfig(base_url=server.base_url, endpoint="/v1/chat/completions", dataset_name="jsonl",
                                 dataset_path=path, multi_turn=True, max_tokens=2, num_prompts=20, request_rate=20,
                                 concurrency=1, max_seconds=2.0, num_warmups=0))
    sessions = result.sessions
    assert sessions is not None
    first = sessions["per_turn"][0]
    assert first["started"] == 20  # every session's first turn had arrived: sent, or cancelled waiting
    assert result.counts.cancelled >= 10 and sessions["not_started"] == 0
