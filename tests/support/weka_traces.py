"""Weka-format agent traces for the agentic replay's tests, made here (nothing downloaded), and the configs
and records of their runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from fastbench import BenchConfig
from fastbench.datasetoptions import AgenticOptions

BLOCK = 16  # the traces' block_size, and the synthetic server's cache block


def weka_call(t: float, ids: list[int], extra: int = 5, out: int = 3, **fields: Any) -> dict[str, Any]:
    """A streaming call whose prompt is its blocks and ``extra`` tokens of its own."""
    return {"t": t, "type": "s", "model": "m", "in": len(ids) * BLOCK + extra, "out": out, "hash_ids": ids, **fields}


def weka_subagent(t: float, calls: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"t": t, "type": "subagent", "agent_id": "explore", "subagent_type": "Explore", "status": "completed",
            "requests": calls, **fields}


def weka_trace(name: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": name, "models": ["m"], "block_size": BLOCK, "hash_id_scope": "local", "requests": requests}


def tree_trace(name: str = "tree") -> dict[str, Any]:
    """A root of four calls whose context grows block by block; a subagent spawned by call 1 and joined by
    call 2 (its times relative to the marker, as raw captures give them); one spawned by call 3 with no
    call after it (background). Gaps: think_time where recorded, else the recorded end (t + api_time)."""
    return weka_trace(name, [
        weka_call(0.0, [1, 2], api_time=0.010, stop="tool_use"),
        weka_call(0.020, [1, 2, 3], api_time=0.010, input_types=["tool_result"]),  # gap 0.020 - 0.010
        weka_subagent(0.035, [weka_call(0.0, [50, 51], api_time=0.005),
                              weka_call(0.010, [50, 51, 52], think_time=0.004)]),
        weka_call(0.080, [1, 2, 3, 4], think_time=0.002),
        weka_call(0.100, [1, 2, 3, 4, 5], api_time=0.010),
        weka_subagent(0.120, [weka_call(0.0, [60, 61], api_time=0.005)]),
    ])


def write_traces(path: Path, *traces: dict[str, Any], lines: bool = False) -> Path:
    if lines or len(traces) > 1:
        path.write_bytes(b"".join(orjson.dumps(t) + b"\n" for t in traces))
    else:
        path.write_bytes(orjson.dumps(traces[0]))
    return path


def weka_config(path: Path, **changes: Any) -> BenchConfig:
    names = ("start", "time_scale", "idle_gap_cap", "session_header", "tool_messages")
    agentic = {name: changes.pop(f"agentic_{name}") for name in names if f"agentic_{name}" in changes}
    return BenchConfig(dataset_name="weka", dataset_path=path, num_prompts=1, concurrency=1, metrics_interval_s=0.2,
                       dataset_options=AgenticOptions(**agentic)).replace(**changes)


def read_records(path: Path) -> list[dict[str, Any]]:
    return sorted((orjson.loads(line) for line in path.read_bytes().splitlines()), key=lambda r: r["id"])
