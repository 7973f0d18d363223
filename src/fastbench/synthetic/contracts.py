"""What the synthetic server's parts share: its options, and the interfaces through which they reach the
engine and one another.

Part of the synthetic server (see ``fastbench.synthetic``); imports nothing from the fastbench client and
nothing of the server's parts but ``sched`` (the clock, below them all), so that ``engine`` imports
``protocol``, ``generation`` and ``stepmodel`` while none of them imports ``engine``, nor one another in a
circle.

* ``ServerConfig``: every option, frozen.
* ``GenerationHost``: what a ``Generation`` reads of the engine, and the counters it adds to as it writes.
* ``StepHost``: what the engine model (``stepmodel``) reads of the engine.
* ``ConnectionHost``: what a ``Connection`` reaches of the engine: the clock, the open connections, and
  the dispatch of each request it reads.
* ``Responder``: a client connection as the engine and a generation write to it (``protocol.Connection``).
* ``Request``: a generation request in progress as its connection sees it (``generation.Generation``).

The interfaces are types only: ``SyntheticEngine``, ``Connection`` and ``Generation`` match them by their
shape, so the hot paths read the same attributes as before, with no indirection between.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import asyncio
    import random

    from fastbench.synthetic.sched import Lateness, Scheduler

__all__ = ("ConnectionHost", "GenerationHost", "Request", "Responder", "ServerConfig", "StepHost")


@dataclass(frozen=True)
class ServerConfig:
    """Options of the synthetic server; the CLI flags map one to one (``--ttft-ms`` -> ttft_ms)."""

    host: str = "127.0.0.1"
    port: int = 8000
    model: str = "fastbench-synthetic"
    max_model_len: int = 4096
    default_max_tokens: int = 16
    ttft_ms: float = 50.0
    prefill_tok_s: float | None = None  # TTFT += prompt_tokens / rate
    itl_ms: float = 20.0
    jitter_ms: float = 0.0
    tpc_min: int = 1  # tokens per chunk after the first (uniform in [tpc_min, tpc_max])
    tpc_max: int = 1
    seed: int = 0
    eos_prob: float = 0.0  # per-token stop probability when the request has ignore_eos false
    reasoning_tokens: int = 0
    reasoning_field: str = "reasoning"
    no_usage: bool = False
    final_usage_only: bool = False
    strict_model: bool = False
    # LoRA adapters served beside the model (vLLM's --lora-modules NAME[=PATH]): listed by /v1/models,
    # accepted under --strict-model, and each name's requests counted in /fb/stats' requests_by_model
    lora_modules: tuple[str, ...] = ()
    fault: str | None = None
    fault_every: int = 1
    stall_s: float = 1.0
    trickle_us: int = 200
    oversized_bytes: int = 10 * 1024 * 1024
    timer: str = "auto"  # auto | timerfd | call_at
    # vLLM's automatic prefix caching, modelled (see prefixcache); off by default, unlike vLLM V1,
    # so that a run's TTFT does not depend on the prompts before it unless asked
    enable_prefix_caching: bool = False
    block_size: int = 16  # tokens per cached block (vLLM's default on GPUs)
    prefix_cache_blocks: int = 65536  # blocks kept before the least recently used are evicted
    reset_prefix_cache_endpoint: bool = True  # False: 404, as vLLM without VLLM_SERVER_DEV_MODE=1
    pooling_ms: float = 5.0  # embeddings, pooling, score, rerank: each whole answer after this long
    prompt_tokens_details: bool = False  # usage.prompt_tokens_details.cached_tokens, as vLLM's flag of the name
    exit_with_parent: int | None = None  # stop when this process (the one that started the server) exits
    # The engine model (stepmodel): batched steps whose time grows with the batch, instead of each
    # request's own schedule; its TTFT is the steps', so the CLI's --ttft-ms defaults to 0 with it
    engine_model: bool = False
    step_ms: float | None = None  # fixed part of every step (None: itl_ms)
    step_per_seq_ms: float = 0.0  # per sequence in the step
    step_per_token_ms: float = 0.0  # per token the step verifies, (spec_tokens + 1) per decoding sequence
    max_num_seqs: int = 256  # sequences in a step at most; later requests wait
    spec_tokens: int = 0  # draft tokens verified per sequence and step (speculative decoding)
    spec_acceptance: float = 0.7  # probability a draft token is accepted, given the ones before it were
    draft_ms: float = 0.0  # drafter time per draft position, once a step

    @property
    def spec_k(self) -> int:
        """num_speculative_tokens of the modelled drafter: the engine model's, else most tokens per chunk,
        minus one."""
        return self.spec_tokens if self.engine_model else self.tpc_max - 1



class Request(Protocol):
    """A generation request in progress, as its connection sees it."""

    def end(self, reason: str) -> None:
        """The request is over (finished, failed or its connection gone)."""


class Responder(Protocol):
    """A client connection, as the engine and a generation write to it."""

    transport: asyncio.Transport | None  # None once the connection is gone
    close_after: bool  # close once the response in progress is written
    trickle: bool  # the trickle fault: write the response one byte at a time
    gen: Request | None  # the generation writing to it, if any

    def write(self, data: bytes) -> None: ...

    def respond(self, status: int, body: bytes, ctype: bytes = ..., extra: bytes = ...) -> None:
        """A whole response (head and body); then the next request is read."""

    def reset(self) -> None:
        """Abort the connection with a TCP RST."""

    def response_done(self) -> None:
        """The current response is complete."""


class StepHost(Protocol):
    """What the engine model reads of the engine: its options, clock and seeded draws."""

    @property
    def cfg(self) -> ServerConfig: ...

    @property
    def sched(self) -> Scheduler: ...

    @property
    def rng(self) -> random.Random: ...

    @property
    def jitter_ns(self) -> int: ...


class GenerationHost(StepHost, Protocol):
    """What a generation reads of the engine, and the counters (``/metrics``, ``/fb/stats``) it adds to."""

    chunks_sent: int
    prompt_tokens_total: int
    generation_tokens_total: int
    spec_drafts: int
    spec_draft_tokens: int
    spec_accepted: int

    @property
    def lat(self) -> Lateness: ...

    @property
    def words(self) -> list[bytes]:
        """The output tokens' text, in order (``text`` wraps past its end)."""

    @property
    def itl_ns(self) -> int: ...

    @property
    def req_no(self) -> int:
        """Generation requests read so far (the latest one's number)."""

    @property
    def spec_per_pos(self) -> list[int]:
        """Accepted draft tokens per draft position, counted in place."""

    @property
    def stepper(self) -> object | None:
        """The engine model when it steps the requests (only whether there is one matters here)."""

    def text(self, a: int, b: int) -> bytes:
        """Output tokens ``a`` to ``b`` as text."""

    def account_step(self, index: int, k: int) -> None:
        """Count one chunk (engine step) of ``k`` tokens, chunk ``index`` of its request."""

    def gen_ended(self, reason: str, streamed: bool) -> None: ...


class ConnectionHost(Protocol):
    """What a connection reaches of the engine."""

    @property
    def cfg(self) -> ServerConfig: ...

    @property
    def sched(self) -> Scheduler: ...

    @property
    def conns(self) -> set[Responder]:
        """The open connections (each adds and removes itself)."""

    def dispatch(self, conn: Responder, method: str, target: str, body: bytes, t: int) -> None:
        """Answer one request read whole at ``t`` (CLOCK_MONOTONIC ns)."""
