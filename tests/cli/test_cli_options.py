"""Every command's options: each has help text, none is taken by abbreviation (a mistyped flag is an
error naming the closest one), the fault modes are explained and the main usage names the subcommands."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fastbench.cli import command, validate
from fastbench.synthetic import FAULTS
from fastbench.synthetic import cli as synthetic_cli

PARSERS = {
    "fastbench": command.build_parser,
    "fastbench validate": validate.build_parser,
    "fastbench synthetic-server": synthetic_cli.build_parser,
}


@pytest.mark.parametrize("name", PARSERS)
def test_every_option_has_help(name: str) -> None:
    parser = PARSERS[name]()
    missing = [action.option_strings[0] for action in parser._actions
               if action.option_strings and (not action.help or action.help == argparse.SUPPRESS)]
    assert not missing, f"{name}: options without help: {missing}"


@pytest.mark.parametrize("name,mistyped,closest", [
    ("fastbench", "--num-prompt", "--num-prompts"),
    ("fastbench", "--concurency", "--concurrency"),
    ("fastbench", "--result-jsn", "--result-json"),
    ("fastbench validate", "--concurrenc", "--concurrency"),
    ("fastbench synthetic-server", "--itl", "--itl-ms"),
    ("fastbench synthetic-server", "--max-model", "--max-model-len"),
])
def test_a_mistyped_flag_is_refused_naming_the_closest(
        name: str, mistyped: str, closest: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        PARSERS[name]().parse_args([mistyped, "4"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"unrecognized option {mistyped}; did you mean {closest}?" in err


def test_an_unknown_flag_far_from_any_is_refused_without_a_guess(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        command.build_parser().parse_args(["--zzzzzz"])
    err = capsys.readouterr().err
    assert "unrecognized option --zzzzzz" in err and "did you mean" not in err


def test_the_flags_themselves_still_parse() -> None:
    ns = command.build_parser().parse_args(["--num-prompts", "4", "--concurrency=2"])
    assert (ns.num_prompts, ns.concurrency) == (4, 2)


def test_each_fault_mode_has_one_help_line() -> None:
    text = synthetic_cli.build_parser().format_help()
    lines = text.splitlines()
    for mode in FAULTS:
        described = [line for line in lines if line.split()[:1] == [mode]]
        assert len(described) == 1, mode
        assert len(described[0].split()) > 3, described  # a description, not the bare name
    assert set(synthetic_cli.FAULT_HELP) == set(FAULTS)


def test_main_usage_names_the_subcommands() -> None:
    usage = command.build_parser().format_usage()
    assert "fastbench validate" in usage and "fastbench synthetic-server" in usage


def test_output_into_a_closed_pipe_ends_quietly_with_sigpipes_status(tmp_path: Path) -> None:
    """`fastbench runs | head`: a reader that stops early closes the pipe; the command ends without a
    traceback, with 141 (128 + SIGPIPE) as a shell reports for other tools."""
    from fastbench.study.store import Store

    with Store(tmp_path, create=True):
        pass
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write
    try:
        proc = subprocess.run([sys.executable, "-m", "fastbench", "runs", "--store", str(tmp_path)], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (141, "")
