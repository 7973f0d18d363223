"""The response texts of a run, decoded after it from the output events the core kept (--save-outputs,
or --save-detailed): never on the hot path."""

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
    # The events as one JSON array, parsed in one call, not one per event (a session decodes each reply
    # during the run).
    chunks: list[Any] = orjson.loads(b"[%b]" % blob.strip(b"\0").replace(b"\0", b","))
    return chunks


def _text(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError("a text field is not a string")
    return value


def decode_text(blob: bytes | None) -> str:
    """The answer text of one request's kept output events ("" when none were kept or they cannot be
    read): what a multi-turn session puts into its history, once per turn, during the run. The usual
    shape (each chunk's choices with a ``text`` or a ``delta``) is read in one pass; any other goes
    through the checks of :func:`decode_outputs`."""
    if not blob:
        return ""
    try:
        chunks = _chunks(blob)
    except ValueError:
        return ""
    try:
        return "".join([choice.get("text") or choice["delta"].get("content") or ""
                        for chunk in chunks for choice in chunk["choices"]])
    except (KeyError, TypeError, AttributeError, IndexError):
        pass
    try:
        return _decode_events(blob)[0]
    except (ValueError, TypeError):
        return ""
