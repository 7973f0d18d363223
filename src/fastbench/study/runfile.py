"""One run as the study reads it: its result document, the flat keys an index row and a comparison use,
and the per-request values kept beside it.

The flat keys are the result file's top-level scalars (``vllm bench serve``'s names: ``p99_ttft_ms``,
``output_throughput``, ...) and, for the figures vLLM has no key for, the same pattern built from
``fastbench.distributions``: ``{stat}_{metric}_{unit}`` (``median_decode_rate_tok_s``,
``p99_lateness_ms``), with ``fastbench.throughput``'s own names (``prefill_throughput_tok_s``). Where a
name exists at the top level, the top level wins (vLLM's reading of a metric without samples is 0).
Two keys say what the run started from: ``prompt_seed`` (the seed that drew its prompts) and
``prefix_cache_reset`` (true when the server's prefix cache was emptied before it).
"""

from __future__ import annotations

import datetime
import gzip
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from fastbench.exceptions import StoreError
from fastbench.study.sustained import with_sustained

if TYPE_CHECKING:
    import numpy as np

__all__ = ("DONE_REASONS", "PER_REQUEST", "RunMeta", "flat_complete", "flat_keys", "flat_failed", "flat_status",
           "flat_why",
           "is_complete", "load_result", "per_request_values", "read_records", "run_meta", "run_status")

Scalar = int | float | str | bool | None

# The per-request series a comparison can resample, each computed from a --save-detailed record as the
# result file computes it (results/figures.py): name -> unit.
PER_REQUEST: dict[str, str] = {
    "ttft": "ms", "tpot": "ms", "e2el": "ms", "decode_rate": "tok/s", "prefill_rate": "tok/s",
}


# -- how a run ended: the one rule every reader of a study uses -------------------------------------

DONE_REASONS = ("completed", "time cap")  # the run ended as it was asked to


def is_complete(stopped_reason: str | None, completed: int | None, collapsed: bool = False) -> bool:
    """A complete cell: the run did what it was asked to, ran its whole workload or ran to its time cap
    having completed a request, and measured a working server. A collapsed run (most requests failed,
    none completed: an engine that died mid-cell) is not, nor is an interrupted run, one capped before
    its first completion, one stopped by the max error rate, a lost worker or a dead server: each is
    kept and listed with its status and reason, never averaged into a point, and a sweep runs its cell
    again. A result without a stopped_reason (written by hand) is taken as complete."""
    if collapsed:
        return False
    if stopped_reason is None or stopped_reason == "completed":
        return True
    return stopped_reason == "time cap" and bool(completed)


def run_status(stopped_reason: str | None, completed: int | None, failed: int | None, collapsed: bool) -> str:
    """How a run ended, in the word the listings and the report show: ``ok``, ``time cap`` (ended at
    its --max-seconds, requests completed), ``COLLAPSED`` (the server did not work: most requests
    failed, the max error rate stopped it, or a whole workload ran without one completion),
    ``INTERRUPTED`` (Ctrl-C, the API's stop event), ``CAPPED-EMPTY`` (the time cap came before the
    first completion) or ``FAILED (REASON)`` (the server exited, a worker was lost)."""
    if stopped_reason == "interrupted" or (stopped_reason == "time cap" and not completed):
        if collapsed and failed:  # requests failed: the server's doing, not the client's stop
            return "COLLAPSED"
        return "INTERRUPTED" if stopped_reason == "interrupted" else "CAPPED-EMPTY"
    if collapsed:
        return "COLLAPSED"
    if stopped_reason is None or stopped_reason == "completed":
        return "ok"
    return "time cap" if stopped_reason == "time cap" else f"FAILED ({stopped_reason})"


def _flat_whole(flat: Mapping[str, Any], key: str) -> int | None:
    value = flat.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def flat_complete(flat: Mapping[str, Any]) -> bool:
    """:func:`is_complete` of a run read by its flat keys."""
    reason = flat.get("stopped_reason")
    return is_complete(reason if isinstance(reason, str) else None, _flat_whole(flat, "completed"),
                       bool(flat.get("collapsed")))


