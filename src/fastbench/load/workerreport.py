"""What the parent of a ``--workers`` run makes of its workers once the window is over: each one's part
of the merge (from its own table, or from the run's claimed one by the marks on its rows), the requests
a lost worker had claimed but not finished marked WORKER_LOST, and the result's per-worker section.

The section records what happened as data: how the workers were chosen (``chosen``) and how the
schedule was dealt (``dealing``) are codes with their numbers, worded where the result is built
(:mod:`fastbench.results.workersection`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastbench.load.driver import mean_in_flight
from fastbench.load.merge import Part, histogram_from_counts, values_at_percentiles
from fastbench.load.plan import LoadPlan
from fastbench.load.workerlink import WorkerLink, arrival_offsets_ns
from fastbench.results.records import COL, ErrorClass

__all__ = ("claimed_parts", "dealing", "dealt_parts", "fewer_workers", "mark_lost", "open_loop_cap", "section")


# -- the parts of the merge ---------------------------------------------------------------------------


def dealt_parts(workers: list[WorkerLink]) -> tuple[list[Part], list[int]]:
    """Each worker's part from its own table; how many of its rows it had claimed."""
    parts = []
    claimed = []
    for worker in workers:
        assert worker.table is not None
        table = np.array(worker.table)  # a copy: the shared memory is let go after
        claimed.append(int(worker.claims[0]) if worker.claims is not None else _claimed_as_reported(worker, table))
        parts.append(Part(worker.share.rows, table, worker.outcome.data if worker.outcome is not None else None))
    return parts, claimed


def claimed_parts(workers: list[WorkerLink], claim_next: np.ndarray, claimers: np.ndarray,
                  claim_table: np.ndarray) -> tuple[list[Part], list[int]]:
    """Each worker's part from the run's claimed table: the rows its mark is on (all of them claimed).
    A row the counter handed out that bears no mark was taken by a worker killed between its add and
    its mark (an instruction apart): only a lost worker can leave one, so it goes to the (first)
    lost worker, in flight there."""
    marks = np.array(claimers)
    taken = min(int(claim_next[0]), len(marks))
    lost = [w for w in workers if w.outcome is None]
    unmarked = np.flatnonzero(marks[:taken] == 0)
    if unmarked.size and lost:
        marks[unmarked] = lost[0].index + 1
    parts = []
    for worker in workers:
        mine = np.flatnonzero(marks == worker.index + 1)
        parts.append(Part(mine, claim_table[mine],  # a copy: the shared memory is let go after
                          worker.outcome.data if worker.outcome is not None else None, keyed_by_index=True))
    return parts, [len(part.rows_index) for part in parts]


def mark_lost(worker: WorkerLink, part: Part, claimed: int, start_ns: int) -> None:
    """A lost worker's requests claimed but not finished: failed as WORKER_LOST at the loss. Claimed
    means: the first ``claimed`` rows of its part: with claimed requests, every row its mark is on;
    dealt, those below the count of claims its core wrote in the shared header, or (open loop) due
    by the loss (an arrival waiting for a slot is part of the load it no longer applies)."""
    table = part.table
    offsets = worker.share.offsets
    if offsets is not None and not part.keyed_by_index:
        claimed = max(claimed, int(np.searchsorted(offsets, worker.lost_ns - start_ns, side="right")))
    # claimed from the shared table, its rows are workload indexes (a shared cap's offsets are the run's)
    due_index = part.rows_index if part.keyed_by_index else np.arange(len(table))
    at_s = (worker.lost_ns - start_ns) / 1e9
    why = f"in flight in {worker.name()} when it {worker.lost_how} at {at_s:.3f} s"
    for row in range(min(claimed, len(table))):
        if table[row].any():
            continue
        r = table[row]
        r[COL["index"]] = row
        r[COL["scheduled_ns"]] = start_ns + (int(offsets[due_index[row]]) if offsets is not None else 0)
        r[COL["end_ns"]] = worker.lost_ns
        r[COL["prompt_tokens"]] = -1
        r[COL["cached_tokens"]] = -1
        r[COL["error"]] = int(ErrorClass.WORKER_LOST)
        part.error_messages[row] = why


def _claimed_as_reported(worker: WorkerLink, table: np.ndarray) -> int:
    """Rows claimed, for a transport without the shared claim count: at least the count it last
    reported and every row up to its last finished one (rows claimed since its last report are
    missed)."""
    finished = np.flatnonzero(table.any(axis=1))
    return max(int(worker.progress.get("claimed", 0)), int(finished[-1]) + 1 if finished.size else 0)


# -- the result's section -----------------------------------------------------------------------------


def section(workers: list[WorkerLink], parts: list[Part], plan: LoadPlan, *, requested: int,
            chosen: dict[str, Any] | None, claiming: bool, sharing_cap: bool, start_ns: int,
            end_ns: int) -> dict[str, Any]:
    """The result's per-worker section: enough to see a lagging or lost worker, and how the work
    was dealt (and what that cost: slots left idle by a worker whose share ran out first).
    ``claiming``: the requests were claimed from one shared table; ``sharing_cap``: so were an open
    loop's arrivals, under one cap."""
    each = []
    idle_slot_ns = 0
    for worker, part in zip(workers, parts, strict=True):
        # dealt up front, a closed loop's worker can run out while another has work (claimed: never)
        dry_ns = _ran_dry_ns(part.table, end_ns) if worker.share.offsets is None and not claiming else 0
        idle_slot_ns += dry_ns * worker.share.slots
        each.append(_worker_entry(worker, part, dry_ns, len(workers) if sharing_cap else 0, start_ns))
    return {
        "count": len(workers),
        "requested": requested,
        "chosen": chosen,
        "dealing": dealing(plan, len(workers), claiming=claiming, sharing_cap=sharing_cap),
        "open_loop_cap": open_loop_cap(plan, sharing_cap),
        # closed loop dealt up front: the share of the window's slot time left idle because a worker's
        # requests ran out while another's had not (one process keeps every slot busy until the last
        # request; claimed requests do too: 0)
        "mean_in_flight": sum(mean_in_flight(p.table, start_ns, end_ns) for p in parts),
        "concurrency": plan.concurrency,
        "idle_slot_share": (idle_slot_ns / (plan.concurrency * (end_ns - start_ns))
                            if end_ns > start_ns else 0.0),
        "process": "python -m fastbench.load.worker, one event loop and native core each",
        "start_ns": start_ns,
        "lost": [w.index for w in workers if w.outcome is None],
        "per_worker": each,
    }


