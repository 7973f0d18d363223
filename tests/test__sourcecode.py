"""Lint and types: ruff over the tree, mypy --strict over the package (settings in pyproject.toml)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python

ROOT = pathlib.Path(__file__).resolve().parent.parent


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
