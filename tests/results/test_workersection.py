"""The ``fastbench.workers`` section worded where the result is built: the pools record how the workers
were chosen and how the schedule was dealt as codes with their numbers, and results/workersection.py
turns them into the result file's ``chosen_because`` and ``dealt`` sentences."""

from __future__ import annotations

import pytest

from fastbench.load.generators import make_generator
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.workerreport import dealing
from fastbench.load.workers import choose_workers
from fastbench.results.workersection import chosen_because, dealt, worded_section


def _plan(n: int, concurrency: int, rate: float | None = None) -> LoadPlan:
    return LoadPlan(bodies=[b"{}"] * n, warmup_bodies=[], concurrency=concurrency, request_rate=rate)


def test_the_codes_become_the_sentences_in_their_places_and_the_rest_stays() -> None:
    raw = {"count": 2, "requested": 4,
           "chosen": {"how": "fewer", "requested": 4, "count": 2, "concurrency": 2, "requests": 10},
           "dealing": {"how": "claimed", "workers": 2, "concurrency": 2},
           "open_loop_cap": None, "per_worker": [{"index": 0}, {"index": 1}], "merge_s": 0.01}
    worded = worded_section(raw)
    assert worded is not None
    assert list(worded) == ["count", "requested", "chosen_because", "dealt", "open_loop_cap", "per_worker",
                            "merge_s"]  # the file's order, as docs/result-schema.md lists it
    assert worded["chosen_because"] == ("4 asked for, 2 used: each worker needs a slot and a request of its own "
                                        "(--concurrency 2, 10 requests)")
    assert worded["dealt"].startswith("closed loop: the 2 slots split over 2 workers, each holding every request")
    assert worded["per_worker"] is raw["per_worker"] and worded["merge_s"] == 0.01
    assert "chosen" in raw and "dealing" in raw  # the pool's record is left as it was
    assert worded_section(worded) == worded  # a section read back from a file is already worded
    assert worded_section(None) is None


def test_each_way_of_dealing_has_its_own_words_with_its_numbers() -> None:
    # The record the pool makes for each way, from the plan and how the workers took their work.
    cases = {
        "shared cap": (_plan(10, 4, 50.0), True, True),
        "claimed": (_plan(10, 4), True, False),
        "dealt closed": (_plan(10, 4), False, False),
        "dealt open": (_plan(10, 10, 50.0), False, False),
        "dealt open split": (_plan(10, 4, 50.0), False, False),
    }
    words = {}
    for how, (plan, claiming, sharing_cap) in cases.items():
        record = dealing(plan, 3, claiming=claiming, sharing_cap=sharing_cap)
        assert record == {"how": how, "workers": 3, "concurrency": plan.concurrency}
        words[how] = dealt(record)
    assert len(set(words.values())) == len(cases)
    assert "--concurrency 4 cap shared by the 3 workers" in words["shared cap"]
    assert "i mod 3 = w" in words["shared cap"]
    assert "claims the next request" in words["claimed"] and "4 slots split over 3 workers" in words["claimed"]
    assert "up front" in words["dealt closed"] and "share no memory" in words["dealt closed"]
    assert words["dealt open"].endswith("arrival i to worker i mod 3; no cap binds")
    assert "cap split over the workers" in words["dealt open split"]
    with pytest.raises(ValueError, match="'by hand'"):
        dealt({"how": "by hand", "workers": 1, "concurrency": 1})


def test_why_so_many_workers_in_words() -> None:
    count, auto = choose_workers(4096, 10_000, 2, True)
    assert chosen_because(auto) == ("auto: 4096 streams (--concurrency) at 256 per worker want 16; 2 cores usable, "
                                    f"one left to the server on this machine: {count}")
    _, uncapped = choose_workers(None, 600, 4, False)
    assert chosen_because(uncapped) == "auto: 600 streams (requests (no --concurrency cap)) at 256 per worker " \
                                       "want 3; 4 cores usable: 3"
    assert chosen_because({"how": "ray per node", "nodes": 3, "per_node": 2}) == "--ray: 3 nodes x 2 per node"
    assert chosen_because({"how": "ray spread", "workers": 5}) == "--ray: 5 workers spread over the nodes"
    assert chosen_because(None) is None
    with pytest.raises(ValueError, match="'guessed'"):
        chosen_because({"how": "guessed"})


def test_auto_choosing_one_process_is_worded_as_the_pool_is() -> None:
    target = Target.parse("http://127.0.0.1:1", "/v1/completions")
    _, section = make_generator(target, _plan(4, 1), workers="auto", server_here=True, concurrency_cap=1)
    assert section is not None and section["chosen"]["how"] == "auto"
    worded = worded_section(section)
    assert worded == {"count": 1, "requested": "auto", "chosen_because": chosen_because(section["chosen"])}
    assert worded["chosen_because"].startswith("auto: 1 streams (--concurrency)")
