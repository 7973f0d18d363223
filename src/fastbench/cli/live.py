"""The live terminal view of a run (``RunView``) and of a sweep (``SweepView``): the ``LiveSnapshot`` the
API hands over four times a second (fastbench.api.live), sent to a process of the view's own that draws
it with rich on stderr (``cli/liveproc.py``), so that drawing costs the client's event loop one small
write a look.

On a terminal unless ``--no-live``, ``--no-progress`` or ``--disable-tqdm``; without rich (``pip install
'fastbench-llm[live]'``) the one progress line is drawn instead. The view is transient: the final summary
is printed as without it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import select
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from fastbench.redact import NO_SECRETS, Secrets

if TYPE_CHECKING:  # numpy comes with it, which `fastbench runs` and the help never pay for
    from fastbench.results.live import LiveSnapshot

__all__ = ("RunView", "SweepView", "Watchers", "add_live_args", "rich_available", "start_watchers", "view_wanted")

# The directory that holds the fastbench package this process runs: the view's process imports the same copy.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def add_live_args(group: Any) -> None:
    """--live / --no-live and --metrics-port (a run's and a sweep's)."""
    group.add_argument("--live", action=argparse.BooleanOptionalAction, default=None,
                       help="the live view on stderr: counters, rates, latency p50/p99, the client's skew, the "
                       "server's gauges, memory, time left (default: on a terminal, with rich installed; "
                       "--no-progress and --disable-tqdm turn it off too)")
    group.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                       help="serve fastbench's own figures in Prometheus' text format at "
                       "http://HOST:PORT/metrics while it runs (0: any free port, printed); needs "
                       "pip install 'fastbench-llm[metrics]'")
    group.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                       help="the address --metrics-port listens on (default 127.0.0.1; 0.0.0.0 for all)")
    group.add_argument("--otlp-endpoint", default=None, metavar="URL",
                       help="push fastbench's own figures to an OpenTelemetry collector over OTLP/HTTP every 5 s "
                       "while it runs (e.g. http://127.0.0.1:4318; headers from OTEL_EXPORTER_OTLP_HEADERS); "
                       "needs pip install 'fastbench-llm[otlp]'")


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


class ViewProcess:
    """The view's own process: it imports rich and draws on the terminal (stderr, inherited); this
    process only sends it each snapshot as one JSON line. A frame takes rich ~6 ms of Python, longer
    than a 5 ms chunk gap: drawn in the client's own event loop, or in a thread of it (the GIL), it
    would delay the reads it measures. A line is at most PIPE_BUF bytes, written without blocking, so it
    is written whole or not at all: a view that falls behind loses frames, never the run's time."""

    def __init__(self, secrets: Secrets = NO_SECRETS) -> None:
        self.secrets = secrets  # hidden in every line sent: a cell's failure may quote a server's answer
        code = (f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); from fastbench.cli.liveproc import main; "
                "sys.exit(main())")
        self.process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=sys.stdout,
                                        stderr=sys.stderr)
        assert self.process.stdin is not None
        self._fd = self.process.stdin.fileno()
        os.set_blocking(self._fd, False)
        self.dropped = 0

    def send(self, message: dict[str, Any], *, must: bool = False) -> None:
        line = self.secrets.data(orjson.dumps(message, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY))
        if len(line) > select.PIPE_BUF and not must:
            self.dropped += 1
            return
        try:
            if must:
                os.set_blocking(self._fd, True)
            os.write(self._fd, line)
        except BlockingIOError:
            self.dropped += 1
        except OSError:  # the view is gone: the run goes on without it
            self.dropped += 1
        finally:
            if must:
                os.set_blocking(self._fd, False)

    def close(self) -> None:
        """The last frame drawn, the view erased (the summary is printed after it, as without a view)."""
        self.send({"close": True}, must=True)
        assert self.process.stdin is not None
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _snapshot_message(snapshot: LiveSnapshot) -> dict[str, Any]:
    return {"snapshot": dataclasses.replace(snapshot, histograms={}).to_dict()}


class RunView(ViewProcess):
    """The live view of one run: pass it as ``on_live``; ``close()`` before the summary is printed."""

    def __call__(self, snapshot: LiveSnapshot) -> None:
        self.send(_snapshot_message(snapshot), must=snapshot.final)


class SweepView(ViewProcess):
    """A sweep's grid (each cell's state and key figures as it finishes, the estimated time left) over
    the running cell's live view. ``cell_started`` / ``cell_finished`` come from the sweep's runner;
    ``say`` puts a line of the sweep's progress above the view."""

    def __init__(self, cells: Sequence[str], secrets: Secrets = NO_SECRETS) -> None:
        super().__init__(secrets)
        self.send({"cells": list(cells)}, must=True)

    def cell_started(self, key: str) -> None:
        self.send({"started": key, "at": time.monotonic()}, must=True)

    def cell_finished(self, key: str, state: str, figures: str = "") -> None:
        self.send({"finished": key, "state": state, "figures": figures, "at": time.monotonic()}, must=True)

    def say(self, line: str) -> None:
        self.send({"say": line}, must=True)

    def __call__(self, snapshot: LiveSnapshot) -> None:
        self.send(_snapshot_message(snapshot), must=snapshot.final)


class Watchers:
    """What watches a run from the command line: the live view, the Prometheus exporter, the OTLP
    exporter (each None when not asked for)."""

    def __init__(self, view: Any, exporter: Any, otlp: Any = None) -> None:
        self.view = view
        self.exporter = exporter
        self.otlp = otlp

    @property
    def listeners(self) -> list[Any]:
        return [w for w in (self.view, self.exporter, self.otlp) if w is not None]

    def close_view(self) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None

    def close(self) -> None:
        self.close_view()
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        if self.otlp is not None:
            self.otlp.close()  # its last push: the runs' final figures
            self.otlp = None


def start_watchers(live: bool | None, progress: bool | None, metrics_port: int | None, metrics_host: str,
                   view: Any = None, otlp_endpoint: str | None = None, secrets: Secrets = NO_SECRETS) -> Watchers:
    """The exporters first (a port that cannot be had, an endpoint that is no URL: a one-line error
    before anything starts), then the view: ``view`` (a SweepView) or a RunView, when one is wanted and
    rich is installed."""
    otlp = None
    if otlp_endpoint is not None:
        from fastbench.api.otlp import OtlpExporter

        otlp = OtlpExporter(otlp_endpoint)
    exporter = None
    if metrics_port is not None:
        from fastbench.api.export import PrometheusExporter

        exporter = PrometheusExporter(metrics_port, metrics_host)
        print(f"fastbench: its figures at {exporter.url}", file=sys.stderr, flush=True)
    if view is None and view_wanted(live, progress) and rich_available():
        view = RunView(secrets)
    return Watchers(view, exporter, otlp)
