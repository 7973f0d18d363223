"""The figures of each LoRA adapter of a ``--lora-modules`` run, beside the whole run's: its requests, what
became of them, its tokens and throughputs over the run's measured window, and its latencies.

Derived after the run from the request table and the workload's map of requests to adapters, by the
whole run's definitions: latency from the arrival in open loop and from the send in closed loop, TPOT
over requests of two output tokens or more, prompt tokens from the server's usage where it gave them
(image tokens included) and the workload's count where not. The counts, the tokens and the
throughputs of the adapters add up to the run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fastbench.results.records import COL, ErrorClass


def adapter_figures(rows: np.ndarray, prompt: np.ndarray, adapter_of_request: Sequence[int], names: Sequence[str],
                    open_loop: bool, duration_s: float) -> dict[str, Any]:
    """The ``adapters`` section of the result.

    :param rows: the request table, one row per measured request.
    :param prompt: each row's prompt tokens (-1 where unknown), as the whole run's figures take them.
    :param adapter_of_request: per measured request index, its adapter (an index into ``names``).
    :param duration_s: the measured window, which each adapter's throughputs are over.
    """
    col = {name: rows[:, i] for name, i in COL.items()}
    started = rows.any(axis=1)
    # a row's request: its index column once started, its position before (as the whole run reads it)
    request = np.where(started, col["index"], np.arange(len(rows)))
    which = np.asarray(adapter_of_request, dtype=np.int64)[request] if len(rows) else np.zeros(0, dtype=np.int64)
    error = col["error"]
    completed = started & (error == ErrorClass.OK) & (col["end_ns"] > 0)
    failed = started & (error != ErrorClass.OK) & (error != ErrorClass.CANCELLED)
    origin = col["scheduled_ns"] if open_loop else col["sent_ns"]
    has_first = completed & (col["first_token_ns"] > 0)
    out_tokens = np.maximum(col["output_tokens"], 0)
    has_tpot = has_first & (col["output_tokens"] >= 2)
    tpot = (col["end_ns"] - col["first_token_ns"]) / np.maximum(col["output_tokens"] - 1, 1)
    per_adapter = []
    for i, name in enumerate(names):
        mine = which == i
        done = mine & completed
        input_tokens = sum(np.maximum(prompt[done], 0).tolist())
        output_tokens = sum(out_tokens[done].tolist())
        per_adapter.append({
            "adapter": name,
            "requests": int(mine.sum()),
            "completed": int(done.sum()),
            "failed": int((mine & failed).sum()),
            "total_input_tokens": input_tokens,
            "total_output_tokens": output_tokens,
            "request_throughput_per_s": _per_s(int(done.sum()), duration_s),
            "output_throughput_tok_s": _per_s(output_tokens, duration_s),
            "ttft_ms": _summary((col["first_token_ns"] - origin)[mine & has_first] / 1e6),
            "tpot_ms": _summary(tpot[mine & has_tpot] / 1e6),
            "e2el_ms": _summary((col["end_ns"] - origin)[done] / 1e6),
        })
    return {"adapters": list(names), "per_adapter": per_adapter}


def _per_s(amount: float, duration_s: float) -> float:
    return amount / duration_s if duration_s > 0 else 0.0


def _summary(values: np.ndarray) -> dict[str, float | None]:
    """Mean, median and p99 as the whole run's distributions compute them (numpy, linear interpolation)."""
    if values.size == 0:
        return {"mean": None, "median": None, "p99": None}
    median, p99 = (float(x) for x in np.percentile(values, [50.0, 99.0]))
    return {"mean": float(values.mean()), "median": median, "p99": p99}


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def console_lines(section: dict[str, Any]) -> list[str]:
    """The LoRA block of the console summary: one line per adapter."""
    lines = [f"{'LoRA adapters':-^50}",
             f"{'Adapter':<16} {'done':>6} {'out tok/s':>10} {'TTFT p50':>8} {'TPOT p50':>8}"]
    for a in section["per_adapter"]:
        lines.append(f"{a['adapter'][:16]:<16} {a['completed']:>6} {a['output_throughput_tok_s']:>10.1f} "
                     f"{_ms(a['ttft_ms']['median']):>8} {_ms(a['tpot_ms']['median']):>8}")
    return lines


def card_lines(section: dict[str, Any]) -> list[str]:
    """The run card's table of the adapters (ms, medians and p99)."""
    lines = ["| Adapter | Requests | Completed | Failed | Output tok/s | TTFT median / p99 (ms) | "
             "TPOT median / p99 (ms) |", "|---|---|---|---|---|---|---|"]
    for a in section["per_adapter"]:
        ttft, tpot = a["ttft_ms"], a["tpot_ms"]
        lines.append(f"| {a['adapter']} | {a['requests']} | {a['completed']} | {a['failed']} | "
                     f"{a['output_throughput_tok_s']:.1f} | {_ms(ttft['median'])} / {_ms(ttft['p99'])} | "
                     f"{_ms(tpot['median'])} / {_ms(tpot['p99'])} |")
    return lines
