"""The response texts of a run, decoded after it from the output events the core kept (--save-outputs,
or --save-detailed): never on the hot path."""

from __future__ import annotations

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
    for event in blob.split(b"\0"):
        if not event:
            continue
        chunk = orjson.loads(event)
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


def _text(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError("a text field is not a string")
    return value


def decode_text(blob: bytes | None) -> str:
    """The answer text of one request's kept output events ("" when none were kept or they cannot be
    read): what a multi-turn session puts into its history, once per turn."""
    if not blob:
        return ""
    try:
        return _decode_events(blob)[0]
    except (ValueError, TypeError):
        return ""
