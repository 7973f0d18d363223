"""The measured window, watched from the side: the server's /metrics, its process and its log.

``WindowMonitor`` reads /metrics at the window's start and end and every ``--metrics-interval`` in
between (``prom.MetricsScraper``), stops the run when a launched server's process dies, and marks the
window in a launched server's log. ``report()`` hands what it saw over as a typed ``WindowReport``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from fastbench.config import BenchConfig
from fastbench.results.observations import MetricsReport, WindowReport
from fastbench.server import prom, specdecode
from fastbench.server.external import ExternalServer
from fastbench.server.launch import LaunchedServer
from fastbench.server.serverlog import spec_log_summary, window_warnings

__all__ = ("WindowMonitor",)


class WindowMonitor:
    """What fastbench watches during the measured window, without touching the client's hot path:
    the server's /metrics (any server that has it: launched, attached or synthetic), read at the start,
    every ``metrics_interval_s`` and at the end; the launched server's process (its death stops the
    run) and its log (warnings, "SpecDecoding metrics:" lines)."""

    def __init__(self, base_url: str, config: BenchConfig, server: LaunchedServer | ExternalServer,
                 on_server_death: Callable[[str], None]) -> None:
        self.server = server
        self.config = config
        self.scraper = prom.MetricsScraper(base_url, interval_s=config.metrics_interval_s, api_key=config.api_key,
                                           verify_tls=not config.insecure)
        self.on_server_death = on_server_death
        self.server_died: str | None = None
        self.window_start = "at the first request"
        self._watch: asyncio.Task[None] | None = None
        self._restart: asyncio.Task[None] | None = None
        self.analysis: dict[str, Any] = {}  # specdecode.analyze's, once the window is over

    async def start(self) -> None:
        self.server.mark_window_start()
        await self.scraper.start()
        if isinstance(self.server, LaunchedServer):
            self._watch = asyncio.get_running_loop().create_task(self._watch_process())

    def restart_window_soon(self) -> None:
        """Move the window's start to now (after warm-ups), from a synchronous progress callback."""
        if self._restart is None:
            self.server.mark_window_start()
            self.window_start = "after the warm-ups (at the first progress tick, within 0.5 s of the first request)"
            self._restart = asyncio.get_running_loop().create_task(self.scraper.restart_window())

    def _check_process(self) -> bool:
        """Whether the launched server has exited (then ``server_died`` says how)."""
        message = self.server.exit_message()
        if message is None or not isinstance(self.server, LaunchedServer):
            return False
        if self.server_died is None:
            self.server_died = (f"{message} during the measured window; log: {self.server.log_path}; "
                                f"last lines:\n{self.server.log_tail()}")
        return True

    async def _watch_process(self) -> None:
        """Stop the run when the launched server's process exits: at once where the kernel gives a
        pidfd (Linux 5.3+), else within 0.2 s. Until then every request is refused at once, and a
        closed loop fails hundreds of them a second (1,478 in 0.2 s with a dead fake vLLM)."""
        assert isinstance(self.server, LaunchedServer) and self.server.process is not None
        try:
            pidfd = os.pidfd_open(self.server.process.pid)
        except (AttributeError, OSError):  # no pidfd here, or the process is already gone
            pidfd = None
        if pidfd is not None:
            loop = asyncio.get_running_loop()
            exited: asyncio.Future[None] = loop.create_future()

            def on_exit() -> None:
                if not exited.done():
                    exited.set_result(None)

            loop.add_reader(pidfd, on_exit)
            try:
                await exited
            finally:
                loop.remove_reader(pidfd)
                os.close(pidfd)
        while not self._check_process():  # readable pidfd: waitpid reaps it now
            await asyncio.sleep(0.2 if pidfd is None else 0.001)
        self.on_server_death("server exited")

    async def finish(self) -> None:
        for task in (self._watch, self._restart):
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self._check_process()  # a death the watcher had no time to see: requests fail fast without a server
        scrapes = await self.scraper.stop()
        self.server.mark_window_end()
        self.analysis = specdecode.analyze(scrapes, interval_s=self.scraper.interval_s) if scrapes else {}

    def report(self) -> WindowReport:
        """What was seen of the server over the window (after :meth:`finish`)."""
        server = self.server
        lines = server.window_log_lines()
        scraper = self.scraper
        metrics = MetricsReport(
            available=scraper.available, error=scraper.last_error, status=scraper.last_status,
            failures=scraper.failures, interval_asked_s=scraper.interval_asked_s, interval_s=scraper.interval_s,
            kept_reads=prom.MAX_KEPT_SCRAPES, window_start=self.window_start, analysis=self.analysis,
            engine=self.analysis.get("engine"),
        )
        return WindowReport(
            provenance=server.provenance(),
            launch=server.facts() if isinstance(server, LaunchedServer) else None,
            warnings=window_warnings(lines),
            spec_log=spec_log_summary(lines),
            metrics=metrics,
        )
