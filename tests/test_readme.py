"""The README stays true: its definitions are the result file's, its API example runs."""

from __future__ import annotations

import pathlib
import re

from fastbench.metrics import DEFINITIONS

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_every_definition_is_in_the_readme_verbatim() -> None:
    text = README.read_text()
    for name, definition in DEFINITIONS.items():
        assert f"- **{name}**: {definition}" in text, name


def test_python_api_example_runs(capsys: object) -> None:
    text = README.read_text()
    section = text.split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None
    namespace: dict[str, object] = {}
    exec(compile(code.group(1), "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result.counts.completed == 8  # type: ignore[attr-defined]
    ttft = result.distributions["ttft"].median  # type: ignore[attr-defined]
    assert 19 < ttft < 60


def test_readme_commands_match_ci() -> None:
    text = README.read_text()
    ci = (README.parent / ".ci" / "run").read_text()
    test_command = "pip install '.[test]' && python -m pytest"
    assert test_command in text and test_command in ci
