"""``fastbench --config run.toml``: a run described in a file, turned into the command-line flags it stands for.

The file has two tables::

    [server]                      # a server for fastbench to launch (or base_url = "..." to attach)
    engine = "vllm"               # --launch
    model = "google/gemma-3-270m" # --launch-model
    args = ["--max-model-len", "2048", "--speculative-config", '{"method": "ngram", ...}']  # or one string
    image = "vllm/vllm-openai@sha256:..."                     # --docker-image (omit: a local process)
    env = { VLLM_CPU_KVCACHE_SPACE = "2", HF_TOKEN = "" }      # "" passes fastbench's own value through
    port = 8000

    [benchmark]                   # any fastbench flag, by its name with or without dashes
    concurrency = 16
    num_prompts = 200
    max_seconds = 300
    goodput = { ttft = 500, tpot = 50 }

Flags on the command line override the file: the file's flags are placed before them, and for any flag
given twice argparse keeps the last. The expanded command line is what the result and the card record,
so the card's "Full run command" reproduces the run without the file.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import orjson

from .exceptions import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ("SERVER_KEYS", "config_path", "toml_to_argv")

SERVER_KEYS = {
    "engine": "--launch",
    "model": "--launch-model",
    "args": "--engine-args",
    "image": "--docker-image",
    "docker_args": "--docker-args",
    "env": "--server-env",
    "host": "--server-host",
    "port": "--server-port",
    "ready_timeout": "--ready-timeout",
    "log": "--server-log",
    "engine_bin": "--engine-bin",
    "stop_grace": "--server-stop-grace",
    "base_url": "--base-url",
    "memory_interval": "--memory-interval",
    "metrics_interval": "--metrics-interval",
}


def config_path(argv: list[str]) -> tuple[str | None, list[str]]:
    """Split ``--config PATH`` (or ``--config=PATH``) out of argv."""
    rest: list[str] = []
    path = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--config":
            if i + 1 >= len(argv):
                raise ConfigError("--config needs a TOML file path")
            path = argv[i + 1]
            i += 2
            continue
        if arg.startswith("--config="):
            path = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return path, rest


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every long option by its name without dashes, with dashes as underscores, and by its dest."""
    out: dict[str, argparse.Action] = {}
    for action in parser._actions:  # argparse offers no public list of its actions
        for option in action.option_strings:
            if option.startswith("--"):
                out[option[2:]] = action
                out[option[2:].replace("-", "_")] = action
        out.setdefault(action.dest, action)
    return out


def _long_flag(action: argparse.Action) -> str:
    return next(o for o in action.option_strings if o.startswith("--"))


def _value_flags(flag: str, action: argparse.Action, value: Any, where: str) -> list[str]:
    """The flags that set ``action`` to ``value`` (a TOML value)."""
    if isinstance(action, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return [flag if value else "--no-" + flag[2:]]
    if action.nargs == 0:  # store_true
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return [flag] if value else []
    if flag == "--goodput" and isinstance(value, dict):
        return [flag, *(f"{k}:{v}" for k, v in value.items())]
    if flag == "--extra-body":
        return [flag, orjson.dumps(value).decode() if not isinstance(value, str) else value]
    if flag in ("--engine-args", "--docker-args", "--synthetic-args") and isinstance(value, list):
        return [flag, shlex.join(str(v) for v in value)]
    if flag == "--server-env":
        items = [f"{k}={v}" if v != "" else str(k) for k, v in value.items()] if isinstance(value, dict) else value
        if not isinstance(items, list):
            items = [items]
        out: list[str] = []
        for item in items:
            out += [flag, str(item)]
        return out
    if isinstance(value, list):
        if action.nargs not in ("+", "*"):
            raise ConfigError(f"{where} takes one value, got a list")
        return [flag, *(str(v) for v in value)]
    if isinstance(value, bool):
        raise ConfigError(f"{where} takes a value, not {str(value).lower()}")
    if isinstance(value, dict):
        raise ConfigError(f"{where} takes a value, not a table")
    return [flag, str(value)]


def toml_to_argv(path: str, parser: argparse.ArgumentParser) -> list[str]:
    """The command-line flags that ``path``'s [server] and [benchmark] tables stand for."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc})") from None
    name = Path(path).name
    unknown_tables = sorted(set(doc) - {"server", "benchmark"})
    if unknown_tables:
        raise ConfigError(f"{name}: unknown table(s) {', '.join(unknown_tables)}; use [server] and [benchmark]")
    actions = _actions(parser)
    argv: list[str] = []
    for key, value in dict(doc.get("server", {})).items():
        flag = SERVER_KEYS.get(key)
        if flag is None:
            raise ConfigError(f"{name}: [server] has no key {key!r} (it takes {', '.join(SERVER_KEYS)})")
        argv += _value_flags(flag, actions[flag[2:]], value, f"{name}: [server] {key}")
    for key, value in dict(doc.get("benchmark", {})).items():
        action = actions.get(key)
        if action is None or not action.option_strings or key in ("config", "help", "version"):
            raise ConfigError(f"{name}: [benchmark] has no option {key!r} (see fastbench --help)")
        argv += _value_flags(_long_flag(action), action, value, f"{name}: [benchmark] {key}")
    return argv
