"""``fastbench --config run.toml``: a run described in a file, turned into the command-line flags it stands for.

The file has two tables::

    [server]                      # a server for fastbench to launch (or base_url = "..." to attach)
    engine = "vllm"               # --launch
    model = "google/gemma-3-270m" # --launch-model (beside base_url: --model, the name it serves)
    args = ["--max-model-len", "2048", "--speculative-config", '{"method": "ngram", ...}']  # or one string
    image = "vllm/vllm-openai@sha256:..."                     # --docker-image (omit: a local process)
    gpus = "auto"                                              # --docker-gpus (docker only; also hf_cache)
    env = { VLLM_CPU_KVCACHE_SPACE = "2", HF_TOKEN = "" }      # "" passes fastbench's own value through
    port = 8000

    [benchmark]                   # any fastbench flag, by its name with or without dashes
    concurrency = 16
    num_prompts = 200
    max_seconds = 300
    goodput = { ttft = 500, tpot = 50 }

Flags on the command line override the file: the file's flags are placed before them, and for any flag
given twice argparse keeps the last. A server given on the command line replaces the file's: with
``--base-url`` the file's launch keys are left out (attach to a running server instead), with
``--launch`` its ``base_url``. The expanded command line is what the result and the card record,
so the card's "Full run command" reproduces the run without the file.

The keys and their types come from the parser, through :func:`fastbench.cli.argtypes.options`: a
[benchmark] key is any long option, and its value is the kind the option's type converts (a whole
number, a number, a switch, flags for another program, ...). The values themselves are checked with
the rest of the config, as the command line's are.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from fastbench.cli.argtypes import Option, options
from fastbench.config import GOODPUT_METRICS
from fastbench.exceptions import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ("LAUNCH_FLAGS", "SERVER_KEYS", "config_path", "expand", "options_by_key", "server_flag", "toml_to_argv",
           "toml_type", "value_flags")

SERVER_KEYS = {
    "engine": "--launch",
    "model": "--launch-model",
    "args": "--engine-args",
    "image": "--docker-image",
    "docker_args": "--docker-args",
    "gpus": "--docker-gpus",
    "hf_cache": "--docker-hf-cache",
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
# The flags that only mean something for a server fastbench launches.
LAUNCH_FLAGS = frozenset(flag for flag in SERVER_KEYS.values()
                         if flag not in ("--base-url", "--memory-interval", "--metrics-interval"))


def server_flag(key: str, server: Mapping[str, Any]) -> str | None:
    """The flag a [server] key stands for (None: no such key). ``model`` is the model to launch, except in a
    table that attaches to a running server (``base_url``, no ``engine``): there it is the name the server
    serves the model by (--model), as a user who writes it beside base_url means."""
    if key == "model" and "base_url" in server and "engine" not in server:
        return "--model"
    return SERVER_KEYS.get(key)


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


def expand(argv: list[str], parser: argparse.ArgumentParser) -> tuple[str | None, list[str]]:
    """``argv`` with ``--config PATH`` replaced by the file's flags, placed first so that the command
    line's override them; and PATH (None without --config). A server named on the command line
    replaces the file's: ``--base-url`` drops the file's launch flags, ``--launch`` its base_url."""
    path, rest = config_path(argv)
    if path is None:  # the parser takes no abbreviation (--conf): nothing else can name the file
        return None, argv
    single, given = _given(rest, options(parser), parser)
    skip = (LAUNCH_FLAGS if given.get("base_url") and not given.get("launch")
            else frozenset({"--base-url"}) if given.get("launch") else frozenset())
    # What the file sets for a server or dataset the command line replaced would be refused as idle.
    if given.get("base_url") or given.get("launch"):
        skip |= {"--synthetic-args"}
    if given.get("dataset_name") == "random":
        skip |= {"--dataset-path", "--dataset-order"}
    # A value the command line sets again replaces the file's: only one of them goes into the
    # command (and the card's "Full run command"); repeatable flags add up, so both stay.
    skip |= {option.flags[0] for option in single if option.dest in given}
    return path, [*toml_to_argv(path, parser, skip), *rest]


def _given(rest: list[str], known: list[Option],
           parser: argparse.ArgumentParser) -> tuple[list[Option], dict[str, Any]]:
    """The single-valued options, and the values of those ``rest`` gives, by dest, as argparse reads
    them (abbreviations and aliases included): an option it leaves at a marker was not given."""
    unset = object()
    single = [option for option in known if not option.repeatable]  # repeatable ones add up
    ns, _ = parser.parse_known_args(rest, argparse.Namespace(**{option.dest: unset for option in single}))
    return single, {o.dest: getattr(ns, o.dest) for o in single if getattr(ns, o.dest) is not unset}


def options_by_key(known: list[Option]) -> dict[str, Option]:
    """Every option by each of its long flags without dashes, with dashes as underscores, and by its dest."""
    out: dict[str, Option] = {}
    for option in known:
        for flag in option.flags:
            out[flag[2:]] = out[flag[2:].replace("-", "_")] = option
    for option in known:
        out.setdefault(option.dest, option)
    return out


def toml_type(value: Any) -> str:
    """A TOML value's type as a message names it."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a date/time ({value})"


