"""The server's figures for a live view, from the /metrics reads the window's monitor already keeps: the
latest read's gauges (running and waiting requests, KV-cache use) and, between the window's first read
and the latest, speculative decoding's acceptance length and the prefix cache's hit rate.

Read only when the monitor has a new read (every ``--metrics-interval``), so the parsing costs one
parse per read, not one per look; nothing is asked of the server here.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastbench.server import prefixcache, specdecode
from fastbench.server.prom import Metrics, Scrape

__all__ = ("LiveGauges",)


class LiveGauges:
    """The server's live figures; :meth:`read` parses a read only once."""

    def __init__(self) -> None:
        self._first: Scrape | None = None
        self._latest: Scrape | None = None
        self._first_spec: specdecode.SpecCounters | None = None
        self._first_prefix: prefixcache.PrefixCounters | None = None
        self.figures: dict[str, float] = {}

    def read(self, scrapes: Sequence[Scrape]) -> dict[str, float]:
        """The figures as of the latest of ``scrapes`` (the monitor's list, in time order)."""
        if not scrapes:
            return self.figures
        first, latest = scrapes[0], scrapes[-1]
        first_metrics = None
        if first is not self._first:  # the window restarted after the warm-ups: a new baseline
            self._first = first
            first_metrics = first.metrics()
            self._first_spec = specdecode.SpecCounters.from_metrics(first_metrics)
            self._first_prefix = prefixcache.PrefixCounters.read(first_metrics)[0]
            self._latest = None
        if latest is self._latest:
            return self.figures
        self._latest = latest
        metrics = first_metrics if latest is first and first_metrics is not None else latest.metrics()
        out: dict[str, float] = {}
        for name, names, mean in (("running", specdecode.RUNNING_GAUGES, False),
                                  ("waiting", specdecode.WAITING_GAUGES, False),
                                  ("kv_cache_usage", specdecode.KV_CACHE_GAUGES, True)):
            value = _gauge(metrics, names, mean=mean)
            if value is not None:
                out[name] = value
        spec = specdecode.SpecCounters.from_metrics(metrics)
        if spec is not None and self._first_spec is not None and latest is not first:
            delta = spec.since(self._first_spec)
            length = specdecode.SpecFigures.of(delta).acceptance_length if delta is not None else None
            if length is not None:
                out["acceptance_length"] = length
        prefix = prefixcache.PrefixCounters.read(metrics)[0]
        if prefix is not None and self._first_prefix is not None:
            queries = prefix.queries - self._first_prefix.queries
            hits = prefix.hits - self._first_prefix.hits
            if queries > 0 and 0 <= hits <= queries:
                out["prefix_cache_hit_rate"] = hits / queries
        self.figures = out
        return out


def _gauge(metrics: Metrics, names: Sequence[str], *, mean: bool) -> float | None:
    for name in names:
        if name in metrics:
            return metrics.mean(name) if mean else metrics.total(name)
    return None
