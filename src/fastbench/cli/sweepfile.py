"""A sweep file read into its plan for a Python harness, as ``fastbench sweep FILE`` reads it (its own
module: the reading needs the run command's parser, cli/command.py, which imports cli/sweep.py)::

    from fastbench.api import sweep
    from fastbench.cli.sweepfile import plan_from_file

    points = sweep(plan_from_file("crossover.toml", store="runs"))
"""

from __future__ import annotations

from fastbench.cli import command
from fastbench.cli.sweep import RunCommand, load_plan
from fastbench.study.sweepplan import Plan

__all__ = ("plan_from_file",)


def plan_from_file(path: str, *, store: str | None = None, name: str | None = None, repeats: int | None = None,
                   find_max: str | None = None, warmup: int | None = None) -> Plan:
    """The sweep file's plan, every cell's options checked (ConfigError, one line, naming the key), before
    anything is launched; the keywords are ``fastbench sweep``'s --store, --name, --repeats, --find-max
    and --warmup."""
    plan, _ = load_plan(path, RunCommand(command.build_parser, command.config_from_args), store=store, name=name,
                        repeats=repeats, find_max=find_max, warmup=warmup)
    return plan
