"""The package's layout, kept true: each room imports only the rooms below it, no circles, the yardstick
apart from the client, and no module over ~600 lines; and tests/ mirrors the rooms, each test file in its
room's folder, none importing another. The rooms and what each may import are docs/architecture.md's table
under "The walls", read from the page, and every module is named in its room's row under "The rooms".

Imports are read from the source (``ast``), function-level ones and those under ``if TYPE_CHECKING:``
included: a lazy import is still a dependency, and so is a type a module names (a type-only arrow
upward, or a circle of type hints, ties the modules together as an import does; give the lower module a
``typing.Protocol`` of what it reads, or move the typed record below both).
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "src" / "fastbench"
MAX_LINES = 600

ARCHITECTURE = PACKAGE.parents[1] / "docs" / "architecture.md"
_NAME = re.compile(r"`([^`]+)`")


def _table(heading: str, first_column: str) -> list[tuple[str, str]]:
    """The rows (first cell, second cell) of the two-column table under ``heading`` in docs/architecture.md
    whose header's first cell is ``first_column``."""
    text = ARCHITECTURE.read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows: list[tuple[str, str]] = []
    lines = iter(section.splitlines())
    for line in lines:
        if line.startswith(f"| {first_column} |"):
            next(lines)  # the |---|---| line
            for row in lines:
                if not row.startswith("|"):
                    break
                first, second = (cell.strip() for cell in row.strip().strip("|").split("|", 1))
                rows.append((first, second))
            return rows
    raise AssertionError(f"docs/architecture.md: no table headed '| {first_column} |' under '## {heading}'")


def _module(name: str) -> str:
    return name if name == "fastbench" else f"fastbench.{name}"


def _walls() -> tuple[set[str], dict[str, set[str]]]:
    """The leaves, and what each room may import (besides itself, the leaves and the standard library),
    as docs/architecture.md's table under "The walls" states them: the page is the rule."""
    leaves: set[str] = set()
    allowed: dict[str, set[str]] = {}
    for room_cell, imports_cell in _table("The walls", "room"):
        if room_cell.startswith("leaves:"):
            leaves = {_module(name) for name in _NAME.findall(room_cell)}
            allowed["leaf"] = set()
            continue
        # the first name is the room; names in parentheses only say why
        room = _module(_NAME.findall(room_cell)[0])
        named = re.sub(r"\([^)]*\)", "", imports_cell)
        allowed[room] = {room, *(_module(name) for name in _NAME.findall(named))}
    return leaves, allowed


# Low to high: the leaves, then the core and the records contract, then the wings, then the study (reads
# result files), then the API, then the command line on top.
LEAVES, ALLOWED = _walls()


def test_the_walls_table_is_read_whole() -> None:
    # A row the parse missed or misread would let an import through unseen: the table's known corners.
    assert LEAVES == {"fastbench._version", "fastbench.exceptions", "fastbench.config", "fastbench.datasetoptions",
                      "fastbench.checks", "fastbench.redact", "fastbench.atomicfile"}
    assert ALLOWED["leaf"] == set()
    assert ALLOWED["fastbench._core"] == {"fastbench._core"}
    assert ALLOWED["fastbench.load"] == {"fastbench.load", "fastbench._core", "fastbench.results.records"}
    assert "fastbench.load" not in ALLOWED["fastbench.cli"] and "fastbench.server" not in ALLOWED["fastbench.cli"]
    assert ALLOWED["fastbench.synthetic"] == {"fastbench.synthetic"}
    assert set(ALLOWED) >= {"fastbench.results", "fastbench.server", "fastbench.study", "fastbench.api",
                            "fastbench.metrics", "fastbench.cli", "fastbench.__main__", "fastbench"}


def test_every_module_is_named_in_its_rooms_row_of_the_map() -> None:
    # docs/architecture.md's room list is the map a reader finds a module by: a module it does not name is
    # one the reader cannot place. A package of a room (load/sources/) is named as a folder ("sources/").
    table = _table("The rooms", "room")
    rows = {name.rstrip("/"): set(_NAME.findall(holds)) for room_cell, holds in table
            for name in _NAME.findall(room_cell)}
    everywhere = {name for row in table for cell in row for name in _NAME.findall(cell)}
    missing = []
    for path in [*_sources(), *PACKAGE.rglob("*.pyx")]:
        parts = path.relative_to(PACKAGE).parts
        if path.stem in ("__init__", "__main__"):
            continue
        if len(parts) == 1:
            named = path.stem in everywhere
        else:
            held = rows.get(parts[0], set())
            named = (f"{parts[1]}/" in held if len(parts) > 2 else
                     path.stem in held or path.name in held)
        if not named:
            missing.append(str(path.relative_to(PACKAGE)))
    assert not missing, f"docs/architecture.md, 'The rooms': name these in their room's row, with their job: {missing}"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _room(module: str) -> str:
    if module in LEAVES:
        return "leaf"
    for room in sorted(ALLOWED, key=len, reverse=True):
        if module == room or module.startswith(room + "."):
            return room
    raise AssertionError(f"{module} is in no room of the layout: add it to ALLOWED or LEAVES")


def _imports(path: pathlib.Path) -> set[str]:
    """The fastbench modules ``path`` imports (names imported from a package count as its submodules
    where such a submodule exists)."""
    here = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    return _imports_of(ast.parse(path.read_text(), str(path)), here)


