"""The synthetic server's engine: its options, the state all connections share, its routes and its entry.

It is the yardstick the client is measured against, so it shares no code with the client: it imports
nothing from fastbench but ``_version`` and the modules of ``fastbench.synthetic``, and runs in its own
process (``SyntheticServer`` starts it without importing the ``fastbench`` package at all).

* ``ServerConfig``: every option, frozen (defined in ``contracts``, which its parts share).
* ``SyntheticEngine``: state shared by all connections: routes, counters (``/metrics``, ``/fb/stats``),
  the scheduler; it reads each generation request and starts its ``Generation``.
* ``serve``: the process's coroutine (prints ``READY http://HOST:PORT``, stops on SIGTERM/SIGINT).
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import random
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

from fastbench._version import __version__
from fastbench.synthetic.apis import MessagesEncoder, ResponsesEncoder
from fastbench.synthetic.contracts import Responder, ServerConfig
from fastbench.synthetic.generation import Generation
from fastbench.synthetic.model import (
    count_images,
    count_messages_tokens,
    count_prompt_tokens,
    output_words,
    tokenize_messages,
    tokenize_prompt,
)
from fastbench.synthetic.pooling import WholeAnswers
from fastbench.synthetic.prefixcache import PrefixCache
from fastbench.synthetic.protocol import Connection, error_body
from fastbench.synthetic.sched import Lateness, Scheduler
from fastbench.synthetic.stepmodel import EngineModel

_now = time.monotonic_ns

FAULTS: tuple[str, ...] = (
    "refuse",
    "reset-before-headers",
    "reset-mid-stream",
    "http-500",
    "http-429",
    "not-sse",
    "malformed-sse",
    "oversized-event",
    "no-done",
    "error-event",
    "stall",
    "trickle",
    "close-after-response",
    "usage-contradictory",
)

_TEXT_TABLE_MAX = 65536
_MAX_RECEIPTS = 1_000_000  # requests tagged "fb_row" whose read time is kept for /fb/receipts


class SyntheticEngine:
    """State shared by all connections of one server process."""

    def __init__(self, cfg: ServerConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg = cfg
        self.loop = loop
        self.sched = Scheduler(loop, cfg.timer)
        self.lat = Lateness()
        self.rng = random.Random(cfg.seed)
        n = min(cfg.max_model_len, _TEXT_TABLE_MAX)
        self.words = [w.encode() for w in output_words(cfg.seed, n)]
        self.created = int(time.time())
        self.conns: set[Responder] = set()
        self.req_no = 0
        # "fb_row" of a request -> when its bytes were read (CLOCK_MONOTONIC ns): the client sent
        # them at its own send stamp, so the difference is the request's way in, which no chunk
        # stamp shows (validate reports it apart from the client's error)
        self.receipts: dict[int, int] = {}
        self.faults_injected = 0
        self.images = 0  # image parts of the chat requests read
        self.requests_by_model: dict[str, int] = dict.fromkeys((cfg.model, *cfg.lora_modules), 0)
        self.chunks_sent = 0
        self.streams_open = 0
        self.streams_max = 0
        self.requests_total = 0
        self.running = 0
        self.idle_handle: asyncio.TimerHandle | None = None
        self.idle_collections = 0
        self.last_start_ns = 0
        # vLLM-style counters
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted = 0
        self.spec_per_pos = [0] * cfg.spec_k
        self.ttft_base_ns = int(cfg.ttft_ms * 1e6)
        self.itl_ns = int(cfg.itl_ms * 1e6)
        self.jitter_ns = int(cfg.jitter_ms * 1e6)
        self.label = b'{engine="0",model_name=%b}' % orjson.dumps(cfg.model)
        self.prefix_cache = PrefixCache(cfg.block_size, cfg.prefix_cache_blocks) if cfg.enable_prefix_caching \
            else None
        self.stepper = EngineModel(self) if cfg.engine_model else None
        self.whole = WholeAnswers(cfg, loop)  # embeddings, pooling, score, rerank (synthetic.pooling)

    def close(self) -> None:
        self.sched.close()
        if self.idle_handle is not None:
            self.idle_handle.cancel()
        for c in list(self.conns):
            if c.transport is not None:
                c.transport.abort()

    def text(self, a: int, b: int) -> bytes:
        w = self.words
        if b <= len(w):
            return b"".join(w[a:b])
        n = len(w)
        return b"".join([w[i % n] for i in range(a, b)])

    # -- accounting -----------------------------------------------------------------------------

    def account_step(self, index: int, k: int) -> None:
        """Counters for one engine step (chunk) that produced k tokens; the first is the prefill's."""
        self.generation_tokens_total += k
        K = len(self.spec_per_pos)
        if index > 0 and K:
            acc = k - 1
            self.spec_drafts += 1
            self.spec_draft_tokens += K
            self.spec_accepted += acc
            pp = self.spec_per_pos
            for i in range(acc):
                pp[i] += 1

    def gen_started(self) -> None:
        self.running += 1
        self.last_start_ns = _now()

    def gen_ended(self, reason: str, streamed: bool) -> None:
        self.running -= 1
        self.success[reason] = self.success.get(reason, 0) + 1
        if streamed:
            self.streams_open -= 1
        if self.running == 0:
            self._schedule_idle_gc()

    def _schedule_idle_gc(self) -> None:
        if self.idle_handle is None:
            self.idle_handle = self.loop.call_later(1.0, self._idle_gc)

    def _idle_gc(self) -> None:
        """With the collector off, collect cyclic garbage once nothing has run for a second."""
        self.idle_handle = None
        if self.running:
            return
        quiet_s = (_now() - self.last_start_ns) / 1e9
        if quiet_s < 1.0:
            self.idle_handle = self.loop.call_later(1.0 - quiet_s, self._idle_gc)
            return
        gc.collect()
        self.idle_collections += 1

    # -- reports --------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {
            "server": f"fastbench-synthetic {__version__}",
            "timer": self.sched.mode,
            "lateness": self.lat.as_dict(),
            "chunks_sent": self.chunks_sent,
            "streams_open": self.streams_open,
            "streams_max": self.streams_max,
            "requests_running": self.running,
            "requests_total": self.requests_total,
            "generation_requests": self.req_no,
            "faults_injected": self.faults_injected,
            "connections_open": len(self.conns),
            "idle_gc_collections": self.idle_collections,
            "gc_enabled": gc.isenabled(),
            "fastbench_modules": sorted(m for m in sys.modules if m.split(".")[0] == "fastbench"),
        } | self._prefix_cache_stats() | ({"engine_model": self.stepper.stats()} if self.stepper else {}) \
            | self._input_stats()

    def _input_stats(self) -> dict[str, Any]:
        """Images and adapters only when seen or served: the keys stay those of bench/fast_server.c otherwise."""
        out: dict[str, Any] = {"images": self.images} if self.images else {}
        if self.cfg.lora_modules:
            out["requests_by_model"] = dict(self.requests_by_model)
        return out

    def _prefix_cache_stats(self) -> dict[str, Any]:
        """Only with --enable-prefix-caching: the keys stay those of bench/fast_server.c otherwise."""
        cache = self.prefix_cache
        if cache is None:
            return {}
        return {"prefix_cache": {"block_size": cache.block_size, "blocks": cache.blocks, "queries": cache.queries,
                                 "hits": cache.hits, "resets": cache.resets}}

    def reset_stats(self) -> None:
        self.lat.reset()
        self.receipts.clear()
        self.whole.reset()
        self.chunks_sent = 0
        self.streams_max = self.streams_open
        self.images = 0
        self.requests_by_model = dict.fromkeys((self.cfg.model, *self.cfg.lora_modules), 0)

    def metrics_text(self) -> bytes:
        lb = self.label
        out: list[bytes] = []

        def metric(name: str, kind: str, help_: str, rows: list[tuple[bytes, float]]) -> None:
            out.append(b"# HELP vllm:%b %b\n# TYPE vllm:%b %b\n" % (name.encode(), help_.encode(),
                                                                   name.encode(), kind.encode()))
            for labels, v in rows:
                out.append(b"vllm:%b%b %r\n" % (name.encode(), labels, float(v)))

        def with_label(extra: bytes) -> bytes:
            return lb[:-1] + b"," + extra + b"}"

        step = self.stepper
        metric("num_requests_running", "gauge", "Number of requests in model execution batches.",
               [(lb, self.running if step is None else step.running())])
        metric("num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
               [(lb, 0 if step is None else step.waiting_count())])
        metric("prompt_tokens_total", "counter", "Number of prefill tokens processed.",
               [(lb, self.prompt_tokens_total)])
        metric("generation_tokens_total", "counter", "Number of generation tokens processed.",
               [(lb, self.generation_tokens_total)])
        metric("request_success_total", "counter", "Count of successfully processed requests.",
               [(with_label(b'finished_reason="%b"' % r.encode()), v) for r, v in sorted(self.success.items())
                if r != "abort"])
        if self.prefix_cache is not None:  # vLLM's names (vllm/v1/metrics/loggers.py), in tokens
            metric("prefix_cache_queries_total", "counter",
                   "Prefix cache queries, in terms of number of queried tokens.", [(lb, self.prefix_cache.queries)])
            metric("prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
                   [(lb, self.prefix_cache.hits)])
        if self.spec_per_pos:
            metric("spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.",
                   [(lb, self.spec_drafts)])
            metric("spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.",
                   [(lb, self.spec_draft_tokens)])
            metric("spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
                   [(lb, self.spec_accepted)])
            metric("spec_decode_num_accepted_tokens_per_pos_total", "counter",
                   "Accepted tokens per draft position.",
                   [(with_label(b'position="%d"' % i), v) for i, v in enumerate(self.spec_per_pos)])
        return b"".join(out)

    # -- request routing ------------------------------------------------------------------------

    def dispatch(self, conn: Responder, method: str, target: str, body: bytes, t: int) -> None:
        self.requests_total += 1
        path = target.split("?", 1)[0]
        route = _ROUTES.get(path)
        if route is None:
            conn.respond(404, error_body(404, f"Not Found: {path}"))
            return
        allowed, handler = route
        if method != allowed:
            conn.respond(405, error_body(405, f"Method Not Allowed: {method} {path}"),
                         extra=b"allow: %b\r\n" % allowed.encode())
            return
        handler(self, conn, body, t)

    def h_health(self, conn: Responder, body: bytes, t: int) -> None:
        conn.respond(200, b"", ctype=b"text/plain; charset=utf-8")

    def h_models(self, conn: Responder, body: bytes, t: int) -> None:
        m = self.cfg.model
        # adapters as vLLM lists them: after the model, each with the model as its parent
        conn.respond(200, orjson.dumps({"object": "list", "data": [
            {"id": name, "object": "model", "created": self.created, "owned_by": "fastbench", "root": name,
             "parent": None if name == m else m, "max_model_len": self.cfg.max_model_len, "permission": []}
            for name in (m, *self.cfg.lora_modules)]}))

    def h_version(self, conn: Responder, body: bytes, t: int) -> None:
        conn.respond(200, orjson.dumps({"version": f"fastbench-synthetic {__version__}"}))

    def h_metrics(self, conn: Responder, body: bytes, t: int) -> None:
        conn.respond(200, self.metrics_text(), ctype=b"text/plain; version=0.0.4; charset=utf-8")

    def h_stats(self, conn: Responder, body: bytes, t: int) -> None:
        conn.respond(200, orjson.dumps(self.stats()))

    def h_receipts(self, conn: Responder, body: bytes, t: int) -> None:
        rows = list(self.receipts)
        conn.respond(200, orjson.dumps({"rows": rows, "read_ns": [self.receipts[r] for r in rows]}))

    def h_reset(self, conn: Responder, body: bytes, t: int) -> None:
        self.reset_stats()
        conn.respond(200, orjson.dumps(self.stats()))

    def h_reset_prefix_cache(self, conn: Responder, body: bytes, t: int) -> None:
        if not self.cfg.reset_prefix_cache_endpoint:
            conn.respond(404, error_body(404, "Not Found: /reset_prefix_cache"))
            return
        if self.prefix_cache is not None:
            self.prefix_cache.reset()
        conn.respond(200, orjson.dumps({"success": True}))

    def h_tokenize(self, conn: Responder, body: bytes, t: int) -> None:
        try:
            req = orjson.loads(body)
            if not isinstance(req, dict):
                raise TypeError("body must be a JSON object")
            if "messages" in req:
                ids = tokenize_messages(req["messages"])
            elif "prompt" in req:
                ids = tokenize_prompt(req["prompt"])
            else:
                raise ValueError("give 'prompt' or 'messages'")
        except (ValueError, TypeError) as e:  # orjson.JSONDecodeError is a ValueError
            conn.respond(400, error_body(400, str(e)))
            return
        conn.respond(200, orjson.dumps({"count": len(ids), "max_model_len": self.cfg.max_model_len,
                                        "tokens": ids, "token_strs": None}))

    def h_completions(self, conn: Responder, body: bytes, t: int) -> None:
        self.generate(conn, body, t, chat=False)

    def h_chat(self, conn: Responder, body: bytes, t: int) -> None:
        self.generate(conn, body, t, chat=True)

    def h_responses(self, conn: Responder, body: bytes, t: int) -> None:
        self.generate(conn, body, t, chat=True, api=ResponsesEncoder)

    def h_messages(self, conn: Responder, body: bytes, t: int) -> None:
        self.generate(conn, body, t, chat=True, api=MessagesEncoder)

    # -- generation -----------------------------------------------------------------------------

    def generate(self, conn: Responder, body: bytes, t: int, chat: bool,
                 api: type[ResponsesEncoder | MessagesEncoder] | None = None) -> None:
        cfg = self.cfg
        try:
            req = orjson.loads(body)
            if not isinstance(req, dict):
                raise TypeError("body must be a JSON object")
            stream = bool(req.get("stream", False))
            so = req.get("stream_options") if api is None else None  # the typed APIs have none
            if so is not None and not stream:
                raise ValueError("Stream options can only be defined when `stream=True`.")
            if so is not None and not isinstance(so, dict):
                raise ValueError("stream_options must be an object")
            so = so or {}
            include_usage = bool(so.get("include_usage", False))
            continuous = include_usage and bool(so.get("continuous_usage_stats", False))
            if req.get("n") not in (None, 1):
                raise ValueError("the synthetic server supports n=1 only")
            mt = req.get("max_output_tokens" if api is ResponsesEncoder else "max_tokens")
            if mt is None and api is MessagesEncoder:
                raise ValueError("max_tokens: Field required")  # as Anthropic's API and vLLM's say
            if mt is None and chat:
                mt = req.get("max_completion_tokens")
            max_tokens = cfg.default_max_tokens if mt is None else mt
            if type(max_tokens) is not int or max_tokens < 1:
                raise ValueError(f"max_tokens must be at least 1, got {max_tokens}.")
            ids: list[int] | None = None
            images = 0
            tool_call = chat and _tool_call_forced(req)
            if api is ResponsesEncoder:
                if "input" not in req:
                    raise ValueError("input is required")
                # a text input is one user message: the server applies its chat template to it, as vLLM does
                given = req["input"]
                messages = given if isinstance(given, list) else [{"role": "user", "content": given}]
                if self.prefix_cache is not None:
                    ids = tokenize_messages(messages)
                prompt_tokens = count_messages_tokens(messages)
            elif chat:
                if self.prefix_cache is not None:
                    ids = tokenize_messages(req.get("messages"))
                prompt_tokens = count_messages_tokens(req.get("messages"))
                images = count_images(req.get("messages"))
            else:
                if "prompt" not in req:
                    raise ValueError("prompt is required")
                if self.prefix_cache is not None:
                    ids = tokenize_prompt(req["prompt"])
                prompt_tokens = count_prompt_tokens(req["prompt"])
            model = req.get("model")
            if model is None:
                model = cfg.model
            if not isinstance(model, str):
                raise TypeError("model must be a string")
        except (ValueError, TypeError) as e:  # orjson.JSONDecodeError is a ValueError
            conn.respond(400, error_body(400, str(e)))
            return
        if cfg.strict_model and model != cfg.model and model not in cfg.lora_modules:
            conn.respond(404, error_body(404, f"The model `{model}` does not exist."))
            return
        if chat:
            self.images += images
        if model in self.requests_by_model:
            self.requests_by_model[model] += 1
        elif cfg.lora_modules:  # another name, accepted (not --strict-model): counted under its own
            self.requests_by_model[model] = 1
        total = prompt_tokens + max_tokens
        if total > cfg.max_model_len:
            conn.respond(400, error_body(400, (
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested "
                f"{total} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion). "
                f"Please reduce the length of the messages or completion.")))
            return
        self.req_no += 1
        row = req.get("fb_row")
        if type(row) is int and len(self.receipts) < _MAX_RECEIPTS:
            self.receipts[row] = t
        fault = cfg.fault if (cfg.fault and self.req_no % cfg.fault_every == 0) else None
        if fault:
            self.faults_injected += 1
        if fault == "reset-before-headers":
            conn.reset()
            return
        if fault in ("http-500", "http-429"):
            status = 500 if fault == "http-500" else 429
            msg = "synthetic fault: internal error" if status == 500 else "synthetic fault: rate limited"
            conn.respond(status, error_body(status, msg),
                         extra=b"retry-after: 1\r\n" if status == 429 else b"")
            return
        if fault == "close-after-response":
            conn.close_after = True
        if fault == "trickle":
            conn.trickle = True
        n_out = max_tokens
        if cfg.eos_prob > 0 and not req.get("ignore_eos", False):
            u = self.rng.random()
            n_out = min(max_tokens, 1 + int(math.log(1.0 - u) / math.log(1.0 - cfg.eos_prob))
                        if cfg.eos_prob < 1 else 1)
        ttft = self.ttft_base_ns
        cached = self.prefix_cache.admit(ids) if self.prefix_cache is not None and ids is not None else 0
        if cfg.prefill_tok_s and self.stepper is None:  # cached prompt tokens cost no prefill
            ttft += int((prompt_tokens - cached) / cfg.prefill_tok_s * 1e9)
        g = Generation(self, conn, chat, model, prompt_tokens, n_out, "stop" if n_out < max_tokens else "length",
                 t, t + ttft, include_usage, continuous, fault, cached, api, tool_call)
        itl_ms = req.get("fb_itl_ms")  # a request's own gap between chunks: a server that speeds up or slows down
        if isinstance(itl_ms, (int, float)) and not isinstance(itl_ms, bool) and 0 <= itl_ms <= 3_600_000:
            g.itl_ns = int(itl_ms * 1e6)
        conn.gen = g
        self.gen_started()
        if stream and fault != "not-sse":
            self.streams_open += 1
            self.streams_max = max(self.streams_max, self.streams_open)
            g.start_stream()
        else:
            g.start_whole()
        if self.stepper is not None:  # the engine model decides when its chunks go out, its prefill in a step
            self.stepper.admit(g, prompt_tokens - cached, t + ttft)


