"""The errors fastbench raises on purpose.

Each subclasses the stdlib error it is a kind of, so callers that already catch ``ValueError`` or
``ConnectionError`` keep working. Messages are one line that says what to fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastbench.results.result import Result

__all__ = ("ConfigError", "DatasetError", "FastbenchError", "ResultWriteError", "ServerDiedError", "ServerError",
           "StoreError", "WorkerError")


class FastbenchError(Exception):
    """Base of every error fastbench raises on purpose."""


class ConfigError(FastbenchError, ValueError):
    """An option, or a combination of options, that cannot work."""


class DatasetError(ConfigError):
    """A dataset that cannot be read or used: missing file, bad JSON, wrong shape, nothing usable."""


class ServerError(FastbenchError, ConnectionError):
    """The server could not be reached, or answered something fastbench cannot use."""


class ResultWriteError(FastbenchError, OSError):
    """The run finished but a result file could not be written (disk full, directory removed).

    ``result`` holds what was measured, so that the caller can still use or save it elsewhere.
    """

    def __init__(self, message: str, result: Result) -> None:
        super().__init__(message)
        self.result = result


class ServerDiedError(ServerError):
    """The server died during the measured window. The result files are written (the run is
    marked as stopped early) and ``result`` holds what was measured."""

    def __init__(self, message: str, result: Result) -> None:
        super().__init__(message)
        self.result = result


class StoreError(FastbenchError):
    """A results store that cannot be opened, read or written, or a run it does not hold."""


class WorkerError(FastbenchError, RuntimeError):
    """A ``--workers`` process could not start (or failed before the window opened); the message
    carries its own error. Nothing was measured."""
