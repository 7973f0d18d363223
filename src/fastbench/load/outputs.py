"""The response texts of a run, decoded after it from the output events the core kept (--save-outputs,
or --save-detailed), and a multi-turn session's replies, decoded once per turn from the answer strings
the core kept: never per event."""

from __future__ import annotations

from typing import Any

import orjson


def decode_outputs(raw: dict[int, bytes]) -> tuple[dict[int, tuple[str, str] | tuple[None, None]], int]:
    """Row -> (answer text, reasoning text) from the output events the core kept (NUL-separated
    JSON chunks), and how many rows had an event that is not a readable OpenAI chunk (their texts
    are None: the core counted their tokens, but no text can be told from them). Runs once per
    request after the run, never on the hot path."""
    decoded: dict[int, tuple[str, str] | tuple[None, None]] = {}
    unreadable = 0
    for row, blob in raw.items():
        try:
            decoded[row] = _decode_events(blob)
        except (ValueError, TypeError):  # orjson.JSONDecodeError is a ValueError
            decoded[row] = (None, None)
            unreadable += 1
    return decoded, unreadable


def _decode_events(blob: bytes) -> tuple[str, str]:
    answer: list[str] = []
    reasoning: list[str] = []
    for chunk in _chunks(blob):
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                raise TypeError("a choice is not an object")
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise TypeError("a delta is not an object")
            answer.append(_text(choice.get("text") or delta.get("content")))
            reasoning.append(_text(delta.get("reasoning") or delta.get("reasoning_content")))
    return "".join(answer), "".join(reasoning)


def _chunks(blob: bytes) -> list[Any]:
    # The events as one JSON array, parsed in one call, not one per event.
    chunks: list[Any] = orjson.loads(b"[%b]" % blob.strip(b"\0").replace(b"\0", b","))
    return chunks


def _text(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError("a text field is not a string")
    return value


def decode_answer(raw: bytes | None) -> str:
    """The answer text of one request from what the core kept of it for a multi-turn session's history:
    the raw bytes of its answer strings (each chunk's ``text``, or its delta's ``content``; reasoning
    left out), escapes as sent, joined. Once per turn, during the run: one UTF-8 decode, or one JSON
    string decode when an escape is in it (a string's escapes are per character, so the joined pieces
    decode to the joined texts). "" when none was kept, or when the text cannot be read (bytes that are
    not UTF-8, a lone surrogate escape), as the saved outputs then read it as unreadable."""
    if not raw:
        return ""
    try:
        if b"\\" not in raw:
            return raw.decode()
        text: str = orjson.loads(b'"%b"' % raw)
    except ValueError:  # UnicodeDecodeError and orjson.JSONDecodeError are ValueErrors
        return ""
    return text
