"""--ray without Ray: the clock-offset estimator, rows put on the driver's clock, the options' checks,
and Ray never imported unless --ray is given (a clear error naming the extra when it is missing).
The runs on a real Ray cluster are tests/test_ray.py."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest

from fastbench import api
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError, WorkerError
from fastbench.load.clocks import ClockSample, estimate_offset
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.raypool import INSTANT_COLUMNS, RayPool, import_ray, shift_rows
from fastbench.results.records import COL, NCOLS


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
    with pytest.raises(WorkerError, match=r"^--ray needs Ray: pip install 'fastbench\[ray\]'"):
        import_ray()
    plan = LoadPlan(bodies=[b"{}"], warmup_bodies=[], concurrency=1)
    pool = RayPool(Target.parse("http://127.0.0.1:9", "/v1/completions"), plan, address="auto")
    with pytest.raises(WorkerError, match="fastbench\\[ray\\]"):
        import uvloop

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
