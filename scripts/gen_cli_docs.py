"""Write docs/cli.md from the command line's parsers: every command's options, grouped as its parser groups
them, each with its value, unit, default and help, the vLLM compatibility flags that --help folds into one
line included.

    python scripts/gen_cli_docs.py            # rewrite docs/cli.md
    python scripts/gen_cli_docs.py --check    # exit 1 if docs/cli.md is not what this writes now

tests/cli/test_cli_docs.py runs the check, so a flag added or changed without regenerating the page fails
there. The page is made from argparse's own records of each option (not from --help's text, whose layout
follows the terminal's width and the Python version), so it is the same on every machine.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
from collections.abc import Callable, Iterator

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"
COMMAND = "python scripts/gen_cli_docs.py"

def commands() -> list[tuple[str, Callable[[], argparse.ArgumentParser]]]:
    """Each command and its parser, in the order the main usage names them."""
    from fastbench.cli import command, compare, plot, report, runs, sweep, validate
    from fastbench.synthetic import cli as synthetic_cli

    return [
        ("fastbench", command.build_parser),
        ("fastbench validate", validate.build_parser),
        ("fastbench synthetic-server", lambda: synthetic_cli.build_parser(prog="fastbench synthetic-server")),
        ("fastbench runs", runs.build_parser),
        ("fastbench compare", compare.build_parser),
        ("fastbench sweep", sweep.build_parser),
        ("fastbench plot", plot.build_parser),
        ("fastbench report", report.build_parser),
    ]


# Units the flags' names state by their ending (--itl-ms, --max-seconds, --ramp-up-start-rps, ...).
_UNIT_SUFFIXES = (
    ("-ms", "ms"), ("-us", "us"), ("-tok-s", "tokens/s"), ("-rps", "requests/s"), ("-seconds", "s"),
    ("-sec", "s"), ("-s", "s"), ("-bytes", "bytes"), ("-len", "tokens"), ("-tokens", "tokens"),
)
# Flags whose names do not end in their unit; their help says it in words.
_UNITS = {
    "--request-rate": "requests/s", "--think-time": "s", "--request-timeout": "s", "--ready-timeout": "s",
    "--server-stop-grace": "s", "--memory-interval": "s", "--metrics-interval": "s",
    "--ready-check-timeout-sec": "s", "--timed-trace-chunk-hash-size": "tokens", "--block-size": "tokens",
    "--prefix-cache-blocks": "blocks", "--num-prompts": "requests", "--num-warmups": "requests",
    "--num-requests": "requests", "--concurrency": "requests in flight", "--max-tokens": "tokens",
    "--max-turns": "turns", "--workers-per-node": "workers", "--warmup": "requests", "--repeats": "runs",
    "--tokens-per-chunk": "tokens", "--reasoning-tokens": "tokens", "--default-max-tokens": "tokens",
    "--max-error-rate": "fraction", "--eos-prob": "probability", "--random-range-ratio": "fraction",
    "--prefill-tok-s": "tokens/s",
}


def unit(action: argparse.Action) -> str:
    if action.nargs == 0 or not action.option_strings:
        return ""
    for flag in action.option_strings:
        if flag in _UNITS:
            return _UNITS[flag]
    flag = action.option_strings[-1]
    return next((name for suffix, name in _UNIT_SUFFIXES if flag.endswith(suffix)), "")


def value(action: argparse.Action, kinds: dict[str, str]) -> str:
    """What the option takes, as a reader writes it: its metavar where the parser gives one, else its
    choices, else the kind of value its type reads (as a --config file's message names it)."""
    if isinstance(action, argparse.BooleanOptionalAction):
        return "switch (`--no-` form too)"
    if action.nargs == 0:
        return "switch"
    if isinstance(action.metavar, str) and action.metavar:
        one = f"`{action.metavar}`"
    elif action.choices is not None:
        one = "one of " + ", ".join(f"`{choice}`" for choice in action.choices)
    else:
        kind = kinds.get(action.dest, "a string")
        one = {"a string": "text", "an integer": "integer", "a number": "number"}.get(kind, kind)
    if action.nargs == "+":
        return f"{one}, one or more"
    if action.nargs == "*":
        return f"{one}, any number"
    if action.nargs == "?":
        return f"{one}, optional" if action.metavar else "switch, or a value"
    if isinstance(action, argparse._AppendAction):
        return f"{one}, repeatable"
    return one


def metavar(action: argparse.Action) -> str:
    if isinstance(action.metavar, str):
        return action.metavar
    if action.choices is not None:
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return action.dest.upper() if action.option_strings else action.dest


def default(action: argparse.Action) -> str:
    shown = action.default
    if shown is None or shown is False or shown == argparse.SUPPRESS or shown in ((), [], {}, ""):
        return ""
    if action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction):
        return ""  # a store_const's default is the off state, not a value to give
    if isinstance(shown, tuple):
        return "`" + "-".join(str(part) for part in dict.fromkeys(shown)) + "`"  # (1, 1) is 1; (1, 4) is 1-4
    return f"`{shown}`"


