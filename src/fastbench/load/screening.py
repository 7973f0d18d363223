"""Screening against the context: which prompts fit ``max_model_len`` with the output they ask for.

When ``max_model_len`` is known, requests whose ``prompt_len + max_tokens`` exceeds it are screened
out and replaced by further draws from the dataset (``max_tokens`` here is the largest output limit
the body carries, ``extra_body``'s included; with ``max_tokens`` null and no other limit, only prompts
of ``max_model_len`` tokens or more are screened out).

A dataset source offers ``Candidate`` prompts to a ``Selector``, which keeps them until it has as many
as the run needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard

from fastbench._core import BodyParts, TokenRuns

if TYPE_CHECKING:
    from typing_extensions import Buffer  # bytes, or a numpy view of a larger buffer (a trace's prompts)

    from fastbench.load.sharing import SharedBlocks


class JsonPrompt(NamedTuple):
    """A prompt already serialised as its JSON value (a token-id array, or a string for text), in parts
    joined only into each request body: shared-prefix datasets serialise their prefix once, not per
    request, and its bytes are copied once, into the body."""

    parts: tuple[Buffer, ...]  # joined, the prompt's JSON value (a trace's: views of its token buffer)
    chars: int  # characters of prompt text; 0 for token ids

    @property
    def json(self) -> bytes:
        return b"".join(self.parts)


class PartsPrompt(NamedTuple):
    """A prompt whose JSON value is ``open``, runs ``first`` to ``end`` of a shared token buffer, then
    ``close`` (a trace's: each distinct block's tokens lie once in the buffer). Its request's body is
    sent from those parts (``BodyParts``), never joined into a bytes object of its own."""

    source: TokenRuns
    first: int
    end: int
    open: bytes
    close: bytes
    chars: int  # characters of prompt text; 0 for token ids

    @property
    def json(self) -> bytes:
        return BodyParts(self.open, self.source, self.first, self.end, self.close).joined()


class Messages(NamedTuple):
    """A whole conversation sent as the chat body's ``messages`` (the chat endpoint only)."""

    json: bytes  # the messages list, serialised
    text: str  # the contents joined, for counting


Prompt = str | list[int] | JsonPrompt | PartsPrompt | Messages

# Other names servers take for the output limit, which win over max_tokens where they are honoured
# (vLLM's chat: max_completion_tokens; llama.cpp: n_predict; TGI: max_new_tokens).
OTHER_OUTPUT_LIMITS = ("max_completion_tokens", "n_predict", "max_new_tokens")


def output_limit_known(extra_body: dict[str, Any]) -> bool:
    """Whether each request's max_tokens is the limit the server applies: not when --extra-body
    sets max_tokens to something else than a count (null lifts it), or sets a limit of another name."""
    if "max_tokens" in extra_body and max_tokens_override(extra_body) is None:
        return False
    return not any(key in extra_body for key in OTHER_OUTPUT_LIMITS)


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def screening_limit(max_tokens: int, extra_body: dict[str, Any]) -> int:
    """The output tokens a request is screened for against max_model_len: the largest limit its body
    carries (the dataset's max_tokens, or --extra-body's, and any limit of another name: which one a
    server applies differs, so none may overflow the context), or 1 when --extra-body lifts
    max_tokens (null) and sets no other: the server then fills what the prompt leaves."""
    sent = extra_body.get("max_tokens") if "max_tokens" in extra_body else max_tokens
    limits = [v for v in (sent, *(extra_body.get(k) for k in OTHER_OUTPUT_LIMITS)) if _is_count(v)]
    return max(limits, default=1)


def max_tokens_override(extra_body: dict[str, Any]) -> int | None:
    """extra_body's ``max_tokens``, which replaces the dataset's in the body."""
    value = extra_body.get("max_tokens")
    return value if _is_count(value) else None


@dataclasses.dataclass
class Candidate:
    """A prompt a dataset offers, with its length (None: unknown), its output tokens, where its
    length came from (a ``fastbench.load.tokens`` source) and, for a trace, when it is due."""

    prompt: Prompt
    prompt_len: int | None
    max_tokens: int
    source: str
    arrival_s: float | None = None  # a trace's timestamp in seconds: the run sends it that long after the first
    shares: SharedBlocks | None = None  # its leading blocks other prompts may share (load.sharing); None: none


class Selector:
    """Accepts candidates until ``need`` are in hand, screening against ``max_model_len``."""

    def __init__(self, need: int, max_model_len: int | None, extra_body: dict[str, Any]) -> None:
        self.need = need
        self.max_model_len = max_model_len
        self.extra_body = extra_body
        self.accepted: list[Candidate] = []
        self.screened_out = 0
        self.sources: list[str] = []

    @property
    def remaining(self) -> int:
        return self.need - len(self.accepted)

    def offer(self, candidates: Sequence[Candidate]) -> None:
        limits: dict[int, int] = {}  # max_tokens -> the output screened for: a few values, 100,000s of prompts
        mml = self.max_model_len
        for c in candidates:
            if self.remaining <= 0:
                return
            max_tokens = limits.get(c.max_tokens)
            if max_tokens is None:
                max_tokens = limits[c.max_tokens] = screening_limit(c.max_tokens, self.extra_body)
            if mml is not None and c.prompt_len is not None and c.prompt_len + max_tokens > mml:
                self.screened_out += 1
                continue
            self.accepted.append(c)
            if c.source not in self.sources:
                self.sources.append(c.source)
