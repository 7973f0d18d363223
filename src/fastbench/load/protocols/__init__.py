"""The APIs fastbench speaks, one module per API: what a request's body holds, the headers it adds, what
the stream's events mean (which carry output, where usage arrives, what ends the stream) and the names
`vllm bench serve` knows it by. A run picks one by its endpoint (``--endpoint`` or ``--backend``).

The events' meaning is data (:class:`StreamEvents`) that the native core is given once per run; the core
stamps every read before anything is parsed, and the one JSON scan reads each event with the API's
tables, so an API is a table and not a path of its own (``csrc/fb_json.h``, ``fb_api_t``). The OpenAI
APIs (completions, chat) are the scan's own grammar, ``events`` None.

Adding an API: its module here (its ``PROTOCOL``), its twin in the synthetic server
(``fastbench.synthetic.apis``), and their tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from fastbench.load.protocols import chat, completions, messages, responses
from fastbench.load.protocols.base import Protocol, StreamEvents

if TYPE_CHECKING:
    from fastbench._core import StreamApi
    from fastbench.load.plan import Target

__all__ = ("BACKENDS", "PROTOCOLS", "Protocol", "StreamEvents", "by_endpoint", "request_head", "stream_api")

# Every API fastbench speaks, by its endpoint.
PROTOCOLS: dict[str, Protocol] = {
    p.endpoint: p for p in (completions.PROTOCOL, chat.PROTOCOL, responses.PROTOCOL, messages.PROTOCOL)
}

# vllm bench serve's --backend names for them, and the endpoint each calls.
BACKENDS: dict[str, str] = {name: p.endpoint for p in PROTOCOLS.values() for name in p.backends}


def by_endpoint(endpoint: str) -> Protocol:
    """The API an endpoint streams; a KeyError for one fastbench does not stream (the options were checked)."""
    return PROTOCOLS[endpoint]


def stream_api(endpoint: str) -> StreamApi | None:
    """The core's tables for the events of the API ``endpoint`` streams; None: OpenAI chunks, or an API
    answered whole (fastbench.load.pooling), which has no events."""
    protocol = PROTOCOLS.get(endpoint)
    events = protocol.events if protocol is not None else None
    return events.stream_api() if events is not None else None


def request_head(target: Target, api_key: str | None, headers: Mapping[str, str], endpoint: str,
                 accept: str = "text/event-stream") -> bytes:
    """The head every request of the run shares: the API's own headers (none of its own for an API answered
    whole), then ``headers`` (--header), which replace any of them."""
    protocol = PROTOCOLS.get(endpoint)
    own = protocol.headers(api_key) if protocol is not None else {}
    return target.request_head(api_key, {**own, **headers}, accept=accept)
