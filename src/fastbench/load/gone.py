"""When the server has gone away: every connection attempt refused for a stated time, nothing answered.

A server killed mid-run leaves a port that refuses every connection; a closed loop then fails each of its
remaining requests in microseconds (1,968 CONNECT failures in one such run) and calls the result a collapse.
The rule here, judged on the request table's own stamps as rows finish: the server went away once the
requests that failed to connect (``CONNECT`` with no response byte) span ``after_s`` seconds, from the first
such failure to the latest, with no response byte received from the server in between (any read counts).
While the server is silent the watch makes connection attempts of its own (an open loop's arrivals wait for
a pooled connection rather than fail, leaving no row to read); a refused one counts as a refusal, an
accepted one as an answer.
The run then stops like an interrupted one, and keeps what it measured.

While connections are refused, a closed-loop slot waits before its next attempt (:func:`refusal_wait`), so the
dead port is not hammered and the rule's seconds pass with a few dozen failed requests, not thousands.
"""

from __future__ import annotations

import numpy as np

from fastbench.results.records import COL, ErrorClass

STOP_REASON = "server went away"  # the run's stopped_reason when the rule held
# Default for --server-gone-s: longer than a connect storm's refusals or a load balancer's failover, short
# beside a run; 0 turns the rule off.
SERVER_GONE_S = 5.0
# How often the driver looks at the table, and how many rows past the first unfinished one it looks at.
LOOK_INTERVAL_S = 0.05
LOOK_ROWS = 65_536
# After this long without a read, the watch makes a connection attempt of its own every as often: an open
# loop against a dead port leaves its arrivals waiting for a pooled connection, with no failed row to read.
PROBE_AFTER_S = 0.5
# A closed-loop slot's wait after its n-th refusal in a row: 10 ms doubling, at most half a second.
FIRST_WAIT_S = 0.01
LONGEST_WAIT_S = 0.5


def refusal_wait(refusals_in_a_row: int) -> float:
    """Seconds a slot waits before its next connection attempt after this many refusals in a row."""
    if refusals_in_a_row <= 0:
        return 0.0
    return float(min(LONGEST_WAIT_S, FIRST_WAIT_S * 2.0 ** min(refusals_in_a_row - 1, 16)))


def refused(row: np.ndarray) -> bool:
    """The request failed to connect: refused, or closed before any response byte."""
    return bool(row[COL["error"]] == ErrorClass.CONNECT and row[COL["first_byte_ns"]] == 0)


class ServerGoneWatch:
    """Follows the request table as its rows finish and says when the rule above holds."""

    def __init__(self, rows: np.ndarray, after_s: float, started_ns: int = 0) -> None:
        """``started_ns``: when the watch began; its first attempt of its own comes PROBE_AFTER_S later at the
        earliest, so a run whose server answers at once never sees one."""
        self.rows = rows
        self.after_ns = int(after_s * 1e9)
        self.mark = 0  # every row before it has finished and been looked at
        self.last_answer_ns = 0  # the latest stamp at which the server was seen answering
        self.first_refused_ns = 0  # the first refusal after it (0: none)
        self.last_refused_ns = 0
        self._reads = 0
        self._probed_ns = started_ns

    @property
    def refused_for_s(self) -> float:
        """How long every connection attempt has been refused, by the rows' stamps."""
        if not self.first_refused_ns:
            return 0.0
        return (self.last_refused_ns - self.first_refused_ns) / 1e9

    def probe_due(self, now_ns: int) -> bool:
        """Whether to try a connection now: the server has been silent, and no attempt of the watch's own
        was made within PROBE_AFTER_S."""
        quiet_since = max(self.last_answer_ns, self._probed_ns)
        return now_ns - quiet_since >= PROBE_AFTER_S * 1e9

    def probed(self, at_ns: int, accepted: bool) -> None:
        """The watch's own connection attempt at ``at_ns``: accepted (the server listens), or refused."""
        self._probed_ns = at_ns
        if accepted:
            self.last_answer_ns = max(self.last_answer_ns, at_ns)
            self.first_refused_ns = self.last_refused_ns = 0
        elif at_ns > self.last_answer_ns:
            self.first_refused_ns = min(self.first_refused_ns or at_ns, at_ns)
            self.last_refused_ns = max(self.last_refused_ns, at_ns)

    def look(self, reads: int, now_ns: int) -> bool:
        """Take in the rows finished since the last look; ``reads``: the core's count of socket reads (a
        growing count is the server answering, on a stream still in flight too). True: the server went away."""
        if reads != self._reads:
            self._reads = reads
            self.last_answer_ns = max(self.last_answer_ns, now_ns)
        window = self.rows[self.mark:self.mark + LOOK_ROWS]
        end = window[:, COL["end_ns"]]
        first_byte = window[:, COL["first_byte_ns"]]
        if first_byte.size:
            self.last_answer_ns = max(self.last_answer_ns, int(first_byte.max()))
        refusals = end[(window[:, COL["error"]] == ErrorClass.CONNECT) & (first_byte == 0) & (end > 0)]
        refusals = refusals[refusals > self.last_answer_ns]
        if self.first_refused_ns and self.first_refused_ns <= self.last_answer_ns:  # it answered since: again
            self.first_refused_ns = self.last_refused_ns = 0
        if refusals.size:
            earliest, latest = int(refusals.min()), int(refusals.max())
            self.first_refused_ns = min(self.first_refused_ns or earliest, earliest)
            self.last_refused_ns = max(self.last_refused_ns, latest)
        unfinished = np.flatnonzero(end == 0)
        self.mark += int(unfinished[0]) if unfinished.size else len(end)
        return bool(self.after_ns and self.first_refused_ns
                    and self.last_refused_ns - self.first_refused_ns >= self.after_ns)