def _is_scalar(value: Any) -> bool:
    """A string or a number: what an engine argument or an environment value may be written as."""
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False


def value_flags(option: Option, value: Any, where: str) -> list[str]:
    """The flags that set ``option`` to ``value`` (a TOML value), type-checked.

    Always ``--flag=value``, never ``--flag value``: argparse takes a separate value that starts with
    a dash (``args = ["--enforce-eager"]``, ``label = "-x"``) for a flag of its own.
    """

    def wrong(wanted: str) -> ConfigError:
        return ConfigError(f"{where} must be {wanted}, got {toml_type(value)}")

    flag, kind = option.flags[0], option.kind
    if kind == "true or false":
        if not isinstance(value, bool):
            raise wrong(kind)
        if option.negatable:
            return [flag if value else "--no-" + flag[2:]]
        return [flag] if value else []
    if kind == "KEY:MS":
        return _goodput_flags(value, where, wrong)
    if kind == "KEY=VALUE":  # --header, --metadata: { key = "value" } or ["key=value"], words after the flag
        if isinstance(value, dict) and all(_is_scalar(v) for v in value.values()):
            items = [f"{k}={v}" for k, v in value.items()]
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            items = list(value)
        else:
            raise wrong('a table of key = "value" or an array of "KEY=VALUE" strings')
        if any(item.startswith("-") for item in items):
            raise wrong('KEY=VALUE pairs whose key does not start with a dash')
        return [flag, *items]
    if kind in ("names, comma-separated", "numbers, comma-separated"):  # "ttft,e2el" or ["ttft", "e2el"]
        numbers = kind.startswith("numbers")
        if isinstance(value, list) and all(_is_scalar(v) if numbers else isinstance(v, str) for v in value):
            return [f"{flag}={','.join(str(v) for v in value)}"]
        if isinstance(value, str) or (numbers and _is_scalar(value)):
            return [f"{flag}={value}"]
        raise wrong(f"an array or a string of {kind}")
    if option.several:  # e.g. lora_modules = ["a", "b"]: words after the flag
        items = value if isinstance(value, list) else [value]
        if not all(_is_scalar(v) and not str(v).startswith("-") for v in items):
            raise wrong("an array of strings (none starting with a dash) or one string")
        return [flag, *(str(v) for v in items)]
    if flag == "--save-detailed":  # vllm's switch; a string is the old spelling of requests_jsonl
        if isinstance(value, bool):
            return [flag] if value else []
        if isinstance(value, str):
            return [f"{flag}={value}"]
        raise wrong("true or false")
    if kind == "a JSON object":
        if isinstance(value, dict):
            return [f"{flag}={orjson.dumps(value).decode()}"]
        if isinstance(value, str) and _is_json_object(value):
            return [f"{flag}={value}"]
        raise wrong("a table or a JSON object in a string")
    if kind == "flags":
        if isinstance(value, list) and all(_is_scalar(v) for v in value):
            return [f"{flag}={shlex.join(str(v) for v in value)}"]
        if isinstance(value, str):
            return [f"{flag}={value}"]
        raise wrong("an array of strings or one string of flags")
    if flag == "--server-env":  # [server] env = { NAME = "VALUE" }, as the file's docstring shows
        if isinstance(value, dict) and all(_is_scalar(v) for v in value.values()):
            return [f"{flag}={k}={v}" if v != "" else f"{flag}={k}" for k, v in value.items()]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [f"{flag}={v}" for v in value]
        if isinstance(value, str):
            return [f"{flag}={value}"]
        raise wrong('a table of NAME = "VALUE", an array of "NAME=VALUE" strings or one such string')
    if option.repeatable and kind == "a string":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [f"{flag}={v}" for v in value]
        if isinstance(value, str):
            return [f"{flag}={value}"]
        raise wrong("an array of strings or one string")
    if kind == "an integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "a number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind == 'an integer or "auto"':
        ok = (isinstance(value, int) and not isinstance(value, bool)) or value == "auto"
    elif kind == 'a number or "auto"':
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) or value == "auto"
    else:
        ok = isinstance(value, str)
    if not ok:
        raise wrong(kind)
    if option.choices is not None and value not in option.choices:
        raise wrong("one of " + ", ".join(repr(c) for c in option.choices))
    return [f"{flag}={value}"]


