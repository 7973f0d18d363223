"""The figures of a multi-turn run (``--multi-turn``): per turn index, how TTFT grows with the history,
and per session, how far each got and how long it took. Derived after the run from the request table
and the workload's map of rows to sessions and turns; definitions in ``definitions.DEFINITIONS``
(``turn_ttft``, ``turn_prompt_tokens``, ``session_turns_completed``, ``session_duration``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastbench.results.records import COL, ErrorClass


def session_figures(rows: np.ndarray, session_of_row: np.ndarray, turn_of_row: np.ndarray,
                    open_loop: bool, prompt_lens: Any = None) -> dict[str, Any]:
    """The ``sessions`` section of the result.

    :param rows: the request table (one row per turn of every session).
    :param session_of_row, turn_of_row: per row, its session and turn index (0-based).
    :param open_loop: latency counts from the scheduled time (else from the send), as for TTFT.
    :param prompt_lens: per row, the workload's prompt length (None where unknown): used where the
        server reported none.
    """
    col = {name: rows[:, i] for name, i in COL.items()}
    started = rows.any(axis=1)
    completed = started & (col["error"] == ErrorClass.OK) & (col["end_ns"] > 0)
    has_first = completed & (col["first_token_ns"] > 0)
    origin = col["scheduled_ns"] if open_loop else col["sent_ns"]
    ttft_ms = (col["first_token_ns"] - origin) / 1e6
    prompt = col["prompt_tokens"].astype(np.float64)
    if prompt_lens is not None:
        known = np.array([-1 if n is None else n for n in prompt_lens], dtype=np.float64)
        prompt = np.where(prompt >= 0, prompt, known)
    per_turn = []
    for turn in range(int(turn_of_row.max()) + 1 if len(turn_of_row) else 0):
        at = turn_of_row == turn
        ttfts = ttft_ms[at & has_first]
        prompts = prompt[at & completed]
        prompts = prompts[prompts >= 0]
        per_turn.append({
            "turn": turn + 1,
            "requests": int(at.sum()),
            "started": int((at & started).sum()),
            "completed": int((at & completed).sum()),
            "ttft_ms_p50": float(np.percentile(ttfts, 50)) if ttfts.size else None,
            "ttft_ms_p99": float(np.percentile(ttfts, 99)) if ttfts.size else None,
            "mean_prompt_tokens": float(prompts.mean()) if prompts.size else None,
        })
    n = int(session_of_row.max()) + 1 if len(session_of_row) else 0
    turns = np.bincount(session_of_row, minlength=n)
    done_turns = np.bincount(session_of_row, weights=completed, minlength=n).astype(np.int64)
    began = np.bincount(session_of_row, weights=started, minlength=n) > 0
    failed = started & (col["error"] != ErrorClass.OK) & (col["error"] != ErrorClass.CANCELLED)
    had_failure = np.bincount(session_of_row, weights=failed, minlength=n) > 0
    finished = done_turns == turns
    # a session's span: its first turn's start to its last turn's end (completed sessions only)
    first = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(first, session_of_row[started], origin[started])
    last = np.zeros(n, dtype=np.int64)
    np.maximum.at(last, session_of_row[completed], col["end_ns"][completed])
    durations = (last[finished] - first[finished]) / 1e9
    return {
        "sessions": n,
        "completed": int(finished.sum()),
        "ended_early": int((began & ~finished).sum()),
        "ended_by_failure": int((began & ~finished & had_failure).sum()),
        "cut_short": int((began & ~finished & ~had_failure).sum()),
        "not_started": int((~began).sum()),
        "turns_per_session_mean": float(turns.mean()) if n else None,
        "turns_completed": value_summary(done_turns[began].astype(np.float64)),
        "duration_s": value_summary(durations),
        "per_turn": per_turn,
    }


def value_summary(values: np.ndarray) -> dict[str, float | None]:
    """Mean, median, p99, min and max of ``values`` (None each where there are none)."""
    if values.size == 0:
        return {"mean": None, "median": None, "p99": None, "min": None, "max": None}
    median, p99 = (float(x) for x in np.percentile(values, [50.0, 99.0]))
    return {"mean": float(values.mean()), "median": median, "p99": p99, "min": float(values.min()),
            "max": float(values.max())}
