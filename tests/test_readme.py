"""The README stays true: its definitions are the result file's, its API example runs."""

from __future__ import annotations

import pathlib
import re

import pytest

from fastbench.results.definitions import DEFINITIONS

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python

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


def test_toml_example_expands_to_flags(tmp_path: pathlib.Path) -> None:
    from fastbench.cli import command as cli
    from fastbench.cli import tomlconfig

    section = README.read_text().split("## Launching the server too", 1)[1]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block is not None
    path = tmp_path / "run.toml"
    path.write_text(block.group(1))
    parser = cli.build_parser()
    argv = tomlconfig.toml_to_argv(str(path), parser)
    ns = parser.parse_args(argv)
    assert ns.launch == "vllm" and ns.concurrency == 16 and ns.num_prompts == 1000
    assert "eagle3" in " ".join(argv)
