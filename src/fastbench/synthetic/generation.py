"""One generation request of the synthetic server: its schedule, and the chunks (or whole response) it writes.

Part of the synthetic server (see ``fastbench.synthetic``); imports nothing from the fastbench client.

``Generation`` holds a request's absolute schedule (chunk i due at arrival + TTFT + i * ITL, plus
jitter) and its preformatted chunk templates. The scheduler calls ``step`` at each due time: a fast path
formats a middle chunk from the template; ``_step_general`` writes the first and last chunks and carries
out the mid-stream fault modes (stall, reset, error event, malformed or oversized events, no [DONE],
contradictory usage). A non-streaming request is answered whole when its last chunk would have been.
A request of a typed-event API (Responses, Messages) has its events written by its encoder (``apis``):
``_step_api`` is its ``_step_general``, with the same schedule and the same faults.
"""

from __future__ import annotations

import heapq
import time
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from fastbench.synthetic.apis import Encoder
    from fastbench.synthetic.contracts import GenerationHost, Responder

_now = time.monotonic_ns


def _frame(ev: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%b\r\n" % (len(ev), ev)


_DONE = _frame(b"data: [DONE]\n\n")
_END = b"0\r\n\r\n"
_USAGE = b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}'
_TAIL = b',"fb_sent_ns":%d}\n\n'
_ERROR_EVENT = (b'data: {"error":{"message":"synthetic fault: error mid-stream","type":"InternalServerError",'
                b'"param":null,"code":500}}\n\n')


