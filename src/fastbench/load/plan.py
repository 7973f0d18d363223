"""What the driver sends and where: the target parsed once from --base-url and --endpoint, the request
head every request shares, and the plan (bodies, load shape, limits, callbacks) a caller hands over."""

from __future__ import annotations

import asyncio
import dataclasses
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from fastbench.config import BenchConfig
from fastbench.datasetoptions import AgenticOptions
from fastbench.exceptions import ConfigError
from fastbench.load.screening import output_limit_known

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from fastbench._core import BodyParts
    from fastbench.load.agentic import TreePlan
    from fastbench.load.sessions import SessionPlan


@dataclasses.dataclass(frozen=True)
class Target:
    """Where requests go, parsed once from --base-url and --endpoint."""

    scheme: str
    host: str
    port: int
    path: str  # the endpoint path, including any prefix from the base URL
    prefix: str = ""  # the base URL's path, less a trailing /v1: the server's root

    @classmethod
    def parse(cls, base_url: str, endpoint: str) -> Target:
        try:
            url = urllib.parse.urlsplit(base_url)
        except ValueError as exc:  # e.g. an unclosed IPv6 bracket
            raise ConfigError(f"--base-url is not a valid URL ({exc}): {base_url!r}") from None
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ConfigError(f"--base-url must look like http://host:port, got {base_url!r}")
        try:
            port = url.port or (443 if url.scheme == "https" else 80)
        except ValueError:
            raise ConfigError(f"--base-url has a bad port: {base_url!r}") from None
        if not endpoint.startswith("/"):
            raise ConfigError(f"--endpoint must start with '/', got {endpoint!r}")
        prefix = url.path.rstrip("/")
        if prefix.endswith("/v1") and endpoint.startswith("/v1/"):
            prefix = prefix[: -len("/v1")]  # accept --base-url http://h:8000/v1 as OpenAI clients do
        return cls(url.scheme, url.hostname, port, prefix + endpoint, prefix)

    @property
    def base_url(self) -> str:
        """The server's root: scheme://host:port and the base URL's path, without credentials or a
        trailing /v1; where /v1/models, /metrics and /tokenize are asked for."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"

    def request_head(self, api_key: str | None, headers: Mapping[str, str] | None = None, *,
                     accept: str = "text/event-stream") -> bytes:
        """The head every request shares, up to "Content-Length: "; ``headers`` (--header) replace
        fastbench's own of the same name (any case) and add the rest, as vllm bench serve's do."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        fields = {
            "Host": f"{host}:{self.port}",
            "User-Agent": "fastbench",
            "Content-Type": "application/json",
            "Accept": accept,
        }
        if api_key:
            fields["Authorization"] = f"Bearer {api_key}"
        for name, value in (headers or {}).items():
            for own in [own for own in fields if own.lower() == name.lower()]:
                del fields[own]
            fields[name] = value
        lines = [f"POST {self.path} HTTP/1.1", *(f"{name}: {value}" for name, value in fields.items())]
        return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")


def check_api_key(api_key: str | None) -> None:
    """The key travels in an HTTP header, which carries printable ASCII only (a key read from a
    file often brings its trailing newline). The message never shows the key."""
    if api_key is not None and not (api_key.isascii() and api_key.isprintable()):
        raise ConfigError("the API key holds a character an HTTP header cannot carry (a trailing newline?); "
                          "it must be printable ASCII")


class PlannedRequest(Protocol):
    """What a plan reads of one request (load.datasets.RequestSpec)."""

    @property
    def body(self) -> bytes | BodyParts: ...

    @property
    def max_tokens(self) -> int: ...


class PlannedWork(Protocol):
    """What a plan is built from (load.datasets.Workload, which names this module's types itself)."""

    @property
    def requests(self) -> Sequence[PlannedRequest]: ...

    @property
    def warmups(self) -> Sequence[PlannedRequest]: ...

    @property
    def arrival_offsets_ns(self) -> Sequence[int] | None: ...

    @property
    def sessions(self) -> SessionPlan | None: ...

    @property
    def trees(self) -> TreePlan | None: ...


