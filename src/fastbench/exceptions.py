"""The errors fastbench raises on purpose.

Each subclasses the stdlib error it is a kind of, so callers that already catch ``ValueError`` or
``ConnectionError`` keep working. Messages are one line that says what to fix.

The two that carry what was measured (``ResultWriteError``, ``ServerDiedError``) are
:mod:`fastbench.results.result`'s, beside the Result they hold: this module, a leaf, names nothing above it.
"""

from __future__ import annotations

__all__ = ("ConfigError", "DatasetError", "FastbenchError", "ServerError", "StoreError", "WorkerError")


class FastbenchError(Exception):
    """Base of every error fastbench raises on purpose."""


class ConfigError(FastbenchError, ValueError):
    """An option, or a combination of options, that cannot work."""


class DatasetError(ConfigError):
    """A dataset that cannot be read or used: missing file, bad JSON, wrong shape, nothing usable."""


class ServerError(FastbenchError, ConnectionError):
    """The server could not be reached, or answered something fastbench cannot use."""


class StoreError(FastbenchError):
    """A results store that cannot be opened, read or written, or a run it does not hold."""


class WorkerError(FastbenchError, RuntimeError):
    """A ``--workers`` process could not start (or failed before the window opened); the message
    carries its own error. Nothing was measured."""
