"""--ray without Ray: the clock-offset estimator, rows put on the driver's clock, the core's skew put on
the server's clock, the options' checks (fastbench and fastbench validate), and Ray never imported
unless --ray is given (a clear error naming the extra when it is missing). The runs on a real Ray
cluster are tests/load/test_ray.py."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
import uvloop

from fastbench import api
from fastbench.api import validation as fv
from fastbench.api import validation_figures as vf
from fastbench.cli import validate as validate_cli
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError, WorkerError
from fastbench.load.clocks import ClockSample, estimate_offset
from fastbench.load.driver import LoadGenerator
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.raypool import INSTANT_COLUMNS, RayPool, import_ray, shift_rows
from fastbench.results import validation_report
from fastbench.results.notes import _workers_note
from fastbench.results.records import COL, NCOLS
from fastbench.synthetic import SyntheticServer


def _exchanges(true_offset_ns: int, rng: random.Random, count: int) -> list[ClockSample]:
    """Exchanges with a remote clock ``true_offset_ns`` ahead, each leg delayed at random and unevenly
    (the outbound leg up to 5 times the return one), as a loaded network does."""
    samples, t = [], 1_000_000_000
    for _ in range(count):
        out = rng.randint(20_000, 5_000_000)
        back = rng.randint(20_000, 1_000_000)
        samples.append(ClockSample(t, t + out + true_offset_ns, t + out + back))
        t += out + back + rng.randint(0, 1_000_000)
    return samples


@pytest.mark.parametrize("true_offset_ns", [0, 1, -7, 123_456_789, -3_000_000_000_000])
def test_the_true_offset_lies_within_the_estimates_uncertainty(true_offset_ns: int) -> None:
    rng = random.Random(true_offset_ns)
    for _ in range(200):
        samples = _exchanges(true_offset_ns, rng, rng.randint(1, 64))
        estimate = estimate_offset(samples)
        assert estimate.agrees_with(true_offset_ns)
        shortest = min(s.round_trip_ns for s in samples)
        assert estimate.min_round_trip_ns == shortest
        assert estimate.uncertainty_ns == (shortest + 1) // 2  # half the shortest round trip, no more
        assert estimate.to_local(estimate.to_remote(42)) == 42


def test_the_shortest_round_trip_is_the_one_used() -> None:
    slow = ClockSample(0, 10_000 + 900, 2_000)  # remote read late in a long exchange
    fast = ClockSample(5_000, 5_050 + 100, 5_100)  # a 100 ns exchange, remote 100 ns ahead
    estimate = estimate_offset([slow, fast, slow])
    assert (estimate.offset_ns, estimate.uncertainty_ns, estimate.samples) == (100, 50, 3)
    assert estimate.median_round_trip_ns == 2_000


def test_bad_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="no clock samples"):
        estimate_offset([])
    with pytest.raises(ValueError, match="ends before it starts"):
        estimate_offset([ClockSample(10, 5, 9)])


def test_rows_are_put_on_the_drivers_clock_and_durations_kept() -> None:
    rows = np.zeros((3, NCOLS), dtype=np.int64)
    rows[0, INSTANT_COLUMNS] = [1_000, 1_100, 1_200, 1_300, 1_300, 2_000]
    rows[0, COL["connect_ns"]] = 77
    rows[0, COL["output_tokens"]] = 5
    rows[1, COL["scheduled_ns"]] = 1_500  # claimed, never sent: only its schedule is set
    shifted = shift_rows(rows, 400)
    assert shifted[0, INSTANT_COLUMNS].tolist() == [600, 700, 800, 900, 900, 1_600]
    assert shifted[0, COL["connect_ns"]] == 77 and shifted[0, COL["output_tokens"]] == 5
    assert shifted[1, COL["scheduled_ns"]] == 1_100 and shifted[1, COL["sent_ns"]] == 0  # unset stays unset
    assert not shifted[2].any()
    assert rows[0, COL["end_ns"]] == 2_000  # the node's own table is left as it was
    assert shift_rows(rows, 0) is rows


def test_the_ray_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="--workers-per-node .*give --ray"):
        api.validate(BenchConfig(workers_per_node=2))
    with pytest.raises(ConfigError, match="not both"):
        api.validate(BenchConfig(ray="auto", workers=4, workers_per_node=2))
    with pytest.raises(ConfigError, match="workers_per_node|workers-per-node"):
        api.validate(BenchConfig(ray="auto", workers_per_node=0))
    with pytest.raises(ConfigError, match="--ray must be"):
        api.validate(BenchConfig(ray=" "))
    api.validate(BenchConfig(ray="auto", workers_per_node=3))
    api.validate(BenchConfig(ray="10.0.0.1:6379", workers=8))


def test_without_ray_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed
    with pytest.raises(WorkerError, match=r"^--ray needs Ray: pip install 'fastbench-llm\[ray\]'"):
        import_ray()
    plan = LoadPlan(bodies=[b"{}"], warmup_bodies=[], concurrency=1)
    pool = RayPool(Target.parse("http://127.0.0.1:9", "/v1/completions"), plan, address="auto")
    with pytest.raises(WorkerError, match="fastbench-llm\\[ray\\]"):
        uvloop.run(pool.run())


def test_ray_is_never_imported_without_the_flag() -> None:
    """A whole run (parse, check, the built-in server, the load over --workers 2, the result) in a fresh
    interpreter, then: is ray among its modules?"""
    code = ("import sys\n"
            "from fastbench import api\n"
            "from fastbench.cli.command import build_parser\n"
            "from fastbench.config import BenchConfig\n"
            "build_parser()\n"
            "api.run(BenchConfig(workers=2, concurrency=2, num_prompts=4, random_input_len=4, random_output_len=2, "
            "progress=False))\n"
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def _skews_with_offset(skew_offset_ns: int) -> tuple[int, int, int, int]:
    """One small run against the synthetic server with the core subtracting ``skew_offset_ns`` from its
    receive stamps for skew: (chunks, skews recorded, negative ones, smallest recorded in ns)."""
    with SyntheticServer(ttft_ms=2, itl_ms=2) as server:
        body = fv.request_body(6)
        plan = LoadPlan(bodies=[body] * 8, warmup_bodies=[], concurrency=4)
        generator = LoadGenerator(Target.parse(server.base_url, fv.ENDPOINT), plan)
        generator.state.skew_offset_ns = skew_offset_ns
        data = uvloop.run(generator.run())
    skew = data.histograms["skew"]
    return (int(data.rows[:, COL["chunks"]].sum()), int(skew.get_total_count()), int(data.extra["skew_negative"]),
            int(skew.get_min_value()))


def test_the_core_sets_receive_stamps_beside_the_servers_by_the_skew_offset() -> None:
    """--ray's correction, one subtraction per chunk in the core: a node whose clock reads 40 ms behind
    the server's is given -40 ms, and every skew it records is then at least 40 ms; one 10 s ahead, given
    nothing, would see every chunk received before it was sent (counted negative, failing validate)."""
    chunks, recorded, negative, smallest = _skews_with_offset(-40_000_000)
    assert chunks == recorded == 8 * 6 and negative == 0
    assert smallest >= 40_000_000 * 0.999  # the HDR histogram's 3 significant digits
    chunks, recorded, negative, smallest = _skews_with_offset(10_000_000_000)
    assert chunks == recorded == negative == 8 * 6
    chunks, recorded, negative, smallest = _skews_with_offset(0)
    assert chunks == recorded == 8 * 6 and negative == 0 and smallest < 10_000_000  # the default: no offset


@pytest.mark.parametrize("args,words", [
    (["--workers-per-node", "2"], "--workers-per-node places workers on the nodes of a Ray cluster: give --ray"),
    (["--ray", "auto", "--workers", "4", "--workers-per-node", "2"], "--ray: give --workers N"),
    (["--ray", " "], "--ray must be 'auto' or a Ray cluster's address"),
    (["--ray", "auto", "--pin"], "--pin pins the client to a CPU of this host"),
    (["--ray", "auto", "--workers-per-node", "0"], "--workers-per-node must be between 1 and 256"),
    (["--ray", "auto", "--workers", "0"], "--workers must be 'auto' or between 1 and 256"),
])
def test_validate_refuses_bad_ray_combinations_before_the_run(args: list[str], words: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        validate_cli.main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith(f"fastbench validate: error: {words}"), err


def test_validate_ray_without_ray_names_the_extra_and_starts_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if it were not installed

    def no_server(*args: object, **kwargs: object) -> None:
        raise AssertionError("a server was started")

    monkeypatch.setattr(SyntheticServer, "start", no_server)
    assert validate_cli.main(["--ray", "auto", "--concurrency", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fastbench validate: error: --ray needs Ray: pip install "
                                               "'fastbench-llm[ray]'"), err


def _section(*nodes: dict[str, object]) -> dict[str, object]:
    return {"ray": {"nodes": list(nodes)}}


def _node(node: str, offset_ns: int, uncertainty_ns: int, same_clock: bool,
          estimated: bool = True) -> dict[str, object]:
    estimate = {"offset_ns": offset_ns + 7, "uncertainty_ns": uncertainty_ns or 600_000,
                "min_round_trip_ns": 1_200_000, "median_round_trip_ns": 2_000_000, "samples": 64}
    return {"node": node, "host": "h", "workers": [0], "same_clock": same_clock, "offset_ns": offset_ns,
            "uncertainty_ns": uncertainty_ns, "skew_offset_ns": offset_ns - uncertainty_ns,
            "estimate": estimate if estimated else None}


def test_validate_and_the_run_notes_say_how_each_nodes_clock_was_estimated() -> None:
    """One node estimated by UDP, one that fell back to Ray calls: the notes, the table's lines and
    the run's workers note name the method, the round trips and why UDP was not used."""
    by_udp = _node("aaaa1111", 2_000_000, 25_000, False)
    by_udp["estimate"].update(method="udp", samples=200, min_round_trip_ns=50_000)  # type: ignore[attr-defined]
    by_calls = _node("bbbb2222", 0, 0, True)
    by_calls["estimate"]["method"] = "ray-call"  # type: ignore[index]
    by_calls["clock_fallback"] = ("no valid UDP reply from 10.0.0.2:4000 in 0.5 s (9 pings unanswered, 0 replies "
                                  "ignored)")
    clocks = vf._node_clocks(_section(by_udp, by_calls))
    assert clocks is not None and [c["method"] for c in clocks] == ["udp", "ray-call"]
    assert [c["fallback"] for c in clocks] == [None, by_calls["clock_fallback"]]
    notes = vf._clock_notes(clocks)
    assert "+- 0.025 ms to this host's (UDP pings, shortest of 200 round trips 0.050 ms)" in notes[0]
    assert ("holds 0, Ray actor calls, shortest of 64 round trips 1.200 ms; not by UDP: no valid UDP reply from "
            "10.0.0.2:4000 in 0.5 s (9 pings unanswered, 0 replies ignored))") in notes[1]
    lines = validation_report._clock_lines(clocks)
    assert lines[1].endswith("+2.000 +- 0.025; by UDP; workers 0")
    assert lines[2].endswith("(this host's clock); by Ray calls, no UDP reply; workers 0")
    note = _workers_note({"count": 2, "per_worker": [], **_section(by_udp, by_calls)})
    assert ("Ray actors on 2 nodes (node clocks put on this host's to within 0.025 ms; no UDP clock reply from node "
            "bbbb2222: estimated by Ray calls)") in note


