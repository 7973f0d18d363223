from .engine import BUILD_FLAVOUR, COLUMN_ORDER, Recorder, RunState, StreamConnection, now_ns

__all__ = ("BUILD_FLAVOUR", "COLUMN_ORDER", "Recorder", "RunState", "StreamConnection", "now_ns")
