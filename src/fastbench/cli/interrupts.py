"""Ctrl-C and SIGTERM for every command that runs something (a run, a sweep): the first signal asks
the work to stop early and keep what it measured; one that comes ``SAME_INTERRUPT_S`` or more later
abandons it (the running task is cancelled). Closer ones are the same interrupt delivered twice:
coreutils ``timeout`` signals the child and then its own process group, and a script may signal the
process and then its group.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Iterator

__all__ = ("SAME_INTERRUPT_S", "stop_on_signals")

# A second signal this soon after the first is the same interrupt, delivered again (``timeout`` sends
# two within microseconds); a person who means "abandon" presses again after reading the "stopping"
# line, which takes longer than this.
SAME_INTERRUPT_S = 1.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals(stopping: str) -> Iterator[asyncio.Event]:
    """Inside a running loop: an Event that the first SIGINT or SIGTERM sets (printing ``stopping``, one
    line, on stderr), and a later one, ``SAME_INTERRUPT_S`` or more after it, cancels the task that
    entered the block. The handlers are removed on leaving."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    task = asyncio.current_task()
    first_signal_s: float | None = None

    def on_signal() -> None:
        nonlocal first_signal_s
        now = time.monotonic()
        if first_signal_s is None:
            first_signal_s = now
            stop.set()
            print(f"\n{stopping}", file=sys.stderr)
        elif now - first_signal_s >= SAME_INTERRUPT_S and task is not None:
            task.cancel()

    for sig in SIGNALS:
        loop.add_signal_handler(sig, on_signal)
    try:
        yield stop
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
