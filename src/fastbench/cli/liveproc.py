"""The live view's own process (started by ``cli/live.py``): reads JSON lines on stdin (a snapshot, a
sweep's cells and their states, a line to say, close) and draws them with rich on stderr, a frame per
batch of lines read, the newest snapshot only. It ignores Ctrl-C (the run's process handles it) and
ends on "close" or when stdin closes.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson

from fastbench.results.live import LiveSnapshot

__all__ = ("main", "run_lines")


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 1 else f"{value:,.1f}" if value < 1000 else f"{value:,.0f}"


def _pair(q: Any) -> str:
    return "-" if q is None else f"{_ms(q.p50_ms)} / {_ms(q.p99_ms)}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, s = divmod(int(seconds), 60)
    return f"{minutes} min {s:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


GIB = float(2**30)


def run_lines(s: LiveSnapshot) -> list[tuple[str, str]]:
    """The run view's rows, (heading, text): what a test reads and rich lays out."""
    cap = f" of {s.max_seconds:g} s" if s.max_seconds else ""
    failed = ", ".join(f"{name} {n}" for name, n in sorted(s.failed_by_class.items())) or "none"
    rows = [
        ("run", f"{' '.join(f'{k}={v}' for k, v in s.labels.items()) or 'fastbench'}   "
                f"{s.elapsed_s:.1f} s{cap}   time left {_duration(s.time_left_s)}"
                f"{'   (finished)' if s.final else ''}"),
        ("requests", f"done {s.completed:,}/{s.total:,}   in flight {s.in_flight:,}   failed {s.failed:,} "
                     f"({failed})"),
        ("now", f"{s.requests_per_s_now:,.2f} req/s   {s.tokens_per_s_now:,.0f} tok/s"),
        ("so far", f"{s.requests_per_s_run:,.2f} req/s   {s.tokens_per_s_run:,.0f} tok/s   "
                f"{s.output_tokens:,} tokens"),
        ("p50 / p99 ms", "   ".join(f"{name.upper()} {_pair(s.latency.get(name))}"
                                   for name in ("ttft", "tpot", "itl", "e2e"))),
    ]
    client = []
    if s.skew is not None:
        client.append(f"skew {_pair(s.skew)} ms (against the synthetic server's stamps)")
    if s.lateness is not None:
        client.append(f"lateness {_pair(s.lateness)} ms")
    if client:
        rows.append(("client", "   ".join(client)))
    server = []
    for name, label, fmt in (("running", "running", "{:.0f}"), ("waiting", "waiting", "{:.0f}"),
                             ("kv_cache_usage", "KV cache", "{:.0%}"), ("acceptance_length", "acceptance", "{:.2f}"),
                             ("prefix_cache_hit_rate", "prefix hits", "{:.0%}")):
        if name in s.server:
            server.append(f"{label} {fmt.format(s.server[name])}")
    rows.append(("server", "   ".join(server) or "no /metrics read yet"))
    memory = [f"{label} {s.memory[name] / GIB:.2f} GiB" for name, label in
              (("server_rss", "server RSS"), ("gpu_used", "GPU used"), ("mem_available_drop", "MemAvailable drop"))
              if name in s.memory]
    if memory:
        rows.append(("memory", "   ".join(memory)))
    return rows


def _grid(rows: Sequence[tuple[str, str]]) -> Any:
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for heading, text in rows:
        table.add_row(heading, text)
    return table


class Screen:
    """What the view shows: the newest snapshot, and for a sweep its cells' grid."""

    def __init__(self) -> None:
        self.snapshot: LiveSnapshot | None = None
        self.order: list[str] = []
        self.state: dict[str, str] = {}
        self.figures: dict[str, str] = {}
        self.spent: list[float] = []
        self.started_at = 0.0
        self.sweep = False

    def take(self, message: dict[str, Any], console: Any) -> bool:
        """Apply one message; True for "close"."""
        if "snapshot" in message:
            self.snapshot = LiveSnapshot.from_dict(message["snapshot"])
        elif "cells" in message:
            self.sweep = True
            self.order = list(message["cells"])
            self.state = dict.fromkeys(self.order, "waiting")
        elif "started" in message:
            key = message["started"]
            if key not in self.state:
                self.order.append(key)
            self.state[key] = "running"
            self.started_at = float(message["at"])
            self.snapshot = None
        elif "finished" in message:
            key = message["finished"]
            if key not in self.state:
                self.order.append(key)
            if self.state.get(key) == "running":  # a skipped cell (or a launch that failed) took no time
                self.spent.append(float(message["at"]) - self.started_at)
            self.state[key] = message["state"]
            self.figures[key] = message["figures"]  # a skipped or failed cell's reason
        elif "say" in message:
            console.print(message["say"], markup=False, highlight=False)
        return bool(message.get("close"))

    def time_left_s(self) -> float | None:
        waiting = sum(1 for state in self.state.values() if state == "waiting")
        own = self.snapshot.time_left_s if self.snapshot is not None else None
        if not self.spent:
            return own if not waiting else None
        return waiting * sum(self.spent) / len(self.spent) + (own or 0.0)

    def render(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        parts: list[Any] = []
        if self.sweep:
            skipped = sum(1 for state in self.state.values() if state == "skipped")
            grid = Table(title=f"sweep: {len(self.spent)} of {len(self.order)} cells measured"
                               f"{f', {skipped} skipped' if skipped else ''}, "
                               f"time left ~{_duration(self.time_left_s())}", title_justify="left")
            for name in ("cell", "state", "figures"):
                grid.add_column(name)
            for key in self.order:
                state = self.state[key]
                grid.add_row(key, state, self.figures.get(key, ""), style="dim" if state == "skipped" else None)
            parts.append(grid)
        if self.snapshot is not None:
            parts.append(_grid(run_lines(self.snapshot)))
        return Group(*parts)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run's process stops the run; this one draws to the end
    with contextlib.suppress(OSError):  # on a busy machine the client's process runs first, the view waits
        os.nice(10)
    from rich.console import Console
    from rich.live import Live

    console = Console(stderr=True)
    screen = Screen()
    live = Live(console=console, auto_refresh=False, transient=True, redirect_stdout=False, redirect_stderr=False)
    live.start()
    fd = sys.stdin.fileno()
    pending = b""
    closing = False
    try:
        while not closing:
            select.select([fd], [], [])
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line and screen.take(orjson.loads(line), console):
                    closing = True
            live.update(screen.render(), refresh=True)
            if not closing:
                time.sleep(0.05)  # at most 20 frames a second, whatever arrives
    finally:
        live.stop()
    return 0
