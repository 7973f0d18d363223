"""Prometheus text exposition: a small parser, and a scraper of a server's /metrics over a run.

The scraper follows the project's rule for the hot path: during the measured window it only stores
``(time, body)`` of each /metrics answer (one small GET every couple of seconds on the client's event
loop), compressed by a worker thread; parsing happens after the run. What it keeps is bounded: past
``MAX_KEPT_SCRAPES`` answers it drops every other one and scrapes half as often, so a day-long run
holds no more than a half-hour one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
import time
import zlib
from collections.abc import Iterable, Mapping

import aiohttp

from fastbench.server import control

__all__ = ("MAX_COUNT", "Metrics", "MetricsScraper", "PromSample", "Scrape", "counter_problem", "parse_prometheus")

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
# Above 2**53 a float no longer holds every integer; no real counter of tokens or drafts gets there.
MAX_COUNT = 2.0**53
# vLLM's /metrics is 50-300 kB; a body past this is a broken server, and every body of the window is kept.
MAX_BODY_BYTES = 16 << 20
# Most answers kept of one window (even: see _thin): 17 minutes at the default 2 s before thinning starts.
MAX_KEPT_SCRAPES = 512


@dataclasses.dataclass(frozen=True)
class PromSample:
    """One sample line: ``name{labels} value [timestamp_ms]``."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp_ms: int | None = None


def _parse_labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    """Parse ``{a="x",b="y"}`` starting at the ``{`` at ``pos``; return the labels and the index past ``}``."""
    labels: dict[str, str] = {}
    pos += 1
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        m = _LABEL_NAME.match(line, pos)
        if m is None:
            raise ValueError(f"bad label name at column {pos}")
        name = m.group()
        pos = m.end()
        while pos < n and line[pos] in " \t":
            pos += 1
        if line[pos:pos + 1] != "=":
            raise ValueError(f"expected = after label {name!r}")
        pos += 1
        while pos < n and line[pos] in " \t":
            pos += 1
        if line[pos:pos + 1] != '"':
            raise ValueError(f"expected a quoted value for label {name!r}")
        pos += 1
        chars: list[str] = []
        while True:
            if pos >= n:
                raise ValueError(f"unterminated value of label {name!r}")
            ch = line[pos]
            if ch == "\\":
                nxt = line[pos + 1:pos + 2]
                chars.append(_ESCAPES.get(nxt, "\\" + nxt))
                pos += 2
            elif ch == '"':
                pos += 1
                break
            else:
                chars.append(ch)
                pos += 1
        labels[name] = "".join(chars)
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == ",":
            pos += 1
        elif pos < n and line[pos] == "}":
            return labels, pos + 1
        else:
            raise ValueError(f"expected , or }} after label {name!r}")


def _parse_line(line: str) -> PromSample:
    m = _NAME.match(line)
    if m is None:
        raise ValueError("no metric name")
    name = m.group()
    pos = m.end()
    labels: dict[str, str] = {}
    brace = pos
    while brace < len(line) and line[brace] in " \t":
        brace += 1
    if brace < len(line) and line[brace] == "{":
        labels, pos = _parse_labels(line, brace)
    fields = line[pos:].split()
    if not 1 <= len(fields) <= 2 or (pos < len(line) and line[pos] not in " \t"):
        raise ValueError("expected a value and an optional timestamp after the name")
    value = float(fields[0])  # also "NaN", "+Inf", "-Inf"
    timestamp = int(fields[1]) if len(fields) == 2 else None
    return PromSample(name, labels, value, timestamp)


def parse_prometheus(text: str, *, strict: bool = False) -> list[PromSample]:
    """Parse Prometheus text format (version 0.0.4, and OpenMetrics' subset of it that servers emit).

    Comments (``# HELP``, ``# TYPE``, ``# EOF``) and blank lines are skipped; label values may hold
    escaped ``\\\\``, ``\\"`` and ``\\n``, commas and braces; values may be ``NaN`` or ``±Inf``.
    A malformed line is skipped, or raises ``ValueError`` naming its line number when ``strict``.
    """
    out: list[PromSample] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            out.append(_parse_line(line))
        except (ValueError, IndexError) as exc:
            if strict:
                raise ValueError(f"/metrics line {number}: {exc}: {raw[:120]!r}") from None
    return out


def counter_problem(value: float) -> str | None:
    """Why ``value`` cannot be a counter's reading (``"NaN"``, ``"+Inf"``, ``"-Inf"``, ``"negative"``,
    ``"above 2^53"``), or None when it can."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value < 0:
        return "negative"
    if value > MAX_COUNT:
        return "above 2^53"
    return None


def _is_number(value: float) -> bool:
    """A reading that sums: not NaN or ±Inf, and within ±2^53 (1e308 twice overflows a float sum,
    and no real counter or gauge gets past 2^53)."""
    return math.isfinite(value) and abs(value) <= MAX_COUNT


class Metrics:
    """The samples of one scrape, by metric name.

    ``total``, ``mean`` and ``by_label`` leave out samples that are no number (NaN, ±Inf, past
    2^53); for a counter, where leaving one engine's series out would give a wrong total, ask
    ``counter_problem`` first.
    """

    def __init__(self, samples: Iterable[PromSample]) -> None:
        self.series: dict[str, list[PromSample]] = {}
        for sample in samples:
            self.series.setdefault(sample.name, []).append(sample)

    @classmethod
    def parse(cls, text: str) -> Metrics:
        return cls(parse_prometheus(text))

    def __contains__(self, name: object) -> bool:
        return name in self.series

    def names(self) -> list[str]:
        return sorted(self.series)

    def total(self, name: str) -> float | None:
        """The sum over every series of ``name`` (vLLM has one per engine), values that are no
        number left out (see :func:`_is_number`); None if absent."""
        samples = self.series.get(name)
        if not samples:
            return None
        return math.fsum(s.value for s in samples if _is_number(s.value))

    def mean(self, name: str) -> float | None:
        """The mean over the series of ``name`` (a gauge such as cache usage per engine), values
        that are no number left out; None if absent or none is a number."""
        values = [s.value for s in self.series.get(name, ()) if _is_number(s.value)]
        return math.fsum(values) / len(values) if values else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Sum of the series of ``name`` per value of ``label`` (series without it, and values that
        are no number, are left out)."""
        out: dict[str, float] = {}
        for s in self.series.get(name, ()):
            key = s.labels.get(label)
            if key is not None and _is_number(s.value):
                out[key] = out.get(key, 0.0) + s.value
        return out

    def counter_problem(self, name: str) -> str | None:
        """Why the series of counter ``name`` do not sum to a count (see :func:`counter_problem`; the
        first bad sample's), or None when every sample is a count or there are none."""
        for s in self.series.get(name, ()):
            problem = counter_problem(s.value)
            if problem is not None:
                return problem
        return None


