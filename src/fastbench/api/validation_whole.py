"""``fastbench validate --backend openai-embeddings`` (and the other APIs answered whole): prove the client's
E2E latency and input token counts of whole JSON answers against the synthetic server's own log.

The synthetic server logs, for each request tagged ``fb_row``, when it read the request and when it handed
the answer's bytes to its socket (``/fb/answers``, CLOCK_MONOTONIC ns: the client's clock on this host), and
the tokens its usage counted (its stated rule: whitespace words). Per request:

* end skew: the client's end stamp (the kernel's receive stamp of the read that held the answer's last
  byte) minus the server's send stamp. It is the client's own error on E2E's end plus the answer's way
  over loopback; never negative where both clocks are one.
* E2E less the server's time (read to send): the request's way in and the answer's way out, which the
  client's E2E holds and the server's time does not.
* tokens: the client's input tokens (its row's, from the answer's usage) against the server's count, each
  request; and both against the count the client's own body holds (its words).

PASS: every request completed, every count equal, and the p99 end skew within the tolerance.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import numpy as np
import orjson

from fastbench.api.validation import MODEL, _http_json, _on_uvloop
from fastbench.config import BACKEND_ENDPOINTS, POOLING_ENDPOINTS
from fastbench.exceptions import ConfigError
from fastbench.load.drive import drive
from fastbench.load.generators import make_generator
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.pooling import BODIES
from fastbench.results.records import COL, ErrorClass

__all__ = ("WHOLE_BACKENDS", "WholeReport", "avalidate_whole", "validate_whole")

WHOLE_BACKENDS = tuple(dict.fromkeys(b for backends in POOLING_ENDPOINTS.values() for b in backends))
_WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")


@dataclasses.dataclass(frozen=True)
class WholeReport:
    """What ``validate --backend`` for an API answered whole found."""

    settings: dict[str, Any]
    completed: int
    requests: int
    end_skew_ms: dict[str, float | None]  # p50, p99, max, min of client end stamp - server send stamp
    way_ms: dict[str, float | None]  # p50, p99, max of client E2E - server's read-to-send time
    e2el_ms: dict[str, float | None]  # the client's E2E latency, p50 and p99
    tokens_equal: int  # requests whose client count equals the server's usage and the body's own count
    tokens_checked: int
    tolerance_ms: float

    @property
    def passed(self) -> bool:
        p99 = self.end_skew_ms.get("p99")
        return (self.completed == self.requests > 0 and self.tokens_equal == self.tokens_checked == self.requests
                and p99 is not None and p99 <= self.tolerance_ms)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"passed": self.passed}

    def render(self) -> str:
        def q(d: dict[str, float | None]) -> str:
            return "  ".join(f"{k} {v:.3f}" if v is not None else f"{k} n/a" for k, v in d.items())

        s = self.settings
        return "\n".join([
            f"fastbench validate --backend {s['backend']} ({s['endpoint']}): {self.requests} requests, "
            f"{s['batch_size']} input(s) each, concurrency {s['concurrency']}, server answers after "
            f"{s['pooling_ms']:g} ms",
            f"  completed                              {self.completed}/{self.requests}",
            f"  end skew (client end - server send) ms {q(self.end_skew_ms)}",
            f"  E2E - server read-to-send ms           {q(self.way_ms)}",
            f"  client E2E latency ms                  {q(self.e2el_ms)}",
            f"  input tokens equal the server's usage  {self.tokens_equal}/{self.tokens_checked}",
            f"{'PASS' if self.passed else 'FAIL'}: p99 end skew within {self.tolerance_ms:g} ms and every count "
            "equal" if self.passed else f"FAIL: see above (tolerance {self.tolerance_ms:g} ms)",
        ])


def _bodies(backend: str, endpoint: str, n: int, batch: int) -> tuple[list[bytes], list[int]]:
    """Each request's body, tagged with its row, and the tokens the server's rule counts for it."""
    make = BODIES[backend]
    bodies, counts = [], []
    for i in range(n):
        texts = [" ".join(_WORDS[(i + j + k) % len(_WORDS)] for k in range(1 + (i + j) % 7)) for j in range(batch)]
        if backend == "vllm-rerank":
            texts = ["query words here", *texts]
            count = sum(3 + 1 + len(t.split()) for t in texts[1:])
        elif backend == "openai-embeddings-chat":
            count = 4 + len(texts[0].split())
        else:
            count = sum(len(t.split()) for t in texts)
        body = make(MODEL, texts if batch > 1 or backend == "vllm-rerank" else texts[0])
        if endpoint == "/score":
            body = {"model": MODEL, "queries": body["query"], "documents": body["documents"]}
        bodies.append(orjson.dumps(body | {"fb_row": i}))
        counts.append(count)
    return bodies, counts


async def avalidate_whole(backend: str, concurrency: int = 16, num_requests: int | None = None,
                          pooling_ms: float = 5.0, batch_size: int = 1, tolerance_ms: float = 0.5, *,
                          base_url: str | None = None, warmup: bool = True) -> WholeReport:
    """The run: a synthetic server answering after ``pooling_ms``, ``num_requests`` (default 3 x
    ``concurrency``) requests of ``batch_size`` inputs in closed loop."""
    if backend not in WHOLE_BACKENDS:
        raise ConfigError(f"--backend {backend}: validate takes {', '.join(WHOLE_BACKENDS)} for whole answers")
    if backend == "openai-embeddings-chat" and batch_size != 1:
        raise ConfigError("--backend openai-embeddings-chat sends one message a request: leave out --batch-size")
    if not (1 <= concurrency <= 4096 and 1 <= batch_size <= 10_000 and 0 <= pooling_ms <= 60_000):
        raise ConfigError("--concurrency 1-4096, --batch-size 1-10000, --pooling-ms 0-60000")
    n = num_requests if num_requests is not None else 3 * concurrency
    endpoint = BACKEND_ENDPOINTS[backend]
    bodies, counts = _bodies(backend, endpoint, n, batch_size)
    server = None
    try:
        if base_url is None:
            from fastbench.synthetic import SyntheticServer

            server = SyntheticServer(pooling_ms=pooling_ms)
            await asyncio.to_thread(server.start)
            base_url = server.base_url
        root = Target.parse(base_url, endpoint).base_url
        plan = LoadPlan(bodies=bodies, warmup_bodies=bodies[:concurrency] if warmup else [],
                        concurrency=concurrency, max_seconds=60.0 + n * (pooling_ms / 1e3 + 0.05),
                        whole_answers=True)
        await asyncio.to_thread(_http_json, root, "/fb/reset", "POST")
        generator, _ = make_generator(Target.parse(base_url, endpoint), plan)
        data = await drive(generator)
        log = await asyncio.to_thread(_http_json, root, "/fb/answers")
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)
    rows = np.asarray(data.rows)
    done = (rows[:, COL["error"]] == ErrorClass.OK) & (rows[:, COL["end_ns"]] > 0)
    index = rows[:, COL["index"]]
    served = dict(zip(log["rows"], zip(log["read_ns"], log["sent_ns"], log["prompt_tokens"])))
    skew, way, e2e, equal, checked = [], [], [], 0, 0
    for r in np.flatnonzero(done).tolist():
        i = int(index[r])
        if i not in served:
            continue
        read_ns, sent_ns, tokens = served[i]
        end, start = int(rows[r, COL["end_ns"]]), int(rows[r, COL["sent_ns"]])
        skew.append((end - sent_ns) / 1e6)
        way.append(((end - start) - (sent_ns - read_ns)) / 1e6)
        e2e.append((end - start) / 1e6)
        checked += 1
        equal += int(rows[r, COL["prompt_tokens"]]) == tokens == counts[i]
    settings = {"backend": backend, "endpoint": endpoint, "concurrency": concurrency, "num_requests": n,
                "batch_size": batch_size, "pooling_ms": pooling_ms,
                "server": "external: " + base_url if server is None else "started: " + " ".join(server.argv)}
    return WholeReport(settings=settings, completed=int(done.sum()), requests=n,
                       end_skew_ms=_quantiles(skew, ("p50", "p99", "max", "min")),
                       way_ms=_quantiles(way, ("p50", "p99", "max")), e2el_ms=_quantiles(e2e, ("p50", "p99")),
                       tokens_equal=equal, tokens_checked=checked, tolerance_ms=tolerance_ms)


def _quantiles(values: list[float], names: tuple[str, ...]) -> dict[str, float | None]:
    if not values:
        return dict.fromkeys(names)
    a = np.asarray(values)
    at = {"p50": 50.0, "p99": 99.0, "max": 100.0, "min": 0.0}
    return {name: float(np.percentile(a, at[name])) for name in names}


validate_whole = _on_uvloop(avalidate_whole, "validate_whole")
