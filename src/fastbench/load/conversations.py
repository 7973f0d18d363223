"""Conversations read for multi-turn sessions (``--multi-turn``): ShareGPT's multi-turn data or a JSONL
file of message lists, checked turn by turn.

A conversation is an optional leading ``system`` message, then ``user`` and ``assistant`` messages taking
turns, starting with ``user``; each message has non-empty string content. A *turn* is one user message
and the assistant reply after it (the last user message may have none).

* ``sharegpt``: the ShareGPT V3 list (``{"conversations": [{"from": "human"|"gpt"|"system", "value"}]}``;
  ``user``/``assistant`` and vLLM's converted ``{"messages": [{"role", "content"}]}`` are read too). Raw
  ShareGPT holds many broken conversations (two human turns in a row, empty values), so one with a
  malformed turn is skipped and counted, and the run goes on.
* ``jsonl``: one conversation per line, ``{"messages": [{"role": ..., "content": ...}, ...]}`` with an
  optional ``"id"``. A file written for the run should be right: a malformed turn is a one-line error
  naming the file, the line and the field.
"""

from __future__ import annotations

import dataclasses
from itertools import zip_longest
from operator import itemgetter
from typing import Any

import orjson

from fastbench.exceptions import DatasetError
from fastbench.load.sources import read_dataset_file

_ROLES_SHAREGPT = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bard": "assistant", "system": "system"}


@dataclasses.dataclass(frozen=True)
class Conversation:
    """One conversation: its system prompt (or None), its user messages and the dataset's reply to each
    (one fewer where the last user message has none)."""

    ident: str
    system: str | None
    users: list[str]
    replies: list[str]

    @property
    def turns(self) -> list[tuple[str, str | None]]:
        """(user message, the dataset's reply or None) per turn."""
        return list(zip_longest(self.users, self.replies))


class MalformedTurn(ValueError):
    """A conversation that breaks the shape (the message says which field and why)."""


def read_conversations(path: str, dataset_name: str) -> tuple[list[Conversation], int]:
    """The conversations of ``path`` and how many were skipped as malformed (sharegpt only: a jsonl
    file's malformed turn raises).

    :raises DatasetError: unreadable file, bad JSON, a malformed jsonl turn, no usable conversation.
    """
    raw = read_dataset_file(path, dataset_name)
    if dataset_name == "jsonl":
        conversations, skipped = _read_jsonl(path, raw), 0
    else:
        conversations, skipped = _read_sharegpt(path, raw)
    if not conversations:
        why = f" ({skipped} skipped as malformed)" if skipped else ""
        raise DatasetError(f"{path}: no conversation with a user turn{why}")
    return conversations, skipped


def _read_jsonl(path: str, raw: bytes) -> list[Conversation]:
    conversations = []
    view = memoryview(raw)  # lines parsed in place: a copy of a large file costs as much as parsing it
    start = lineno = 0
    while start < len(raw):
        end = raw.find(b"\n", start)
        end = len(raw) if end < 0 else end
        line, start = view[start:end], end + 1
        lineno += 1
        where = f"{path} line {lineno}"
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if not bytes(line).strip():
                continue  # a blank line
            raise DatasetError(f"{where}: not valid JSON ({exc})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
            raise DatasetError(f"{where}: messages: expected an object with a 'messages' list of "
                               "{'role', 'content'} objects (one conversation per line)")
        try:
            conversations.append(_conversation(str(obj.get("id", lineno)), obj["messages"], "role", "content", None))
        except MalformedTurn as exc:
            raise DatasetError(f"{where}: {exc}") from None
    return conversations


def _read_sharegpt(path: str, raw: bytes) -> tuple[list[Conversation], int]:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DatasetError(f"{path} is not valid JSON ({exc}); a file of one conversation per line needs "
                           "--dataset-name jsonl") from None
    if not isinstance(doc, list):
        raise DatasetError(f"{path} is not a ShareGPT file: expected a JSON list of conversations, found a "
                           f"JSON {type(doc).__name__}")
    conversations = []
    skipped = 0
    for i, entry in enumerate(doc):
        if not isinstance(entry, dict):
            skipped += 1
            continue
        ident = str(entry.get("id", i))
        try:
            if isinstance(entry.get("conversations"), list):
                conversations.append(_conversation(ident, entry["conversations"], "from", "value", _ROLES_SHAREGPT))
            elif isinstance(entry.get("messages"), list):  # vLLM's convert_sharegpt_to_openai.py output
                conversations.append(_conversation(ident, entry["messages"], "role", "content", None))
            else:
                skipped += 1
        except MalformedTurn:
            skipped += 1
    return conversations, skipped


def _conversation(ident: str, messages: list[Any], role_key: str, content_key: str,
                  roles: dict[str, str] | None) -> Conversation:
    """The turns of ``messages``; MalformedTurn naming the field (``messages[2].role``) when the shape breaks.

    Checked in bulk (C-level map and slices: a dataset holds hundreds of thousands of messages); a
    conversation that fails goes through :func:`_find_fault` for the message that says where."""
    try:
        kinds = list(map(itemgetter(role_key), messages))
        if roles is not None:
            kinds = list(map(roles.__getitem__, kinds))
        texts = list(map(itemgetter(content_key), messages))
        every_text_non_blank = all(map(str.strip, texts))  # TypeError where one is not a string
    except (KeyError, TypeError):
        every_text_non_blank = False
    if every_text_non_blank and kinds:
        first = 1 if kinds[0] == "system" else 0
        user_kinds, reply_kinds = kinds[first::2], kinds[first + 1::2]
        if user_kinds and user_kinds.count("user") == len(user_kinds) and \
                reply_kinds.count("assistant") == len(reply_kinds):
            return Conversation(ident, texts[0] if first else None, texts[first::2], texts[first + 1::2])
    raise _find_fault(messages, role_key, content_key, roles)


def _find_fault(messages: list[Any], role_key: str, content_key: str, roles: dict[str, str] | None) -> MalformedTurn:
    """The first place where ``messages`` breaks the shape, message by message."""
    field = "messages" if role_key == "role" else "conversations"
    if not messages:
        return MalformedTurn(f"{field}: empty")
    user = False
    for i, m in enumerate(messages):
        at = f"{field}[{i}]"
        if not isinstance(m, dict):
            return MalformedTurn(f"{at}: expected an object, found a {type(m).__name__}")
        raw_role = m.get(role_key)
        role = roles.get(raw_role) if roles is not None and isinstance(raw_role, str) else raw_role
        if role not in ("system", "user", "assistant"):
            return MalformedTurn(f"{at}.{role_key}: expected system, user or assistant, got {raw_role!r}")
        content = m.get(content_key)
        if not isinstance(content, str) or not content.strip():
            what = "missing" if content is None else "empty" if isinstance(content, str) else "not a string"
            return MalformedTurn(f"{at}.{content_key}: {what} (every message needs text)")
        if role == "system" and i != 0:
            return MalformedTurn(f"{at}.{role_key}: a system message may only come first")
        if role == "user" and user:
            return MalformedTurn(f"{at}.{role_key}: user after user (expected the assistant's reply)")
        if role == "assistant" and not user:
            return MalformedTurn(f"{at}.{role_key}: assistant without a user message before it")
        user = role == "user"
    return MalformedTurn(f"{field}: no user message")
