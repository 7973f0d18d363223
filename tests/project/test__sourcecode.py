"""Lint and types: ruff over the tree, mypy --strict over the package (settings in pyproject.toml); and no
citation of a tracker item or work round anywhere in the tree."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _tool(name: str) -> list[str]:
    pytest.importorskip(name)
    return [sys.executable, "-m", name]


def test_ruff() -> None:
    if not (ROOT / "pyproject.toml").exists():
        pytest.skip("not a source checkout")
    proc = subprocess.run([*_tool("ruff"), "check", "src", "tests", "bench", "scripts"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict() -> None:
    if not (ROOT / "pyproject.toml").exists():
        pytest.skip("not a source checkout")
    proc = subprocess.run([*_tool("mypy")], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# A numbered tracker item or work round ("issue N", "item N", "session N", "stop N", a zero-padded "round 0N")
# means nothing to a reader of the repository, who cannot look it up: say what and why instead. Upstream
# references can be looked up and are fine: a project's issue (vllm-project/vllm#1234, an issues/ URL)
# and a standard's numbered item (RFC 9112 6.3 item 3).
CITATION = re.compile(r"(?<![\w-])(?:issue|session|stop|item)s? #?[0-9]+|(?<![\w-])round 0[0-9]\b", re.IGNORECASE)
UPSTREAM = re.compile(r"[\w.-]+/[\w.-]+#[0-9]+|/issues/[0-9]+|/pull/[0-9]+"
                      r"|RFC [0-9]+,? (?:section )?[0-9.]+,? items? [0-9]+(?: and [0-9]+)?", re.IGNORECASE)
CITATION_ROOTS = ("src", "docs", "bench", "tests", "scripts", "csrc", "fuzz", "README.md")


def _tracked_text_files() -> list[pathlib.Path]:
    listed = subprocess.run(["git", "ls-files", "-z", "--", *CITATION_ROOTS], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name]


def citations(text: str) -> list[tuple[int, str]]:
    """(line number, the words) of each tracker or work-round citation in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in CITATION.finditer(UPSTREAM.sub("", line)):
            found.append((number, match.group(0)))
    return found


def test_the_citation_check_tells_trackers_from_upstream() -> None:
    # the citations spelt from parts, so that this file holds none itself
    cited = [f"{word} {number}" for word, number in (("issue", 14), ("item", 8), ("Session", 5), ("stop", 20),
                                                      ("round", "08"), ("items", "#3"))]
    assert [words for _, words in citations("as " + "; ".join(cited) + " say")] == cited
    assert citations("vllm-project/vllm#27339, RFC 9112 6.3 item 3, RFC 9112 section 6.3 items 3 and 4, "
                     "--sessions 2000, round 2 of 3, rounds 1-4, the session at index 5") == []


def test_no_tracker_or_work_round_numbers() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    found = []
    for path in _tracked_text_files():
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary seeds of the fuzzers; a file deleted but not yet committed
        found += [f"{path.relative_to(ROOT)}:{number}: {words}" for number, words in citations(text)]
    assert not found, "say what and why instead of a tracker or work-round number:\n" + "\n".join(found)