class Generation:
    """One generation request. Chunk i is due at base + i * itl (+ jitter), base = arrival + TTFT."""

    __slots__ = (
        "R",
        "api",
        "base",
        "cached_tokens",
        "chat",
        "conn",
        "continuous",
        "emitted",
        "ended",
        "engine_k",
        "eng",
        "fast",
        "fault",
        "fault_done",
        "finish",
        "idx",
        "include_usage",
        "itl_ns",
        "n_out",
        "pre",
        "prev_due",
        "prompt_tokens",
        "reported",
        "sizes",
        "streamed",
        "tmpl",
        "tool_call",
    )

    def __init__(self, eng: GenerationHost, conn: Responder, chat: bool, model: str, prompt_tokens: int,
                 n_out: int, finish: str, arrival: int, base: int, include_usage: bool, continuous: bool,
                 fault: str | None, cached_tokens: int = 0, api: type[Encoder] | None = None,
                 tool_call: bool = False) -> None:
        cfg = eng.cfg
        self.eng = eng
        self.cached_tokens = cached_tokens  # prompt tokens the prefix cache served
        self.conn: Responder | None = conn
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        self.n_out = n_out
        self.finish = finish
        self.base = base
        self.itl_ns = eng.itl_ns  # the server's gap, unless the request asks for its own ("fb_itl_ms")
        self.prev_due = arrival  # jitter may move chunk 0 before base, never before the request
        usage_ok = not cfg.no_usage and not cfg.final_usage_only
        self.include_usage = include_usage and usage_ok
        self.continuous = continuous and usage_ok
        self.fault = fault
        self.idx = 0
        self.emitted = 0
        self.engine_k = 0  # tokens of the next chunk, set by the engine model (stepmodel) when it runs
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
        # the output is one tool call's arguments (tool_choice forced it): the call's id, else None
        self.tool_call = b"call_" + rid[8:] if tool_call else None
        self.R = cfg.reasoning_tokens if chat and not tool_call else 0
        self.fast = fault is None
        esc = self.pre.replace(b"%", b"%%")
        if tool_call:
            t = esc + b'{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"%b"}}]},' \
                      b'"logprobs":null,"finish_reason":null}]'
        elif chat:
            t = esc + b'{"index":0,"delta":{"content":"%b"},"logprobs":null,"finish_reason":null}]'
        else:
            t = esc + b'{"index":0,"text":"%b","logprobs":null,"finish_reason":null,"stop_reason":null}]'
        if self.continuous:
            t += b',"usage":{"prompt_tokens":%d,"total_tokens":%%d,"completion_tokens":%%d}' % prompt_tokens
        self.tmpl = t + b',"fb_sent_ns":'
        self.api: Encoder | None = None
        if api is not None:  # its encoder writes the events; no chunk carries usage
            self.api = api(rid, model, prompt_tokens, cached_tokens, cfg.reasoning_tokens)
            self.R = cfg.reasoning_tokens
            self.include_usage = self.continuous = False
            self.fast = False  # the template, once its first text chunk is out (_step_api)

    # -- plan -------------------------------------------------------------------------------------

    def _next_size(self) -> int:
        cfg = self.eng.cfg
        if self.engine_k:
            k = self.engine_k
        elif self.idx == 0:
            k = 1
        elif cfg.tpc_min == cfg.tpc_max:
            k = cfg.tpc_max
        else:
            k = cfg.tpc_min + int(self.eng.rng.random() * (cfg.tpc_max - cfg.tpc_min + 1))
        return min(k, self.n_out - self.emitted)

    def _due(self, i: int) -> int:
        eng = self.eng
        due = self.base + i * self.itl_ns
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
        if self.eng.stepper is None:
            self.eng.sched.push(self._due(0), self.step)

    def _delta(self, a: int, b: int) -> bytes:
        eng = self.eng
        R = eng.cfg.reasoning_tokens
        if not self.chat:
            return b'"text":"%b"' % eng.text(a, b)
        if self.tool_call:  # the first delta names the call, as vLLM's do
            named = b'"id":"%b","type":"function","function":{"name":"tool",' % self.tool_call if a == 0 else \
                b'"function":{'
            return b'"delta":{"tool_calls":[{"index":0,%b"arguments":"%b"}}]}' % (named, eng.text(a, b))
        if a >= R:
            return b'"delta":{"content":"%b"}' % eng.text(a, b)
        f = eng.cfg.reasoning_field.encode()
        if b <= R:
            return b'"delta":{"%b":"%b"}' % (f, eng.text(a, b))
        return b'"delta":{"%b":"%b","content":"%b"}' % (f, eng.text(a, R), eng.text(R, b))

    def _usage(self, completion: int) -> bytes:
        p = self.prompt_tokens
        return _USAGE % (p, p + completion, completion)

    def _final_usage(self, completion: int) -> bytes:
        """The end-of-stream usage; with --enable-prompt-tokens-details it carries the prefix cache's
        tokens, and, as vLLM's, leaves them out when it served none."""
        usage = self._usage(completion)
        if self.cached_tokens and self.eng.cfg.prompt_tokens_details:
            usage = usage[:-1] + b',"prompt_tokens_details":{"cached_tokens":%d}}' % self.cached_tokens
        return usage

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
        k = self.engine_k  # the engine model's, else this server's tokens per chunk
        if not k:
            k = cfg.tpc_max if cfg.tpc_min == cfg.tpc_max else \
                cfg.tpc_min + int(eng.rng.random() * (cfg.tpc_max - cfg.tpc_min + 1))
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
        if eng.stepper is not None:  # the engine model calls again at the next step's end
            return
        if eng.jitter_ns:
            nd = self._due(i)
        else:
            nd = self.base + i * self.itl_ns
        sched = eng.sched
        sched.seq += 1
        heapq.heappush(sched.heap, (nd, sched.seq, self.step))
        if not sched.running and (sched.armed == 0 or nd < sched.armed):
            sched._arm(nd)

    def _step_general(self, due: int) -> None:
        conn = self.conn
        if self.ended or conn is None or conn.transport is None:
            return
        if self.api is not None:
            self._step_api(due, conn, self.api)
            return
        eng = self.eng
        i = self.idx
        a = self.emitted
        fault = self.fault
        malformed = False
        if fault and not self.fault_done and i > 0 and a >= self.n_out // 2:  # mid-stream faults fire here
            if self._mid_fault(due, conn, _frame(_ERROR_EVENT) + _DONE):
                return
            malformed = fault == "malformed-sse"
        k = self._next_size()
        b = a + k
        last = b == self.n_out
        pre = self.pre
        if last:
            fin = b'"length"' if self.finish == "length" else b'"tool_calls"' if self.tool_call else b'"stop"'
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
                out += _frame(pre + b"]" + self._final_usage(c) + _TAIL % ns)
            if fault != "no-done":
                out += _DONE
            out += _END
        conn.write(out)
        self._counted(eng, ns - due, i, k, b)
        if last:
            self.end(self.finish)
            conn.response_done()
        elif eng.stepper is None:
            eng.sched.push(self._due(i + 1), self.step)

    def _counted(self, eng: GenerationHost, late_ns: int, i: int, k: int, b: int) -> None:
        """What a chunk written on the general and the typed-API paths counts (step() inlines the same): its
        lateness, the engine's step, and that the stream is now at chunk ``i + 1``, token ``b``."""
        eng.lat.record(late_ns)
        eng.chunks_sent += 1
        if i == 0:
            eng.prompt_tokens_total += self.prompt_tokens
        eng.account_step(i, k)
        self.idx = i + 1
        self.emitted = b

    def _mid_fault(self, due: int, conn: Responder, error_event: bytes) -> bool:
        """The mid-stream fault, once, half-way through: True when it took the step over."""
        eng = self.eng
        fault = self.fault
        self.fault_done = True
        if fault == "stall":
            stall = int(eng.cfg.stall_s * 1e9)
            self.base += stall
            self.prev_due = due + stall
            eng.sched.push(due + stall, self.step)
            return True
        if fault == "reset-mid-stream":
            self.end("abort")
            conn.reset()
            return True
        if fault == "error-event":
            conn.write(error_event + _END)
            self.end("abort")
            conn.response_done()
            return True
        return False

    def _step_api(self, due: int, conn: Responder, api: Encoder) -> None:
        """_step_general for a typed-event API: the first chunk opens the stream, the last closes it."""
        eng = self.eng
        i = self.idx
        a = self.emitted
        fault = self.fault
        malformed = False
        if fault and not self.fault_done and i > 0 and a >= self.n_out // 2:  # mid-stream faults fire here
            if self._mid_fault(due, conn, _frame(api.error() + _TAIL % _now())):
                return
            malformed = fault == "malformed-sse"
        k = self._next_size()
        b = a + k
        last = b == self.n_out
        events: list[bytes] = []
        if i == 0:
            if fault == "oversized-event":
                events.append(b'data: {"type":"fb_pad","fb_pad":"%b"' % (b"x" * eng.cfg.oversized_bytes))
            events += api.opening()
        deltas = api.deltas(a, b, eng.text)
        if last:
            deltas += api.closing(self.n_out // 2 if fault == "usage-contradictory" else b, self.finish, eng.text,
                                  self.n_out, fault != "no-done")
        ns = _now()
        out = b"".join([_frame(e + _TAIL % ns) for e in events])
        if malformed:
            out += _frame(b"data: {not json\n\n")
        else:
            out += b"".join([_frame(e + _TAIL % ns) for e in deltas])
        if last:
            out += _END
        conn.write(out)
        self._counted(eng, ns - due, i, k, b)
        if api.in_text and not self.fast and fault is None and b >= self.R:
            self.tmpl = api.template()  # the text block is open: the next chunks go from the template
            self.fast = True
        if last:
            self.end(self.finish)
            conn.response_done()
        elif eng.stepper is None:
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
        if self.eng.stepper is not None:  # the engine model steps it (stepmodel)
            return
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
        n = self.n_out
        R = self.R  # the reasoning tokens: none on completions, nor in a tool call
        reasoning = eng.text(0, min(R, n)).decode() if R else None
        content = eng.text(min(R, n), n).decode()
        c = n // 2 if self.fault == "usage-contradictory" else n
        doc = self.api.whole(reasoning, content, c, self.finish) if self.api is not None else \
            self._whole_chunk(content, reasoning, c)
        ns = _now()
        doc["fb_sent_ns"] = ns
        eng.lat.record(ns - due)
        eng.prompt_tokens_total += self.prompt_tokens
        for i, k in enumerate(self.sizes):
            eng.account_step(i, k)
        self.idx = len(self.sizes)
        self.emitted = n
        self.end(self.finish)
        conn.respond(200, orjson.dumps(doc))

    def _whole_chunk(self, content: str, reasoning: str | None, completion: int) -> dict[str, Any]:
        """The OpenAI APIs' whole response."""
        cfg = self.eng.cfg
        choice: dict[str, Any]
        if self.chat:
            msg: dict[str, Any] = {"role": "assistant", "content": content}
            if reasoning is not None:
                msg[cfg.reasoning_field] = reasoning
            msg["tool_calls"] = []
            finish = self.finish
            if self.tool_call:
                msg["content"] = None
                msg["tool_calls"] = [{"id": self.tool_call.decode(), "type": "function",
                                      "function": {"name": "tool", "arguments": content}}]
                finish = "tool_calls" if finish == "stop" else finish
            choice = {"index": 0, "message": msg, "logprobs": None, "finish_reason": finish, "stop_reason": None}
        else:
            choice = {"index": 0, "text": content, "logprobs": None, "finish_reason": self.finish,
                      "stop_reason": None, "prompt_logprobs": None}
        pre: dict[str, Any] = orjson.loads(self.pre[6:] + b"]}")
        pre["object"] = "chat.completion" if self.chat else "text_completion"
        pre["choices"] = [choice]
        if not cfg.no_usage:
            pre["usage"] = {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + completion,
                            "completion_tokens": completion}
            if self.cached_tokens and cfg.prompt_tokens_details:
                pre["usage"]["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return pre