@dataclasses.dataclass
class LoadPlan:
    """What to send and how: built by the caller from a BenchConfig and a Workload."""

    bodies: Sequence[bytes | BodyParts]  # BodyParts: sent from their parts as they lie (a trace's)
    warmup_bodies: Sequence[bytes | BodyParts]
    concurrency: int
    request_rate: float | None = None
    burstiness: float = 1.0
    seed: int = 0
    max_seconds: float | None = None
    request_timeout_s: float | None = None
    max_error_rate: float | None = None
    # stop once every connection attempt for this many seconds failed, nothing answered (load.gone); 0: never
    server_gone_s: float = 0.0
    verify_tls: bool = True
    kernel_timestamps: bool = True
    # read the sockets at least this often instead of on every arrival (0: on every arrival); "auto":
    # the core chooses the tick from the chunk gaps (RunState.coalesce_auto)
    coalesce_s: float | Literal["auto"] = 0.0
    # Per request, the output tokens it asks for (max_tokens): usage beyond it is not trusted; with
    # coalescing, a stream that may end with its next chunk is watched on every arrival, so a
    # closed loop's turnover stays prompt.
    expected_output_tokens: Sequence[int] | None = None
    save_outputs: bool = False  # keep response texts (memory grows with them; off by default)
    keep_chunk_stamps: bool = False  # keep each completed request's chunk stamps (8 bytes a chunk)
    # the API answers each request with one whole JSON body, not a stream (embeddings, pooling, score,
    # rerank: fastbench.load.pooling); the core keeps it and reads its usage once, at its end
    whole_answers: bool = False
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)  # --header, on every request
    # the API the bodies speak (fastbench.load.protocols): its headers, and what its stream's events mean
    endpoint: str = "/v1/completions"
    # open loop whose rate moves over the requests: (strategy, start rps, end rps), see pacer.ramp_up_offsets_ns
    ramp_up: tuple[str, float, float] | None = None
    # open loop at given times, ns from the window's start, one per body; wins over request_rate: a
    # trace's times, or a worker's share of a schedule its parent drew (fastbench.load.workers)
    arrival_offsets_ns: Sequence[int] | npt.NDArray[np.int64] | None = None
    on_progress: Callable[[dict[str, Any]], None] | None = None
    progress_interval_s: float = 0.5
    # Called once when the measured window starts (after the warm-ups), e.g. to snapshot server counters.
    on_window_start: Callable[[], None] | None = None
    # Set by the caller (e.g. on Ctrl-C or SIGTERM) to end the run early; what was measured is kept.
    stop_event: asyncio.Event | None = None
    # A worker's common start: awaited after the warm-ups, returns the window's start instant
    # (CLOCK_MONOTONIC ns, the same clock in every process of the host) once it has come.
    start_at: Callable[[], Awaitable[int]] | None = None
    # Multi-turn sessions: the rows form sessions whose turns follow each other (bodies may wait for the
    # reply before them); request_rate is then the sessions' arrival rate.
    sessions: SessionPlan | None = None
    # Agent trees (--dataset-name weka): each row sent when the rows it depends on have ended and its gap has
    # passed; request_rate is then the trees' arrival rate.
    trees: TreePlan | None = None
    # (header name, its value by row): each measured request carries the header (a session's id, for a router to
    # pin it); the warm-ups carry none
    row_header: tuple[str, Sequence[str]] | None = None

    @classmethod
    def from_config(cls, config: BenchConfig, work: PlannedWork, *, stop_event: asyncio.Event | None = None,
                    progress_interval_s: float = 0.5) -> LoadPlan:
        """The plan of a run: what ``config`` asks for, sending ``work``'s requests. The callbacks that
        watch the run (progress, window start) are the caller's to set."""
        return cls(
            bodies=[spec.body for spec in work.requests],
            warmup_bodies=[spec.body for spec in work.warmups],
            # open loop without a cap: a slot for every request, so none ever waits for one
            concurrency=config.effective_concurrency or max(1, len(work.requests)),
            request_rate=config.request_rate,
            burstiness=config.burstiness,
            seed=config.seed,
            max_seconds=config.max_seconds,
            request_timeout_s=config.request_timeout_s,
            max_error_rate=config.max_error_rate,
            server_gone_s=config.server_gone_s,
            coalesce_s="auto" if config.coalesce_ms == "auto" else config.coalesce_ms / 1e3,
            # max_tokens bounds the usage the core trusts: only where it is the server's real limit
            expected_output_tokens=[spec.max_tokens for spec in work.requests]
            if output_limit_known(config.extra_body) else None,
            verify_tls=not config.insecure,
            save_outputs=config.save_outputs or config.per_request_arrays,  # vllm's generated_texts
            keep_chunk_stamps=config.per_request_arrays,  # vllm's itls
            whole_answers=config.pooling,  # one JSON answer a request, scanned at its end (load.pooling)
            headers=config.headers,
            endpoint=config.endpoint,
            ramp_up=(config.ramp_up_strategy, config.ramp_up_start_rps or 0.0, config.ramp_up_end_rps or 0.0)
            if config.ramp_up_strategy is not None else None,
            arrival_offsets_ns=work.arrival_offsets_ns,
            stop_event=stop_event,
            progress_interval_s=progress_interval_s,
            sessions=work.sessions,
            trees=work.trees,
            row_header=session_header(config, work),
        )

    @property
    def accept(self) -> str:
        """The Accept header the answers are asked in: one JSON body, or an event stream."""
        return "application/json" if self.whole_answers else "text/event-stream"


def session_header(config: BenchConfig, work: PlannedWork) -> tuple[str, list[str]] | None:
    """--agentic-session-header: the header's name and, by row, its value (the call's agent)."""
    name = config.options(AgenticOptions).session_header
    if name is None or work.trees is None:
        return None
    if any(given.lower() == name.lower() for given in config.headers):
        raise ConfigError(f"--agentic-session-header {name} and --header {name} both set it: give one")
    return name, work.trees.session_ids()
