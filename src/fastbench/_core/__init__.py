from .engine import (
    BUILD_FLAVOUR,
    COLUMN_ORDER,
    OUT_ANSWER,
    OUT_DELTA,
    OUT_END,
    OUT_ERROR,
    OUT_REASONING,
    OUT_TOOL,
    ArrivalTimer,
    BodyParts,
    Recorder,
    RunState,
    StreamApi,
    StreamConnection,
    TokenRuns,
    debug_counters,
    lay_out_blocks,
    now_ns,
    scan_trace,
)

__all__ = (
    "ArrivalTimer", "BUILD_FLAVOUR", "BodyParts", "COLUMN_ORDER", "OUT_ANSWER", "OUT_DELTA", "OUT_END", "OUT_ERROR",
    "OUT_REASONING", "OUT_TOOL", "Recorder", "RunState", "StreamApi", "StreamConnection", "TokenRuns",
    "debug_counters", "lay_out_blocks", "now_ns", "scan_trace",
)
