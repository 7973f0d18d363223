"""The built-in synthetic OpenAI-compatible streaming server: the yardstick fastbench is measured against.

Run it on its own (``python -m fastbench.synthetic --port 8000``, or ``fastbench synthetic-server``) or
from Python with :class:`SyntheticServer`, which starts it as a subprocess. It shares no code with the
fastbench client (a bug common to both would hide itself) and runs in its own process, on uvloop, with
a hand-written HTTP/1.1 protocol.

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (vLLM's stream shapes, including
``stream_options.include_usage`` / ``continuous_usage_stats``), ``GET /health``, ``GET /v1/models``,
``GET /version``, ``GET /metrics`` (vLLM-style Prometheus text, with speculative-decoding counters when
``--tokens-per-chunk`` allows more than one token per chunk or ``--spec-tokens`` is given, and
prefix-cache counters with ``--enable-prefix-caching``), ``POST /tokenize``, ``POST /reset_prefix_cache``
(vLLM's), and its own ``GET /fb/stats`` (self-measured write lateness, chunk and stream counts) and ``POST /fb/reset``.

Token model (deterministic, documented):

* a string prompt has one token per whitespace-separated word; a token-id prompt one per id;
* a chat request has, per message, the words of its content (text parts joined, and an assistant's tool
  calls' arguments) plus 4 tokens, and per image part one token per 32x32 pixels covering it (a PNG or GIF
  data URL's header gives its size; any other image counts 256);
* ``--lora-modules NAME ...``: adapters served beside ``--model`` (listed by /v1/models with the model as
  their parent, accepted with ``--strict-model``); /fb/stats then counts each name's requests
  (``requests_by_model``), and ``images`` the image parts read;
* a chat request with ``tools`` and ``tool_choice`` "required" (or a named function) is answered with one
  tool call, its arguments the output tokens, streamed as ``tool_calls`` deltas (finish_reason
  "tool_calls"); "auto" is the model's choice, and this model answers text;
* output tokens are single words (" tok", " the", ...): the same sequence for every response of a
  server with a given ``--seed``; the server always produces ``max_tokens`` tokens (default 16) unless
  ``--eos-prob P`` stops a request early (each token ends it with probability P when the request does
  not set ``ignore_eos``; finish_reason "stop").

Timing: chunk ``i`` (``i`` = 0 is the first token) of a request received at ``t`` is due at
``t + TTFT + i * ITL (+ uniform jitter)``, an absolute schedule, so lateness never accumulates; a
request body's own ``"fb_itl_ms"`` (a number of ms) is its ITL instead of ``--itl-ms`` (a server that
speeds up or slows down, for tests of the client's choices from the gaps it sees).
TTFT = ``--ttft-ms`` (default 50) + ``prompt_tokens / --prefill-tok-s`` when that is given (then
``--ttft-ms`` defaults to 0); with ``--enable-prefix-caching``, prompt tokens found in the prefix cache
(``prefixcache``: blocks of ``--block-size`` tokens, vLLM's counting) are left out of that prefill
term, and with ``--enable-prompt-tokens-details`` the final usage (and a whole response's) carries them
as ``prompt_tokens_details.cached_tokens``, left out when none, as vLLM's. ``t`` is the time the request's
last bytes were read. Every SSE data
event except ``[DONE]`` carries ``"fb_sent_ns"``: ``time.monotonic_ns()`` taken just before the write.
The first chunk holds one token (the prefill's); each later chunk is one decode step emitting
``1 + accepted`` tokens, with ``K = max tokens per chunk - 1`` draft tokens per step (see /metrics).
Whole (non-streaming) responses are sent when the last chunk would have been.

Engine model (``stepmodel``; on with any of ``--step-ms``, ``--step-per-seq-ms``, ``--step-per-token-ms``,
``--max-num-seqs``, ``--spec-tokens``, ``--spec-acceptance``, ``--draft-ms``; docs/synthetic.md): instead of
each request's own schedule, the sequences decode together in steps whose time grows with the batch, each
sending one chunk per step of ``1 + accepted`` tokens with speculative decoding, so that a study's
per-stream lines fall with load and a speculative variant crosses a baseline.

Fault modes (``--fault``; every ``--fault-every``-th generation request, counting from 1, gets it):
``refuse`` (the port is bound but never listened on: every connection is refused; ignores
--fault-every), ``reset-before-headers`` (TCP RST on receipt), ``reset-mid-stream`` (RST at the
middle of the stream), ``http-500``, ``http-429`` (with Retry-After: 1), ``not-sse`` (200 with the
JSON body of a whole response to a streaming request), ``malformed-sse`` (the middle chunk is
``data: {not json``), ``oversized-event`` (one extra 10 MiB data event before the first chunk),
``no-done`` (the chunked body ends without ``[DONE]``), ``error-event`` (vLLM's
``{"error": {...}}`` event at the middle, then ``[DONE]``), ``stall`` (the schedule from the middle
on shifts by ``--stall-s``), ``trickle`` (the whole response is written one byte at a time,
``--trickle-us`` apart), ``close-after-response`` (``Connection: close`` and a close after the
response), ``usage-contradictory`` (per-chunk usage decreases from the middle on; the final usage
reports half the tokens streamed). Mid-stream faults need at least two chunks.

Modules, low to high: ``model`` (the token model), ``prefixcache`` (the prefix cache), ``sched`` (the
scheduler of timed writes and its lateness histogram), ``contracts`` (the options, and the interfaces
through which the parts above reach the engine and one another), ``protocol`` (HTTP/1.1: one connection's
requests and responses), ``generation`` (one request's schedule, chunks and fault modes), ``stepmodel``
(the engine model's batched steps), ``engine`` (shared state and counters, routes, the process's
coroutine), ``cli`` (the command line) and ``server`` (``SyntheticServer``, which starts the process).
"""

from fastbench.synthetic.cli import build_parser, config_from_args, main
from fastbench.synthetic.contracts import ServerConfig
from fastbench.synthetic.engine import FAULTS
from fastbench.synthetic.model import (
    CHAT_MESSAGE_OVERHEAD,
    count_messages_tokens,
    count_prompt_tokens,
    count_text_tokens,
    output_words,
)
from fastbench.synthetic.server import SyntheticServer, SyntheticStartError

__all__ = [
    "CHAT_MESSAGE_OVERHEAD",
    "FAULTS",
    "ServerConfig",
    "SyntheticServer",
    "SyntheticStartError",
    "build_parser",
    "config_from_args",
    "count_messages_tokens",
    "count_prompt_tokens",
    "count_text_tokens",
    "main",
    "output_words",
]