def _tool_call_forced(req: dict[str, Any]) -> bool:
    """Whether a chat request's answer is a tool call: ``tools`` given and ``tool_choice`` "required" or a named
    function, which vLLM forces; with "auto" the model chooses, and this server's answers text."""
    tools, choice = req.get("tools"), req.get("tool_choice")
    if tools is not None and not isinstance(tools, list):
        raise ValueError("tools must be a list")
    if choice not in (None, "none", "auto") and not tools:
        raise ValueError("When using `tool_choice`, `tools` must be set.")  # vLLM's words
    return bool(tools) and (choice == "required" or isinstance(choice, dict))


_ROUTES: dict[str, tuple[str, Callable[[SyntheticEngine, Responder, bytes, int], None]]] = {
    "/health": ("GET", SyntheticEngine.h_health),
    "/v1/models": ("GET", SyntheticEngine.h_models),
    "/version": ("GET", SyntheticEngine.h_version),
    "/metrics": ("GET", SyntheticEngine.h_metrics),
    "/tokenize": ("POST", SyntheticEngine.h_tokenize),
    "/reset_prefix_cache": ("POST", SyntheticEngine.h_reset_prefix_cache),
    "/v1/completions": ("POST", SyntheticEngine.h_completions),
    "/v1/chat/completions": ("POST", SyntheticEngine.h_chat),
    "/v1/responses": ("POST", SyntheticEngine.h_responses),
    "/v1/messages": ("POST", SyntheticEngine.h_messages),
    "/fb/stats": ("GET", SyntheticEngine.h_stats),
    "/fb/reset": ("POST", SyntheticEngine.h_reset),
    "/fb/receipts": ("GET", SyntheticEngine.h_receipts),
    # the APIs answered whole, and their send log (synthetic.pooling)
    "/v1/embeddings": ("POST", lambda e, conn, body, t: e.whole.embeddings(conn, body, t)),
    "/pooling": ("POST", lambda e, conn, body, t: e.whole.pooling(conn, body, t)),
    "/score": ("POST", lambda e, conn, body, t: e.whole.score(conn, body, t)),
    "/rerank": ("POST", lambda e, conn, body, t: e.whole.rerank(conn, body, t)),
    "/v1/rerank": ("POST", lambda e, conn, body, t: e.whole.rerank(conn, body, t)),
    "/fb/answers": ("GET", lambda e, conn, body, t: conn.respond(200, e.whole.log_json())),
}


