"""The distribution's name is the project's own: on PyPI the name ``fastbench`` belongs to an unrelated
package, so no page, help text or error message may tell anyone to ``pip install fastbench`` (with or
without extras): that installs someone else's code. Every install line that names the project names it
as pyproject.toml does, or installs from a clone (``.``) or a built wheel."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME = PROJECT["name"]
EXTRAS = set(PROJECT["optional-dependencies"])


def _normal(name: str) -> str:
    """PEP 503: the name as an index compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _installs(text: str) -> list[str]:
    """The requirements each ``pip install`` of ``text`` names, as written (flags, paths, wheels and shell
    variables left out): what pip would fetch by name from an index."""
    named = []
    for found in re.finditer(r"pip install ([^`\n]*)", text):
        try:
            words = shlex.split(found.group(1))
        except ValueError:  # an unbalanced quote in prose: split on spaces instead
            words = found.group(1).split()
        for word in words:
            if word in ("&&", "||", ";", "|") or word.startswith("#"):
                break
            word = word.strip("'\"(),.;:")
            if not word or word.startswith(("-", "/", "$", "{")) or ".whl" in word:
                continue
            requirement = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?", word)
            if requirement is not None:
                named.append(requirement.group(0))
    return named


def _sources() -> list[Path]:
    """What users read: the README, docs/ and bench/'s pages, and the text fastbench itself prints (help,
    errors, which docs/cli.md reproduces), CI and the scripts."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("*.md"))]
    code = sorted((ROOT / "src" / "fastbench").rglob("*.py")) + sorted((ROOT / "scripts").glob("*"))
    return [*pages, *(path for path in code if path.is_file()), ROOT / ".ci" / "run"]


def test_the_scan_finds_what_pip_would_fetch_by_name() -> None:
    text = ("pip install 'fastbench[plot]' && fastbench plot\n`pip install fastbench`, or "
            "pip install --quiet tokenizers \"${pins[@]}\" . '.[ray]' ./dist/fastbench_llm-0.1.0-cp311.whl "
            "Fastbench_LLM[gpu]")
    assert _installs(text) == ["fastbench[plot]", "fastbench", "tokenizers", "Fastbench_LLM[gpu]"]
    assert [_normal(n.partition("[")[0]) for n in _installs(text)][-1] == "fastbench-llm"


def test_the_distribution_has_a_name_of_its_own_and_the_readme_says_it() -> None:
    assert _normal(NAME) != "fastbench"
    readme = (ROOT / "README.md").read_text()
    assert f"The distribution is named `{NAME}`" in readme
    # the import name and the command stay fastbench
    assert PROJECT["scripts"] == {"fastbench": "fastbench.cli:main"}


def test_no_install_line_fetches_the_name_fastbench_and_each_that_names_the_project_uses_its_name() -> None:
    wrong = []
    for path in _sources():
        for requirement in _installs(path.read_text(errors="replace")):
            name, _, extras = requirement.partition("[")
            extras_named = set(extras.rstrip("]").split(",")) if extras else set()
            ours = extras_named and extras_named <= EXTRAS
            if _normal(name) == "fastbench" or (ours and _normal(name) != _normal(NAME)):
                wrong.append(f"{path.relative_to(ROOT)}: pip install {requirement}")
    assert not wrong, wrong


def test_install_lines_of_the_pages_install_from_a_clone() -> None:
    """The README and docs/ install from a clone, ``pip install '.[EXTRA]'``: the project is not on PyPI
    yet, so a page that said ``pip install 'NAME[EXTRA]'`` would send a new user to an index that has none."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        if page.name == "cli.md":
            continue  # fastbench's own help, generated: it tells an installed fastbench how to add an extra
        assert not [r for r in _installs(text) if _normal(r.partition("[")[0]) == _normal(NAME)], page.name
    readme = (ROOT / "README.md").read_text()
    for extra in ("plot", "gpu", "ray"):
        assert f"'.[{extra}]'" in readme, extra
