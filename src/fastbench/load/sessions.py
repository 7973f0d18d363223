"""Multi-turn sessions (``--multi-turn``): conversations replayed turn by turn, each turn's prompt the
history so far plus the next user message.

A session is one conversation (``fastbench.load.conversations``); ``--num-prompts`` counts sessions, and
each sends one request per turn (``--max-turns`` caps them). The history a turn carries holds the
assistant replies of the earlier turns: the server's own (``--multi-turn-history server``, the default,
as vLLM's multi-turn benchmark) or the dataset's (``dataset``: every body is known before the run and
built ahead, so a run is repeatable whatever the server answers). Each turn asks for ``--max-tokens``,
else as many tokens as the dataset's reply to it has (vLLM's default).

Between a reply and the next turn the user thinks: ``--think-time`` seconds, ``constant``, ``uniform`` on
[0, 2 x mean] or ``exponential`` with that mean (``--think-time-distribution``), drawn ahead from the seed.

Bodies: on the chat endpoint the history goes as ``messages``; on the completions endpoint it is rendered
into one prompt by a chat template given locally (:class:`ChatTemplate`). Each message is serialised once
and a conversation's messages are joined once; a turn's history is a prefix of them, and its body one join
of that prefix between the two halves of a body serialised once. Each message's tokens are counted once
and a history's length is their sum. Building 100,000 turns costs about what serialising each body whole
would (bench/build_requests.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from collections.abc import Callable, Coroutine
from itertools import accumulate, chain, zip_longest
from typing import Any

import numpy as np
import orjson

from fastbench._core import now_ns
from fastbench.config import BenchConfig
from fastbench.datasetoptions import MultiTurnOptions
from fastbench.exceptions import ConfigError, DatasetError
from fastbench.load.conversations import read_conversations
from fastbench.load.tokens import SOURCE_CHARS, TokenCounter

__all__ = ("DEFAULT_TEMPLATE", "ChatTemplate", "SessionPlan", "build_sessions", "load_template", "start_on_arrival",
           "think_times_ns")


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """How the completions endpoint gets a conversation as one prompt: each message is ``message`` with
    ``{role}`` and ``{content}`` replaced, the messages are joined as they are, and ``generation_prompt``
    follows (where the model's answer begins). A ``--chat-template`` file is a JSON object with these two
    keys. The model's own template (Jinja, in its tokenizer_config.json) is not read: fastbench takes no
    Jinja dependency, and a benchmark needs the same bytes every run, whatever is installed."""

    message: str = "<|{role}|>\n{content}\n"
    generation_prompt: str = "<|assistant|>\n"

    def render(self, role: str, content: str) -> str:
        # {content} last: a message's own text may hold "{role}" and must stay as it is
        return self.message.replace("{role}", role).replace("{content}", content)


DEFAULT_TEMPLATE = ChatTemplate()
# The context check counts each message's text; a chat template adds a few tokens around each (~4-5 in
# Llama 3's, Qwen's and Gemma's, 4 in the synthetic server's), allowed for here so that a turn near the
# limit is left out before the run instead of failing in it.
MESSAGE_ALLOWANCE = 8


def load_template(path: str | None) -> ChatTemplate:
    """The ``--chat-template`` file's template, or the default; a DatasetError says what is wrong."""
    if path is None:
        return DEFAULT_TEMPLATE
    try:
        with open(path, "rb") as f:
            doc = orjson.loads(f.read())
    except OSError as exc:
        raise DatasetError(f"cannot read --chat-template {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise DatasetError(f"--chat-template {path} is not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("message"), str) or "{content}" not in doc["message"]:
        raise DatasetError(f"--chat-template {path}: message: expected a string holding {{content}} (and usually "
                           "{role}), e.g. {\"message\": \"<|{role}|>\\n{content}\\n\", \"generation_prompt\": "
                           "\"<|assistant|>\\n\"}")
    generation = doc.get("generation_prompt", "")
    if not isinstance(generation, str):
        raise DatasetError(f"--chat-template {path}: generation_prompt: expected a string")
    return ChatTemplate(doc["message"], generation)


def think_times_ns(n: int, mean_s: float, distribution: str, seed: int) -> np.ndarray:
    """``n`` think times in ns, drawn from ``seed``: ``constant`` (all ``mean_s``), ``uniform`` on
    [0, 2 x mean_s], ``exponential`` with mean ``mean_s``."""
    if mean_s <= 0 or n == 0:
        return np.zeros(n, dtype=np.int64)
    rng = np.random.default_rng([seed, 0x5E55])  # apart from the arrival schedule's stream
    if distribution == "constant":
        draws = np.full(n, mean_s)
    elif distribution == "uniform":
        draws = rng.uniform(0.0, 2.0 * mean_s, n)
    elif distribution == "exponential":
        draws = rng.exponential(mean_s, n)
    else:
        raise ConfigError(f"--think-time-distribution must be constant, uniform or exponential, got {distribution!r}")
    return np.round(draws * 1e9).astype(np.int64)


@dataclasses.dataclass
class SessionPlan:
    """What the driver needs to replay sessions: their rows, think times, and each turn's body.

    :param first_rows: per session, the row of its first turn; its turns take the rows after it.
    :param turns: per session, how many turns it sends.
    :param think_ns: per row, the think time before that turn is sent (0 for a first turn).
    :param server_history: the history carries the server's replies: bodies after the first turn are
        built when the reply before them is in (the core then keeps each reply's answer text).
    """

    first_rows: list[int]
    turns: list[int]
    think_ns: np.ndarray
    server_history: bool
    bodies: list[bytes]  # per row: the body, or b"" where it waits for the server's reply
    # server history: per session, its history so far (the pieces _Bodies joins); per row, its user message
    _history: list[bytearray] = dataclasses.field(default_factory=list)
    _user: list[bytes] = dataclasses.field(default_factory=list)
    _max_tokens: list[int] = dataclasses.field(default_factory=list)  # per row
    _session: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _bodies: _Bodies | None = None

    @property
    def session_of_row(self) -> np.ndarray:
        return self._session

    @property
    def turn_of_row(self) -> np.ndarray:
        starts = np.asarray(self.first_rows, dtype=np.int64)
        turn: np.ndarray = np.arange(len(self._session), dtype=np.int64) - starts[self._session]
        return turn

    def body(self, row: int, reply: str | None) -> bytes:
        """The body of ``row``: built ahead, or (server history) built now from the session's history,
        ``reply`` (the server's answer to the turn before) and this turn's user message. Called for a
        session's turns in order."""
        if not self.server_history or self.bodies[row]:
            return self.bodies[row]
        assert self._bodies is not None
        maker = self._bodies
        history = self._history[int(self._session[row])]
        history += maker.sep
        history += maker.message("assistant", reply or "")
        history += maker.sep
        history += self._user[row]
        return maker.make(history, self._max_tokens[row])


def _fields(config: BenchConfig, model: str, chat: bool) -> dict[str, Any]:
    """The body's fields other than the history and max_tokens, in the order vllm bench serve sends them."""
    body: dict[str, Any] = {"model": model}
    body["stream"] = True
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if config.ignore_eos:
        body["ignore_eos"] = True
    body.update(config.sampling)
    if config.logprobs is not None:
        body.update({"logprobs": True, "top_logprobs": config.logprobs} if chat else {"logprobs": config.logprobs})
    return body


class _Bodies:
    """A turn's body from its history: the serialised messages (chat) or the rendered, JSON-escaped text
    (completions), one piece per message, joined by ``sep``. The body around the history is serialised
    once, so a body is one join of five pieces (bench/build_requests.py)."""

    def __init__(self, config: BenchConfig, model: str, chat: bool, template: ChatTemplate) -> None:
        self.chat, self.template = chat, template
        history_mark, max_mark = "\x00fastbench history\x00", "\x00fastbench max_tokens\x00"
        self.key = "messages" if chat else "prompt"
        fields = {"model": model, self.key: history_mark, "max_tokens": max_mark, **_fields(config, model, chat)}
        fields.update(config.extra_body)  # last: the user's keys win
        self.fields, self.extra_body = fields, config.extra_body
        try:
            around = orjson.dumps(fields)
        except TypeError as exc:
            raise ConfigError(f"extra_body cannot be sent as JSON: {exc}") from None
        head, found_history, rest = around.partition(orjson.dumps(history_mark))
        middle, found_max, tail = rest.partition(orjson.dumps(max_mark))
        # --extra-body replaced the history or max_tokens: every body is made whole (make_whole)
        self.spliced = bool(found_history) and bool(found_max)
        if chat:
            self.sep, self.open, self.close = b",", b"[", b"]"
        else:  # one JSON string: the escaped text of each message, then the generation prompt's
            self.sep, self.open = b"", b'"'
            self.close = orjson.dumps(template.generation_prompt)[1:]
        self.head, self.middle, self.tail = head + self.open, self.close + middle, tail

    def message(self, role: str, content: str) -> bytes:
        if self.chat:
            return orjson.dumps({"role": role, "content": content})
        # a JSON string's escaping is per character: the escaped pieces join into the escaped whole
        return orjson.dumps(self.template.render(role, content))[1:-1]

    def make(self, history: bytes | bytearray | memoryview, max_tokens: int) -> bytes:
        """The body whose history is ``history`` (pieces joined by ``sep``)."""
        if self.spliced:
            return b"".join((self.head, history, self.middle, b"%d" % max_tokens, self.tail))
        return self.make_whole(history, max_tokens)

    def make_whole(self, history: bytes | bytearray | memoryview, max_tokens: int) -> bytes:
        value = orjson.loads(b"".join((self.open, history, self.close)))
        full = {**self.fields, self.key: value, "max_tokens": max_tokens}
        full.update(self.extra_body)
        return orjson.dumps(full)


async def _count_tokens(texts: list[str], counter: TokenCounter) -> list[int]:
    """The tokens of each text, each distinct text counted once where counting costs more than a lookup."""
    if counter.source == SOURCE_CHARS:
        return await counter.count(texts)
    distinct = dict.fromkeys(texts)
    tokens = dict(zip(distinct, await counter.count(list(distinct))))
    return list(map(tokens.__getitem__, texts))


async def build_sessions(config: BenchConfig, model: str, chat: bool, mml: int | None, counter: TokenCounter,
                         notes: list[str]) -> tuple[SessionPlan, list[int | None], list[int], list[bytes], str]:
    """Read the conversations and lay out the run's sessions.

    :returns: the plan, each row's prompt length (message text only; None where the server's replies make it
        unknown ahead), each row's max_tokens, the warm-up bodies (first turns of the sessions after the
        measured ones) and the dataset's name for the result.
    """
    options = config.options(MultiTurnOptions)
    path = os.fspath(config.dataset_path or "")
    conversations, skipped = read_conversations(path, config.dataset_name)
    if skipped:
        notes.append(f"multi-turn: skipped {skipped} malformed conversations (role order, missing content)")
    if config.dataset_order == "random":
        random.Random(config.seed).shuffle(conversations)
    template = load_template(os.fspath(options.chat_template) if options.chat_template else None)
    sessions_needed = config.num_prompts + config.num_warmups
    if len(conversations) < sessions_needed:
        notes.append(f"multi-turn: {len(conversations)} conversations for {config.num_prompts} sessions"
                     f" + {config.num_warmups} warm-ups; conversations were reused in order")
    picked = [conversations[i % len(conversations)] for i in range(sessions_needed)]
    if config.num_warmups and sessions_needed > len(conversations):
        notes.append("multi-turn: the warm-ups' first turns are measured sessions' first turns too (too few "
                     "conversations): a server's prefix cache may hold them before the window")
    # Every message sent is counted (a distinct text once); a turn's history length is a sum of these.
    turns_wanted = [options.max_turns] * config.num_prompts + [1] * config.num_warmups
    counts = await _count_tokens(list(chain.from_iterable(
        chain(([conv.system] if conv.system else []), conv.users[:n], conv.replies[:n])
        for conv, n in zip(picked, turns_wanted))), counter)
    counted = 0
    maker = _Bodies(config, model, chat, template)
    message, make, sep = maker.message, maker.make, maker.sep
    server = options.history == "server"
    first_rows: list[int] = []
    turns: list[int] = []
    bodies: list[bytes] = []
    users_sent: list[bytes] = []  # server history: per row, its user message
    prompt_lens: list[int | None] = []
    max_tokens: list[int] = []
    histories: list[bytearray] = []
    no_length = cut = 0
    for conv in picked[:config.num_prompts]:
        users, replies = conv.users[:options.max_turns], conv.replies[:options.max_turns]
        history_len = counts[counted] if conv.system else 0
        counted += 1 if conv.system else 0
        user_tokens = counts[counted:counted + len(users)]
        reply_tokens = counts[counted + len(users):counted + len(users) + len(replies)]
        counted += len(users) + len(replies)
        sent = 0
        for user_len, reply_len in zip_longest(user_tokens, reply_tokens):
            out = config.max_tokens or (max(1, reply_len) if reply_len is not None else None)
            if out is None:  # a last user message without a reply: no output length to ask for
                no_length += 1
                break
            length = history_len + user_len
            # messages so far: the system's, a user's and a reply per earlier turn, this user's
            messages = (1 if conv.system else 0) + 2 * sent + 1
            if mml is not None and length + messages * MESSAGE_ALLOWANCE + out > mml:  # outgrown the context
                cut += len(users) - sent
                break
            prompt_lens.append(length if sent == 0 or not server else None)
            max_tokens.append(out)
            # The next turn's history holds this reply: the dataset's, or the server's, which may run to
            # the max_tokens it was asked for.
            history_len = length + (out if server else (reply_len or 0))
            sent += 1
        if not sent:
            continue
        first_rows.append(len(bodies))
        turns.append(sent)
        outs = max_tokens[-sent:]
        pieces = [message("system", conv.system)] if conv.system else []
        if server:  # the first turn's body now; the later ones from the server's replies, in the run
            pieces.append(message("user", users[0]))
            history = bytearray(sep.join(pieces))
            bodies.append(make(history, outs[0]))
            histories.append(history)
            users_sent.append(b"")
            for user in users[1:sent]:
                bodies.append(b"")
                users_sent.append(message("user", user))
            continue
        # dataset history: the conversation's messages joined once; each turn's history is a prefix of them
        for t in range(sent):
            if t:
                pieces.append(message("assistant", replies[t - 1]))
            pieces.append(message("user", users[t]))
        ends = list(accumulate(len(piece) + len(sep) for piece in pieces))
        whole = memoryview(sep.join(pieces))
        first = 1 if conv.system else 0
        bodies.extend([make(whole[:ends[first + 2 * t] - len(sep)], out) for t, out in enumerate(outs)])
    if not bodies:
        raise DatasetError(f"{path}: no turn to send (see the notes: {'; '.join(notes) or 'no conversation'})")
    if no_length:
        notes.append(f"multi-turn: {no_length} last user messages without a reply were not sent (no output "
                     "length to ask for: give --max-tokens)")
    if cut:
        notes.append(f"multi-turn: {cut} turns not sent: their history + max_tokens passes max_model_len {mml} "
                     f"(counting {MESSAGE_ALLOWANCE} tokens per message for the chat template)")
    notes.append(f"multi-turn: {len(first_rows)} sessions, {len(bodies)} turns; history with the "
                 f"{'server' if server else 'dataset'}'s replies; think time {options.think_time_s:g} s "
                 f"{options.think_time_distribution}")
    if not chat:
        rendered_by = (f"--chat-template {os.fspath(options.chat_template)}" if options.chat_template
                       else "the default template")
        notes.append(f"multi-turn on /v1/completions: the history is rendered by {rendered_by} (see "
                     "docs/multiturn.md), not the model's own")
    session = np.repeat(np.arange(len(first_rows), dtype=np.int64), turns)
    turn = np.arange(len(bodies), dtype=np.int64) - np.asarray(first_rows, dtype=np.int64)[session]
    think = think_times_ns(len(bodies), options.think_time_s, options.think_time_distribution, config.seed)
    think[turn == 0] = 0
    plan = SessionPlan(first_rows=first_rows, turns=turns, think_ns=think, server_history=server, bodies=bodies,
                       _history=histories, _user=users_sent, _max_tokens=max_tokens, _session=session,
                       _bodies=maker)
    warmups = []
    for conv in picked[config.num_prompts:]:
        counted += 2 if conv.system else 1
        out = config.max_tokens or (max(1, counts[counted]) if conv.replies else 16)
        counted += 1 if conv.replies else 0
        pieces = ([message("system", conv.system)] if conv.system else []) + [message("user", conv.users[0])]
        warmups.append(make(sep.join(pieces), out))
    return plan, prompt_lens, max_tokens, warmups, f"{config.dataset_name} multi-turn:{path}"


async def start_on_arrival(due_ns: np.ndarray, slots: asyncio.Semaphore, stop: asyncio.Future[None],
                           session: Callable[[int, int], Coroutine[Any, Any, None]]) -> int:
    """Open loop: start session ``s`` as ``session(s, due_ns[s])`` once it is due and a slot for its first
    turn is free; the session holds that slot and releases it when its first turn is done. Sessions start
    in order; one whose slot comes late keeps its due time (its turn's latency counts from it). A task
    exists only for a session that has started and not ended (at most the slots' count plus those between
    turns), not one per session from the start: 100,000 sessions would be 100,000 timers. Stops starting
    when ``stop`` is done. Returns the most sessions that ran at once."""
    running: set[asyncio.Task[None]] = set()
    loop = asyncio.get_running_loop()
    peak = 0

    async def begin(s: int, due: int) -> None:
        # A loop running late finds several sessions due at once and makes their tasks before any runs; one
        # whose task first runs after the stop (an earlier one's doing) does not begin, and its slot goes back.
        if stop.done():
            slots.release()
            return
        await session(s, due)

    try:
        for s, due in enumerate(due_ns.tolist()):
            delay_s = (due - now_ns()) / 1e9
            if delay_s > 0:
                await asyncio.wait([stop], timeout=delay_s)
            if stop.done():
                break
            await slots.acquire()
            if stop.done():
                slots.release()
                break
            task = loop.create_task(begin(s, due))
            running.add(task)
            task.add_done_callback(running.discard)
            peak = max(peak, len(running))
        if running:
            await asyncio.gather(*running)
    finally:
        for task in running:
            task.cancel()
    return peak
