"""fastbench compare: changes against the baseline, judged against run-to-run noise from the per-request
records, runs named by id, folder or file, and --fail-if as a regression gate."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastbench import BenchConfig, run
from fastbench.exceptions import StoreError
from fastbench.study import compare as cmp
from fastbench.study.runfile import flat_keys

RUN = dict(num_prompts=60, concurrency=4, random_input_len=32, random_output_len=12)


def fastbench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fastbench", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "FASTBENCH_STORE": ""})


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two runs kept in a store: the second against a server whose first token takes twice as long."""
    where = tmp_path_factory.mktemp("compare")
    store = where / "store"
    fast = run(BenchConfig(**RUN, synthetic_args=("--ttft-ms", "20", "--itl-ms", "5"), store=store,  # type: ignore[arg-type]
                           variant="fast", result_json=where / "fast.json", save_detailed=where / "fast.jsonl"))
    slow = run(BenchConfig(**RUN, synthetic_args=("--ttft-ms", "40", "--itl-ms", "5"), store=store,  # type: ignore[arg-type]
                           variant="slow", result_json=where / "slow.json"))  # no records beside this file
    return {"where": where, "store": str(store), "fast": fast.run_id, "slow": slow.run_id}


def _row(comparison: cmp.Comparison, key: str) -> cmp.Row:
    return next(row for row in comparison.rows if row.figure.key == key)


def test_a_slower_first_token_is_beyond_noise_and_the_decode_rate_is_not_judged_blind(two: dict[str, Any]) -> None:
    runs = [cmp.load_run(two["fast"], two["store"]), cmp.load_run(two["slow"], two["store"])]
    comparison = cmp.compare(runs)
    ttft = _row(comparison, "median_ttft_ms")
    (change,) = ttft.changes
    assert ttft.baseline == runs[0].flat["median_ttft_ms"] and change.value == runs[1].flat["median_ttft_ms"]
    assert change.change_pct == pytest.approx((change.value - ttft.baseline) / ttft.baseline * 100)
    assert 50 < change.change_pct < 150  # 20 ms -> 40 ms, less what both share (prefill of 32 tokens, network)
    assert change.verdict == "beyond noise" and change.interval_pct is not None
    lo, hi = change.interval_pct
    assert 0 < lo <= change.change_pct <= hi
    # figures one run holds one value of cannot be judged from one run each: said, not guessed
    (throughput,) = _row(comparison, "output_throughput").changes
    assert throughput.verdict == "cannot tell" and "repeated runs" in throughput.why
    (p99,) = _row(comparison, "p99_ttft_ms").changes
    assert p99.verdict == "cannot tell" and p99.why == "60 requests are too few for a p99 (need 500)"
    assert comparison.config_differences == ["B: synthetic_args ['--ttft-ms', '20', '--itl-ms', '5'] -> "
                                             "['--ttft-ms', '40', '--itl-ms', '5']", "B: variant fast -> slow"]


def test_the_bootstrap_tells_a_shift_from_noise() -> None:
    """Over 60 seeded pairs of samples: of one distribution, about 5% are called beyond noise (what a 95%
    interval promises); with one shifted by 20%, nearly all are, and their intervals hold the shift."""
    def side(values: np.ndarray) -> cmp.RunSide:
        series = {k: values for k in ("ttft", "tpot", "e2el", "decode_rate", "prefill_rate")}
        flat = {"median_ttft_ms": float(np.median(values)), "mean_tpot_ms": float(values.mean())}
        return cmp.RunSide(ref="x", run_id=None, doc={}, flat=flat, series=series, records="test")

    figures = [cmp.Figure("median_ttft_ms", "TTFT median", "ms", "lower", "ttft", 50.0),
               cmp.Figure("mean_tpot_ms", "TPOT mean", "ms", "lower", "tpot", None)]
    false_alarms, found, covered = np.zeros(2), np.zeros(2), np.zeros(2)
    pairs = 60
    for seed in range(pairs):
        rng = np.random.default_rng(seed)
        base, same = rng.gamma(4.0, 25.0, 300), rng.gamma(4.0, 25.0, 300)
        for i, row in enumerate(cmp.compare([side(base), side(same)], figures).rows):
            false_alarms[i] += row.changes[0].verdict == "beyond noise"
        for i, row in enumerate(cmp.compare([side(base), side(same * 1.2)], figures).rows):
            (change,) = row.changes
            found[i] += change.verdict == "beyond noise"
            assert change.interval_pct is not None
            covered[i] += change.interval_pct[0] < 20 < change.interval_pct[1]
    assert np.all(false_alarms <= 0.12 * pairs), false_alarms
    assert np.all(found >= 0.9 * pairs), found
    assert np.all(covered >= 0.85 * pairs), covered


