"""A deliberately NAIVE streaming client, the yardstick fastbench is compared with in bench/.

It does what typical benchmark tools do (vllm bench serve's request function is the model):
aiohttp on the default asyncio loop, ``async for line in response.content``, ``json.loads`` per
chunk, and the chunk's timestamp taken with ``time.monotonic_ns()`` *after* the chunk was parsed.
The garbage collector is left on, per-chunk Python objects are kept, as those tools do.

Because it parses every chunk anyway, it keeps the synthetic server's send stamp (``fb_sent_ns``)
beside each receive stamp, so its timing errors are exact, not bounded: skew per chunk, and the
chunk-gap error per gap (its gap minus the server's gap).

Run it against a running synthetic server (bench/bench_client.py does this in a subprocess so that
its CPU time and peak RSS are its own)::

    python bench/reference_client.py --base-url http://127.0.0.1:8000 --concurrency 64 \\
        --num-requests 192 --output-len 64 --json out.json

The JSON it writes has the same keys as ``fastbench validate --json`` where the figures agree in
meaning (see bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from typing import Any

import aiohttp
import numpy as np

_now = time.monotonic_ns


class RequestLog:
    """What one request saw: its send time, end time, and per chunk (receive ns, server send ns, tokens)."""

    __slots__ = ("end_ns", "ok", "recv", "sent_ns", "server_sent", "tokens")

    def __init__(self) -> None:
        self.sent_ns = 0
        self.end_ns = 0
        self.recv: list[int] = []
        self.server_sent: list[int] = []
        self.tokens: list[int] = []
        self.ok = False



def _peak_rss_kib() -> int:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries ru_maxrss across execve, so a
    child of a bigger process would report its parent's peak. (The same as fastbench.validate's, on
    purpose not imported: importing fastbench would add its modules to the yardstick's own RSS.)"""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

def payload(model: str, output_len: int) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": "hello world",
        "max_tokens": output_len,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


async def one_request(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> RequestLog:
    """The naive way: read lines, parse JSON, then take the time."""
    log = RequestLog()
    log.sent_ns = _now()
    prev_tokens = 0
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                await response.read()
                log.end_ns = _now()
                return log
            async for line in response.content:
                line = line.strip()
                if not line:
                    continue
                text = line.decode("utf-8").removeprefix("data: ")
                if text == "[DONE]":
                    continue
                data = json.loads(text)
                ts = _now()
                choices = data.get("choices")
                if choices and choices[0].get("text"):
                    usage = data.get("usage") or {}
                    tokens = int(usage.get("completion_tokens", prev_tokens + 1))
                    log.recv.append(ts)
                    log.server_sent.append(int(data.get("fb_sent_ns", 0)))
                    log.tokens.append(tokens - prev_tokens)
                    prev_tokens = tokens
        log.ok = True
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        log.ok = False
    log.end_ns = _now()
    return log


async def run(base_url: str, concurrency: int, num_requests: int, output_len: int,
              model: str = "fastbench-synthetic", warmup: bool = True) -> dict[str, Any]:
    """Closed loop: `concurrency` workers, each sending its next request as soon as one ends."""
    url = base_url.rstrip("/") + "/v1/completions"
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if warmup:  # open one connection per stream first, as fastbench's warm-up does
            await asyncio.gather(*(one_request(session, url, payload(model, 2)) for _ in range(concurrency)))
        logs: list[RequestLog] = []
        next_i = 0

        async def worker() -> None:
            nonlocal next_i
            while next_i < num_requests:
                next_i += 1
                logs.append(await one_request(session, url, payload(model, output_len)))

        start_ns = _now()
        cpu0 = time.process_time_ns()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, num_requests))))
        cpu_ns = time.process_time_ns() - cpu0
        end_ns = _now()
    return summarize(logs, start_ns, end_ns, cpu_ns, concurrency)


def _q(values: np.ndarray, scale: float = 1e6) -> dict[str, float] | None:
    if values.size == 0:
        return None
    p50, p99, p999 = np.percentile(values, [50, 99, 99.9])
    return {"count": int(values.size), "min": float(values.min()) / scale, "p50": float(p50) / scale,
            "p99": float(p99) / scale, "p999": float(p999) / scale, "max": float(values.max()) / scale}


