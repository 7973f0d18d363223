"""The result's ``fastbench.workers`` section in words: why so many workers ran, and how the schedule was
dealt to them.

The pools (load/workers.py, load/raypool.py) record what happened as data, in RunData.extra["workers"]:
``chosen`` (None, or a record whose ``how`` is "auto", "sessions", "fewer", "ray per node" or "ray
spread") and ``dealing`` (``how``: "shared cap", "claimed", "dealt closed", "dealt open" or "dealt open
split", with the workers and the cap). :func:`worded_section` turns those into the result file's
``chosen_because`` and ``dealt`` sentences (docs/result-schema.md), in their places; every other key
stays as the pool wrote it.
"""

from __future__ import annotations

from typing import Any

__all__ = ("chosen_because", "dealt", "worded_section")


def worded_section(section: dict[str, Any] | None) -> dict[str, Any] | None:
    """The section as the result file holds it: ``chosen`` becomes ``chosen_because`` and ``dealing``
    becomes ``dealt``, each where it stood (a section already worded is returned as it is)."""
    if section is None:
        return None
    worded: dict[str, Any] = {}
    for key, value in section.items():
        if key == "chosen":
            worded["chosen_because"] = chosen_because(value)
        elif key == "dealing":
            worded["dealt"] = dealt(value)
        else:
            worded[key] = value
    return worded


def chosen_because(chosen: dict[str, Any] | None) -> str | None:
    """Why the pool has the workers it has, in words (None: as many as were asked for)."""
    if chosen is None:
        return None
    how = chosen["how"]
    if how == "auto":
        shown = "--concurrency" if chosen["capped"] else "requests (no --concurrency cap)"
        where = f"{chosen['cores']} cores usable" + (", one left to the server on this machine"
                                                     if chosen["server_here"] else "")
        return (f"auto: {chosen['streams']} streams ({shown}) at {chosen['per_worker']} per worker want "
                f"{chosen['wanted']}; {where}: {chosen['count']}")
    if how == "sessions":
        return "multi-turn sessions run in one process (their turns are built during the run)"
    if how == "fewer":
        return (f"{chosen['requested']} asked for, {chosen['count']} used: each worker needs a slot and a request "
                f"of its own (--concurrency {chosen['concurrency']}, {chosen['requests']} requests)")
    if how == "ray per node":
        return f"--ray: {chosen['nodes']} nodes x {chosen['per_node']} per node"
    if how == "ray spread":
        return f"--ray: {chosen['workers']} workers spread over the nodes"
    raise ValueError(f"no words for how the workers were chosen: {how!r}")


def dealt(dealing: dict[str, Any]) -> str:
    """How the schedule was split over the workers, in words."""
    how, count, cap = dealing["how"], dealing["workers"], dealing["concurrency"]
    if how == "shared cap":
        return (f"open loop: the arrivals drawn once, each worker holding every one; the --concurrency "
                f"{cap} cap shared by the {count} workers through memory they share: a slot "
                "is taken on the run's in-flight count only below the cap, an arrival claimed only when due "
                "(compare-and-swaps), and a slot that frees in any worker sends the oldest due arrival, as "
                f"one process's do; worker w's timer wakes for arrivals i mod {count} = w")
    if how == "claimed":
        return (f"closed loop: the {cap} slots split over {count} workers, each holding every "
                "request; a slot that frees claims the next request from one counter in memory the workers "
                "share (an atomic add), as one process's slots do, so --concurrency is held until the "
                "requests run out")
    if how == "dealt closed":
        return (f"closed loop: the {cap} slots split over {count} workers, and each request "
                "dealt up front to the worker of its slot (request i to slot i mod concurrency), as workers "
                "on other nodes share no memory to claim from; a worker whose requests run out leaves its "
                "slots idle while another still has work")
    if how == "dealt open":
        return f"open loop: the arrivals drawn once, arrival i to worker i mod {count}; no cap binds"
    if how == "dealt open split":
        return (f"open loop: the arrivals drawn once, arrival i to worker i mod {count}; the --concurrency cap "
                "split over the workers, so an arrival waits for a slot of its own worker (workers on other "
                "nodes share no memory to share the cap through)")
    raise ValueError(f"no words for how the schedule was dealt: {how!r}")
