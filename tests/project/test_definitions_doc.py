"""docs/definitions.md holds every figure's definition, verbatim as every result file stores it.

Each entry is ``- **name**: text``, wrapped over lines that continue it with two spaces of indent; joined
again with one space, an entry's text is the definition, character for character.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from fastbench.results.definitions import DEFINITIONS

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "definitions.md"
WIDTH = 110  # the page's lines, so that a reader of the source never scrolls sideways
ENTRY = re.compile(r"^- \*\*(\w+)\*\*: (\S.*)$")
CONTINUATION = re.compile(r"^  (\S.*)$")
# A continuation line opening with one of these would render as a nested list, a heading, a quote or a table
# row, so the page would show something other than the definition.
MARKDOWN_OPENER = re.compile(r"^([-+*>#|]|\d+[.)])(\s|$)")


def entries(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The page's entries as (name, joined text), in order, and the lines that break the entry format."""
    found: list[tuple[str, str]] = []
    malformed: list[str] = []
    in_entry = False
    for number, line in enumerate(text.splitlines(), 1):
        entry = ENTRY.match(line)
        continuation = CONTINUATION.match(line)
        if entry:
            found.append((entry.group(1), entry.group(2)))
            in_entry = True
        elif in_entry and continuation:
            if MARKDOWN_OPENER.match(continuation.group(1)):
                malformed.append(f"{number}: a continuation that Markdown reads as a new block: {line!r}")
            name, joined = found[-1]
            found[-1] = (name, f"{joined} {continuation.group(1)}")
        else:
            in_entry = False
            if line.startswith("- **") or (line.startswith(" ") and line.strip()):
                malformed.append(f"{number}: not an entry line nor the continuation of one: {line!r}")
    return found, malformed


def test_the_page_holds_every_definition_verbatim_and_nothing_else() -> None:
    found, malformed = entries(PAGE.read_text())
    assert not malformed, malformed
    names = [name for name, _ in found]
    assert len(names) == len(set(names)), sorted({name for name in names if names.count(name) > 1})
    page = dict(found)
    assert sorted(set(DEFINITIONS) - set(page)) == [], "definitions missing from the page"
    assert sorted(set(page) - set(DEFINITIONS)) == [], "entries of the page that no result file defines"
    differ = [name for name, text in page.items() if text != DEFINITIONS[name]]
    assert differ == [], f"entries whose joined text is not the result file's: {differ}"


def test_joining_the_wrapped_lines_gives_back_each_definition() -> None:
    """Wrapping splits at single spaces only, so joining with one space is exact: a definition with a double
    space, a line break or an edge space could not be written on the page unchanged."""
    assert [name for name, text in DEFINITIONS.items() if "  " in text or "\n" in text or text != text.strip()] == []


def test_the_pages_lines_are_short() -> None:
    long_lines = [f"{number}: {len(line)}" for number, line in enumerate(PAGE.read_text().splitlines(), 1)
                  if len(line) > WIDTH]
    assert long_lines == [], long_lines


def test_the_checker_catches_a_changed_word_a_split_entry_and_a_nested_list() -> None:
    text = ("- **ttft**: Time to first\n  token.\n"
            "- **tpot**: (E2E latency\n  - TTFT) / (output tokens - 1)\n"
            "\n  an indented line after a blank\n"
            "- **itl** : a name written otherwise\n")
    found, malformed = entries(text)
    assert found == [("ttft", "Time to first token."), ("tpot", "(E2E latency - TTFT) / (output tokens - 1)")]
    assert [line.split(":")[0] for line in malformed] == ["4", "6", "7"]
    assert dict(found)["ttft"] != DEFINITIONS["ttft"]