# --------------------------------------------------------------------------------------------------
# Process entry


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def serve(cfg: ServerConfig) -> int:
    """Run the server until SIGTERM/SIGINT (or, with ``exit_with_parent``, that process's exit). Prints
    ``READY http://HOST:PORT`` once listening."""
    import signal

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watch = _watch_parent(loop, cfg.exit_with_parent, stop) if cfg.exit_with_parent is not None else None
    try:
        return await _serve_until(cfg, loop, stop)
    finally:
        if watch is not None:
            watch.cancel()


def _watch_parent(loop: asyncio.AbstractEventLoop, pid: int, stop: asyncio.Event) -> asyncio.Task[None]:
    """Set ``stop`` once process ``pid`` is gone (a parent killed with SIGKILL cannot stop its server):
    at once through a pidfd on Linux, else by noticing that this process was given another parent."""

    async def watch() -> None:
        try:
            fd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # not Linux 5.3+, or the parent is gone already
            fd = -1
        if fd >= 0:
            gone = asyncio.Event()
            loop.add_reader(fd, gone.set)  # a pidfd is readable once its process has exited
            try:
                await gone.wait()
            finally:
                loop.remove_reader(fd)
                os.close(fd)
        else:
            while os.getppid() == pid:
                await asyncio.sleep(0.5)
        stop.set()

    return loop.create_task(watch())


async def _serve_until(cfg: ServerConfig, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> int:
    if cfg.fault == "refuse":
        # Bind but never listen: connections are refused (RST) while the port stays ours.
        fam = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
        sock = socket.socket(fam, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((cfg.host, cfg.port))
        port = sock.getsockname()[1]
        print(f"READY http://{_url_host(cfg.host)}:{port}", flush=True)
        await stop.wait()
        sock.close()
        return 0
    eng = SyntheticEngine(cfg, loop)
    server = await loop.create_server(lambda: Connection(eng), cfg.host, cfg.port, backlog=4096,
                                      reuse_address=True)
    port = server.sockets[0].getsockname()[1]
    gc.collect()
    gc.freeze()
    gc.disable()
    print(f"READY http://{_url_host(cfg.host)}:{port}", flush=True)
    print(f"fastbench-synthetic {__version__} listening on {_url_host(cfg.host)}:{port} "
          f"(model {cfg.model!r}, timer {eng.sched.mode})", file=sys.stderr, flush=True)
    await stop.wait()
    server.close()
    eng.close()
    return 0
