from .engine import (
    BUILD_FLAVOUR,
    COLUMN_ORDER,
    ArrivalClaims,
    ArrivalTimer,
    BodyParts,
    Claims,
    Dispatcher,
    Pool,
    Recorder,
    RowClaims,
    RunState,
    SharedArrivals,
    SharedDispatcher,
    Slots,
    StreamConnection,
    TokenRuns,
    debug_counters,
    lay_out_blocks,
    now_ns,
    scan_trace,
)

__all__ = (
    "ArrivalClaims", "ArrivalTimer", "BUILD_FLAVOUR", "BodyParts", "COLUMN_ORDER", "Claims", "Dispatcher", "Pool",
    "Recorder", "RowClaims", "RunState", "SharedArrivals", "SharedDispatcher", "Slots", "StreamConnection",
    "TokenRuns", "debug_counters", "lay_out_blocks", "now_ns", "scan_trace",
)
