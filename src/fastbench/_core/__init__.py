from .engine import (
    BUILD_FLAVOUR,
    COLUMN_ORDER,
    ArrivalTimer,
    Recorder,
    RunState,
    StreamConnection,
    debug_counters,
    now_ns,
)

__all__ = (
    "ArrivalTimer", "BUILD_FLAVOUR", "COLUMN_ORDER", "Recorder", "RunState", "StreamConnection", "debug_counters",
    "now_ns",
)
