"""fastbench's own figures in Prometheus' text format while it runs (``--metrics-port``), so that a
Grafana beside the server's dashboard shows the client and the server on one time axis.

``PrometheusExporter`` is a live listener (``arun(on_live=exporter)``): it keeps each run's latest
``LiveSnapshot``, one set of series per run, labelled ``label``, ``variant`` and ``cell`` (a sweep's
cells each keep theirs after they finish), and serves them from prometheus_client's threaded HTTP server:
a scrape is rendered in the server's thread from the kept snapshots, nothing is asked of the event loop,
and a scraper that connects and stalls holds one thread of its own, never the run. With ``--workers``
(and ``--ray``) the parent's snapshot holds the workers' merged running figures, histograms included.
prometheus_client (``pip install 'fastbench-llm[metrics]'``) is imported only when an exporter is made.

The latencies are Prometheus histograms over ``results.live.BOUNDS_S``, counted from the HDR
histograms the live sampler keeps; names follow OpenTelemetry's GenAI conventions where they have one
(``time_to_first_token``, ``time_per_output_token``, ``request_duration``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from fastbench.exceptions import ConfigError
from fastbench.results.live import LiveSnapshot

__all__ = ("PrometheusExporter",)

LABELS = ("label", "variant", "cell")
HISTOGRAMS = {
    "ttft": ("fastbench_time_to_first_token_seconds", "time to first token (from the arrival in open loop)"),
    "tpot": ("fastbench_time_per_output_token_seconds", "time per output token after the first, per request"),
    "itl": ("fastbench_inter_chunk_latency_seconds", "gap between consecutive output chunks of a request"),
    "e2e": ("fastbench_request_duration_seconds", "end-to-end latency of completed requests"),
}
SERVER_GAUGES = {
    "running": ("fastbench_server_requests_running", "the server's running requests (its /metrics, latest read)"),
    "waiting": ("fastbench_server_requests_waiting", "the server's waiting requests (its /metrics, latest read)"),
    "kv_cache_usage": ("fastbench_server_kv_cache_usage_ratio", "the server's KV-cache use, 0-1 (latest read)"),
    "acceptance_length": ("fastbench_server_spec_decode_acceptance_length",
                          "speculative decoding's mean acceptance length over the window so far"),
    "prefix_cache_hit_rate": ("fastbench_server_prefix_cache_hit_ratio",
                              "the prefix cache's hit rate over the window so far"),
}


class PrometheusExporter:
    """Serves the runs' latest snapshots at ``http://host:port/metrics``; ``close()`` stops it."""

    wants_histograms = True  # LiveSampler builds the snapshot's Prometheus buckets for it

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        try:
            from prometheus_client import start_http_server
            from prometheus_client.registry import CollectorRegistry
        except ImportError:
            raise ConfigError("--metrics-port needs prometheus_client: pip install 'fastbench-llm[metrics]'") from None
        self._runs: dict[tuple[str, ...], LiveSnapshot] = {}
        self._lock = threading.Lock()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise ConfigError(f"--metrics-port {port}: cannot listen on {host}:{port} "
                              f"({exc.strerror or exc})") from None
        self.host = host
        self.port = int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def __call__(self, snapshot: LiveSnapshot) -> None:
        key = tuple(snapshot.labels.get(name, "") for name in LABELS)
        with self._lock:
            self._runs[key] = snapshot

    def snapshots(self) -> list[tuple[tuple[str, ...], LiveSnapshot]]:
        with self._lock:
            return list(self._runs.items())

    def linger(self, seconds: float) -> None:
        """Keep serving the kept snapshots, the runs' final ones, for ``seconds`` (a Prometheus scraping
        every 15 s would otherwise never see a run's last figures nor ``fastbench_run_finished`` at 1);
        Ctrl-C ends the wait."""
        if seconds <= 0:
            return
        print(f"fastbench: the final figures stay at {self.url} for {seconds:g} s (--metrics-linger; Ctrl-C "
              "to end now)", file=sys.stderr, flush=True)
        try:
            time.sleep(seconds)
        except KeyboardInterrupt:
            pass

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Collector:
    def __init__(self, exporter: PrometheusExporter) -> None:
        self.exporter = exporter

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        runs = self.exporter.snapshots()
        completed = CounterMetricFamily("fastbench_requests_completed", "requests completed", labels=LABELS)
        failed = CounterMetricFamily("fastbench_requests_failed", "requests failed or cancelled, by class",
                                     labels=(*LABELS, "class"))
        tokens = CounterMetricFamily("fastbench_output_tokens", "output tokens (the server's usage)", labels=LABELS)
        gauges = {
            "in_flight": GaugeMetricFamily("fastbench_requests_in_flight", "requests sent and not ended",
                                           labels=LABELS),
            "total": GaugeMetricFamily("fastbench_requests_planned", "requests the workload holds", labels=LABELS),
            "elapsed": GaugeMetricFamily("fastbench_elapsed_seconds", "seconds since the measured window opened",
                                         labels=LABELS),
            "left": GaugeMetricFamily("fastbench_time_left_seconds", "estimated seconds left", labels=LABELS),
            "rps": GaugeMetricFamily("fastbench_requests_per_second", "requests completed per second, now",
                                     labels=LABELS),
            "tps": GaugeMetricFamily("fastbench_output_tokens_per_second", "output tokens per second, now",
                                     labels=LABELS),
            "finished": GaugeMetricFamily("fastbench_run_finished", "1 once the run has ended", labels=LABELS),
        }
        skew = GaugeMetricFamily("fastbench_client_skew_seconds", "receive stamp minus the synthetic server's "
                                 "send stamp, quantiles over the run", labels=(*LABELS, "quantile"))
        server = {name: GaugeMetricFamily(metric, text, labels=LABELS)
                  for name, (metric, text) in SERVER_GAUGES.items()}
        histograms = {name: HistogramMetricFamily(metric, text, labels=LABELS)
                      for name, (metric, text) in HISTOGRAMS.items()}
        for key, s in runs:
            labels = list(key)
            completed.add_metric(labels, s.completed)
            tokens.add_metric(labels, s.output_tokens)
            for name, n in sorted(s.failed_by_class.items()):
                failed.add_metric([*labels, name], n)
            for name, value in (("in_flight", s.in_flight), ("total", s.total), ("elapsed", s.elapsed_s),
                                ("left", s.time_left_s), ("rps", s.requests_per_s_now),
                                ("tps", s.tokens_per_s_now), ("finished", 1.0 if s.final else 0.0)):
                if value is not None:
                    gauges[name].add_metric(labels, value)
            if s.skew is not None:
                for q, value in (("0.5", s.skew.p50_ms), ("0.99", s.skew.p99_ms)):
                    if value is not None:
                        skew.add_metric([*labels, q], value / 1e3)
            for name, value in s.server.items():
                if name in server:
                    server[name].add_metric(labels, value)
            for name, b in s.histograms.items():
                if name in histograms:
                    buckets = [(f"{bound:g}", count) for bound, count in zip(b.bounds_s, b.cumulative)]
                    histograms[name].add_metric(labels, [*buckets, ("+Inf", b.count)], b.sum_s)
        yield completed
        yield failed
        yield tokens
        yield from gauges.values()
        yield skew
        yield from server.values()
        yield from histograms.values()
