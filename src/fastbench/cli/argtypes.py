"""The command line's argument types and parser class, shared by ``fastbench``, ``fastbench validate``
and ``--config`` files. A leaf: it imports nothing of fastbench but the goodput metric names."""

from __future__ import annotations

import argparse
import math
from typing import Any, NoReturn

import orjson

from fastbench.config import GOODPUT_METRICS


def goodput_slos(values: list[str]) -> dict[str, float]:
    slos = {}
    for item in values:
        key, sep, value = item.partition(":")
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not sep or key not in GOODPUT_METRICS or not ms > 0:
            raise argparse.ArgumentTypeError(
                f"--goodput takes KEY:MS pairs with KEY in ttft, tpot, e2el and MS > 0, got {item!r}")
        slos[key] = ms
    return slos


def json_object(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--extra-body is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--extra-body must be a JSON object, e.g. '{\"temperature\": 0}'")
    return value


def request_rate(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--request-rate must be a number or inf, got {text!r}") from None
    if math.isinf(value) and value > 0:
        return None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"--request-rate must be > 0 (or inf), got {text!r}")
    return value


def whole_number(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
    return value


def positive_int(text: str) -> int:
    return whole_number(text, 1)


def non_negative_int(text: str) -> int:
    return whole_number(text, 0)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default unless its help already says it, or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        # "is", not "in": 0 == False, and a default of 0 is worth showing
        if ("default" in text or action.default is None or action.default is False
                or action.default == argparse.SUPPRESS or not action.option_strings):
            return text
        return text + " (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """Errors in one line that points at --help, not the whole usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def value_kind(action: argparse.Action) -> str:
    """What a config file must write for ``action``'s value: "true or false", "an integer", "a number"
    or "a string", from the converter argparse runs on the command line's text."""
    if action.nargs == 0:  # store_true, --x/--no-x
        return "true or false"
    if action.type in (int, positive_int, non_negative_int):
        return "an integer"
    if action.type in (float, request_rate):
        return "a number"
    return "a string"