def _goodput_flags(value: Any, where: str, wrong: Callable[[str], ConfigError]) -> list[str]:
    """``goodput = { ttft = 500 }`` or ``["ttft:500"]``: --goodput takes several values, so they follow
    it as words of their own; none may start with a dash."""
    if isinstance(value, dict):
        for key, ms in value.items():
            if key not in GOODPUT_METRICS:
                raise ConfigError(f"{where} takes ttft, tpot and e2el, got {key!r}")
            if not isinstance(ms, (int, float)) or isinstance(ms, bool):
                raise ConfigError(f"{where}.{key} must be a number of milliseconds, got {toml_type(ms)}")
        return ["--goodput", *(f"{k}:{v}" for k, v in value.items())]
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(item, str) and not item.startswith("-") for item in items):
        raise wrong('a table such as { ttft = 500 } or an array of "KEY:MS" strings')
    return ["--goodput", *items]


def _table(doc: dict[str, Any], name: str, table: str) -> dict[str, Any]:
    value = doc.get(table, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{name}: {table} must be a table ([{table}] and its keys), got {toml_type(value)}")
    return value


def toml_to_argv(path: str, parser: argparse.ArgumentParser, skip: frozenset[str] = frozenset()) -> list[str]:
    """The command-line flags that ``path``'s [server] and [benchmark] tables stand for, less the
    flags in ``skip`` (checked all the same)."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:  # e.g. UTF-16, as some editors and shells write by default
        raise ConfigError(f"--config {path}: not UTF-8 text; save it as UTF-8") from None
    name = Path(path).name
    unknown_tables = sorted(set(doc) - {"server", "benchmark"})
    if unknown_tables:
        raise ConfigError(f"{name}: unknown table(s) {', '.join(unknown_tables)}; use [server] and [benchmark]")
    by_key = options_by_key(options(parser))
    argv: list[str] = []
    server = _table(doc, name, "server")
    for key, value in server.items():
        flag = server_flag(key, server)
        if flag is None:
            raise ConfigError(f"{name}: [server] has no key {key!r} (it takes {', '.join(SERVER_KEYS)})")
        flags = value_flags(by_key[flag[2:]], value, f"{name}: [server] {key}")
        argv += [] if flag in skip else flags
    for key, value in _table(doc, name, "benchmark").items():
        option = by_key.get(key)
        if option is None or option.dest == "config":
            raise ConfigError(f"{name}: [benchmark] has no option {key!r} (see fastbench --help)")
        flags = value_flags(option, value, f"{name}: [benchmark] {key}")
        argv += [] if option.flags[0] in skip else flags
    return argv
