"""What a run's text says about it: the notes, where token counts and timestamps came from, why it collapsed.

Every sentence ``figures.summarize`` puts into a :class:`~fastbench.results.result.Result` is worded
here, from the result's own fields and the few counts in :class:`NoteFacts`. The notes go whole into
the run card's Notes and the result file; the console shows each whole, wrapped (:func:`console_notes`),
and a note says its point first.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastbench.results.cache import LABEL as PREFIX_CACHE_LABEL
from fastbench.results.records import TimestampSource
from fastbench.results.result import Counts, Result

# Below this many samples p99 / p99.9 are just the slowest request or two; the notes say so.
FEW_SAMPLES = 100


@dataclasses.dataclass(frozen=True)
class SlotWaits:
    """Open loop under a concurrency cap of ``cap`` slots: the requests that found every slot busy."""

    cap: int
    granted: int  # started requests, each granted a slot
    waited_ms: np.ndarray  # arrival to send, per request that arrived with every slot busy
    still_waiting_ms: np.ndarray  # arrival to the stop, per request still waiting for a slot when the run stopped
    pools: int = 1  # --workers whose workers each held a share of the cap (--ray): a request waited for its own's


# A trace's request sent more than this after its time counts as behind the trace's pace.
PACE_SLACK_MS = 1.0


@dataclasses.dataclass(frozen=True)
class TracePace:
    """A trace replay's sends against the trace's times (send stamp minus the request's time)."""

    started: int
    behind: int  # sent more than PACE_SLACK_MS after their time
    p99_ms: float
    max_ms: float


@dataclasses.dataclass(frozen=True)
class NoteFacts:
    """What the notes state beyond the Result's own fields, counted by ``figures`` from the request table."""

    no_tpot: int  # completed requests with fewer than 2 output tokens
    unknown_prompt: int  # completed requests without a prompt token count
    over_context: int  # completed requests reporting more prompt tokens than the server's max_model_len
    cut_short: int  # requests sent but cancelled when the run stopped
    cut_short_tokens: int  # output tokens those had received
    unreadable_outputs: int  # --save-outputs: requests whose events were not readable OpenAI chunks
    slot_waits: SlotWaits | None  # open loop under a concurrency cap only
    trace_pace: TracePace | None = None  # a trace sent at its times only


# A console note is shown whole, wrapped at this many columns, its prefix ("* ") included; a long one is
# wrapped, never cut (the result file and the card have the same text).
CONSOLE_WIDTH = 80
CUT_MARK = " …"
# Where a note may be cut, best first: after a whole clause, between list items, at a word (a heading's colon
# is no place: "heading …" alone says nothing).
_CUT_AFTER = ("; ", ", ", " ")


def console_line(note: str, width: int = CONSOLE_WIDTH) -> str:
    """``note`` as one line of at most ``width`` characters, for a table cell that has one line: whole where it
    fits, else its opening clauses, cut where one ends (never inside parentheses, and keeping at least half the
    line) and marked with " …"."""
    text = " ".join(note.split())
    if len(text) <= width:
        return text
    room = width - len(CUT_MARK)
    outside = []  # per position: not inside parentheses or brackets
    depth = 0
    for char in text[:room + 1]:
        if char in "([":
            depth += 1
        elif char in ")]" and depth:
            depth -= 1
        outside.append(depth == 0)
    for separator in _CUT_AFTER:
        cuts = [i for i in range(room // 2, room + 1) if outside[i] and text.startswith(separator, i)]
        if cuts:
            return text[:cuts[-1]].rstrip(" ;:,") + CUT_MARK
    return text[:room] + CUT_MARK


def wrapped(text: str, prefix: str, width: int = CONSOLE_WIDTH) -> list[str]:
    """``text`` whole, after ``prefix`` on its first line and under it on the next ones, in lines of at
    most ``width`` columns (a word longer than a line, e.g. a path, is left whole on its own)."""
    return textwrap.wrap(" ".join(text.split()), width, initial_indent=prefix,
                         subsequent_indent=" " * len(prefix), break_long_words=False,
                         break_on_hyphens=False) or [prefix.rstrip()]


def console_notes(notes: Sequence[str], prefix: str, width: int = CONSOLE_WIDTH) -> list[str]:
    """Each note whole after ``prefix``, wrapped at ``width`` columns."""
    return [line for note in notes for line in wrapped(note, prefix, width)]


def usage_statement(by_source: dict[str, int], completed: int) -> str:
    """Where the token counts came from (UsageSource name -> completed requests), and each fallback."""
    per_chunk = by_source.get("PER_CHUNK", 0)
    final = by_source.get("FINAL", 0)
    none = by_source.get("NONE", 0)
    inconsistent = by_source.get("INCONSISTENT", 0)
    if completed == 0:
        return "no completed request: no token counts"
    if per_chunk == completed:
        return "token counts from the server's per-chunk usage (exact per chunk)"
    parts = []
    if per_chunk:
        parts.append(f"{per_chunk}/{completed} requests had per-chunk usage")
    if final:
        parts.append(
            f"{final}/{completed} had usage only at the end: their totals (and so tokens per chunk) "
            "are exact, but per-token ITL counts each of their chunks as 1 token"
        )
    if none:
        parts.append(
            f"{none}/{completed} had no usage at all: their output tokens are the chunks with text "
            "(undercounts with speculative decoding) and their prompt tokens come from the workload, if known"
        )
    if inconsistent:
        parts.append(
            f"{inconsistent}/{completed} had usage that cannot be right (malformed, going backwards, past "
            "max_tokens, or no token for text) and is not trusted: their output tokens are the chunks with text"
        )
    return "token counts fall back: " + "; ".join(parts)


def timestamp_statement(source: TimestampSource, kernel_stamped_ratio: float | None) -> str:
    """Which clock stamped the reads, and how many reads lacked a kernel stamp."""
    if source == TimestampSource.KERNEL:
        statement = "receive timestamps: kernel (SO_TIMESTAMPNS)"
        if kernel_stamped_ratio is not None and kernel_stamped_ratio < 1.0:
            statement += f"; {100 * (1 - kernel_stamped_ratio):.1f}% of reads had none and used the user-space clock"
        return statement
    return "receive timestamps: user space (clock read after each socket read returned)"


def collapse_reason(counts: Counts, stopped_reason: str, max_error_rate: float | None) -> str | None:
    """Why the run did not measure a working server, or None when it did. A run interrupted before its
    first completion with no request failed measured nothing of the server: it is interrupted, not
    collapsed (the client stopped it)."""
    finished = counts.completed + counts.failed
    if stopped_reason == "max error rate":
        return f"stopped early: failed/finished passed max_error_rate {max_error_rate}"
    if counts.completed == 0 and not (stopped_reason == "interrupted" and counts.failed == 0):
        return "no request completed"
    if finished and counts.failed / finished > 0.5:
        return f"most requests failed ({counts.failed}/{finished})"
    return None


def run_notes(result: Result, facts: NoteFacts) -> list[str]:
    """Short statements about the run, for the card's Notes and the result file."""
    cfg, n, d = result.config, result.counts, result.distributions
    notes: list[str] = []
    failed = ", ".join(f"{name} {k}" for name, k in n.failed_by_class.items())
    failed_text = f"{n.failed} failed ({failed})" if n.failed else "0 errors"
    left = n.cancelled + n.not_started
    if result.cap_hit:
        cap = f"{cfg.max_seconds:g} s " if cfg.max_seconds is not None else ""
        notes.append(
            f"{n.completed}/{n.total} completed before the {cap}time cap, {failed_text}; "
            f"{left} not started/cancelled"
        )
    else:
        text = f"{n.completed}/{n.total} completed, {failed_text}, in {result.duration_s:.1f} s"
        if left:
            text += f"; {left} not started/cancelled"
        notes.append(text)
    if result.stopped_reason == "interrupted":
        notes.append("interrupted before the workload finished")
    if result.stopped_reason == "server went away":
        notes.append(f"the server went away: every connection attempt for {cfg.server_gone_s:g} s was refused or "
                     "closed before any byte, and nothing answered in between (--server-gone-s); the run stopped "
                     "there and keeps what it measured")
    if result.collapse_reason:
        notes.append(f"collapsed run: {result.collapse_reason}")
    if result.workers is not None:
        notes.append(_workers_note(result.workers))
    if n.resent:
        notes.append(
            f"{n.resent} requests were re-sent once on a new connection: their kept-alive "
            "connection closed or reset before any response byte"
        )
    if facts.slot_waits is not None:
        notes += _slot_wait_notes(facts.slot_waits)
    if facts.cut_short_tokens:
        notes.append(f"{facts.cut_short} requests cut short when the run stopped had received "
                     f"{facts.cut_short_tokens:,} output tokens: like vllm bench serve, token counts and throughputs "
                     "cover completed requests only")
    if facts.unreadable_outputs:
        notes.append(f"--save-outputs: {facts.unreadable_outputs} requests streamed events that are not "
                     "readable OpenAI chunks (bad JSON or types); their output_text and reasoning_text are null")
    if result.prefix_cache is not None and result.prefix_cache.warning:
        notes.append(PREFIX_CACHE_LABEL + result.prefix_cache.warning)
    if n.warmups:
        notes.append(f"{n.warmups} warm-up requests sent before the measured window, not counted")
    if 0 < n.completed < FEW_SAMPLES:
        notes.append(
            f"only {n.completed} requests completed: p99 and p99.9 are the slowest one or two requests"
        )
    notes.append(result.usage.statement)
    if facts.unknown_prompt:
        notes.append(f"{facts.unknown_prompt} completed requests have no prompt token count (counted as 0)")
    if facts.over_context:
        per_input = " per input" if result.pooling is not None and result.pooling.batch_size > 1 else ""
        notes.append(f"{facts.over_context} completed requests report more prompt tokens than the server's "
                     f"max_model_len ({result.server_info['max_model_len']}){per_input} allows: its usage cannot "
                     "be right there")
    if facts.no_tpot:
        notes.append(f"{facts.no_tpot} completed requests had fewer than 2 output tokens: no TPOT for them")
    ts = result.timestamps
    notes.append(ts.statement)
    if ts.multi_event_read_ratio is not None:
        notes.append(
            f"{100 * ts.multi_event_read_ratio:.1f}% of reads carried more than one event "
            f"({ts.events_per_read:.2f} output events per read; events of one read share its timestamp)"
        )
    if cfg.coalesce_ms == "auto":
        notes.extend(coalescing_notes(result.client.coalescing))
    elif cfg.coalesce_ms:
        text = f"reads coalesced (--coalesce-ms {cfg.coalesce_ms:g}): "
        gap = d["itl"].median
        if gap is not None and 2 * cfg.coalesce_ms > gap:  # the warning first: the console shows the opening
            text += (f"the window is over half the median chunk gap ({_fmt_ms(gap)} ms): chunks of one "
                     "stream can share a read and its stamp, and a server that leaves Nagle on waits for "
                     "the read's ACK: use a smaller window or none; ")
        notes.append(text + f"each socket drained at least every {cfg.coalesce_ms:g} ms, a stream about to end "
                            "on every arrival; times from kernel stamps")
    prefill = d.get("prefill_rate")
    if prefill is not None and prefill.count:
        notes.append(
            f"prefill rate is the median of per-request prompt tokens / raw TTFT (n={prefill.count}), "
            "not total prompt tokens / run time"
        )
    if cfg.open_loop:
        ttft, raw, late = d["ttft"], d["ttft_raw"], d["lateness"]
        notes.append(
            ("trace replay at the trace's times" if cfg.trace_timed
             else f"open loop at {cfg.rate_text} (burstiness {cfg.burstiness:g})") + ": TTFT and E2E count "
            f"from the scheduled time; median TTFT {_fmt_ms(ttft.median)} ms vs {_fmt_ms(raw.median)} ms "
            f"from the send time; sent p99 {_fmt_ms(late.p99)} ms after scheduled"
            + ("" if cfg.concurrency is None else " (waits for a slot included)")
            + ("" if result.client.late_share is None
               else f"; {100 * result.client.late_share:.1f} % of requests sent > 0.1 ms after they could go "
                    "(client lateness)")
        )
    if facts.trace_pace is not None:
        notes.append(_trace_pace_note(facts.trace_pace, cfg.effective_concurrency))
    ttfa_median, ttft_median = d["ttfa"].median, d["ttft"].median
    if ttfa_median is not None and ttft_median is not None and ttfa_median > ttft_median * 1.01:
        notes.append(f"reasoning output first: median TTFA {_fmt_ms(ttfa_median)} ms")
    skew = d.get("skew")
    if skew is not None and skew.count:
        notes.append(
            f"client skew vs the synthetic server's send stamps: p99 {skew.p99:.3f} ms, max {skew.max:.3f} ms"
        )
    cl = result.client
    slots = cfg.effective_concurrency
    # the client's own count: a server's /metrics gauges (the card's Server metrics) count otherwise
    in_flight = (f"client's mean in flight (send to last byte read) {cl.mean_in_flight:.1f} "
                 f"({'no cap' if slots is None else f'concurrency {slots}'}")
    in_flight += f", peak {cl.max_concurrent_requests})"
    if cl.cpu_per_event_us is not None:
        in_flight += f"; client CPU {cl.cpu_per_event_us:.1f} us per output event"
    notes.append(in_flight)
    notes.extend(str(note) for note in result.workload_info.get("notes") or [])
    return notes


def _trace_pace_note(pace: TracePace, cap: int | None) -> str:
    """Whether the client kept the trace's pace: a trace replay that fell behind no longer measures the
    trace's load."""
    figures = f"(lateness p99 {pace.p99_ms:.2f} ms, max {pace.max_ms:.2f} ms)"
    if pace.started and pace.behind > 0.01 * pace.started:
        why = (f"; requests that found all {cap} slots busy waited for one (--concurrency)" if cap is not None
               else "")
        return (f"the client could not keep the trace's pace: {pace.behind} of {pace.started} requests were sent "
                f"more than {PACE_SLACK_MS:g} ms after their time in the trace {figures}{why}")
    return (f"the trace's pace was kept: {pace.started - pace.behind} of {pace.started} requests sent within "
            f"{PACE_SLACK_MS:g} ms of their time in the trace {figures}")


def _slot_wait_notes(waits: SlotWaits) -> list[str]:
    """Open loop under a cap: how many requests arrived with every slot busy and waited for one
    (the wait is in their TTFT and E2EL, which run from the arrival), and how many were still
    waiting when the run stopped (cancelled, so left out of every latency figure)."""
    notes = []
    if waits.waited_ms.size:
        busy = (f"all {waits.cap} slots busy" if waits.pools <= 1 else
                f"all the slots of its worker busy (--concurrency {waits.cap} split over {waits.pools} workers, "
                "each holding its share)")
        notes.append(f"{waits.waited_ms.size} of {waits.granted} requests arrived with {busy} "
                     f"and waited for one (median {np.median(waits.waited_ms):.1f} ms, max "
                     f"{waits.waited_ms.max():.1f} ms): the wait is in their TTFT and E2EL, which run from the "
                     "arrival; without --concurrency there is no cap")
    if waits.still_waiting_ms.size:
        notes.append(f"{waits.still_waiting_ms.size} requests were still waiting for a slot when the run stopped "
                     f"(median {np.median(waits.still_waiting_ms):.1f} ms waited so far): cancelled, so no latency "
                     "figure counts them")
    return notes


# Why automatic coalescing set a tick (RunState.coalescing's names), in words
COALESCING_WHY = {
    "learning": "until the chunk gaps were known",
    "gaps": "0.4 of the short chunk gap",
    "max": "the longest tick",
    "ends": "held short: ends that came unwatched are seen on the tick",
    "few reads": "too few reads per tick to gain",
    "shared reads": "backed off: chunks of one stream shared reads",
    "user stamps": "reads without kernel stamps",
    "open loop": "open loop: arrivals on time first",
}


def describe_coalescing(summary: dict[str, Any]) -> str:
    """One statement of what automatic coalescing chose and when (driver.coalescing_summary)."""
    def tick(change: dict[str, Any]) -> str:
        return "every arrival" if not change["tick_ms"] else f"a {change['tick_ms']:.2f} ms tick"

    def step(change: dict[str, Any]) -> str:
        gap = f", short gap {change['short_gap_ms']:.2f} ms" if change.get("short_gap_ms") else ""
        at = "from the start," if change["at_s"] < 0.005 else f"{change['at_s']:.2f} s"  # set before the window
        return f"{at} {tick(change)} ({COALESCING_WHY.get(change['why'], change['why'])}{gap})"

    changes = summary["changes"]
    shown = [step(c) for c in changes]
    if len(shown) > 6:
        shown = [*shown[:3], f"... {summary['changes_total'] - 5} more ...", *shown[-2:]]
    reads = summary["reads_on_tick"] + summary["reads_on_arrival"]
    share = f"{100 * summary['reads_on_tick'] / reads:.1f}" if reads else "0"
    ended = f", ending on {tick(changes[-1])}" if changes else ""
    # what it came to first (the console shows a note's opening), then each change
    return (f"reads coalesced automatically: {share} % of reads on the tick{ended} (--coalesce-ms auto); "
            f"{summary['multi_event_reads_on_tick']} of those with several events "
            f"({summary['multi_event_reads_on_arrival']} on every arrival); "
            f"{summary['ends_unwatched']} requests ended unwatched; {'; '.join(shown)} (s from the window's start)")


def coalescing_notes(summary: dict[str, Any] | None) -> list[str]:
    """The notes on automatic coalescing: one, or one per worker."""
    if summary is None:
        return []
    if "per_worker" in summary:
        return [f"worker {i}: " + describe_coalescing(s) for i, s in enumerate(summary["per_worker"]) if s]
    return [describe_coalescing(summary)]


def _fmt_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}" if value < 10 else f"{value:.1f}"


# --workers: a note when more than this share of the slot time stood idle because the requests
# dealt to one worker ran out before another's.
IDLE_SLOT_NOTE_SHARE = 0.05


def _workers_note(workers: dict[str, Any]) -> str:
    """What --workers did: how many processes, anything that went wrong (first: the console shows a note's
    opening), why that many, how far apart they started."""
    count = workers.get("count", 1)
    text = f"{count} client worker process{'es' if count != 1 else ''}"
    problems = []
    idle = workers.get("idle_slot_share") or 0.0
    if count > 1 and idle > IDLE_SLOT_NOTE_SHARE:
        dry = max(workers.get("per_worker", ()), key=lambda w: w.get("ran_out_s") or 0.0)
        problems.append(
            f"SHORTFALL: requests were dealt to the workers up front (by slot), and worker {dry['index']} ran "
            f"out {dry['ran_out_s']:.2f} s before the end, so {idle:.0%} of the window's slot time stood idle: "
            f"mean in flight {workers.get('mean_in_flight', 0.0):.2f} of --concurrency {workers.get('concurrency')} "
            "(one process keeps every slot busy until the requests run out; docs/workers.md)")
    for lost in workers.get("per_worker", ()):
        if lost.get("lost"):
            problems.append(f"worker {lost['index']} LOST at {lost['lost']['at_s']:.3f} s ({lost['lost']['how']}): "
                            "its unfinished requests count as WORKER_LOST")
    described = ""  # why that many, where they ran, how far apart they started
    if workers.get("chosen_because"):
        described += f" ({workers['chosen_because']})"
    ray = workers.get("ray")
    if ray:  # --ray: where they ran, and how well the nodes' clocks are known
        nodes = ray.get("nodes", ())
        unknown = [n["estimate"]["uncertainty_ns"] / 1e6 for n in nodes
                   if not n.get("same_clock") and n.get("estimate")]
        clocks = (f"node clocks put on this host's to within {max(unknown):.3f} ms" if unknown
                  else "every node on this host's clock")
        fell_back = [str(n["node"])[:8] for n in nodes if n.get("clock_fallback")]
        if fell_back:  # their offsets came from Ray calls: ten times less sure than by UDP
            clocks += (f"; no UDP clock reply from node{'s' if len(fell_back) > 1 else ''} {', '.join(fell_back)}: "
                       "estimated by Ray calls")
        described += f", Ray actors on {len(nodes)} node{'s' if len(nodes) != 1 else ''} ({clocks})"
    late = [w.get("started_late_ms") for w in workers.get("per_worker", ()) if w.get("started_late_ms") is not None]
    if late:
        described += f", window started within {max(late):.3f} ms of the common instant"
    if problems:
        clauses = [f"{text}: {'; '.join(problems)}", *([described.lstrip(", ")] if described else [])]
    else:
        clauses = [text + described]
    if count > 1:
        clauses.append("merged exactly (rows concatenated, histograms added)")
    cap = workers.get("open_loop_cap")
    if count > 1 and cap == "shared":
        clauses.append("the open loop's --concurrency cap shared by every worker, as one process's")
    elif count > 1 and cap == "split":
        clauses.append("the open loop's --concurrency cap split, each worker holding its share")
    return "; ".join(clauses)
