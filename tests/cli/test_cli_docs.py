"""docs/cli.md is what scripts/gen_cli_docs.py writes from the parsers now, and --help folds the vLLM
compatibility flags into one line that points there."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import types

import pytest

from fastbench.cli import command, vllmflags

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _generator() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_docs_are_current() -> None:
    gen = _generator()
    written = (ROOT / "docs" / "cli.md").read_text()
    # pytest's diff of two long texts is hard to read: name the first line that differs, and the fix
    for number, (theirs, ours) in enumerate(zip(written.splitlines(), gen.render().splitlines()), 1):
        assert theirs == ours, f"docs/cli.md line {number} is out of date: run `{gen.COMMAND}`"
    assert written == gen.render(), f"docs/cli.md is out of date: run `{gen.COMMAND}`"


def test_every_subcommand_the_usage_names_is_documented() -> None:
    usage = command.build_parser().format_usage()
    named = {f"fastbench {word}" for words in re.findall(r"fastbench ([a-z|-]+)", usage) for word in words.split("|")}
    documented = {name for name, _ in _generator().commands()}
    assert named and named <= documented, named - documented


def test_help_folds_the_compatibility_flags_into_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        command.build_parser().parse_args(["--help"])
    shown = capsys.readouterr().out
    doc = (ROOT / "docs" / "cli.md").read_text()
    for flag, unused in vllmflags.UNUSED.items():
        assert re.search(rf"(^|\s){re.escape(flag)}\b", shown) is None, flag  # not in --help ...
        assert f"| `{flag}` |" in doc and unused.why in doc, flag  # ... but in docs/cli.md, with its reason
    section = shown.split(vllmflags.GROUP_TITLE + ":", 1)[1].split("\n\n", 1)[0]
    assert f"{len(vllmflags.UNUSED)} more of its flags" in section and "docs/cli.md" in section
    for own in ("--base-url", "--concurrency", "--coalesce-ms", "--dataset-name", "--result-json", "--launch"):
        assert own in shown, own
