"""A remote clock's offset to this one, estimated as NTP does: from the exchange with the shortest
round trip.

One exchange: this side reads its clock (``sent_ns``), asks the other side for its clock
(``remote_ns``), reads its own again (``received_ns``). The remote reading was taken somewhere
between the two local ones, so ``remote_ns - (sent_ns + received_ns) / 2`` is the offset to within
half the round trip, whatever the delays of each leg. Of many exchanges the one with the shortest
round trip bounds it tightest; that half round trip is the uncertainty recorded with it.

Used by ``--ray`` (fastbench.load.raypool): every latency is a difference of two stamps taken on one
node's clock and needs no offset; the window's edges and time series, which set stamps of different
nodes side by side, are put on the driver's clock with it (:func:`shift_rows`), and so is each chunk's
skew, which sets a node's receive stamp beside the server's send stamp (the core subtracts the offset).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from fastbench.results.records import COL

__all__ = ("INSTANT_COLUMNS", "ClockOffset", "ClockSample", "estimate_offset", "shift_rows")

# Columns of the request table that are instants (absolute stamps), not durations or counts.
INSTANT_COLUMNS = [COL[name] for name in ("scheduled_ns", "sent_ns", "first_byte_ns", "first_token_ns",
                                          "first_answer_ns", "end_ns")]


@dataclasses.dataclass(frozen=True)
class ClockSample:
    """One exchange: this clock before asking, the remote clock's answer, this clock after."""

    sent_ns: int
    remote_ns: int
    received_ns: int

    @property
    def round_trip_ns(self) -> int:
        return self.received_ns - self.sent_ns


@dataclasses.dataclass(frozen=True)
class ClockOffset:
    """``offset_ns``: the remote clock minus this one (a remote stamp ``t`` is ``t - offset_ns`` here),
    true to within ``uncertainty_ns`` either way."""

    offset_ns: int
    uncertainty_ns: int
    min_round_trip_ns: int
    median_round_trip_ns: int
    samples: int
    method: str = ""  # how the exchanges went: "udp" (fastbench.load.udpclock) or "ray-call" (an actor call)
    unanswered: int = 0  # exchanges asked for but never answered (UDP pings lost or late)
    ignored: int = 0  # answers that were not to the exchange waited for (late, duplicated, garbled)

    def to_remote(self, local_ns: int) -> int:
        """An instant of this clock on the remote one."""
        return local_ns + self.offset_ns

    def to_local(self, remote_ns: int) -> int:
        """An instant of the remote clock on this one."""
        return remote_ns - self.offset_ns

    def agrees_with(self, offset_ns: int) -> bool:
        """Whether ``offset_ns`` lies within this estimate's uncertainty."""
        return abs(offset_ns - self.offset_ns) <= self.uncertainty_ns

    def as_dict(self) -> dict[str, int | str]:
        return dataclasses.asdict(self)


def estimate_offset(samples: Sequence[ClockSample], *, method: str = "", unanswered: int = 0,
                    ignored: int = 0) -> ClockOffset:
    """The offset from the exchange with the shortest round trip (see the module's docstring);
    ``method`` and the counts of exchanges that gave no sample are recorded with it."""
    if not samples:
        raise ValueError("no clock samples")
    for sample in samples:
        if sample.received_ns < sample.sent_ns:
            raise ValueError(f"a clock sample ends before it starts: {sample}")
    best = min(samples, key=lambda s: s.round_trip_ns)
    # The true offset lies in [remote - received, remote - sent]; its middle, rounded down, is within
    # half the width rounded up of either end.
    low, high = best.remote_ns - best.received_ns, best.remote_ns - best.sent_ns
    trips = sorted(s.round_trip_ns for s in samples)
    return ClockOffset(offset_ns=(low + high) // 2, uncertainty_ns=(high - low + 1) // 2,
                       min_round_trip_ns=best.round_trip_ns, median_round_trip_ns=trips[len(trips) // 2],
                       samples=len(samples), method=method, unanswered=unanswered, ignored=ignored)


def shift_rows(rows: np.ndarray, offset_ns: int) -> np.ndarray:
    """Request rows of a clock ``offset_ns`` ahead of this one, on this one: every instant set
    (non-zero) less the offset; a copy (the rows themselves when the offset is 0)."""
    if offset_ns == 0 or not len(rows):
        return rows
    shifted = np.array(rows, dtype=np.int64)
    instants = shifted[:, INSTANT_COLUMNS]
    shifted[:, INSTANT_COLUMNS] = np.where(instants != 0, instants - offset_ns, 0)
    return shifted
