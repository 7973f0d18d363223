"""The one mapping from a parsed command line to what it configures: a config's fields (``BenchConfig``,
``LaunchConfig``) or a function's keyword arguments (``validate``'s settings).

Each field takes the value of the flag whose dest is its name, or of the dest ``renamed`` names for it;
a field made from several flags, or converted, is given by the caller. Nothing is copied field by field
by hand, so a flag that is named as its field needs no line anywhere to reach it.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ("from_args", "target_names")

_KEYWORDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def target_names(target: type | Callable[..., Any]) -> tuple[str, ...]:
    """The names ``target`` takes: a dataclass's fields (not what else its ``__init__`` folds in), or a
    function's keyword-capable parameters."""
    if isinstance(target, type) and dataclasses.is_dataclass(target):
        return tuple(field.name for field in dataclasses.fields(target) if field.init)
    return tuple(name for name, p in inspect.signature(target).parameters.items() if p.kind in _KEYWORDS)


def from_args(ns: argparse.Namespace, target: type | Callable[..., Any], *,
              renamed: Mapping[str, str] | None = None, **made: Any) -> dict[str, Any]:
    """The keyword arguments of ``target`` that ``ns`` gives: ``made`` as given, then each other name from
    the dest ``renamed`` names for it, or from the dest of its own name; a name with neither keeps its
    default."""
    renamed = renamed or {}
    values = dict(made)
    for name in target_names(target):
        if name in values:
            continue
        if name in renamed:  # a renamed dest is always there: a misspelt one fails here, not silently
            values[name] = getattr(ns, renamed[name])
        elif hasattr(ns, name):
            values[name] = getattr(ns, name)
    return values