def test_validate_states_each_nodes_clock_and_refuses_one_unknown() -> None:
    clocks = vf._node_clocks(_section(_node("aaaa1111", 0, 0, True), _node("bbbb2222", 1_500_000_000, 600_000, False)))
    assert clocks is not None and [c["uncertainty_ms"] for c in clocks] == [0.0, 0.6]
    assert clocks[1]["offset_ms"] == 1500.0 and clocks[1]["skew_offset_ms"] == 1499.4
    notes = vf._clock_notes(clocks)
    assert "this host's" in notes[0] and "exact" in notes[0]
    assert "offset +1500.000 +- 0.600 ms" in notes[1] and "plus 0 to 1.200 ms" in notes[1]
    assert "widened by the nodes' clock uncertainty (up to +- 0.600 ms" in notes[2]
    assert vf._clock_notes(vf._node_clocks(_section(_node("aaaa1111", 0, 0, True))) or [])[-1].endswith("exact")
    assert vf._node_clocks({"count": 2}) is None and vf._node_clocks(None) is None  # not --ray
    with pytest.raises(WorkerError, match=r"^validate --ray: the clock offset of node cccc3333 on h is unknown"):
        vf._node_clocks(_section(_node("aaaa1111", 0, 0, True), _node("cccc3333", 0, 0, False, estimated=False)))


