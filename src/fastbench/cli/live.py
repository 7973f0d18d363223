"""The live terminal view of a run (``RunView``) and of a sweep (``SweepView``), drawn with rich on stderr
from the ``LiveSnapshot`` the API hands over four times a second (fastbench.api.live).

rich costs ~60 ms to import, so it is imported only when a view is drawn: on a terminal, unless
``--no-live``, ``--no-progress`` or ``--disable-tqdm``; without rich (``pip install 'fastbench[live]'``)
the one progress line is drawn instead. A frame is drawn in the event loop between the client's
wake-ups, never per token; the view is transient, so the final summary is printed as without it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from fastbench.results.live import LiveSnapshot

__all__ = ("RunView", "SweepView", "add_live_args", "rich_available", "view_wanted")


def add_live_args(group: Any) -> None:
    """--live / --no-live and --metrics-port (a run's and a sweep's)."""
    group.add_argument("--live", action=argparse.BooleanOptionalAction, default=None,
                       help="the live view on stderr: counters, rates, latency p50/p99, the client's skew, the "
                       "server's gauges, memory, time left (default: on a terminal, with rich installed; "
                       "--no-progress and --disable-tqdm turn it off too)")
    group.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                       help="serve fastbench's own figures in Prometheus' text format at "
                       "http://HOST:PORT/metrics while it runs (0: any free port, printed); needs "
                       "pip install 'fastbench[metrics]'")
    group.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                       help="the address --metrics-port listens on (default 127.0.0.1; 0.0.0.0 for all)")


def rich_available() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def view_wanted(live: bool | None, progress: bool | None) -> bool:
    """Whether to draw the live view: asked for, or on a terminal unless the progress line is off."""
    if live is not None:
        return live and progress is not False
    return progress is not False and sys.stderr.isatty()


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


class _LiveScreen:
    """A rich Live on stderr, redrawn only when told (no refresh thread: it would contend for the GIL)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        self.live = Live(console=self.console, auto_refresh=False, transient=True, redirect_stdout=True,
                         redirect_stderr=False)
        self.live.start()

    def draw(self, renderable: Any) -> None:
        self.live.update(renderable, refresh=True)

    def close(self) -> None:
        self.live.stop()


class RunView:
    """The live view of one run: pass it as ``on_live``; ``close()`` before the summary is printed."""

    def __init__(self) -> None:
        self.screen = _LiveScreen()
        self.last: LiveSnapshot | None = None

    def __call__(self, snapshot: LiveSnapshot) -> None:
        self.last = snapshot
        self.screen.draw(_grid(run_lines(snapshot)))

    def close(self) -> None:
        self.screen.close()


class SweepView:
    """A sweep's grid (each cell's state and key figures as it finishes, the estimated time left) over
    the running cell's live view. ``cell_started`` / ``cell_finished`` come from the sweep's runner."""

    def __init__(self, cells: Sequence[str]) -> None:
        self.screen = _LiveScreen()
        self.order: list[str] = list(cells)
        self.state: dict[str, str] = {key: "waiting" for key in cells}
        self.figures: dict[str, str] = {}
        self.spent: list[float] = []
        self._started = 0.0
        self.current: LiveSnapshot | None = None
        self.running: str | None = None

    def cell_started(self, key: str) -> None:
        if key not in self.state:
            self.order.append(key)
        self.state[key] = "running"
        self.running = key
        self.current = None
        self._started = time.monotonic()
        self._draw()

    def cell_finished(self, key: str, state: str, figures: str = "") -> None:
        self.state[key] = state
        self.figures[key] = figures
        self.spent.append(time.monotonic() - self._started)
        self.running = None
        self._draw()

    def __call__(self, snapshot: LiveSnapshot) -> None:
        self.current = snapshot
        self._draw()

    def time_left_s(self) -> float | None:
        waiting = sum(1 for state in self.state.values() if state == "waiting")
        if not self.spent:
            return self.current.time_left_s if self.current is not None and not waiting else None
        own = self.current.time_left_s or 0.0 if self.current is not None else 0.0
        return waiting * sum(self.spent) / len(self.spent) + own

    def _draw(self) -> None:
        from rich.console import Group
        from rich.table import Table

        grid = Table(title=f"sweep: {len(self.spent)} of {len(self.order)} cells measured, "
                           f"time left ~{_duration(self.time_left_s())}", title_justify="left", expand=False)
        for name in ("cell", "state", "figures"):
            grid.add_column(name)
        for key in self.order:
            grid.add_row(key, self.state[key], self.figures.get(key, ""))
        parts: list[Any] = [grid]
        if self.current is not None:
            parts.append(_grid(run_lines(self.current)))
        self.screen.draw(Group(*parts))

    def close(self) -> None:
        self.screen.close()


class Watchers:
    """What watches a run from the command line: the live view (or None), the exporter (or None)."""

    def __init__(self, view: Any, exporter: Any) -> None:
        self.view = view
        self.exporter = exporter

    @property
    def listeners(self) -> list[Any]:
        return [w for w in (self.view, self.exporter) if w is not None]

    def close_view(self) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None

    def close(self) -> None:
        self.close_view()
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None


def start_watchers(live: bool | None, progress: bool | None, metrics_port: int | None, metrics_host: str,
                   view: Any = None) -> Watchers:
    """The exporter first (a port that cannot be had is a one-line error before anything starts), then
    the view: ``view`` (a SweepView) or a RunView, when one is wanted and rich is installed."""
    exporter = None
    if metrics_port is not None:
        from fastbench.api.export import PrometheusExporter

        exporter = PrometheusExporter(metrics_port, metrics_host)
        print(f"fastbench: its figures at {exporter.url}", file=sys.stderr, flush=True)
    if view is None and view_wanted(live, progress) and rich_available():
        view = RunView()
    return Watchers(view, exporter)
