"""The server's live figures from the monitor's /metrics reads: the latest read's gauges, and between the
window's first read and the latest the acceptance length and the prefix cache's hit rate; each read
parsed once; a new first read (the window restarted after the warm-ups) is a new baseline."""

from __future__ import annotations

import pytest

from fastbench.server import prom
from fastbench.server.livegauges import LiveGauges

pytestmark = pytest.mark.pure_python


def _read(t: float, running: int, drafts: int, accepted: int, queries: int, hits: int, kv: float = 0.5) -> prom.Scrape:
    body = (f"vllm:num_requests_running{{engine=\"0\"}} {running}\n"
            "vllm:num_requests_waiting{engine=\"0\"} 2\n"
            f"vllm:kv_cache_usage_perc{{engine=\"0\"}} {kv}\n"
            f"vllm:spec_decode_num_drafts_total{{engine=\"0\"}} {drafts}\n"
            f"vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} {drafts * 3}\n"
            f"vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} {accepted}\n"
            f"vllm:prefix_cache_queries_total{{engine=\"0\"}} {queries}\n"
            f"vllm:prefix_cache_hits_total{{engine=\"0\"}} {hits}\n")
    return prom.Scrape(t, body.encode())


def test_gauges_now_and_counters_over_the_window_so_far(monkeypatch: pytest.MonkeyPatch) -> None:
    gauges = LiveGauges()
    assert gauges.read([]) == {}
    first = _read(0.0, 1, drafts=100, accepted=150, queries=1000, hits=100)
    only = gauges.read([first])
    assert only == {"running": 1.0, "waiting": 2.0, "kv_cache_usage": 0.5}  # no span yet: no rates
    later = _read(2.0, 7, drafts=300, accepted=450, queries=3000, hits=1100, kv=0.75)
    figures = gauges.read([first, later])
    assert figures["running"] == 7.0 and figures["kv_cache_usage"] == 0.75
    assert figures["acceptance_length"] == pytest.approx(1 + 300 / 200)  # 1 + accepted / drafts, over the span
    assert figures["prefix_cache_hit_rate"] == pytest.approx(1000 / 2000)
    parsed = []
    monkeypatch.setattr(prom.Scrape, "metrics", lambda self: parsed.append(self) or prom.Metrics.parse(
        self.body.decode()))
    assert gauges.read([first, later]) is figures and parsed == []  # the same reads: nothing parsed again
    restarted = _read(3.0, 2, drafts=1000, accepted=1000, queries=5000, hits=0)
    assert "acceptance_length" not in gauges.read([restarted])  # a new baseline, no span yet
    assert parsed == [restarted]