def _imports_of(tree: ast.AST, here: str) -> set[str]:
    """The fastbench modules a parsed module imports, anywhere in it; ``here``: its package."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names if alias.name.split(".")[0] == "fastbench")
            elif isinstance(child, ast.ImportFrom):
                base = _absolute(child, here)
                if base.split(".")[0] == "fastbench":
                    for alias in child.names:
                        sub = f"{base}.{alias.name}"
                        found.add(sub if _exists(sub) else base)
            visit(child)

    visit(tree)
    return found


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module an ``from X import`` names, relative forms (``from .engine import``) resolved."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def _exists(module: str) -> bool:
    rel = pathlib.Path(*module.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").exists() or (PACKAGE / rel / "__init__.py").exists()


def _sources() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _graph() -> dict[str, set[str]]:
    graph = {_module_name(path): _imports(path) for path in _sources()}
    return {module: {dep for dep in deps if dep != module} for module, deps in graph.items()}


def test_imports_for_types_and_lazy_ones_count() -> None:
    source = """
from typing import TYPE_CHECKING
import fastbench.config
if TYPE_CHECKING:
    from fastbench.results.result import Result
    from .contracts import ServerConfig
else:
    from fastbench import exceptions
def later():
    from fastbench.load import plan
"""
    found = _imports_of(ast.parse(source), "fastbench.synthetic")
    assert found == {"fastbench.config", "fastbench.results.result", "fastbench.synthetic.contracts",
                     "fastbench.exceptions", "fastbench.load.plan"}


def test_every_import_points_down_or_sideways_within_its_room() -> None:
    wrong = []
    for module, deps in _graph().items():
        room = _room(module)
        for dep in deps:
            if dep in LEAVES:
                continue
            if not any(dep == ok or dep.startswith(ok + ".") for ok in ALLOWED[room]):
                wrong.append(f"{module} imports {dep}")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_yardstick_imports_nothing_of_the_client() -> None:
    for path in (PACKAGE / "synthetic").rglob("*.py"):
        deps = _imports(path)
        client = {d for d in deps if d != "fastbench._version" and not d.startswith("fastbench.synthetic")}
        assert not client, f"{path.name} imports {sorted(client)}"


def test_no_circles() -> None:
    graph = _graph()
    # Tarjan's strongly connected components: any component of more than one module is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph.get(node, ()):
            if dep not in graph:
                continue
            if dep not in index:
                connect(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    assert not circles, circles


@pytest.mark.parametrize("path", [*_sources(), *sorted(PACKAGE.rglob("*.pyx"))],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_the_limit(path: pathlib.Path) -> None:
    # No exception, and no reason accepted in a docstring: a module that grows past it is split along its jobs.
    lines = path.read_text().count("\n")
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE)}: {lines} lines, over {MAX_LINES}: split it along its jobs"


# -- tests/ mirrors the rooms ------------------------------------------------------------------------------

TESTS = PACKAGE.parents[1] / "tests"
# A folder of tests/ per room (its room in the package beside it), and project for the checks of the whole
# tree (this file, lint and types, the README, CI's summary). What tests share lives in tests/support/.
TEST_ROOMS = {"core": "_core", "load": "load", "results": "results", "server": "server", "study": "study",
              "synthetic": "synthetic", "cli": "cli", "api": "api", "project": None}
TEST_FILE = re.compile(r"^(test_.*|.*_test)\.py$")  # pytest's python_files


def _test_files() -> list[pathlib.Path]:
    return sorted(path for path in TESTS.rglob("*.py") if TEST_FILE.match(path.name))


def _imported_tests(text: str) -> list[str]:
    """The test modules (test files, conftest.py, a room folder of tests/) that ``text`` imports."""
    named: list[str] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            named += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            named += ["." * node.level + (node.module or "")]
    found = []
    for name in named:
        top = name.split(".")[0]
        if name.startswith(".") or TEST_FILE.match(top + ".py") or top in ("tests", "conftest", *TEST_ROOMS):
            found.append(name)
    return found


def test_every_test_file_lives_in_the_folder_of_its_room() -> None:
    misplaced = [str(path.relative_to(TESTS)) for path in _test_files()
                 if path.parent.parent != TESTS or path.parent.name not in TEST_ROOMS]
    assert not misplaced, f"move these into the folder of the room they test ({', '.join(TEST_ROOMS)}): {misplaced}"
    for folder, room in TEST_ROOMS.items():
        assert (TESTS / folder).is_dir(), folder
        assert room is None or (PACKAGE / room).is_dir(), f"tests/{folder} mirrors no room of the package"


def test_no_test_file_imports_another() -> None:
    # What two test files share goes into tests/support/ (fixtures into a room's conftest.py): a test file
    # imported by another is collected twice under two names and ties one file's edits to the other's.
    wrong = [f"{path.relative_to(TESTS)} imports {name}" for path in sorted(TESTS.rglob("*.py"))
             for name in _imported_tests(path.read_text())]
    assert not wrong, "\n".join(wrong)


def test_the_import_check_tells_test_files_from_helpers() -> None:
    text = ("from test_conn import drive\nimport core.test_conn\nfrom tests.load import test_workers\n"
            "from . import helpers\nfrom conftest import fixture\n"
            "def f():\n    from test_result_schema import undocumented\n"
            "from support.timing import until_a_round_passes\nfrom support import scripted\nimport fastbench.load\n")
    assert _imported_tests(text) == ["test_conn", "core.test_conn", "tests.load", ".", "conftest",
                                         "test_result_schema"]
