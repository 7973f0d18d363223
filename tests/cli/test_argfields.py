"""The one mapping from a parsed command line to a config (cli/argfields.py): every field of BenchConfig and
LaunchConfig is reached from a flag, by its name, by the renamed table, or made from several flags; a
renamed flag reaches its field and not the one of its own name."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest

from fastbench.api.validation import checked_settings
from fastbench.cli import argfields, command
from fastbench.cli import validate as validate_cli
from fastbench.config import BenchConfig, LaunchConfig

pytestmark = pytest.mark.pure_python


@dataclasses.dataclass(frozen=True)
class _Target:
    a: int = 0
    b_s: float = 0.0
    c: str = "default"


def test_a_field_takes_its_own_dest_a_renamed_one_or_what_is_made() -> None:
    ns = argparse.Namespace(a=1, b=2.5, c="flag", unrelated=9)
    assert argfields.from_args(ns, _Target, renamed={"b_s": "b"}) == {"a": 1, "b_s": 2.5, "c": "flag"}
    assert argfields.from_args(ns, _Target, renamed={"b_s": "b"}, c="made") == {"a": 1, "b_s": 2.5, "c": "made"}
    assert argfields.from_args(argparse.Namespace(a=1), _Target) == {"a": 1}  # the others keep their defaults
    with pytest.raises(AttributeError):  # a misspelt dest fails, never leaves the field at its default
        argfields.from_args(ns, _Target, renamed={"b_s": "bee"})


def test_a_function_takes_its_keyword_parameters() -> None:
    def settings(x: int, *, y: int = 0, **rest: Any) -> None: ...

    assert argfields.target_names(settings) == ("x", "y")
    assert argfields.from_args(argparse.Namespace(x=1, y=2, rest=3), settings) == {"x": 1, "y": 2}


def test_a_dataclass_gives_its_fields_not_what_its_init_folds_in() -> None:
    names = argfields.target_names(BenchConfig)
    assert "dataset_options" in names and "random_input_len" not in names  # a flat name folds into the options


def _made_by_config_from_args(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> tuple[BenchConfig, set[str]]:
    """The config a command line makes, and the fields config_from_args and _launch_config make themselves."""
    made: set[str] = set()
    real = argfields.from_args

    def recording(ns: argparse.Namespace, target: Any, **kwargs: Any) -> dict[str, Any]:
        made.update(name for name in kwargs if name != "renamed")
        return real(ns, target, **kwargs)

    monkeypatch.setattr(argfields, "from_args", recording)
    parser = command.build_parser()
    return command.config_from_args(parser.parse_args(argv), argv), made


def test_every_config_field_is_reached_from_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _, made = _made_by_config_from_args(monkeypatch, ["--launch", "vllm", "--launch-model", "m"])
    dests = {action.dest for action in command.build_parser()._actions}
    for config_type, renamed in ((BenchConfig, command.BENCH_DESTS), (LaunchConfig, command.LAUNCH_DESTS)):
        assert set(renamed.values()) <= dests, f"{config_type.__name__}: renamed to no flag"
        assert set(renamed) <= set(argfields.target_names(config_type)), f"{config_type.__name__}: no such field"
        unreached = set(argfields.target_names(config_type)) - dests - set(renamed) - made
        assert not unreached, f"{config_type.__name__} fields no flag reaches: {sorted(unreached)}"


def test_renamed_flags_reach_their_fields_and_not_the_namesakes(monkeypatch: pytest.MonkeyPatch) -> None:
    config, _ = _made_by_config_from_args(monkeypatch, [
        "--model", "served", "--launch", "vllm", "--launch-model", "weights", "--server-host", "0.0.0.0",
        "--server-port", "9001", "--ready-timeout", "5", "--server-log", "s.log", "--server-stop-grace", "3",
        "--request-timeout", "7", "--metrics-interval", "1.5", "--memory-interval", "0.5", "--temperature", "0.3"])
    assert (config.model, config.request_timeout_s, config.metrics_interval_s, config.memory_interval_s,
            config.temperature) == ("served", 7.0, 1.5, 0.5, 0.3)
    launch = config.launch
    assert launch is not None
    # vllm bench serve's --model, --host and --port are not the launched server's
    assert (launch.engine, launch.model, launch.host, launch.port, launch.ready_timeout_s, launch.log_path,
            launch.stop_grace_s) == ("vllm", "weights", "0.0.0.0", 9001, 5.0, "s.log", 3.0)


def test_validate_settings_are_one_mapping_of_its_flags() -> None:
    ns = validate_cli.build_parser().parse_args(["--concurrency", "3", "--itl-ms", "4", "--no-warmup", "--pin"])
    settings = argfields.from_args(ns, checked_settings, warmup=not ns.no_warmup)
    assert set(settings) == set(argfields.target_names(checked_settings))  # every setting has its flag
    assert (settings["concurrency"], settings["itl_ms"], settings["warmup"], settings["pin"]) == (3, 4.0, False, True)
