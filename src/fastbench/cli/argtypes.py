"""The command line's argument types and parser class, shared by ``fastbench``, ``fastbench validate``
and ``--config`` files. A leaf: it imports nothing of fastbench.

The types turn text into values and check nothing else: what a value may be is checked once, where
every way in meets (fastbench/checks.py), so that a flag, a config file's key and the Python API get
the same message. :func:`options` is all a config file needs to know of a parser.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import shlex
from collections.abc import Iterable, Sequence
from typing import Any, Literal, NoReturn

import orjson


def whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def workers_count(text: str) -> int | str:
    """--workers: a whole number, or "auto" (the range is checked with the other options)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or 'auto', got {text!r}") from None


def coalesce_window(text: str) -> float | str:
    """--coalesce-ms: a number of ms, or "auto" (the range is checked with the other options)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of ms or 'auto', got {text!r}") from None


def json_object(text: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object, e.g. '{\"temperature\": 0}'")
    return value


def shell_words(text: str) -> tuple[str, ...]:
    """Flags for another program in one string, split as a shell would: ``"--itl-ms 10 --no-usage"``."""
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:  # No closing quotation, No escaped character
        raise argparse.ArgumentTypeError(str(exc)) from None


def goodput_slo(text: str) -> tuple[str, float]:
    """One ``KEY:MS`` of --goodput, e.g. ``ttft:500``; which keys and values are taken is checked
    with the rest of the config."""
    key, sep, value = text.partition(":")
    try:
        if sep:
            return key, float(value)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"expected KEY:MS (KEY ttft, tpot or e2el; MS milliseconds > 0), got {text!r}")


def key_value(text: str) -> tuple[str, str]:
    """One ``KEY=VALUE`` of --header or --metadata; both sides stripped, as vllm bench serve does."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def comma_words(text: str) -> tuple[str, ...]:
    """``ttft,tpot,itl``: a comma-separated list (which names are taken is checked with the config)."""
    return tuple(word.strip() for word in text.split(","))


def comma_numbers(text: str) -> tuple[float, ...]:
    """``50,90,99``: comma-separated numbers."""
    try:
        return tuple(float(word) for word in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, e.g. 50,90,99, got {text!r}") from None


def range_ratio(text: str) -> float:
    """--random-range-ratio: one number (vllm bench serve also takes a JSON dict of input and output
    ratios, which fastbench does not)."""
    try:
        return float(text)
    except ValueError:
        pass
    if text.lstrip().startswith("{"):
        raise argparse.ArgumentTypeError("fastbench takes one ratio for input and output lengths, not a JSON dict")
    raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")


def fold_in_help(action: argparse.Action) -> None:
    """Leave ``action`` out of --help: its group's description names it in a line, and docs/cli.md (written
    from the parsers by scripts/gen_cli_docs.py) lists it with its help. It parses as any other option."""
    setattr(action, _FOLDED, True)


def folded_in_help(action: argparse.Action) -> bool:
    return getattr(action, _FOLDED, False) is True


_FOLDED = "fastbench_folded_in_help"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a flag's default unless its help already says it, or there is none to show; leaves out the
    options folded into their group's description (:func:`fold_in_help`)."""

    def add_arguments(self, actions: Iterable[argparse.Action]) -> None:
        super().add_arguments([action for action in actions if not folded_in_help(action)])

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        # "is", not "in": 0 == False, and a default of 0 is worth showing
        if ("default" in text or action.default is None or action.default is False
                or action.default == argparse.SUPPRESS or not action.option_strings):
            return text
        return text + " (default: %(default)s)"


class LaidOutHelpFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """HelpFormatter that prints the description and epilog as written: for epilogs laid out as tables."""


class Parser(argparse.ArgumentParser):
    """Errors in one line that points at --help, not the whole usage block; no abbreviations (argparse
    would take --num-prompt as --num-prompts without a word): a flag it does not know is an error that
    names the closest one it does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(unknown_arguments(extras, self))
        return ns

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def unknown_arguments(extras: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """What to say of arguments ``parser`` did not take: the first unknown flag and the closest flag
    it knows (a prefix of exactly one flag names that one), or the stray values."""
    known = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    for arg in extras:
        if not arg.startswith("-") or arg == "-":
            continue
        given = arg.split("=", 1)[0]
        starting = [flag for flag in known if flag.startswith(given)]
        close = starting if len(starting) == 1 else difflib.get_close_matches(given, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"unrecognized option {given}{hint}"
    return f"unrecognized arguments: {' '.join(extras)} (a value with spaces needs quotes)"


# What a config file writes for an option: the plain kinds as a message names them, and the option
# types above that take more than one TOML form.
ValueKind = Literal["true or false", "an integer", 'an integer or "auto"', "a number", 'a number or "auto"',
                    "a string", "a JSON object",
                    "flags", "KEY:MS", "KEY=VALUE", "names, comma-separated", "numbers, comma-separated"]
_KIND_OF_TYPE: dict[Any, ValueKind] = {
    int: "an integer", whole_number: "an integer", workers_count: 'an integer or "auto"', float: "a number",
    coalesce_window: 'a number or "auto"',
    json_object: "a JSON object", shell_words: "flags", goodput_slo: "KEY:MS", range_ratio: "a number",
    key_value: "KEY=VALUE", comma_words: "names, comma-separated", comma_numbers: "numbers, comma-separated",
}


@dataclasses.dataclass(frozen=True)
class Option:
    """One long option of a parser, as a config file sees it."""

    flags: tuple[str, ...]  # its long flags, the first the one it is written with
    dest: str  # the Namespace attribute argparse stores it in
    kind: ValueKind
    choices: tuple[Any, ...] | None
    repeatable: bool  # each use adds a value (action="append")
    negatable: bool  # --x and --no-x (argparse.BooleanOptionalAction)
    several: bool = False  # takes several values after one flag (nargs "*" or "+")


def options(parser: argparse.ArgumentParser) -> list[Option]:
    """The parser's long options that set a value (--help and --version set none).

    The one place that reads argparse's list of actions, which argparse does not make public;
    the kind of value comes from the type the option converts its text with (nargs=0: a switch).
    """
    found = []
    for action in parser._actions:
        negatable = isinstance(action, argparse.BooleanOptionalAction)
        flags = tuple(o for o in action.option_strings
                      if o.startswith("--") and not (negatable and o.startswith("--no-")))
        if not flags or action.default == argparse.SUPPRESS:
            continue
        found.append(Option(
            flags=flags,
            dest=action.dest,
            kind="true or false" if action.nargs == 0 else _KIND_OF_TYPE.get(action.type, "a string"),
            choices=tuple(action.choices) if action.choices is not None else None,
            repeatable=isinstance(action, (argparse._AppendAction, argparse._CountAction)),
            negatable=negatable,
            several=action.nargs in ("*", "+"),
        ))
    return found
