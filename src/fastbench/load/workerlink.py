"""What the parent of a ``--workers`` run holds of each worker: its share of the run's schedule (the
open loop's arrivals drawn once, as one process draws them, then dealt by :func:`split_schedule`; the rule
is in :mod:`fastbench.load.workers`) and its end of the link to the worker (:class:`WorkerLink`: how it is
reached, what it said, and how it was lost).
"""

from __future__ import annotations

import asyncio
import dataclasses
import mmap
from typing import Any

import numpy as np

from fastbench.load import pacer
from fastbench.load.plan import LoadPlan
from fastbench.load.worker import WorkerOutcome, write_frame

__all__ = ("Share", "WorkerLink", "arrival_offsets_ns", "merged_chunk_counts", "split_schedule")


def arrival_offsets_ns(plan: LoadPlan) -> np.ndarray | None:
    """The open loop's arrivals, drawn as one process draws them (None: closed loop)."""
    n = len(plan.bodies)
    if plan.arrival_offsets_ns is not None:  # a trace's times
        return np.asarray(plan.arrival_offsets_ns, dtype=np.int64)
    if plan.ramp_up is not None:
        strategy, start_rps, end_rps = plan.ramp_up
        return pacer.ramp_up_offsets_ns(n, strategy, start_rps, end_rps, plan.burstiness, plan.seed)
    if plan.request_rate is not None:
        return pacer.arrival_offsets_ns(n, plan.request_rate, plan.burstiness, plan.seed)
    return None


@dataclasses.dataclass(frozen=True)
class Share:
    """One worker's part of the schedule."""

    rows: np.ndarray  # int64: the workload indexes of its requests, in the order it sends them (claimed: all)
    slots: int
    warmups: list[int]  # indexes into the warm-up bodies
    offsets: np.ndarray | None  # its arrivals' offsets from the common start (open loop)


def split_schedule(n: int, concurrency: int, offsets: np.ndarray | None, n_warmups: int,
                   workers: int, *, claimed: bool = False) -> list[Share]:
    """Deal one run's schedule to ``workers`` workers (fewer when there are fewer slots or requests:
    each holds at least one of both). See the module's docstring for the rule. ``claimed``: every
    worker holds every request and claims them as its slots free; in the open loop the cap is then
    shared, and each worker's ``slots`` is the whole of it (at most that many of the run's at once)."""
    count = max(1, min(workers, concurrency, n))
    if claimed and offsets is not None:
        slots = [concurrency] * count
    else:
        slots = [concurrency // count + (1 if w < concurrency % count else 0) for w in range(count)]
    index = np.arange(n, dtype=np.int64)
    owner = index % count if offsets is not None else (index % concurrency) % count
    shares = []
    for w in range(count):
        rows = index if claimed else index[owner == w]
        shares.append(Share(rows=rows, slots=slots[w], warmups=list(range(w, n_warmups, count)),
                            offsets=offsets[rows] if offsets is not None else None))
    return shares


@dataclasses.dataclass
class WorkerLink:
    """The parent's end of one worker: how it is reached, and what it said."""

    share: Share
    index: int
    process: asyncio.subprocess.Process | None = None
    writer: asyncio.StreamWriter | None = None
    reader: asyncio.StreamReader | None = None
    shared: mmap.mmap | None = None
    table: np.ndarray | None = None  # dealt requests: its own table (claimed: the pool holds the run's)
    claims: np.ndarray | None = None  # the shared header: [0] is the count of rows it has claimed (dealt)
    ready: bool = False
    heard_ns: int = 0  # when it last said anything (0: not yet)
    finishing: bool = False  # its window is over; it is building its result
    progress: dict[str, int] = dataclasses.field(default_factory=dict)
    # its running chunk histograms as last reported (worker.running_chunk_counts): name -> (indexes, counts)
    chunk_counts: dict[str, tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict)
    outcome: WorkerOutcome | None = None
    failure: str | None = None  # its own error, when it reported one
    lost_ns: int = 0
    lost_how: str = ""
    stderr_tail: list[str] = dataclasses.field(default_factory=list)

    def take_progress(self, report: dict[str, Any]) -> None:
        """A progress report: its counts, and its chunk histograms when it carries them."""
        chunk_counts = report.pop("chunk_counts", None)
        if chunk_counts is not None:
            self.chunk_counts = chunk_counts
        self.progress = report

    def send(self, kind: str, payload: Any) -> None:
        if self.writer is not None and not self.writer.is_closing():
            self.writer.write(write_frame(kind, payload))

    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def name(self) -> str:
        """How the result names it: "worker 1 (pid 123)"."""
        return f"worker {self.index} (pid {self.pid() if self.pid() is not None else '?'})"


def merged_chunk_counts(workers: list[WorkerLink], counts_len: int) -> dict[str, np.ndarray]:
    """The workers' running chunk histograms as last reported, added up (HDR counts of one layout merge
    exactly); empty before any worker reported them."""
    out: dict[str, np.ndarray] = {}
    for worker in workers:
        for name, (at, counts) in worker.chunk_counts.items():
            out.setdefault(name, np.zeros(counts_len, dtype=np.int64))[at] += counts
    return out