def test_runs_are_named_by_id_prefix_folder_or_result_file(two: dict[str, Any]) -> None:
    by_id = cmp.load_run(two["fast"][:-1], two["store"])
    by_folder = cmp.load_run(str(Path(two["store"]) / "runs" / two["fast"]), None)
    by_file = cmp.load_run(str(two["where"] / "fast.json"), None)  # its --save-detailed file is found
    assert by_id.run_id == two["fast"] and by_folder.run_id is None
    for side in (by_folder, by_file):
        assert side.flat["median_ttft_ms"] == by_id.flat["median_ttft_ms"]
        assert side.series is not None and by_id.series is not None
        assert np.array_equal(side.series["ttft"], by_id.series["ttft"])
    bare = cmp.load_run(str(two["where"] / "slow.json"), None)
    assert bare.series is None
    (change,) = _row(cmp.compare([by_file, bare]), "median_ttft_ms").changes
    assert (change.verdict, change.why) == ("cannot tell", "no per-request records")
    assert change.change_pct is not None and change.change_pct > 50  # the change itself is still shown


def test_compare_prints_a_table_and_markdown(two: dict[str, Any]) -> None:
    proc = fastbench("compare", "--store", two["store"], two["fast"], two["slow"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"A  {two['fast']}, variant fast") and lines[1].startswith(f"B  {two['slow']}")
    ttft = next(line for line in lines if line.startswith("TTFT median"))
    assert ttft.rstrip().endswith("yes, worse")  # +~100%: beyond noise and the 5% threshold
    proc = fastbench("compare", "--store", two["store"], two["fast"], two["slow"], "--markdown")
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(cmp.FIGURES)
    assert len({line.count("|") for line in table}) == 1  # every row has the header's cells
    assert table[0] == "| figure | unit | A | B | change B | 95% interval B | verdict B |"


@pytest.mark.parametrize("rules,status", [
    (["median_ttft_ms>+10%"], 1),
    (["median_ttft_ms>+500%"], 0),
    (["median_ttft_ms>+5"], 1),  # ms, the key's unit
    (["output_throughput<-50%", "median_tpot_ms>+50%"], 0),
    (["median_tpot_ms>+50%", "median_ttft_ms>=+10%"], 1),
])
def test_fail_if_is_a_regression_gate(two: dict[str, Any], rules: list[str], status: int) -> None:
    args = [a for rule in rules for a in ("--fail-if", rule)]
    proc = fastbench("compare", "--store", two["store"], two["fast"], two["slow"], *args)
    assert proc.returncode == status, proc.stdout + proc.stderr
    verdicts = [line for line in proc.stdout.splitlines() if "--fail-if" in line]
    assert len(verdicts) == len(rules)
    assert any(line.startswith("FAIL") for line in verdicts) == (status == 1)


@pytest.mark.parametrize("args,words", [
    (["--fail-if", "p99_ttft_ms>>10%"], "expected KEY OP CHANGE"),
    (["--fail-if", "p99_ttft_ms 10%"], "expected KEY OP CHANGE"),
    (["--fail-if", "p99_tft_ms>+10%"], "no figure 'p99_tft_ms' in these runs (did you mean p99_ttft_ms"),
    (["--fail-if", "spec_decode_acceptance_length<-5%"], "no figure 'spec_decode_acceptance_length'"),
    (["--fail-if", "request_goodput<-5%"], "request_goodput is not measured in"),
])
def test_bad_rules_are_one_line_and_exit_2(two: dict[str, Any], args: list[str], words: str) -> None:
    proc = fastbench("compare", "--store", two["store"], two["fast"], two["slow"], *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr, proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("refs,words", [
    (["only-one"], "compare needs two runs or more"),
    (["zzz", "yyy"], "zzz: not a file or folder, and no run 'zzz' in the store"),
])
def test_bad_runs_are_one_line_and_exit_2(two: dict[str, Any], refs: list[str], words: str) -> None:
    proc = fastbench("compare", "--store", two["store"], *refs)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and words in proc.stderr, proc.stderr


def test_a_folder_that_is_no_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="a directory without result.json"):
        cmp.load_run(str(tmp_path), None)


def test_a_rule_parses_its_parts() -> None:
    rule = cmp.parse_rule(" p99_ttft_ms >= -2.5% ", ["p99_ttft_ms"])
    assert (rule.key, rule.op, rule.threshold, rule.percent) == ("p99_ttft_ms", ">=", -2.5, True)
    base = cmp.RunSide("a", None, {}, flat_keys({"p99_ttft_ms": 100.0, "fastbench": {}}), None, "")
    other = cmp.RunSide("b", None, {}, flat_keys({"p99_ttft_ms": 97.0, "fastbench": {}}), None, "")
    assert rule.check(base, other) == (False, "p99_ttft_ms: 100 -> 97 (-3.0%)")
    assert cmp.parse_rule("p99_ttft_ms<-2", ["p99_ttft_ms"]).check(base, other) == (True, "p99_ttft_ms: 100 -> 97 (-3)")


# -- size as well as noise -----------------------------------------------------------------------------


def _ttft_side(values: np.ndarray, **flat: Any) -> cmp.RunSide:
    series = {k: values for k in ("ttft", "tpot", "e2el", "decode_rate", "prefill_rate")}
    return cmp.RunSide(ref="x", run_id=None, doc={"fastbench": {}},
                       flat={"median_ttft_ms": float(np.median(values)), **flat}, series=series, records="test")


TTFT_ONLY = [cmp.Figure("median_ttft_ms", "TTFT median", "ms", "lower", "ttft", 50.0)]


def test_a_tiny_change_beyond_noise_is_trivial_and_a_large_one_matters() -> None:
    """30.1 -> 30.16 ms on 4,000 tight requests each: beyond noise, +0.2%, of no size that matters."""
    rng = np.random.default_rng(7)
    base = rng.normal(30.1, 0.05, 4000)
    tiny = _ttft_side(rng.normal(30.16, 0.05, 4000))
    (change,) = cmp.compare([_ttft_side(base), tiny], TTFT_ONLY).rows[0].changes
    assert change.verdict == "beyond noise" and 0.1 < (change.change_pct or 0) < 0.3
    assert change.matters is False and change.judgement == "trivial" and change.threshold == cmp.Threshold(5.0)
    (big,) = cmp.compare([_ttft_side(base), _ttft_side(base * 1.08)], TTFT_ONLY).rows[0].changes
    assert big.judgement == "worse" and big.matters
    (faster,) = cmp.compare([_ttft_side(base), _ttft_side(base * 0.9)], TTFT_ONLY).rows[0].changes
    assert faster.judgement == "better"
    (same,) = cmp.compare([_ttft_side(base), _ttft_side(rng.permutation(base))], TTFT_ONLY).rows[0].changes
    assert same.judgement == "within noise"
    # a threshold set per figure: by its key, its metric's short name, or all; the most specific wins
    for given in ({"median_ttft_ms": cmp.Threshold(0.1)}, {"ttft": cmp.Threshold(0.1)}, {"all": cmp.Threshold(0.1)},
                  {"all": cmp.Threshold(50.0), "ttft": cmp.Threshold(0.1)}):
        (strict,) = cmp.compare([_ttft_side(base), tiny], TTFT_ONLY, given).rows[0].changes
        assert strict.judgement == "worse", given
    (absolute,) = cmp.compare([_ttft_side(base), tiny], TTFT_ONLY, {"ttft": cmp.Threshold(0.05, percent=False)}
                              ).rows[0].changes
    assert absolute.judgement == "worse"  # 0.06 ms >= 0.05 ms


def test_below_the_threshold_is_trivial_even_where_noise_cannot_be_judged() -> None:
    def side(throughput: float) -> cmp.RunSide:
        return cmp.RunSide("x", None, {}, {"output_throughput": throughput}, None, "")

    (small,) = cmp.compare([side(1000.0), side(1020.0)], cmp.FIGURES[:1]).rows[0].changes
    assert (small.verdict, small.judgement) == ("cannot tell", "trivial")
    (large,) = cmp.compare([side(1000.0), side(1200.0)], cmp.FIGURES[:1]).rows[0].changes
    assert large.judgement == "cannot tell" and "repeated runs" in large.why


def test_default_thresholds_are_5_percent_and_10_for_tails() -> None:
    by_key = {f.key: f.threshold for f in cmp.FIGURES}
    assert by_key["median_ttft_ms"] == by_key["output_throughput"] == cmp.Threshold(5.0)
    assert by_key["p99_ttft_ms"] == by_key["p99_e2el_ms"] == cmp.Threshold(10.0)


def test_thresholds_parse_per_figure_and_refuse_in_one_line() -> None:
    parsed = cmp.parse_thresholds(["ttft=2%", "median_tpot_ms=0.5, all=3%"])
    assert parsed == {"ttft": cmp.Threshold(2.0), "median_tpot_ms": cmp.Threshold(0.5, percent=False),
                      "all": cmp.Threshold(3.0)}
    with pytest.raises(StoreError, match="no figure 'tft'.*did you mean ttft"):
        cmp.parse_thresholds(["tft=2%"])
    for bad in ("ttft=-2%", "ttft", "ttft=x"):
        with pytest.raises(StoreError, match="expected NAME=CHANGE"):
            cmp.parse_thresholds([bad])


def test_the_gate_holds_no_rule_on_a_change_within_noise() -> None:
    rng = np.random.default_rng(3)
    base = rng.gamma(4.0, 25.0, 300)
    noisy = _ttft_side(rng.gamma(4.0, 25.0, 300) * 1.03)  # +3% on wide samples: within noise
    comparison = cmp.compare([_ttft_side(base), noisy], TTFT_ONLY)
    (change,) = comparison.rows[0].changes
    assert change.verdict == "within noise"
    rule = cmp.parse_rule("median_ttft_ms>+1%", ["median_ttft_ms"])
    held, line = rule.check(comparison.runs[0], noisy)
    assert held is (change.change_pct is not None and change.change_pct > 1)  # the change alone, as before
    assert rule.check(comparison.runs[0], noisy, change)[0] is False
    assert "within noise" in rule.check(comparison.runs[0], noisy, change)[1]
    worse = _ttft_side(base * 1.5)
    (beyond,) = cmp.compare([_ttft_side(base), worse], TTFT_ONLY).rows[0].changes
    assert rule.check(comparison.runs[0], worse, beyond) == (True, rule.check(comparison.runs[0], worse)[1]
                                                            + ", beyond noise")


def test_compare_takes_thresholds_on_the_command_line(two: dict[str, Any]) -> None:
    proc = fastbench("compare", "--store", two["store"], two["fast"], two["slow"], "--threshold", "ttft=500%",
                     "--fail-if", "median_ttft_ms>+10%")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the gate keeps its own CHANGE
    lines = proc.stdout.splitlines()
    median = next(line for line in lines if line.startswith("TTFT median"))
    assert median.rstrip().endswith("beyond noise, below 500% (trivial)")
    p99 = next(line for line in lines if line.startswith("TTFT p99"))  # the metric's name sets both statistics
    assert p99.rstrip().endswith("below 500% (trivial); noise: 60 requests are too few for a p99 (need 500)")
    gate = next(line for line in lines if "--fail-if" in line)
    assert gate.startswith("FAIL") and gate.endswith(", beyond noise")
    bad = fastbench("compare", "--store", two["store"], two["fast"], two["slow"], "--threshold", "ttfx=2%")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "ttfx" in bad.stderr


# -- the prefix cache ---------------------------------------------------------------------------------


def _cached_side(ttft: np.ndarray, *, hit_rate: float | None = None, in_stats: float | None = None,
                 share: float | None = None, warning: str | None = None) -> cmp.RunSide:
    """A run as its result gives its cache state: the flat keys, or (older results) only
    fastbench.server.prefix_cache_stats."""
    flat: dict[str, Any] = {}
    if hit_rate is not None:
        flat["prefix_cache_hit_rate"] = hit_rate
    if share is not None:
        flat["cached_tokens_share"] = share
    if warning is not None:
        flat["prefix_cache_warning"] = warning
    side = _ttft_side(ttft, **flat)
    if in_stats is not None:
        side.doc["fastbench"]["server"] = {"prefix_cache_stats": {"queries": 1000, "hits": int(in_stats * 1000),
                                                                  "hit_rate": in_stats}}
    return side


def test_compare_says_when_the_cache_states_differ_enough_to_explain_a_latency_change() -> None:
    rng = np.random.default_rng(5)
    cold = rng.normal(26.1, 1.0, 400)
    warm = rng.normal(0.9, 0.05, 400)
    comparison = cmp.compare([_cached_side(cold, in_stats=0.49), _cached_side(warm, hit_rate=0.98)], TTFT_ONLY)
    assert [c.hit_rate for c in comparison.cache] == [0.49, 0.98]
    assert comparison.rows[0].changes[0].judgement == "better"
    (note,) = comparison.notes
    assert note.startswith("B: the prefix-cache hit rate was 0.49 in A and 0.98 in B while TTFT median changed -96")
    assert "the cache, not the server, may explain" in note
    # close states, the same latency change: nothing said of the cache
    assert cmp.compare([_cached_side(cold, hit_rate=0.9), _cached_side(warm, hit_rate=0.98)], TTFT_ONLY).notes == []
    # apart, with no latency change beyond its threshold: said, and that nothing moved with it
    (calm,) = cmp.compare([_cached_side(cold, hit_rate=0.1), _cached_side(rng.permutation(cold), hit_rate=0.6)],
                          TTFT_ONLY).notes
    assert calm == "B: the prefix-cache hit rate was 0.10 in A and 0.60 in B; no latency changed beyond its threshold"
    # the per-request share where the hit rate is missing; the warning shown as it is
    shared = cmp.compare([_cached_side(cold, share=0.0), _cached_side(warm, share=0.95, warning="hit rate 0.95 "
                                                                     "but random prompts share about 0")], TTFT_ONLY)
    assert shared.notes[0] == "B: prefix cache: hit rate 0.95 but random prompts share about 0"
    assert shared.notes[1].startswith("B: the cached-token share was 0.00 in A and 0.95 in B while TTFT median")


def test_compare_prints_the_cache_state_of_real_runs(tmp_path: Path) -> None:
    """Two runs of the same prompts against one synthetic server that caches prefixes: the second
    finds them cached, its TTFT drops, and compare says the cache explains it."""
    from fastbench.synthetic import SyntheticServer

    store = tmp_path / "store"
    with SyntheticServer("--enable-prefix-caching", "--prefill-tok-s", "20000", "--itl-ms", "1") as server:
        ids = [run(BenchConfig(base_url=server.base_url, num_prompts=12, concurrency=4, random_input_len=512,
                               random_output_len=4, seed=11, store=store)).run_id for _ in range(2)]
    proc = fastbench("compare", "--store", str(store), *(i or "" for i in ids))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    rates = [float(re.search(r"prefix-cache hit rate ([0-9.]+)", line).group(1))  # type: ignore[union-attr]
             for line in lines[:2]]
    assert rates[0] < 0.2 and rates[1] > 0.8, lines[:2]
    note = next(line for line in lines if "may explain the latency change" in line)
    assert note.startswith(f"B: the prefix-cache hit rate was {rates[0]:.2f} in A and {rates[1]:.2f} in B while TTFT")
