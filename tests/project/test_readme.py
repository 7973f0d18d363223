"""The README stays true and short: its API and sweep examples run, its commands are CI's, its links resolve;
and so do the examples of the docs pages it points to. The definitions it points to: test_definitions_doc.py."""

from __future__ import annotations

import pathlib
import re

import pytest

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_readme_points_at_the_definitions_and_keeps_no_copy_of_them() -> None:
    """One copy, docs/definitions.md, checked against the result file's: a second would drift unchecked."""
    text = README.read_text()
    assert "](docs/definitions.md)" in text
    assert not re.findall(r"^- \*\*\w+\*\*: ", text, re.M)


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
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = "pip install '.[test]' && python -m pytest"
    assert test_command in text and test_command in ci


def test_the_readme_sweep_example_makes_its_plan(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fastbench.cli import command
    from fastbench.cli.sweep import RunCommand, load_plan

    section = README.read_text().split("## Sweeps: variants x a grid, resumable", 1)[1]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block is not None
    path = tmp_path / "crossover.toml"
    path.write_text(block.group(1))
    plan, _ = load_plan(str(path), RunCommand(command.build_parser, command.config_from_args),
                        store=str(tmp_path / "runs"))
    assert len(plan.cells) == 2 * 4 * 3  # variants x concurrency x repeats
    assert len(plan.groups) == 2  # one launch per variant
    capsys.readouterr()
    assert command.main(["sweep", str(path), "--store", str(tmp_path / "runs"), "--dry-run"]) == 0
    assert "24 cells (8 points x 3 repeats), 0 done, 24 to run" in capsys.readouterr().out


def test_servers_page_toml_example_expands_to_flags(tmp_path: pathlib.Path) -> None:
    from fastbench.cli import command as cli
    from fastbench.cli import tomlconfig

    section = (ROOT / "docs" / "servers.md").read_text().split("## Launching the server too", 1)[1]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block is not None
    path = tmp_path / "run.toml"
    path.write_text(block.group(1))
    parser = cli.build_parser()
    argv = tomlconfig.toml_to_argv(str(path), parser)
    ns = parser.parse_args(argv)
    assert ns.launch == "vllm" and ns.concurrency == 16 and ns.num_prompts == 1000
    assert "eagle3" in " ".join(argv)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces made dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # a '#' in a code block is no heading
    return {_anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    """A page moved or a heading renamed breaks no link of README.md, docs/ or bench/'s pages."""
    pages = [README, ROOT / "bench" / "README.md", ROOT / "bench" / "RESULTS.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_the_readme_stays_short() -> None:
    """A newcomer reads it in two minutes; what it leaves out is one link away (the test above)."""
    assert len(README.read_text().splitlines()) <= 120


def test_the_package_exports_every_name_the_docs_use_from_it() -> None:
    """What README.md and docs/ import from ``fastbench`` or call on it (``fastbench.make_server(...)``,
    ``fastbench.LaunchConfig``) is a public name of the package, and the same object as at its home and
    at the older paths the docs once gave (``fastbench.metrics``, ``fastbench.server.engines``)."""
    import fastbench
    import fastbench.metrics
    import fastbench.server.engines

    named: set[str] = set()
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for imported in re.findall(r"^\s*from fastbench import ([\w, ]+)$", text, re.M):
            named.update(name.strip() for name in imported.split(","))
        # a class, or a function called: a result file's keys ("fastbench.workers") are neither
        named.update(re.findall(r"(?<![\w./-])fastbench\.([A-Z]\w*|[a-z_]\w*(?=\())", text))
    assert {"to_vllm_keys", "make_server", "run", "SyntheticServer"} <= named
    assert named <= set(fastbench.__all__), sorted(named - set(fastbench.__all__))
    assert fastbench.to_vllm_keys is fastbench.metrics.to_vllm_keys
    assert fastbench.make_server is fastbench.server.engines.make_server


def _extras_named(text: str) -> set[str]:
    """The extras ``'.[a,b]'`` installs name in ``text``."""
    return {name for group in re.findall(r"'\.\[([a-z,]+)\]'", text) for name in group.split(",")}


def test_the_quick_start_installs_what_every_command_the_readme_shows_needs() -> None:
    """A new user who ran the quick start's install can run each ``fastbench SUBCOMMAND`` the README shows: the
    extra a subcommand's own help says it needs ("Needs matplotlib: ...", not a flag's "needs") is in that one
    install line."""
    import subprocess
    import sys

    text = README.read_text()
    quick = re.search(r"```bash\n(python3 -m venv .*fastbench --num-prompts \d+)\n```", text)
    assert quick is not None
    installed = _extras_named(quick.group(1))
    shown = set(re.findall(r"\bfastbench (plot|report|runs|compare|sweep|validate)\b", text))
    assert {"plot", "report", "sweep"} <= shown
    needed = {}
    for sub in sorted(shown):
        help_text = subprocess.run([sys.executable, "-m", "fastbench", sub, "--help"], capture_output=True,
                                   text=True, timeout=60).stdout
        needed[sub] = set(re.findall(r"Needs [^.;]*?fastbench-llm\[(\w+)\]", " ".join(help_text.split())))
    assert needed["report"] == needed["plot"] == {"plot"}  # the help says it, as the README's line does
    missing = {sub: extras - installed for sub, extras in needed.items() if extras - installed}
    assert not missing, missing


def test_the_readme_names_every_extra_and_what_needs_it() -> None:
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]) - {"test"}
    section = README.read_text().split("The extras, from a clone", 1)[1].split("\n\n", 1)[0]
    assert _extras_named(section) >= extras, extras - _extras_named(section)
    flat = " ".join(section.split())
    for extra, user in (("metrics", "--metrics-port"), ("otlp", "--otlp-endpoint"), ("plot", "fastbench plot")):
        assert user in flat.split(f"'.[{extra}]'", 1)[1][:40], extra  # said right after the extra
