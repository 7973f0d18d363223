"""The aggregate throughput a study reads: each run's steady-state figure, its whole-window one where it has none.

A cell's whole-window ``output_throughput`` counts its ramp-up and drain, and reads low at high
concurrency with varied output lengths; ``steady_output_throughput`` (definition
``steady_output_throughput``) is what the server sustained at the cell's load. The sweep summary, the
crossover figure and the Pareto frontier read :data:`SUSTAINED_KEY`, a flat key made here from the two:
the steady figure, or the whole-window one for a run without a steady interval (an older result, a run
that never reached its concurrency, a ramp), with :data:`STEADY_SHARE_KEY` 1.0 or 0.0 beside it so the
mean over a point's repeats is the share of its runs that had one, and the page says where it fell back.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ("LABEL", "STEADY_SHARE_KEY", "SUSTAINED_KEY", "THROUGHPUT_TEXT", "fallback_line", "axis_label",
           "fallback_mark", "fallback_note", "runs_fallback_line", "with_sustained")

SUSTAINED_KEY = "sustained_output_throughput"
STEADY_SHARE_KEY = "sustained_is_steady"  # 1.0: the steady-state figure; 0.0: the whole window's
LABEL = "steady-state output throughput"
MARK = "*"
THROUGHPUT_TEXT = (f"throughput: the {LABEL}, over the part of each run where its load held (ramp-up and drain "
                   "left out: definition steady_output_throughput)")


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def with_sustained(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The run's flat keys with :data:`SUSTAINED_KEY` and :data:`STEADY_SHARE_KEY` added (both None when
    it has neither figure)."""
    steady, whole = _number(flat.get("steady_output_throughput")), _number(flat.get("output_throughput"))
    out = dict(flat)
    out[SUSTAINED_KEY] = steady if steady is not None else whole
    out[STEADY_SHARE_KEY] = None if steady is None and whole is None else float(steady is not None)
    return out


def fallback_mark(share: float | None) -> str:
    """The mark a summary puts by a throughput whose runs were not all steady-state."""
    return MARK if share is not None and share < 1.0 else ""


def fallback_line(shares: Iterable[Any], of: str = "runs", names: Sequence[str] = ()) -> str | None:
    """From each run's (or point's) :data:`STEADY_SHARE_KEY`: how many fell back to the whole window's
    throughput, as a line to show beside the figure (naming them from ``names``, in the same order, where
    given); None when none did."""
    known = [(s, name) for s, name in itertools.zip_longest((_number(x) for x in shares), names) if s is not None]
    fell = [name for s, name in known if s < 1.0]
    if not fell:
        return None
    have = "have runs without a" if of == "points" else "have no"
    named = [name for name in fell if name]
    which = f" ({', '.join(named[:5])}{', ...' if len(named) > 5 else ''})" if named else ""
    return f"{len(fell)} of {len(known)} {of}{which} {have} steady interval: the whole-window throughput is used"


def runs_fallback_line(points: Sequence[Any]) -> str | None:
    """:func:`fallback_line` over a figure's runs (``figures_data.RunPoint``), each named by variant and load."""
    def name(p: Any) -> str:
        load = f"c={p.concurrency}" if p.concurrency is not None else (
            f"rate={p.request_rate:g}" if p.request_rate is not None else "")
        return f"{p.variant} {load}".strip()

    return fallback_line([p.flat.get(STEADY_SHARE_KEY) for p in points], names=[name(p) for p in points])


def fallback_note(shares: Iterable[Any], of: str = "runs") -> str:
    """One line for a table: which throughput it shows, and :func:`fallback_line`'s count."""
    line = fallback_line(shares, of)
    return THROUGHPUT_TEXT + (f"; {line} (marked {MARK})" if line else "")


def axis_label(points: Sequence[Any], unit: str = "tokens/s") -> str:
    """A figure's throughput axis label: it names the steady-state figure and, on a second line, how many
    of the figure's runs (``figures_data.RunPoint``) fell back to the whole window's."""
    shares = [_number(p.flat.get(STEADY_SHARE_KEY)) for p in points]
    known = [s for s in shares if s is not None]
    fell = sum(1 for s in known if s < 1.0)
    label = f"Aggregate output throughput, steady state ({unit})"
    return label + (f"\n({fell} of {len(known)} runs: whole window, no steady interval)" if fell else "")
