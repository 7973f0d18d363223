"""The --metrics-port exporter scraped during a run by prometheus_client's own text parser: its counters
and histogram counts equal to the run's result, each bucket the run's HDR values at or below its bound,
while a scraper that connected and never reads stalls beside it."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from fastbench import api
from fastbench.api.export import PrometheusExporter
from fastbench.config import BenchConfig


def _scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def test_prometheus_endpoint_during_a_run_and_a_stalled_scraper() -> None:
    pytest.importorskip("prometheus_client")
    exporter = PrometheusExporter(0)
    stalled = socket.create_connection(("127.0.0.1", exporter.port))  # connects, sends nothing, never reads
    half = socket.create_connection(("127.0.0.1", exporter.port))
    half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")  # asks, then never reads the answer
    during: list[dict[str, list[tuple[dict[str, str], float]]]] = []

    def scrape_once(snapshot: object) -> None:
        if not during and getattr(snapshot, "completed", 0) > 20:
            during.append(_scrape(exporter.url))  # from the loop: the server's thread answers it

    try:
        config = BenchConfig(num_prompts=150, concurrency=8, random_input_len=16, random_output_len=16,
                             label="exp", variant="v1")
        result = api.run(config, on_live=[exporter, scrape_once])
        after = _scrape(exporter.url)
    finally:
        stalled.close()
        half.close()
        exporter.close()
    assert during, "no scrape happened during the run"
    labels = {"label": "exp", "variant": "v1", "cell": ""}
    running = dict((tuple(sorted(lab.items())), v) for lab, v in during[0]["fastbench_requests_completed_total"])
    assert 0 < running[tuple(sorted(labels.items()))] < 150

    def value(name: str, **extra: str) -> float:
        want = {**labels, **extra}
        return next(v for lab, v in after[name] if lab == want)

    assert value("fastbench_requests_completed_total") == result.counts.completed == 150
    assert value("fastbench_output_tokens_total") == result.total_output_tokens
    assert value("fastbench_run_finished") == 1.0
    ttft = result.distributions["ttft"]
    assert value("fastbench_time_to_first_token_seconds_count") == ttft.count
    assert value("fastbench_time_to_first_token_seconds_bucket", le="+Inf") == ttft.count
    # each bucket counts the run's own HDR values at or below its bound, cumulative
    for metric, name in (("fastbench_inter_chunk_latency_seconds", "itl"), ("fastbench_time_to_first_token_seconds",
                                                                             "ttft")):
        hdr = result.histograms[name]
        assert value(f"{metric}_count") == hdr.get_total_count() > 0
        buckets = sorted((float(lab["le"]), v) for lab, v in after[f"{metric}_bucket"] if lab["le"] != "+Inf")
        assert [v for _, v in buckets] == sorted(v for _, v in buckets)
        for bound, count in buckets:
            expected = sum(hdr.get_count_at_index(i) for i in range(hdr.counts_len)
                           if hdr.get_value_from_index(i) <= round(bound * 1e9))
            assert count == expected, (name, bound)


def test_workers_parent_exports_the_merged_histograms_while_they_run() -> None:
    pytest.importorskip("prometheus_client")
    exporter = PrometheusExporter(0)
    during: list[dict[str, list[tuple[dict[str, str], float]]]] = []

    def scrape_once(snapshot: object) -> None:
        if not during and getattr(snapshot, "completed", 0) > 40 and not getattr(snapshot, "final", True):
            during.append(_scrape(exporter.url))

    try:
        config = BenchConfig(num_prompts=120, concurrency=8, random_input_len=16, random_output_len=30, workers=2,
                             synthetic_args=("--itl-ms", "10"), label="w2")
        result = api.run(config, on_live=[exporter, scrape_once])
        after = _scrape(exporter.url)
    finally:
        exporter.close()
    assert during, "no scrape happened while the workers ran"
    labels = {"label": "w2", "variant": "", "cell": ""}

    def value(scrape: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
        return next(v for lab, v in scrape[name] if lab == labels)

    for metric, name in (("fastbench_time_to_first_token_seconds", "ttft"),
                         ("fastbench_inter_chunk_latency_seconds", "itl")):
        # the workers' running figures while they run, the merged run's at the end
        assert 0 < value(during[0], f"{metric}_count") < result.histograms[name].get_total_count(), name
        assert value(after, f"{metric}_count") == result.histograms[name].get_total_count(), name