def flat_status(flat: Mapping[str, Any]) -> str:
    """:func:`run_status` of a run read by its flat keys."""
    reason = flat.get("stopped_reason")
    return run_status(reason if isinstance(reason, str) else None, _flat_whole(flat, "completed"),
                      _flat_whole(flat, "failed"), bool(flat.get("collapsed")))


def flat_failed(flat: Mapping[str, Any]) -> bool:
    """The run measured no working server: it collapsed, or the server exited or a worker was lost
    (:func:`run_status` COLLAPSED or FAILED). A sweep records its cell failed; a Ctrl-C or an empty
    time cap is the client's doing, not a failure."""
    status = flat_status(flat)
    return status == "COLLAPSED" or status.startswith("FAILED")


def flat_why(flat: Mapping[str, Any]) -> str:
    """Why a run is no complete cell, in words (its collapse reason, else how it stopped); "" when it is one."""
    if flat_complete(flat):
        return ""
    if flat.get("collapsed"):
        reason = flat.get("collapse_reason")
        return f"the server collapsed: {reason}" if isinstance(reason, str) and reason else "the server collapsed"
    reason = flat.get("stopped_reason")
    if reason == "time cap":
        return "time cap before the first completion"
    return str(reason) if isinstance(reason, str) and reason else "not complete"


def load_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A fastbench result file's document; a StoreError in one line when it is none."""
    try:
        doc = orjson.loads(Path(path).read_bytes())
    except OSError as exc:
        raise StoreError(f"{path}: {exc.strerror or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise StoreError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("fastbench"), dict):
        raise StoreError(f"{path}: not a fastbench result file (no \"fastbench\" object)")
    return doc


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (int, float, str, bool))


def flat_keys(doc: Mapping[str, Any]) -> dict[str, Scalar]:
    """The run's figures under flat names (see the module docstring)."""
    out: dict[str, Scalar] = {k: v for k, v in doc.items() if k != "fastbench" and _is_scalar(v)}
    fb = doc.get("fastbench") or {}
    for metric, dist in (fb.get("distributions") or {}).items():
        if not isinstance(dist, dict):
            continue
        for key, value in dist.items():
            if not _is_scalar(value):
                continue
            if key == "count":
                out.setdefault(f"{metric}_count", value)
                continue
            stat, _, unit = key.partition("_")  # "p99.9_ms" -> p99.9, ms; "median_tok_s" -> median, tok_s
            out.setdefault(f"{stat}_{metric}_{unit}", value)
    for key, value in (fb.get("throughput") or {}).items():
        if _is_scalar(value):
            out.setdefault(key, value)
    run = fb.get("run") or {}
    for key in ("stopped_reason", "collapsed", "collapse_reason"):
        out.setdefault(key, run.get(key))
    counts = fb.get("counts") or {}
    for key in ("cancelled", "not_started"):
        out.setdefault(key, counts.get(key))
    out.setdefault("mean_tokens_per_chunk", (fb.get("tokens") or {}).get("mean_tokens_per_chunk"))
    # what the run's prompts and the server's cache started from: the seed, and whether it was emptied
    out.setdefault("prompt_seed", (fb.get("config") or {}).get("seed"))
    reset = (fb.get("server") or {}).get("prefix_cache_reset")
    if reset is not None:  # a string before the reset's record was an object
        out.setdefault("prefix_cache_reset", reset.get("done") is True if isinstance(reset, dict)
                       else reset == "done before the first request")
    return with_sustained(out)  # the throughput a study reads: steady-state, else the whole window's


class RunMeta(NamedTuple):
    """What the store's index keeps of a run besides its flat keys: who and what it measured. (A
    NamedTuple: a listing builds 10,000 of them from index rows.)"""

    created_at: str  # ISO 8601 with offset, as the result file
    created_unix: float
    label: str | None
    model: str | None
    variant: str | None
    engine: str | None  # the launched engine, "synthetic" for the built-in server, None when attached
    concurrency: int | None
    request_rate: float | None  # None: closed loop
    num_prompts: int | None
    completed: int | None
    failed: int | None
    duration_s: float | None
    stopped_reason: str | None
    collapsed: bool
    result_schema: int | None
    fastbench_version: str | None

    @property
    def complete(self) -> bool:
        """A complete cell (:func:`is_complete`)."""
        return is_complete(self.stopped_reason, self.completed, self.collapsed)

    @property
    def status(self) -> str:
        """How it ended (:func:`run_status`)."""
        return run_status(self.stopped_reason, self.completed, self.failed, self.collapsed)