def test_a_clock_that_moved_during_the_run_widens_the_skew_check_and_every_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A node estimated at +1500.000 +- 0.600 ms before the window and +1498.000 +- 0.500 ms after it: its
    receive stamps were set back by 1499.400 ms, up to 1.900 ms more than the 1497.500 the offset may have
    come down to, so its skews may be that much below the truth: the skew check and every bound carry it."""
    moved = _node("bbbb2222", 1_500_000_000, 600_000, False)
    moved["estimate_after"] = {"offset_ns": 1_498_000_000, "uncertainty_ns": 500_000, "min_round_trip_ns": 1_000_000,
                               "median_round_trip_ns": 2_000_000, "samples": 64}
    (clock,) = vf._node_clocks(_section(moved)) or []
    assert clock["below_truth_ms"] == pytest.approx(1.9) and clock["moved_ms"] == pytest.approx(-2.000007)
    assert "up to 1.900 ms below their true values" in vf._clock_notes([clock])[0]
    real_run = LoadGenerator.run

    async def as_if_over_ray(self: LoadGenerator) -> object:
        data = await real_run(self)
        data.extra["workers"] = {"count": 1, "per_worker": [], **_section(moved)}
        return data

    monkeypatch.setattr(LoadGenerator, "run", as_if_over_ray)
    report = fv.validate_client(2, num_requests=4, output_len=4, itl_ms=2, ttft_ms=2, tolerance_ms=50)
    checks = {c.name: c for c in report.checks}
    assert report.skew.p99 is not None
    assert checks["skew p99 (ms)"].value == pytest.approx(report.skew.p99 + 1.9)
    assert checks["chunk-gap p99-level error bound (ms)"].value is not None
    assert checks["chunk-gap p99-level error bound (ms)"].value >= 1.9
    ttft = next(x for x in report.series if x.name == "ttft")
    assert ttft.error_bound_worst_ms == pytest.approx((report.skew.max or 0) + 1.9)