def help_text(action: argparse.Action, prog: str) -> str:
    """The help as --help prints it, %(default)s and the like filled in, on one line."""
    text = action.help or ""
    if "%" in text:
        params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
        params["prog"] = prog
        for name in list(params):
            if hasattr(params[name], "__name__"):
                params[name] = params[name].__name__
        if params.get("choices") is not None:
            params["choices"] = ", ".join(str(c) for c in params["choices"])
        text = text % params
    return " ".join(text.split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _option_rows(group: argparse._ArgumentGroup, prog: str, kinds: dict[str, str]) -> Iterator[str]:
    for action in group._group_actions:
        if action.help == argparse.SUPPRESS or "-h" in action.option_strings:
            continue
        flags = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{metavar(action)}` (positional)"
        cells = (flags, value(action, kinds), unit(action), default(action), help_text(action, prog))
        yield "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _synopsis(parser: argparse.ArgumentParser) -> str:
    if parser.usage:
        return " ".join(parser.usage.split("\n")[0].split())
    positionals = [metavar(a) if a.nargs in (None, 1) else f"[{metavar(a)} ...]"
                   for a in parser._actions if not a.option_strings]
    return " ".join([parser.prog, *positionals, "[options]"])


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", name.lower()).replace(" ", "-")


def render() -> str:
    """docs/cli.md as the parsers stand now."""
    from fastbench.cli import argtypes

    parsers = [(name, build()) for name, build in commands()]
    out = [
        "# Command-line reference",
        "",
        f"Written by `{COMMAND}` from the parsers themselves (src/fastbench/cli/, src/fastbench/synthetic/cli.py);",
        "tests/cli/test_cli_docs.py fails when this page is not what the script writes now. Do not edit it by hand:",
        "change the option's help and run the script again.",
        "",
        "A value that starts with a dash needs the `=` form (`--engine-args=\"--enforce-eager\"`); no flag is",
        "taken by an abbreviation. Units are those of the option's value; an empty default means none (the",
        "help says what happens then).",
        "",
        *[f"- [`{name}`](#{_anchor(name)})" for name, _ in parsers],
    ]
    for name, parser in parsers:
        out += ["", f"## `{name}`", "", "```text", _synopsis(parser), "```"]
        if parser.description:
            out += ["", " ".join(parser.description.split())]
        kinds = {option.dest: option.kind for option in argtypes.options(parser)}
        for group in parser._action_groups:
            rows = list(_option_rows(group, parser.prog, kinds))
            if not rows:
                continue
            title = group.title if group.title not in (None, "options") else "options"
            out += ["", f"### {name}: {title}", ""]
            if group.description:
                out += [" ".join(group.description.split()), ""]
            out += ["| option | value | unit | default | what it does |", "|---|---|---|---|---|", *rows]
        if parser.epilog:
            out += ["", "```text", parser.epilog.strip("\n"), "```"]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if DOC.read_text() != text:
            print(f"docs/cli.md is not what the parsers say now: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    # The tree's own package when its extension is built in place (make compile); else the installed one.
    if list((ROOT / "src" / "fastbench" / "_core").glob("engine*.so")):
        sys.path.insert(0, str(ROOT / "src"))
    sys.exit(main(sys.argv[1:]))
