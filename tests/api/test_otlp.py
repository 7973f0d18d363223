"""The OTLP exporter pushing to a collector stand-in (an HTTP server here that decodes each request with the
OTLP protobuf classes): pushes during the run, the last one holding the result's counts and its HDR
values bucket by bucket under the GenAI conventions' names; a collector that is down costs the run
nothing but a warning; an endpoint that is no URL is a one-line error."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from fastbench import api
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError

pytest.importorskip("opentelemetry.proto", reason="needs pip install 'fastbench-llm[otlp]'")

from fastbench.api.otlp import OtlpExporter  # noqa: E402


class _Collector(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.paths: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Collector

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        body = self.rfile.read(int(self.headers["Content-Length"]))
        message = ExportMetricsServiceRequest()
        message.ParseFromString(body)
        self.server.requests.append(message)
        self.server.paths.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def collector() -> Iterator[_Collector]:
    server = _Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _points(message: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for resource in message.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                out.setdefault(metric.name, []).extend(getattr(metric, kind).data_points)
    return out


def _attrs(point: Any) -> dict[str, str]:
    return {kv.key: kv.value.string_value for kv in point.attributes}


def test_pushes_during_the_run_and_the_last_holds_the_results_figures(collector: _Collector) -> None:
    port = collector.server_address[1]
    exporter = OtlpExporter(f"http://127.0.0.1:{port}", interval_s=0.3)
    config = BenchConfig(num_prompts=150, concurrency=8, random_input_len=16, random_output_len=16,
                         synthetic_args=("--itl-ms", "10"), label="otlp", variant="v1")
    try:
        result = api.run(config, on_live=[exporter])
    finally:
        exporter.close()
    assert collector.paths and set(collector.paths) == {"/v1/metrics"}
    pushed = [_points(m) for m in collector.requests]
    running = [p for p in pushed if p["fastbench.run.finished"][0].as_double == 0.0]
    assert running and 0 < running[-1]["fastbench.requests.completed"][0].as_int < 150
    last = pushed[-1]
    assert last["fastbench.run.finished"][0].as_double == 1.0
    completed = last["fastbench.requests.completed"][0]
    assert completed.as_int == result.counts.completed == 150
    assert _attrs(completed) == {"fastbench.label": "otlp", "fastbench.variant": "v1"}
    assert last["fastbench.output_tokens"][0].as_int == result.total_output_tokens
    resource = collector.requests[-1].resource_metrics[0].resource
    assert {kv.key: kv.value.string_value for kv in resource.attributes}["service.name"] == "fastbench"
    for metric, name in (("gen_ai.client.operation.time_to_first_chunk", "ttft"),
                         ("gen_ai.client.operation.time_per_output_chunk", "itl"),
                         ("gen_ai.client.operation.duration", "e2el")):
        (point,) = last[metric]
        hdr = result.histograms[name]
        assert point.count == hdr.get_total_count() > 0 and sum(point.bucket_counts) == point.count
        assert len(point.bucket_counts) == len(point.explicit_bounds) + 1
        at_or_below = 0
        for bound, count in zip(point.explicit_bounds, point.bucket_counts):  # each bucket apart, not cumulative
            at_or_below += count
            expected = sum(hdr.get_count_at_index(i) for i in range(hdr.counts_len)
                           if hdr.get_value_from_index(i) <= round(bound * 1e9))
            assert at_or_below == expected, (metric, bound)
        assert point.start_time_unix_nano < point.time_unix_nano


def test_a_collector_that_is_down_costs_the_run_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exporter = OtlpExporter(f"http://127.0.0.1:{port}/v1/metrics", interval_s=0.2)
    config = BenchConfig(num_prompts=40, concurrency=4, random_input_len=16, random_output_len=16)
    with caplog.at_level(logging.WARNING, logger="fastbench.api.otlp"):
        try:
            result = api.run(config, on_live=[exporter])
        finally:
            exporter.close()
    assert result.counts.completed == 40 and exporter.pushes == 0 and exporter.failures >= 2
    assert sum("OTLP export" in r.getMessage() for r in caplog.records) == 1  # said once, not at every push


def test_an_endpoint_that_is_no_url_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"give an http:// or https:// URL"):
        OtlpExporter("127.0.0.1:4318")
