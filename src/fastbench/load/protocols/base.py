"""What every API module of ``fastbench.load.protocols`` states: :class:`Protocol` and its events' tables."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from fastbench._core import StreamApi

# A prompt as a body takes it: a text, a conversation's messages ({"role": ..., "content": ...}), or (for
# completions) token ids.
Prompt = str | list[Any]


@dataclasses.dataclass(frozen=True)
class StreamEvents:
    """What a typed-event API's stream means, as the core's scanner reads it (``fb_api_t``).

    Each event names itself in a top-level ``"type"``; ``types`` maps those that matter to their kind
    (``fastbench._core.OUT_*``: answer, reasoning or tool text in a string ``"delta"``; ``OUT_DELTA``: output
    whose kind the key of the ``"delta"`` object says, by ``delta_keys``; the end of the stream; an error).
    Usage is a top-level ``"usage"``, or the one inside a top-level object of ``usage_holders``.
    """

    types: Mapping[str, int]
    output_key: str  # in usage: the output tokens so far
    input_keys: tuple[str, ...]  # in usage: the counts that add up to the prompt
    end_event: str  # the event that ends a stream: without it the response was cut
    delta_keys: Mapping[str, int] = dataclasses.field(default_factory=dict)
    usage_holders: tuple[str, ...] = ()
    cached_key: str = ""  # in usage: the prompt tokens served from cache
    details: tuple[str, str] = ("", "")  # or in usage's object details[0], under details[1]

    def stream_api(self) -> StreamApi:
        """The core's tables for these events (made once per run)."""
        return StreamApi(dict(self.types), dict(self.delta_keys), self.usage_holders, self.output_key,
                         self.input_keys, self.cached_key, self.details,
                         f"the stream ended without its end event ({self.end_event})")


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One API: its endpoint, vllm bench serve's names for it, its request bodies, headers and events."""

    endpoint: str
    backends: tuple[str, ...]  # vllm bench serve's --backend names (the first is the result's)
    # The body's own fields for a prompt, the model name and the output tokens asked for, in the order
    # sent; the run adds --ignore-eos, the sampling options and --extra-body after them.
    body: Callable[[str, Prompt, int], dict[str, Any]]
    events: StreamEvents | None = None  # None: OpenAI chunks, the scanner's own grammar
    # Headers of its own every request carries, from the API key; --header replaces any of them.
    headers: Callable[[str | None], dict[str, str]] = lambda api_key: {}
    chat_form: bool = True  # a prompt goes as a conversation (the server applies its chat template)
    logprobs: str = ""  # how --logprobs is asked for: "completions", "chat" or "" (not offered)

    @property
    def backend(self) -> str:
        """vllm bench serve's name for it, as the result's ``backend`` key says."""
        return self.backends[0]