class Scrape:
    """One /metrics answer: when it was read (monotonic seconds) and its body, kept zlib-compressed
    (Prometheus text shrinks ~8x)."""

    __slots__ = ("packed", "t")

    def __init__(self, t: float, body: bytes) -> None:
        self.t = t
        self.packed = zlib.compress(body, 1)

    def __repr__(self) -> str:
        return f"Scrape(t={self.t!r}, {len(self.packed):,} bytes compressed)"

    @property
    def body(self) -> bytes:
        return zlib.decompress(self.packed)

    def metrics(self) -> Metrics:
        return Metrics.parse(self.body.decode("utf-8", errors="replace"))


class BodyTooLargeError(Exception):
    """A /metrics body past MAX_BODY_BYTES."""


async def _read_capped(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    async for part in resp.content.iter_chunked(1 << 16):
        size += len(part)
        if size > limit:
            raise BodyTooLargeError(f"a body over {limit:,} bytes")
        parts.append(part)
    return b"".join(parts)


class MetricsScraper:
    """Reads ``BASE_URL/metrics`` at the window's start and end and every ``interval_s`` in between.

    ``await start()`` takes the first scrape (and finds out whether the server has /metrics at all);
    ``await stop()`` takes the last one. Failures are counted, never raised: a server without /metrics,
    or one that stops answering it, costs the run nothing. ``interval_s`` doubles each time the kept
    answers reach ``MAX_KEPT_SCRAPES`` (see the module's note).
    """

    def __init__(self, base_url: str, *, interval_s: float = 2.0, api_key: str | None = None,
                 timeout_s: float = control.METRICS_TIMEOUT_S, verify_tls: bool = True) -> None:
        self.url = control.url(base_url, "/metrics")
        self.verify_tls = verify_tls
        self.interval_asked_s = interval_s
        self.interval_s = interval_s  # doubled at each thinning
        self.timeout_s = timeout_s
        self.headers = control.auth_headers(api_key)
        self.scrapes: list[Scrape] = []
        self.failures = 0
        self.last_error: str | None = None
        self.last_status: int | None = None  # of the last answer, whatever it was
        self.available = False
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        # One read at a time, so that they are kept in time order, and none that began before
        # restart_window lands in the new window.
        self._lock = asyncio.Lock()

    async def scrape(self) -> Scrape | None:
        """One GET; the answer is kept (and returned) when the status is 200."""
        async with self._lock:
            return await self._scrape()

    async def _scrape(self) -> Scrape | None:
        if self._session is None:
            self._session = control.http_session(self.verify_tls)
        self.last_status = None
        try:
            async with self._session.get(self.url, headers=self.headers,
                                         timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as resp:
                self.last_status = resp.status
                if resp.status != 200:
                    raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status,
                                                      message=f"HTTP {resp.status}")
                body = await _read_capped(resp, MAX_BODY_BYTES)
                t = time.monotonic()
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, BodyTooLargeError) as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        # zlib lets go of the GIL while it works: ~1 ms for a vLLM body, off the event loop's thread
        scrape = await asyncio.to_thread(Scrape, t, body)
        self.scrapes.append(scrape)
        if len(self.scrapes) > MAX_KEPT_SCRAPES:
            self._thin()
        return scrape

    def _thin(self) -> None:
        """Keep every other answer and scrape half as often from now on: the kept ones stay evenly
        spaced, and their count under MAX_KEPT_SCRAPES however long the run. There are
        MAX_KEPT_SCRAPES + 1 (an odd count, as MAX_KEPT_SCRAPES is even), so the window's first and
        the newest both stay."""
        assert len(self.scrapes) % 2 == 1
        del self.scrapes[1::2]
        self.interval_s *= 2

    async def start(self) -> bool:
        """Take the window's first scrape and, when it worked, start the periodic ones; return whether
        the server has /metrics."""
        self.available = await self.scrape() is not None
        if self.available and self.interval_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._periodic())
        return self.available

    async def restart_window(self) -> None:
        """Forget what was scraped so far and scrape now: the window starts here (after warm-ups)."""
        if not self.available:
            return
        async with self._lock:
            self.scrapes.clear()
            self.interval_s = self.interval_asked_s  # thinning during the warm-ups is forgotten too
            await self._scrape()

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.scrape()

    async def stop(self) -> list[Scrape]:
        """Stop the periodic scrapes, take the window's last one, close the session; return them all."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self.available:
            await self.scrape()
        await self.close()
        return list(self.scrapes)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._session is not None:
            await self._session.close()
            self._session = None
