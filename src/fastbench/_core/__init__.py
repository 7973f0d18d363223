from .engine import (
    BUILD_FLAVOUR,
    COLUMN_ORDER,
    ArrivalTimer,
    BodyParts,
    Recorder,
    RunState,
    StreamConnection,
    TokenRuns,
    debug_counters,
    lay_out_blocks,
    now_ns,
    scan_trace,
)

__all__ = (
    "ArrivalTimer", "BUILD_FLAVOUR", "BodyParts", "COLUMN_ORDER", "Recorder", "RunState", "StreamConnection",
    "TokenRuns", "debug_counters", "lay_out_blocks", "now_ns", "scan_trace",
)