def _created_unix(created_at: str, date: Any) -> float:
    for text, form in ((created_at, None), (date, "%Y%m%d-%H%M%S")):
        if not isinstance(text, str) or not text:
            continue
        try:
            when = (datetime.datetime.fromisoformat(text) if form is None
                    else datetime.datetime.strptime(text, form))
        except ValueError:
            continue
        return when.timestamp()  # a naive time is local, as the result writes it
    return 0.0


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) else None


def _whole(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def run_meta(doc: Mapping[str, Any]) -> RunMeta:
    """The index's columns of a result document (tolerant: a field it lacks reads None)."""
    fb = doc.get("fastbench") or {}
    config = fb.get("config") or {}
    launch = config.get("launch")
    server = fb.get("server") or {}
    if isinstance(launch, dict):
        engine = _text(launch.get("engine"))
    else:
        engine = "synthetic" if server.get("synthetic") else None
    created_at = str(fb.get("created_at") or "")
    return RunMeta(
        created_at=created_at,
        created_unix=_created_unix(created_at, doc.get("date")),
        label=_text(config.get("label")),
        model=_text(doc.get("model_id")),
        variant=_text(config.get("variant")),
        engine=engine,
        concurrency=_whole(doc.get("max_concurrency")),
        request_rate=_number(doc.get("request_rate")),  # "inf" (closed loop) reads None
        num_prompts=_whole(doc.get("num_prompts")),
        completed=_whole(doc.get("completed")),
        failed=_whole(doc.get("failed")),
        duration_s=_number(doc.get("duration")),
        stopped_reason=_text((fb.get("run") or {}).get("stopped_reason")),
        collapsed=bool((fb.get("run") or {}).get("collapsed")),
        result_schema=_whole(fb.get("schema_version")),
        fastbench_version=_text(fb.get("fastbench_version")),
    )


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The per-request records of a --save-detailed file (``.jsonl``, or ``.jsonl.gz`` as the store keeps
    them)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return [orjson.loads(line) for line in f if line.strip()]
    except (OSError, EOFError) as exc:
        raise StoreError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
    except orjson.JSONDecodeError as exc:
        raise StoreError(f"{path}: a line is not valid JSON ({exc})") from None


def per_request_values(records: Iterable[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Each :data:`PER_REQUEST` series over the completed requests, as the result file derives it:
    TTFT, TPOT and E2E latency in ms; per-stream decode rate = (output tokens - 1) / (end - first
    token); prefill rate = prompt tokens / raw TTFT, in tokens/s."""
    series: dict[str, list[float]] = {name: [] for name in PER_REQUEST}
    for rec in records:
        if rec.get("status") != "completed":
            continue
        for name in ("ttft", "tpot", "e2el"):
            value = rec.get(f"{name}_ms")
            if isinstance(value, (int, float)):
                series[name].append(float(value))
        first, end, out = rec.get("first_token_ns"), rec.get("end_ns"), rec.get("output_tokens")
        if isinstance(first, int) and isinstance(end, int) and isinstance(out, int) and out >= 2 and end > first:
            series["decode_rate"].append((out - 1) / ((end - first) / 1e9))
        prompt, raw = rec.get("prompt_tokens"), rec.get("ttft_raw_ms")
        if isinstance(prompt, int) and prompt > 0 and isinstance(raw, (int, float)) and raw > 0:
            series["prefill_rate"].append(prompt / (raw / 1e3))
    import numpy as np  # here: listing runs (this module's other use) never needs numpy

    return {name: np.asarray(values, dtype=np.float64) for name, values in series.items()}