def summarize(logs: list[RequestLog], start_ns: int, end_ns: int, cpu_ns: int, concurrency: int) -> dict[str, Any]:
    ok = [g for g in logs if g.ok and g.recv]
    recv = np.concatenate([np.asarray(g.recv, dtype=np.int64) for g in ok]) if ok else np.zeros(0, np.int64)
    sent = np.concatenate([np.asarray(g.server_sent, dtype=np.int64) for g in ok]) if ok else np.zeros(0, np.int64)
    stamped = sent > 0
    skew = recv[stamped] - sent[stamped]
    gaps, gap_errors, token_gaps = [], [], []
    for g in ok:
        r = np.asarray(g.recv, dtype=np.int64)
        s = np.asarray(g.server_sent, dtype=np.int64)
        k = np.maximum(np.asarray(g.tokens[1:], dtype=np.int64), 1)
        gaps.append(np.diff(r))
        gap_errors.append(np.diff(r) - np.diff(s))
        token_gaps.append(np.repeat(np.diff(r) // k, k))
    chunk_gaps = np.concatenate(gaps) if gaps else np.zeros(0, np.int64)
    server_gaps = chunk_gaps - np.concatenate(gap_errors) if gaps else np.zeros(0, np.int64)
    ttft = np.array([g.recv[0] - g.sent_ns for g in ok], dtype=np.int64)
    tpot = np.array([(g.recv[-1] - g.recv[0]) / (sum(g.tokens) - 1) for g in ok if sum(g.tokens) > 1])
    chunks = int(recv.size)
    sent_times = np.array([g.sent_ns for g in logs], dtype=np.int64)
    last_sent = int(sent_times.max()) if sent_times.size else start_ns
    opened = min(concurrency, int(sent_times.size))
    all_open = int(np.sort(sent_times)[opened - 1]) if opened else start_ns
    tokens = sum(sum(g.tokens) for g in ok)
    return {
        "client": "reference (aiohttp + json.loads, stamp after parse)",
        "timestamp_source": "user-space clock after json.loads",
        "requests": {"completed": len(ok), "failed": len(logs) - len(ok)},
        "chunks": chunks,
        "tokens": tokens,
        "tokens_per_chunk_mean": tokens / chunks if chunks else None,
        "skew_ms": _q(skew),
        "ttft_ms": _q(ttft),
        "tpot_ms": _q(tpot),
        "itl_chunk_ms": _q(chunk_gaps),
        "itl_chunk_server_ms": _q(server_gaps),
        "itl_token_ms": _q(np.concatenate(token_gaps) if token_gaps else np.zeros(0, np.int64)),
        "itl_gap_error_ms": _q(np.abs(np.concatenate(gap_errors))) if gap_errors else None,
        "window": {"start_ns": start_ns, "all_open_ns": all_open, "last_sent_ns": last_sent, "end_ns": end_ns,
                   "seconds": (end_ns - start_ns) / 1e9},
        "chunks_per_s": chunks / ((end_ns - start_ns) / 1e9) if end_ns > start_ns else 0.0,
        # As fastbench validate: from the moment all asked streams were open to the last send, and
        # from the start of the window (the opening ramp counted in).
        "streams": {"asked": concurrency,
                    "mean_in_flight_client": _mean_in_flight(logs, all_open, last_sent),
                    "mean_in_flight_client_from_start": _mean_in_flight(logs, start_ns, last_sent),
                    "opening_ramp_ms": (all_open - start_ns) / 1e6},
        "client_cpu": {
            "total_ms": cpu_ns / 1e6,
            "us_per_chunk": cpu_ns / chunks / 1e3 if chunks else None,
            "ms_per_request": cpu_ns / len(ok) / 1e6 if ok else None,
            "share_of_a_core": cpu_ns / (end_ns - start_ns) if end_ns > start_ns else None,
        },
        "client_maxrss_kb": _peak_rss_kib(),
    }


def _mean_in_flight(logs: list[RequestLog], lo: int, hi: int) -> float:
    if hi <= lo:
        return 0.0
    busy = 0
    for g in logs:
        a, b = max(g.sent_ns, lo), min(g.end_ns, hi)
        if b > a:
            busy += b - a
    return busy / (hi - lo)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--num-requests", type=int, default=None, help="default: 3 x concurrency")
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--model", default="fastbench-synthetic")
    p.add_argument("--no-warmup", action="store_true")
    p.add_argument("--json", metavar="PATH", help="write the figures here ('-' for stdout)")
    ns = p.parse_args(argv)
    n = ns.num_requests or 3 * ns.concurrency
    out = asyncio.run(run(ns.base_url, ns.concurrency, n, ns.output_len, ns.model, not ns.no_warmup))
    text = json.dumps(out, indent=1)
    if ns.json == "-" or not ns.json:
        print(text)
    else:
        with open(ns.json, "w") as f:
            f.write(text + "\n")
    return 0 if out["requests"]["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
