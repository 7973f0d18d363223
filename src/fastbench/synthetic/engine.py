"""The synthetic server's HTTP/1.1 protocol, request handling and chunk writer (see fastbench.synthetic).

It is the yardstick the client is measured against, so it shares no code with the client: it imports
nothing from fastbench but ``_version`` and the modules of ``fastbench.synthetic``, and runs in its own
process (``SyntheticServer`` starts it without importing the ``fastbench`` package at all).

* ``ServerConfig``: every option, frozen.
* ``SyntheticEngine``: state shared by all connections: routes, counters, the scheduler.
* ``_Conn``: a minimal HTTP/1.1 server protocol (keep-alive, sequential requests, split reads).
* ``_Gen``: one generation request: its absolute schedule and its preformatted chunk templates.
* ``serve``: the process's coroutine (prints ``READY http://HOST:PORT``, stops on SIGTERM/SIGINT).
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import math
import random
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson

from fastbench._version import __version__
from fastbench.synthetic.model import (
    count_messages_tokens,
    count_prompt_tokens,
    output_words,
    tokenize_messages,
    tokenize_prompt,
)
from fastbench.synthetic.sched import Lateness, Scheduler

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
_MAX_HEAD = 65536
_MAX_BODY = 64 * 1024 * 1024
_MAX_RECEIPTS = 1_000_000  # requests tagged "fb_row" whose read time is kept for /fb/receipts

_STATUS: dict[int, bytes] = {
    100: b"100 Continue",
    200: b"200 OK",
    400: b"400 Bad Request",
    404: b"404 Not Found",
    405: b"405 Method Not Allowed",
    413: b"413 Content Too Large",
    429: b"429 Too Many Requests",
    431: b"431 Request Header Fields Too Large",
    500: b"500 Internal Server Error",
    501: b"501 Not Implemented",
}
_ERROR_TYPE: dict[int, str] = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    413: "BadRequestError",
    429: "RateLimitError",
    431: "BadRequestError",
    500: "InternalServerError",
    501: "NotImplementedError",
}


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
    fault: str | None = None
    fault_every: int = 1
    stall_s: float = 1.0
    trickle_us: int = 200
    oversized_bytes: int = 10 * 1024 * 1024
    timer: str = "auto"  # auto | timerfd | call_at

    @property
    def spec_k(self) -> int:
        """num_speculative_tokens of the modelled drafter: most tokens per chunk, minus one."""
        return self.tpc_max - 1


# --------------------------------------------------------------------------------------------------
# The server


def _frame(ev: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%b\r\n" % (len(ev), ev)


_DONE = _frame(b"data: [DONE]\n\n")
_END = b"0\r\n\r\n"
_USAGE = b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}'
_TAIL = b',"fb_sent_ns":%d}\n\n'
_ERROR_EVENT = (b'data: {"error":{"message":"synthetic fault: error mid-stream","type":"InternalServerError",'
                b'"param":null,"code":500}}\n\n')


def _error_body(status: int, message: str, etype: str | None = None) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": etype or _ERROR_TYPE.get(status, "Error"), "param": None,
                   "code": status}}
    )


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
        self.conns: set[_Conn] = set()
        self.req_no = 0
        # "fb_row" of a request -> when its bytes were read (CLOCK_MONOTONIC ns): the client sent
        # them at its own send stamp, so the difference is the request's way in, which no chunk
        # stamp shows (validate reports it apart from the client's error)
        self.receipts: dict[int, int] = {}
        self.faults_injected = 0
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
        }

    def reset_stats(self) -> None:
        self.lat.reset()
        self.receipts.clear()
        self.chunks_sent = 0
        self.streams_max = self.streams_open

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

        metric("num_requests_running", "gauge", "Number of requests in model execution batches.",
               [(lb, self.running)])
        metric("num_requests_waiting", "gauge", "Number of requests waiting to be processed.", [(lb, 0)])
        metric("prompt_tokens_total", "counter", "Number of prefill tokens processed.",
               [(lb, self.prompt_tokens_total)])
        metric("generation_tokens_total", "counter", "Number of generation tokens processed.",
               [(lb, self.generation_tokens_total)])
        metric("request_success_total", "counter", "Count of successfully processed requests.",
               [(with_label(b'finished_reason="%b"' % r.encode()), v) for r, v in sorted(self.success.items())
                if r != "abort"])
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

    def dispatch(self, conn: _Conn, method: str, target: str, body: bytes, t: int) -> None:
        self.requests_total += 1
        path = target.split("?", 1)[0]
        route = _ROUTES.get(path)
        if route is None:
            conn.respond(404, _error_body(404, f"Not Found: {path}"))
            return
        allowed, handler = route
        if method != allowed:
            conn.respond(405, _error_body(405, f"Method Not Allowed: {method} {path}"),
                         extra=b"allow: %b\r\n" % allowed.encode())
            return
        handler(self, conn, body, t)

    def h_health(self, conn: _Conn, body: bytes, t: int) -> None:
        conn.respond(200, b"", ctype=b"text/plain; charset=utf-8")

    def h_models(self, conn: _Conn, body: bytes, t: int) -> None:
        m = self.cfg.model
        conn.respond(200, orjson.dumps({"object": "list", "data": [
            {"id": m, "object": "model", "created": self.created, "owned_by": "fastbench", "root": m,
             "parent": None, "max_model_len": self.cfg.max_model_len, "permission": []}]}))

    def h_version(self, conn: _Conn, body: bytes, t: int) -> None:
        conn.respond(200, orjson.dumps({"version": f"fastbench-synthetic {__version__}"}))

    def h_metrics(self, conn: _Conn, body: bytes, t: int) -> None:
        conn.respond(200, self.metrics_text(), ctype=b"text/plain; version=0.0.4; charset=utf-8")

    def h_stats(self, conn: _Conn, body: bytes, t: int) -> None:
        conn.respond(200, orjson.dumps(self.stats()))

    def h_receipts(self, conn: _Conn, body: bytes, t: int) -> None:
        rows = list(self.receipts)
        conn.respond(200, orjson.dumps({"rows": rows, "read_ns": [self.receipts[r] for r in rows]}))

    def h_reset(self, conn: _Conn, body: bytes, t: int) -> None:
        self.reset_stats()
        conn.respond(200, orjson.dumps(self.stats()))

    def h_tokenize(self, conn: _Conn, body: bytes, t: int) -> None:
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
            conn.respond(400, _error_body(400, str(e)))
            return
        conn.respond(200, orjson.dumps({"count": len(ids), "max_model_len": self.cfg.max_model_len,
                                        "tokens": ids, "token_strs": None}))

    def h_completions(self, conn: _Conn, body: bytes, t: int) -> None:
        self.generate(conn, body, t, chat=False)

    def h_chat(self, conn: _Conn, body: bytes, t: int) -> None:
        self.generate(conn, body, t, chat=True)

    # -- generation -----------------------------------------------------------------------------

    def generate(self, conn: _Conn, body: bytes, t: int, chat: bool) -> None:
        cfg = self.cfg
        try:
            req = orjson.loads(body)
            if not isinstance(req, dict):
                raise TypeError("body must be a JSON object")
            stream = bool(req.get("stream", False))
            so = req.get("stream_options")
            if so is not None and not stream:
                raise ValueError("Stream options can only be defined when `stream=True`.")
            if so is not None and not isinstance(so, dict):
                raise ValueError("stream_options must be an object")
            so = so or {}
            include_usage = bool(so.get("include_usage", False))
            continuous = include_usage and bool(so.get("continuous_usage_stats", False))
            if req.get("n") not in (None, 1):
                raise ValueError("the synthetic server supports n=1 only")
            mt = req.get("max_tokens")
            if mt is None and chat:
                mt = req.get("max_completion_tokens")
            max_tokens = cfg.default_max_tokens if mt is None else mt
            if type(max_tokens) is not int or max_tokens < 1:
                raise ValueError(f"max_tokens must be at least 1, got {max_tokens}.")
            if chat:
                prompt_tokens = count_messages_tokens(req.get("messages"))
            else:
                if "prompt" not in req:
                    raise ValueError("prompt is required")
                prompt_tokens = count_prompt_tokens(req["prompt"])
            model = req.get("model")
            if model is None:
                model = cfg.model
            if not isinstance(model, str):
                raise TypeError("model must be a string")
        except (ValueError, TypeError) as e:  # orjson.JSONDecodeError is a ValueError
            conn.respond(400, _error_body(400, str(e)))
            return
        if cfg.strict_model and model != cfg.model:
            conn.respond(404, _error_body(404, f"The model `{model}` does not exist."))
            return
        total = prompt_tokens + max_tokens
        if total > cfg.max_model_len:
            conn.respond(400, _error_body(400, (
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
            conn.respond(status, _error_body(status, msg),
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
        if cfg.prefill_tok_s:
            ttft += int(prompt_tokens / cfg.prefill_tok_s * 1e9)
        g = _Gen(self, conn, chat, model, prompt_tokens, n_out, "stop" if n_out < max_tokens else "length",
                 t, t + ttft, include_usage, continuous, fault)
        conn.gen = g
        self.gen_started()
        if stream and fault != "not-sse":
            self.streams_open += 1
            self.streams_max = max(self.streams_max, self.streams_open)
            g.start_stream()
        else:
            g.start_whole()


_ROUTES: dict[str, tuple[str, Callable[[SyntheticEngine, _Conn, bytes, int], None]]] = {
    "/health": ("GET", SyntheticEngine.h_health),
    "/v1/models": ("GET", SyntheticEngine.h_models),
    "/version": ("GET", SyntheticEngine.h_version),
    "/metrics": ("GET", SyntheticEngine.h_metrics),
    "/tokenize": ("POST", SyntheticEngine.h_tokenize),
    "/v1/completions": ("POST", SyntheticEngine.h_completions),
    "/v1/chat/completions": ("POST", SyntheticEngine.h_chat),
    "/fb/stats": ("GET", SyntheticEngine.h_stats),
    "/fb/reset": ("POST", SyntheticEngine.h_reset),
    "/fb/receipts": ("GET", SyntheticEngine.h_receipts),
}


class _Gen:
    """One generation request. Chunk i is due at base + i * itl (+ jitter), base = arrival + TTFT."""

    __slots__ = (
        "R",
        "base",
        "chat",
        "conn",
        "continuous",
        "emitted",
        "ended",
        "eng",
        "fast",
        "fault",
        "fault_done",
        "finish",
        "idx",
        "include_usage",
        "n_out",
        "pre",
        "prev_due",
        "prompt_tokens",
        "reported",
        "sizes",
        "streamed",
        "tmpl",
    )

    def __init__(self, eng: SyntheticEngine, conn: _Conn, chat: bool, model: str, prompt_tokens: int,
                 n_out: int, finish: str, arrival: int, base: int, include_usage: bool, continuous: bool,
                 fault: str | None) -> None:
        cfg = eng.cfg
        self.eng = eng
        self.conn: _Conn | None = conn
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        self.n_out = n_out
        self.finish = finish
        self.base = base
        self.prev_due = arrival  # jitter may move chunk 0 before base, never before the request
        usage_ok = not cfg.no_usage and not cfg.final_usage_only
        self.include_usage = include_usage and usage_ok
        self.continuous = continuous and usage_ok
        self.fault = fault
        self.idx = 0
        self.emitted = 0
        self.reported = 0
        self.ended = False
        self.fault_done = False
        self.sizes: list[int] = []
        self.streamed = False
        rid = b"%08x%024x" % (cfg.seed & 0xFFFFFFFF, eng.req_no)
        if chat:
            head = b'data: {"id":"chatcmpl-%b","object":"chat.completion.chunk"' % rid
        else:
            head = b'data: {"id":"cmpl-%b","object":"text_completion"' % rid
        self.pre = head + b',"created":%d,"model":%b,"choices":[' % (int(time.time()), orjson.dumps(model))
        # Template of a middle chunk (not first, not last, no fault, past the reasoning tokens), up to
        # the value of fb_sent_ns: "%b" takes the text, then total/completion token counts.
        self.R = cfg.reasoning_tokens if chat else 0
        self.fast = fault is None
        esc = self.pre.replace(b"%", b"%%")
        if chat:
            t = esc + b'{"index":0,"delta":{"content":"%b"},"logprobs":null,"finish_reason":null}]'
        else:
            t = esc + b'{"index":0,"text":"%b","logprobs":null,"finish_reason":null,"stop_reason":null}]'
        if self.continuous:
            t += b',"usage":{"prompt_tokens":%d,"total_tokens":%%d,"completion_tokens":%%d}' % prompt_tokens
        self.tmpl = t + b',"fb_sent_ns":'

    # -- plan -------------------------------------------------------------------------------------

    def _next_size(self) -> int:
        cfg = self.eng.cfg
        if self.idx == 0:
            k = 1
        elif cfg.tpc_min == cfg.tpc_max:
            k = cfg.tpc_max
        else:
            k = cfg.tpc_min + int(self.eng.rng.random() * (cfg.tpc_max - cfg.tpc_min + 1))
        return min(k, self.n_out - self.emitted)

    def _due(self, i: int) -> int:
        eng = self.eng
        due = self.base + i * eng.itl_ns
        if eng.jitter_ns:
            due += int(eng.rng.uniform(-eng.jitter_ns, eng.jitter_ns))
        due = max(due, self.prev_due)
        self.prev_due = due
        return due

    # -- streaming --------------------------------------------------------------------------------

    def start_stream(self) -> None:
        conn = self.conn
        assert conn is not None
        self.streamed = True
        conn.write(b"HTTP/1.1 200 OK\r\nserver: fastbench-synthetic\r\n"
                   b"content-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\n"
                   b"transfer-encoding: chunked\r\n%b\r\n" % (b"connection: close\r\n" if conn.close_after else b""))
        self.eng.sched.push(self._due(0), self.step)

    def _delta(self, a: int, b: int) -> bytes:
        eng = self.eng
        R = eng.cfg.reasoning_tokens
        if not self.chat:
            return b'"text":"%b"' % eng.text(a, b)
        if a >= R:
            return b'"delta":{"content":"%b"}' % eng.text(a, b)
        f = eng.cfg.reasoning_field.encode()
        if b <= R:
            return b'"delta":{"%b":"%b"}' % (f, eng.text(a, b))
        return b'"delta":{"%b":"%b","content":"%b"}' % (f, eng.text(a, R), eng.text(R, b))

    def _usage(self, completion: int) -> bytes:
        p = self.prompt_tokens
        return _USAGE % (p, p + completion, completion)

    def step(self, due: int) -> None:
        """Write chunk self.idx (called by the scheduler at its due time)."""
        conn = self.conn
        if conn is None:
            return
        tr = conn.transport
        if tr is None:
            return
        i = self.idx
        a = self.emitted
        if i == 0 or not self.fast or a < self.R:
            self._step_general(due)
            return
        eng = self.eng
        cfg = eng.cfg
        if cfg.tpc_min == cfg.tpc_max:
            k = cfg.tpc_max
        else:
            k = cfg.tpc_min + int(eng.rng.random() * (cfg.tpc_max - cfg.tpc_min + 1))
        b = a + k
        if b >= self.n_out:  # the last chunk
            self._step_general(due)
            return
        w = eng.words
        if b <= len(w):
            text = w[a] if k == 1 else b"".join(w[a:b])
        else:
            text = eng.text(a, b)
        if self.continuous:
            body = self.tmpl % (text, self.prompt_tokens + b, b)
        else:
            body = self.tmpl % text
        ns = _now()
        nsb = b"%d" % ns
        tr.write(b"%x\r\n%b%b}\n\n\r\n" % (len(body) + len(nsb) + 3, body, nsb))
        # bookkeeping, inlined (this runs 10k+ times a second)
        late = ns - due
        lat = eng.lat
        if 0 <= late < 10_000_000:
            lat.counts[late // 10_000] += 1
            lat.n += 1
            lat.sum_ns += late
            lat.max_ns = max(lat.max_ns, late)
        else:
            lat.record(late)
        eng.chunks_sent += 1
        eng.generation_tokens_total += k
        pp = eng.spec_per_pos
        if pp:
            eng.spec_drafts += 1
            eng.spec_draft_tokens += len(pp)
            eng.spec_accepted += k - 1
            for j in range(k - 1):
                pp[j] += 1
        self.idx = i = i + 1
        self.emitted = b
        if eng.jitter_ns:
            nd = self._due(i)
        else:
            nd = self.base + i * eng.itl_ns
        sched = eng.sched
        sched.seq += 1
        heapq.heappush(sched.heap, (nd, sched.seq, self.step))
        if not sched.running and (sched.armed == 0 or nd < sched.armed):
            sched._arm(nd)

    def _step_general(self, due: int) -> None:
        conn = self.conn
        if self.ended or conn is None or conn.transport is None:
            return
        eng = self.eng
        i = self.idx
        a = self.emitted
        fault = self.fault
        malformed = False
        if fault and not self.fault_done and i > 0 and a >= self.n_out // 2:  # mid-stream faults fire here
            self.fault_done = True
            if fault == "stall":
                stall = int(eng.cfg.stall_s * 1e9)
                self.base += stall
                self.prev_due = due + stall
                eng.sched.push(due + stall, self.step)
                return
            if fault == "reset-mid-stream":
                self.end("abort")
                conn.reset()
                return
            if fault == "error-event":
                conn.write(_frame(_ERROR_EVENT) + _DONE + _END)
                self.end("abort")
                conn.response_done()
                return
            malformed = fault == "malformed-sse"
        k = self._next_size()
        b = a + k
        last = b == self.n_out
        pre = self.pre
        if last:
            fin = b'"length"' if self.finish == "length" else b'"stop"'
            choice = pre + b'{"index":0,%b,"logprobs":null,"finish_reason":%b,"stop_reason":null}]' % (
                self._delta(a, b), fin)
        elif self.chat:
            choice = pre + b'{"index":0,%b,"logprobs":null,"finish_reason":null}]' % self._delta(a, b)
        else:
            choice = pre + b'{"index":0,%b,"logprobs":null,"finish_reason":null,"stop_reason":null}]' % (
                self._delta(a, b))
        usage = b""
        if self.continuous:
            if fault == "usage-contradictory" and self.fault_done:
                self.reported = max(0, self.reported - 1)  # usage that goes down
            else:
                self.reported = b
            usage = self._usage(self.reported)
        elif last and eng.cfg.final_usage_only:
            usage = self._usage(b)
        firsts: list[bytes] = []
        if i == 0:
            if fault == "oversized-event":
                firsts.append(pre + b'],"fb_pad":"%b"' % (b"x" * eng.cfg.oversized_bytes))
            if self.chat:
                role = pre + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,' \
                             b'"finish_reason":null}]'
                firsts.append(role + self._usage(0) if self.continuous else role)
        ns = _now()
        out = _frame(b"data: {not json\n\n") if malformed else _frame(choice + usage + _TAIL % ns)
        if firsts:
            out = b"".join([_frame(e + _TAIL % ns) for e in firsts]) + out
        if last:
            if self.include_usage:
                c = self.n_out // 2 if fault == "usage-contradictory" else b
                out += _frame(pre + b"]" + self._usage(c) + _TAIL % ns)
            if fault != "no-done":
                out += _DONE
            out += _END
        conn.write(out)
        eng.lat.record(ns - due)
        eng.chunks_sent += 1
        if i == 0:
            eng.prompt_tokens_total += self.prompt_tokens
        eng.account_step(i, k)
        self.idx = i + 1
        self.emitted = b
        if last:
            self.end(self.finish)
            conn.response_done()
        else:
            eng.sched.push(self._due(i + 1), self.step)

    def end(self, reason: str) -> None:
        """The request is over (finished, failed or its connection gone)."""
        if self.ended:
            return
        self.ended = True
        conn = self.conn
        self.conn = None  # breaks the conn <-> gen cycle
        if conn is not None and conn.gen is self:
            conn.gen = None
        self.eng.gen_ended(reason, self.streamed)

    # -- whole (non-streaming) response ------------------------------------------------------------

    def start_whole(self) -> None:
        while self.emitted < self.n_out:
            k = self._next_size()
            self.sizes.append(k)
            self.emitted += k
            self.idx += 1
        self.emitted = 0
        self.idx = 0
        self.eng.sched.push(self._due(len(self.sizes) - 1), self.finish_whole)

    def finish_whole(self, due: int) -> None:
        conn = self.conn
        if self.ended or conn is None or conn.transport is None:
            return
        eng = self.eng
        cfg = eng.cfg
        n = self.n_out
        R = cfg.reasoning_tokens if self.chat else 0
        reasoning = eng.text(0, min(R, n)).decode() if R else None
        content = eng.text(min(R, n), n).decode()
        choice: dict[str, Any]
        if self.chat:
            msg: dict[str, Any] = {"role": "assistant", "content": content}
            if R:
                msg[cfg.reasoning_field] = reasoning
            msg["tool_calls"] = []
            choice = {"index": 0, "message": msg, "logprobs": None, "finish_reason": self.finish,
                      "stop_reason": None}
        else:
            choice = {"index": 0, "text": content, "logprobs": None, "finish_reason": self.finish,
                      "stop_reason": None, "prompt_logprobs": None}
        pre = orjson.loads(self.pre[6:] + b"]}")
        pre["object"] = "chat.completion" if self.chat else "text_completion"
        pre["choices"] = [choice]
        if not cfg.no_usage:
            c = n // 2 if self.fault == "usage-contradictory" else n
            pre["usage"] = {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + c,
                            "completion_tokens": c}
        ns = _now()
        pre["fb_sent_ns"] = ns
        eng.lat.record(ns - due)
        eng.prompt_tokens_total += self.prompt_tokens
        for i, k in enumerate(self.sizes):
            eng.account_step(i, k)
        self.idx = len(self.sizes)
        self.emitted = n
        self.end(self.finish)
        conn.respond(200, orjson.dumps(pre))


class _Conn(asyncio.Protocol):
    """One client connection: parses requests one after another, hands each to the engine."""

    def __init__(self, eng: SyntheticEngine) -> None:
        self.eng = eng
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.in_process = False
        self.close_after = False
        self.eof = False
        self.paused = False
        self.sent_continue = False
        self.gen: _Gen | None = None
        self.trickle = False
        self.tq = bytearray()
        self.trickling = False
        self.finish_pending = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TCPTransport is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.eng.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.eng.conns.discard(self)
        self.transport = None  # breaks the transport <-> protocol cycle (the collector is off)
        g = self.gen
        if g is not None:
            g.end("abort")
        self.gen = None
        self.tq.clear()

    def eof_received(self) -> bool:
        self.eof = True
        return self.busy  # True: keep writing the response in progress, close after it

    def data_received(self, data: bytes) -> None:
        t = _now()
        self.buf += data
        if not self.busy:
            self.process(t)
        elif len(self.buf) > _MAX_HEAD and not self.paused and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True

    # -- output -----------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        tr = self.transport
        if tr is None:
            return
        if self.trickle:
            self.tq += data
            if not self.trickling:
                self.trickling = True
                self.eng.sched.push(_now(), self._trickle_tick)
            return
        tr.write(data)

    def _trickle_tick(self, due: int) -> None:
        tr = self.transport
        if tr is None:
            self.trickling = False
            return
        tr.write(bytes(self.tq[:1]))
        del self.tq[:1]
        if self.tq:
            self.eng.sched.push(due + self.eng.cfg.trickle_us * 1000, self._trickle_tick)
            return
        self.trickling = False
        if self.finish_pending:
            self.finish_pending = False
            self.trickle = False
            self.response_done()

    def respond(self, status: int, body: bytes, ctype: bytes = b"application/json",
                extra: bytes = b"") -> None:
        self.write(b"HTTP/1.1 %b\r\nserver: fastbench-synthetic\r\ncontent-type: %b\r\ncontent-length: %d\r\n"
                   b"%b%b\r\n%b" % (_STATUS[status], ctype, len(body), extra,
                                    b"connection: close\r\n" if self.close_after else b"", body))
        self.response_done()

    def reset(self) -> None:
        """Abort the connection with a TCP RST."""
        tr = self.transport
        if tr is None:
            return
        sock = tr.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        g = self.gen
        if g is not None:
            g.end("abort")
        tr.abort()

    def response_done(self) -> None:
        """The current response is complete: close, or go on with the next buffered request."""
        if self.trickle and (self.trickling or self.tq):
            self.finish_pending = True
            return
        self.trickle = False
        self.busy = False
        self.gen = None
        tr = self.transport
        if tr is None:
            return
        if self.close_after or (self.eof and not self.buf):
            tr.close()
            self.transport = None
            return
        if self.paused:
            self.paused = False
            tr.resume_reading()
        if self.buf and not self.in_process:
            self.process(_now())

    # -- input ------------------------------------------------------------------------------------

    def _fail(self, status: int, message: str) -> None:
        self.close_after = True
        self.busy = True
        self.respond(status, _error_body(status, message))

    def process(self, t: int) -> None:
        self.in_process = True
        try:
            while not self.busy and self.transport is not None and self.buf:
                buf = self.buf
                while buf[:2] == b"\r\n":
                    del buf[:2]
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > _MAX_HEAD:
                        self._fail(431, "request head too large")
                    return
                lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    self._fail(400, "malformed request line")
                    return
                method, target, version = parts
                headers: dict[str, str] = {}
                for ln in lines[1:]:
                    k, sep, v = ln.partition(":")
                    if not sep:
                        self._fail(400, "malformed header line")
                        return
                    headers[k.strip().lower()] = v.strip()
                if "transfer-encoding" in headers:
                    self._fail(501, "chunked request bodies are not supported; send Content-Length")
                    return
                try:
                    cl = int(headers.get("content-length", "0"))
                    if cl < 0:
                        raise ValueError
                except ValueError:
                    self._fail(400, "bad Content-Length")
                    return
                if cl > _MAX_BODY:
                    self._fail(413, "request body too large")
                    return
                total = end + 4 + cl
                if len(buf) < total:
                    if not self.sent_continue and headers.get("expect", "").lower() == "100-continue":
                        self.sent_continue = True
                        if self.transport is not None:
                            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    return
                body = bytes(buf[end + 4:total])
                del buf[:total]
                self.sent_continue = False
                ch = headers.get("connection", "").lower()
                self.close_after = "close" in ch or (version == "HTTP/1.0" and "keep-alive" not in ch)
                self.busy = True
                self.eng.dispatch(self, method, target, body, t)
                t = _now()
        finally:
            self.in_process = False


# --------------------------------------------------------------------------------------------------
# Process entry


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def serve(cfg: ServerConfig) -> int:
    """Run the server until SIGTERM/SIGINT. Prints ``READY http://HOST:PORT`` once listening."""
    import signal

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
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
    server = await loop.create_server(lambda: _Conn(eng), cfg.host, cfg.port, backlog=4096,
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
