"""The errors fastbench raises on purpose.

Each subclasses the stdlib error it is a kind of, so callers that already catch ``ValueError`` or
``ConnectionError`` keep working. Messages are one line that says what to fix.
"""

from __future__ import annotations

__all__ = ("ConfigError", "DatasetError", "FastbenchError", "ServerError")


class FastbenchError(Exception):
    """Base of every error fastbench raises on purpose."""


class ConfigError(FastbenchError, ValueError):
    """An option, or a combination of options, that cannot work."""


class DatasetError(ConfigError):
    """A dataset that cannot be read or used: missing file, bad JSON, wrong shape, nothing usable."""


class ServerError(FastbenchError, ConnectionError):
    """The server could not be reached, or answered something fastbench cannot use."""
