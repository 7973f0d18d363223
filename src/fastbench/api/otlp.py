"""fastbench's own figures pushed to an OpenTelemetry collector over OTLP/HTTP while it runs
(``--otlp-endpoint``): the same figures as the ``--metrics-port`` exporter, for a pipeline that takes
OTLP rather than scrapes.

``OtlpExporter`` is a live listener (``arun(on_live=exporter)``): it keeps each run's latest
``LiveSnapshot`` (one set of series per run, with ``fastbench.label``, ``fastbench.variant`` and
``fastbench.cell`` attributes where given) and a thread of its own posts them every ``interval_s``, and
once more when it is closed, as one ``ExportMetricsServiceRequest`` in protobuf: nothing is asked of the
event loop, and a collector that is slow or gone costs that thread a timeout, never the run. The
messages are built with the OTLP protobuf classes alone (``pip install 'fastbench-llm[otlp]'``:
opentelemetry-proto and protobuf, ~40 ms to import, only when an exporter is made), not the
OpenTelemetry SDK: the figures are aggregated already (HDR histograms), and the SDK's instruments
would aggregate them again, value by value.

Counters are cumulative monotonic sums, the latencies cumulative explicit-bucket histograms over
``results.live.BOUNDS_S``. Names are the GenAI semantic conventions' client metrics where there is one
(``gen_ai.client.operation.duration``, ``.time_to_first_chunk``, ``.time_per_output_chunk``; failures
carry ``error.type``), else ``fastbench.*``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from fastbench._version import __version__
from fastbench.exceptions import ConfigError
from fastbench.results.live import LiveSnapshot

__all__ = ("OtlpExporter",)

_log = logging.getLogger(__name__)

HISTOGRAMS = {
    "ttft": ("gen_ai.client.operation.time_to_first_chunk",
             "time to the first output chunk (from the arrival in open loop, as the result's TTFT)"),
    "itl": ("gen_ai.client.operation.time_per_output_chunk", "gap between consecutive output chunks of a request"),
    "e2e": ("gen_ai.client.operation.duration", "end-to-end latency of completed requests"),
    "tpot": ("fastbench.client.time_per_output_token", "time per output token after the first, per request"),
}
GAUGES = {  # snapshot field -> (name, unit, description)
    "in_flight": ("fastbench.requests.in_flight", "{request}", "requests sent and not ended"),
    "total": ("fastbench.requests.planned", "{request}", "requests the workload holds"),
    "requests_per_s_now": ("fastbench.requests.rate", "{request}/s", "requests completed per second, now"),
    "tokens_per_s_now": ("fastbench.output_tokens.rate", "{token}/s", "output tokens per second, now"),
    "elapsed_s": ("fastbench.elapsed", "s", "since the measured window opened"),
    "time_left_s": ("fastbench.time_left", "s", "estimated time left"),
}
SERVER_GAUGES = {
    "running": ("fastbench.server.requests.running", "{request}", "the server's running requests (latest read)"),
    "waiting": ("fastbench.server.requests.waiting", "{request}", "the server's waiting requests (latest read)"),
    "kv_cache_usage": ("fastbench.server.kv_cache.usage", "1", "the server's KV-cache use, 0-1 (latest read)"),
    "acceptance_length": ("fastbench.server.spec_decode.acceptance_length", "{token}",
                          "speculative decoding's mean acceptance length over the window so far"),
    "prefix_cache_hit_rate": ("fastbench.server.prefix_cache.hit_ratio", "1",
                              "the prefix cache's hit rate over the window so far"),
}
INTERVAL_S = 5.0  # a push every few seconds: a run's curves, not its every look
TIMEOUT_S = 5.0


class OtlpExporter:
    """Pushes the runs' latest snapshots to ``endpoint`` (OTLP/HTTP, e.g. ``http://127.0.0.1:4318``;
    ``/v1/metrics`` is added unless given) every ``interval_s``; ``close()`` pushes the last ones and
    stops. ``headers``: sent with each push (by default from ``OTEL_EXPORTER_OTLP_HEADERS``,
    ``key=value,key=value``)."""

    wants_histograms = True  # LiveSampler builds the snapshot's buckets for it

    def __init__(self, endpoint: str, interval_s: float = INTERVAL_S, headers: dict[str, str] | None = None) -> None:
        try:
            from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
        except ImportError:
            raise ConfigError("--otlp-endpoint needs opentelemetry-proto: pip install 'fastbench-llm[otlp]'") from None
        if not endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"--otlp-endpoint {endpoint!r}: give an http:// or https:// URL "
                              "(OTLP/HTTP, e.g. http://127.0.0.1:4318)")
        if not interval_s > 0:
            raise ConfigError(f"the OTLP push interval must be > 0 s, got {interval_s:g}")
        self.url = endpoint if endpoint.rstrip("/").endswith("/v1/metrics") else endpoint.rstrip("/") + "/v1/metrics"
        self.interval_s = interval_s
        self.headers = {"Content-Type": "application/x-protobuf",
                        **(headers if headers is not None else _env_headers())}
        self._request_type = metrics_service_pb2.ExportMetricsServiceRequest
        self._runs: dict[tuple[str, ...], tuple[LiveSnapshot, int, int]] = {}  # (snapshot, start, at) ns
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.pushes = 0
        self.failures = 0
        self._failing = False
        self._thread = threading.Thread(target=self._loop, name="fastbench-otlp", daemon=True)
        self._thread.start()

    def __call__(self, snapshot: LiveSnapshot) -> None:
        key = tuple(snapshot.labels.get(name, "") for name in ("label", "variant", "cell"))
        now = time.time_ns()
        with self._lock:
            kept = self._runs.get(key)
            start = kept[1] if kept is not None else now - int(snapshot.elapsed_s * 1e9)
            self._runs[key] = (snapshot, start, now)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=TIMEOUT_S + 1)
        self.push()  # the last snapshots (a run's final one), pushed before fastbench exits

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.push()

    def push(self) -> bool:
        """One export of the kept snapshots (none kept: nothing sent); False when it failed (logged once
        until a push succeeds again)."""
        with self._lock:
            runs = list(self._runs.items())
        if not runs:
            return True
        body = self.request(runs).SerializeToString()
        try:
            req = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                resp.read()
        except (OSError, urllib.error.URLError, ValueError) as exc:
            self.failures += 1
            if not self._failing:
                _log.warning("OTLP export to %s failed (%s); the run goes on, retrying every %g s",
                             self.url, exc, self.interval_s)
            self._failing = True
            return False
        self._failing = False
        self.pushes += 1
        return True

    def request(self, runs: list[tuple[tuple[str, ...], tuple[LiveSnapshot, int, int]]]) -> Any:
        """The ExportMetricsServiceRequest for these runs' snapshots."""
        from opentelemetry.proto.metrics.v1 import metrics_pb2 as m

        message = self._request_type()
        resource = message.resource_metrics.add()
        _attributes(resource.resource.attributes, {"service.name": "fastbench", "service.version": __version__})
        scope = resource.scope_metrics.add()
        scope.scope.name, scope.scope.version = "fastbench", __version__
        metrics: dict[str, Any] = {}
        cumulative = m.AGGREGATION_TEMPORALITY_CUMULATIVE

        def metric(name: str, unit: str, description: str) -> Any:
            if name not in metrics:
                metrics[name] = scope.metrics.add(name=name, unit=unit, description=description)
            return metrics[name]

        for _, (s, start_ns, at_ns) in runs:
            attributes = {f"fastbench.{k}": v for k, v in s.labels.items() if v}
            counts: list[tuple[str, str, str, int, dict[str, str]]] = [
                ("fastbench.requests.completed", "{request}", "requests completed", s.completed, {}),
                ("fastbench.output_tokens", "{token}", "output tokens (the server's usage)", s.output_tokens, {})]
            counts += [("fastbench.requests.failed", "{request}", "requests failed or cancelled, by error class", n,
                        {"error.type": name}) for name, n in sorted(s.failed_by_class.items())]
            for name, unit, text, count, extra in counts:
                target = metric(name, unit, text).sum
                target.aggregation_temporality, target.is_monotonic = cumulative, True
                _point(target.data_points.add(), {**attributes, **extra}, start_ns, at_ns, as_int=count)
            gauges: list[tuple[str, str, str, float, dict[str, str]]] = [
                (*GAUGES[field], float(getattr(s, field)), {}) for field in GAUGES if getattr(s, field) is not None]
            gauges.append(("fastbench.run.finished", "1", "1 once the run has ended", 1.0 if s.final else 0.0, {}))
            gauges += [(*SERVER_GAUGES[name], value, {}) for name, value in s.server.items() if name in SERVER_GAUGES]
            if s.skew is not None:
                gauges += [("fastbench.client.skew", "s", "receive stamp minus the synthetic server's send stamp, "
                            "quantiles over the run", ms / 1e3, {"quantile": q})
                           for q, ms in (("0.5", s.skew.p50_ms), ("0.99", s.skew.p99_ms)) if ms is not None]
            for name, unit, text, value, extra in gauges:
                point = metric(name, unit, text).gauge.data_points.add()
                _point(point, {**attributes, **extra}, start_ns, at_ns, as_double=value)
            for key, b in s.histograms.items():
                if key not in HISTOGRAMS:
                    continue
                name, text = HISTOGRAMS[key]
                target = metric(name, "s", text).histogram
                target.aggregation_temporality = cumulative
                point = target.data_points.add()
                _point(point, attributes, start_ns, at_ns)
                point.count, point.sum = b.count, b.sum_s
                point.explicit_bounds.extend(b.bounds_s)
                # OTLP counts each bucket apart (and one above the last bound); the snapshot's are cumulative
                below = [*b.cumulative, b.count]
                point.bucket_counts.extend(n - (below[i - 1] if i else 0) for i, n in enumerate(below))
        return message


def _attributes(target: Any, values: dict[str, str]) -> None:
    for key, value in values.items():
        target.add(key=key).value.string_value = value


def _point(point: Any, attributes: dict[str, str], start_ns: int, at_ns: int, *, as_int: int | None = None,
           as_double: float | None = None) -> None:
    _attributes(point.attributes, attributes)
    point.start_time_unix_nano, point.time_unix_nano = start_ns, at_ns
    if as_int is not None:
        point.as_int = as_int
    elif as_double is not None:
        point.as_double = as_double


def _env_headers() -> dict[str, str]:
    """OTEL_EXPORTER_OTLP_HEADERS (the OpenTelemetry exporters' own variable): ``key=value,key=value``."""
    raw = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_HEADERS") or os.environ.get("OTEL_EXPORTER_OTLP_HEADERS") or ""
    out = {}
    for item in raw.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[key.strip()] = urllib.parse.unquote(value.strip())
    return out
