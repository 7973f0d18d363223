"""A server fastbench did not start: one at ``--base-url``, or the built-in synthetic server.

``ExternalServer`` has the launched servers' API (``launch.LaunchedServer``) with nothing to launch,
no log and no teardown, so that the window monitor and the result treat every server alike.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastbench.exceptions import ServerError
from fastbench.server import control

__all__ = ("ExternalServer",)


class ExternalServer:
    """A server fastbench did not start (``--base-url``, or the built-in synthetic server): the common
    API with nothing to launch, no log and no teardown."""

    engine = "external"

    def __init__(self, base_url: str, *, api_key: str | None = None, pid: int | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.pid = pid
        self.log_path: Path | None = None
        self.load_time_s: float | None = None
        self.version: str | None = None

    def start(self) -> None:
        """Nothing to start."""

    def wait_ready(self, timeout_s: float = 30.0) -> float:
        """Poll /health and /v1/models until the server lists a model; returns the seconds it took."""
        t0 = time.monotonic()
        state = "not polled"
        while time.monotonic() - t0 < timeout_s:
            ready, state = control.probe_ready(self.base_url, None, self.api_key)
            if ready:
                self.version = control.engine_version(self.base_url, self.api_key)
                return time.monotonic() - t0
            time.sleep(control.READY_POLL_S)
        raise ServerError(f"{self.base_url} is not ready after {timeout_s:g} s ({state})")

    def stop(self) -> None:
        """Not ours to stop."""

    def exit_message(self) -> str | None:
        return None

    def mark_window_start(self) -> None:
        pass

    def mark_window_end(self) -> None:
        pass

    def window_log_lines(self) -> list[str]:
        return []

    def provenance(self) -> dict[str, Any]:
        return {"launched": False, "base_url": self.base_url, "engine_version": self.version}