def _worker_entry(worker: WorkerLink, part: Part, dry_ns: int, shared_by: int, start_ns: int) -> dict[str, Any]:
    """One worker's figures; ``shared_by``: the workers sharing an open loop's cap (0: none shared)."""
    table = part.table
    started = table.any(axis=1)
    error = table[:, COL["error"]]
    done = started & (error == 0) & (table[:, COL["end_ns"]] > 0)
    classes: dict[str, int] = {}
    for code in error[started & (error != 0)].tolist():
        name = ErrorClass(code).name
        classes[name] = classes.get(name, 0) + 1
    data = part.data
    entry: dict[str, Any] = {
        "index": worker.index,
        "pid": worker.pid(),
        "requests": len(part.rows_index),  # dealt to it, or claimed by it
        "slots": worker.share.slots,
        "completed": int(done.sum()),
        "not_started": int((~started).sum()),
        "errors": classes,
        "stopped_reason": data.stopped_reason if data is not None else "lost",
        "ran_out_s": dry_ns / 1e9,  # closed loop: its share was done this long before the window's end
        # shared cap: the arrivals it claimed (sent, or cancelled at a stop) that its timer was not
        # for (i mod N != its index): sent as its slot freed while theirs waited, as one process would
        "others_arrivals": (int(np.count_nonzero(part.rows_index % shared_by != worker.index))
                            if shared_by else 0),
        "lost": None if worker.outcome is not None else {
            "at_s": (worker.lost_ns - start_ns) / 1e9, "how": worker.lost_how},
    }
    if data is not None and worker.outcome is not None:
        samples = data.concurrency_samples
        entry.update(
            started_late_ms=worker.outcome.started_late_ns / 1e6,
            client_cpu_s=data.client_cpu_ns / 1e9,
            cpu_per_event_us=data.client_cpu_ns / 1e3 / data.output_events if data.output_events else None,
            mean_in_flight=float(np.mean(samples[:, 1])) if len(samples) else 0.0,
            max_in_flight=int(samples[:, 1].max()) if len(samples) else 0,
            skew_ms=_quantiles_ms(data.histograms["skew"]),
            arrival_lead_us=(data.extra["arrival_lead_ns"] / 1e3
                             if data.extra.get("arrival_lead_ns") is not None else None),
        )
    return entry


def fewer_workers(plan: LoadPlan, requested: int, count: int) -> dict[str, Any] | None:
    """Why ``count`` workers ran where ``requested`` were asked for (None: as many as asked)."""
    if count >= requested:
        return None
    return {"how": "fewer", "requested": requested, "count": count, "concurrency": plan.concurrency,
            "requests": len(plan.bodies)}


def dealing(plan: LoadPlan, count: int, *, claiming: bool, sharing_cap: bool) -> dict[str, Any]:
    """How the schedule was split over ``count`` workers: ``how`` is "shared cap" (an open loop's
    arrivals claimed under one cap), "claimed" (a closed loop's requests claimed from one table),
    "dealt closed" (by slot, up front), "dealt open" (arrival i to worker i mod count, no cap binds) or
    "dealt open split" (the same, each worker its share of a cap that binds)."""
    if sharing_cap:
        how = "shared cap"
    elif claiming:
        how = "claimed"
    elif arrival_offsets_ns(plan) is None:
        how = "dealt closed"
    elif plan.concurrency >= len(plan.bodies):
        how = "dealt open"
    else:
        how = "dealt open split"
    return {"how": how, "workers": count, "concurrency": plan.concurrency}


def open_loop_cap(plan: LoadPlan, sharing_cap: bool) -> str | None:
    """An open loop's --concurrency cap over the workers: "shared" (one, as one process's) or "split"
    (each worker its share); None in closed loop or where no cap binds."""
    if sharing_cap:
        return "shared"
    if arrival_offsets_ns(plan) is None or plan.concurrency >= len(plan.bodies):
        return None
    return "split"


def _ran_dry_ns(table: np.ndarray, end_ns: int) -> int:
    """How long before ``end_ns`` a worker's last request ended, when it had sent them all (else 0)."""
    started = table.any(axis=1)
    if not started.size or not started.all():
        return 0
    last = int(table[:, COL["end_ns"]].max())
    return max(0, end_ns - last)


def _quantiles_ms(counts: Any) -> dict[str, float] | None:
    """p50/p99/max of a worker's skew histogram (its HDR counts), in ms; None when it is empty."""
    hist = histogram_from_counts(np.asarray(counts, dtype=np.int64))
    if hist.get_total_count() == 0:
        return None
    p50, p99 = values_at_percentiles(hist, (50.0, 99.0))
    return {"p50": p50 / 1e6, "p99": p99 / 1e6, "max": hist.get_max_value() / 1e6}
