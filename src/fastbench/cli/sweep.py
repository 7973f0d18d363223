"""``fastbench sweep FILE``: server variants x a benchmark grid x repeats, each cell a run in a results store.

The file (docs/sweep.md)::

    [sweep]
    name = "crossover"                 # default: the file's name; the cells are found again by it
    store = "fastbench-runs"           # the results store (--store overrides)
    repeats = 3
    link = { "--max-num-seqs" = "concurrency" }   # an engine argument set to a grid value: relaunched per value
    stop = ["slo", "saturation", "collapse"]      # the stop rules (the default); [] for none

    [server]                           # what every variant shares: --config's [server] keys
    engine = "vllm"
    model = "Qwen/Qwen3-0.6B"
    args = ["--max-model-len", "4096"]

    [variants.base]                    # a variant: [server] keys; args are added to [server]'s
    [variants.ngram]
    args = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']
    [variants.remote]
    base_url = "http://gpu-box:8000"   # attached: not launched

    [benchmark]                        # any fastbench option; a list is crossed
    concurrency = [1, 4, 16]
    max_tokens = [128, 512]
    num_prompts = 64
    goodput = { ttft = 500 }

Each cell's options become the command line they stand for (the --config machinery, so a key and a
value mean what they mean there) and go through fastbench.api, one run per cell.

The file's keys are checked where the plan reads them, each error naming its key; what the sweep
prints (the dry run, the summary's table and CSV) is cli/sweepsummary.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from fastbench.cli import live, sweepstate
from fastbench.cli.argtypes import HelpFormatter, Option, Parser, options
from fastbench.cli.interrupts import stop_on_signals
from fastbench.cli.sweepsummary import describe_start, render_plan, render_table, write_csv
from fastbench.cli.tomlconfig import SERVER_KEYS, options_by_key, server_flag, toml_type, value_flags
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError, FastbenchError
from fastbench.redact import Secrets
from fastbench.study import cellstate, grid
from fastbench.study import store as run_store
from fastbench.study.sweepplan import (
    Cell,
    Group,
    Journal,
    Plan,
    Point,
    Search,
    StopRules,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ("RunCommand", "build_parser", "load_plan", "main")

SWEEP_KEYS = ("name", "store", "repeats", "link", "stop", "slo_attainment", "saturation", "csv", "warmup",
              "auto_points", "auto_max", "find_max", "find_max_tolerance", "seed", "prompt_reuse",
              "reset_prefix_cache")
DEFAULT_WARMUP = 8  # requests before a launched or attached server's first measured cell
FIND_MAX_AXES = {"concurrency": "concurrency", "rate": "request_rate"}
VARIANT_KEYS = (*SERVER_KEYS, "synthetic_args")
STOP_RULES = ("slo", "saturation", "collapse")
# [benchmark] options a sweep sets itself, per cell: giving them would send every cell to one place.
OWNED = {"store": "the sweep's store ([sweep] store or --store)", "variant": "the [variants] table's names",
         "result_json": "the store (each cell's result is kept there)",
         "result_card": "the store (each cell's card is kept there)",
         "requests_jsonl": "the store (each cell's records are kept there)",
         "config": "the sweep file itself"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Option kinds whose single value is a list: a list of them is crossed only as a list of lists.
_LIST_KINDS = ("names, comma-separated", "numbers, comma-separated", "flags", "KEY=VALUE", "KEY:MS")
SERVER_FLAGS = frozenset(SERVER_KEYS.values()) | {"--synthetic-args"}


class RunCommand(NamedTuple):
    """What a sweep needs of the run command: its parser, and the BenchConfig a parse stands for."""

    build_parser: Callable[[], argparse.ArgumentParser]
    config_from_args: Callable[[argparse.Namespace, Sequence[str]], BenchConfig]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="fastbench sweep", formatter_class=HelpFormatter,
               description="Run a sweep: server variants x a benchmark grid x repeats, each cell one run kept in "
                           "a results store. Running it again resumes: complete cells are skipped. See docs/sweep.md.")
    p.add_argument("file", help="the sweep's TOML file ([sweep], [server], [variants.NAME], [benchmark])")
    p.add_argument("--store", default=None, help="the results store (overrides [sweep] store; default "
                   "$FASTBENCH_STORE, else ./fastbench-runs)")
    p.add_argument("--name", default=None, help="the sweep's name (overrides [sweep] name; default: the file's name)")
    p.add_argument("--repeats", type=int, default=None, help="runs per cell (overrides [sweep] repeats; default 1)")
    p.add_argument("--find-max", choices=tuple(FIND_MAX_AXES), default=None,
                   help="instead of every listed load: bisect between the two values of [benchmark] concurrency (or "
                   "request_rate) for the largest that meets the SLOs (goodput), per series (overrides [sweep] "
                   "find_max)")
    p.add_argument("--warmup", type=int, default=None, metavar="N",
                   help=f"requests sent to each launched or attached server before its first measured cell, kept "
                   f"nowhere (overrides [sweep] warmup; default {DEFAULT_WARMUP}; 0: none)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its estimated time; run nothing")
    p.add_argument("--csv", default=None, help="write the summary here too (it is always written to "
                   "STORE/sweeps/NAME.csv)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="the live view's grid of cells (default: only when stderr is a terminal)")
    live.add_live_args(p)
    return p


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; save it as UTF-8") from None


def _table(doc: Mapping[str, Any], name: str, where: str) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: [{name}] must be a table, got {toml_type(value)}")
    return dict(value)


def _words(value: Any, where: str) -> list[str]:
    """An args value (an array or one string of flags) as a list of words."""
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return [str(v) for v in value]
    raise ConfigError(f"{where} must be an array of strings or one string of flags, got {toml_type(value)}")


def _variant_server(server: Mapping[str, Any], own: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A variant's server table: [server]'s keys, the variant's over them; args added to [server]'s, env merged.
    A variant that attaches (base_url) takes none of [server]'s launch keys."""
    if "base_url" in own or "synthetic_args" in own:
        merged = {k: v for k, v in server.items() if k in ("memory_interval", "metrics_interval")}
        merged.update(own)
        return merged
    merged = dict(server)
    for key, value in own.items():
        if key == "args":
            merged["args"] = _words(server.get("args", []), "[server] args") + _words(value, f"{where} args")
        elif key == "env" and isinstance(value, dict) and isinstance(server.get("env"), dict):
            merged["env"] = {**server["env"], **value}
        else:
            merged[key] = value
    return merged


def _kind(server: Mapping[str, Any]) -> str:
    if "base_url" in server:
        return "attach"
    if "engine" in server or "model" in server:
        return "launch"
    return "synthetic"


def _where(server: Mapping[str, Any], kind: str, linked: Mapping[str, Any]) -> str:
    if kind == "attach":
        return str(server["base_url"])
    if kind == "synthetic":
        return "the built-in synthetic server " + str(server.get("synthetic_args", "")).strip()
    args = _words(server.get("args", []), "args") + [f"{arg}={value}" for arg, value in linked.items()]
    image = f" (image {server['image']})" if server.get("image") else ""
    return shlex.join([str(server.get("engine", "vllm")), "serve", str(server.get("model", "")), *args]) + image


def _takes_list(by_key: Mapping[str, Option]) -> Any:
    def takes_list(key: str) -> bool:
        option = by_key[key]
        return option.kind in _LIST_KINDS or option.several or option.repeatable
    return takes_list


def _flags(option: Option, value: Any, where: str) -> list[str]:
    return value_flags(option, value, where)


def load_plan(path: str, run_command: RunCommand, *, store: str | None = None, name: str | None = None,
              repeats: int | None = None, find_max: str | None = None,
              warmup: int | None = None, check_store: bool = True) -> tuple[Plan, dict[str, Any]]:
    """The sweep file's plan (every cell's config built and checked), and its [sweep] table; ConfigError
    (one line, naming the key) for anything wrong, before anything is launched. ``check_store``: make
    sure the store and the journal can be written (creating them); a dry run writes nothing."""
    file = Path(path).name
    sweep, server, variants_doc, bench = _tables(_load(path), file)
    settings = _settings(sweep, bench, file, name=name, store=store, repeats=repeats, warmup=warmup,
                         find_max=find_max, check_store=check_store)
    parser = run_command.build_parser()
    by_key = options_by_key(options(parser))
    takes_list = _takes_list_checked(bench, by_key, file)
    crossed = grid.crossed_keys(bench, takes_list)
    for key in crossed:
        if not bench[key]:
            raise ConfigError(f"{file}: [benchmark] {key} is an empty list: it would make no cells")
    load = grid.load_key(crossed)
    link = _link(sweep, crossed, settings.search, file)
    variants = _variants(server, variants_doc, link, file)
    start = sweepstate.read(sweep, bench, by_key, variants, file)
    cells = _CellMaker(file, run_command, parser, by_key, settings, link, crossed, load, start, check_store)
    if start.shared_servers and start.prompt_reuse == "fresh":
        cells.notes[f"{', '.join(sorted(start.shared_servers))}: attached to a server another variant attaches "
                    "to, so each draws prompts of its own (one cache would serve one variant's prompts to "
                    "another)"] = None
    grid.check_size(bench, takes_list, variants=len(variants), repeats=settings.repeats, where=file)  # before any cell
    groups = _groups(cells, variants, bench, takes_list)
    seeds = [cell.config.seed for group in groups for cell in group.cells]
    search = settings.search
    plan = Plan(name=settings.name, store=settings.store, groups=tuple(groups), repeats=settings.repeats,
                stop=settings.stop, has_slos=bool(bench.get("goodput")), warmup=settings.warmup, search=search,
                cells_at=cells.at_load if search is not None else None,
                warmup_seed=cellstate.warmup_seed(start.sweep_seed, seeds, settings.name),
                prompt_reuse=start.prompt_reuse, sweep_seed=start.sweep_seed, notes=tuple(cells.notes))
    if search is not None and search.kind == "find_max" and not plan.has_slos:
        raise ConfigError(f"{file}: --find-max needs the SLOs it finds the load for: [benchmark] goodput")
    return plan, sweep


def _tables(doc: Mapping[str, Any], file: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The file's [sweep], [server], [variants] and [benchmark] tables, [sweep]'s and [server]'s keys checked."""
    unknown = sorted(set(doc) - {"sweep", "server", "variants", "benchmark"})
    if unknown:
        raise ConfigError(f"{file}: unknown table [{unknown[0]}]; a sweep file has [sweep], [server], "
                          "[variants.NAME] and [benchmark]")
    sweep = _table(doc, "sweep", file)
    for key in sweep:
        if key not in SWEEP_KEYS:
            raise ConfigError(f"{file}: [sweep] has no key {key!r} (it takes {', '.join(SWEEP_KEYS)})")
    server = _table(doc, "server", file)
    for key in server:
        if key not in VARIANT_KEYS:
            raise ConfigError(f"{file}: [server] has no key {key!r} (it takes {', '.join(VARIANT_KEYS)})")
    return sweep, server, _table(doc, "variants", file), _table(doc, "benchmark", file)


class _Settings(NamedTuple):
    """The sweep's own settings, from [sweep] and the command line (which wins)."""

    name: str
    store: str
    repeats: int
    stop: StopRules
    warmup: int
    search: Search | None


def _settings(sweep: Mapping[str, Any], bench: dict[str, Any], file: str, *, name: str | None, store: str | None,
              repeats: int | None, warmup: int | None, find_max: str | None, check_store: bool) -> _Settings:
    """[sweep]'s settings checked, each error naming its key; ``bench`` gets a search's starting loads."""
    name = name or sweep.get("name") or Path(file).stem
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"{file}: [sweep] name must be letters, digits, '.', '_' or '-', got {name!r}")
    given_store = store is not None
    store = store or sweep.get("store") or os.environ.get("FASTBENCH_STORE") or "fastbench-runs"
    if not isinstance(store, str):
        raise ConfigError(f"{file}: [sweep] store must be a directory path, got {toml_type(store)}")
    # The store and the journal are checked before any cell's options: a measured cell is never lost
    # for want of a place to keep it, and the message names the store, not a cell.
    if check_store:
        run_store.check_store_path(store, "--store" if given_store else "[sweep] store")
        Journal(store, name).check()
    repeats = repeats if repeats is not None else sweep.get("repeats", 1)
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ConfigError(f"{file}: [sweep] repeats must be a whole number >= 1, got {repeats!r}")
    stop = _stop_rules(sweep, file)
    warmup = warmup if warmup is not None else sweep.get("warmup", DEFAULT_WARMUP)
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise ConfigError(f"{file}: [sweep] warmup must be a whole number of requests >= 0, got {warmup!r}")
    return _Settings(name, store, repeats, stop, warmup, _search(sweep, bench, file, find_max))


def _link(sweep: Mapping[str, Any], crossed: Sequence[str], search: Search | None, file: str) -> dict[str, Any]:
    """[sweep] link: engine arguments set to a grid key's value, each checked."""
    link = sweep.get("link", {})
    if not isinstance(link, dict):
        raise ConfigError(f"{file}: [sweep] link must be a table of \"--engine-arg\" = \"grid key\"")
    if link and search is not None:
        raise ConfigError(f"{file}: [sweep] link cannot be used with {search.kind.replace('_', '-')}: the loads it "
                          "measures are not known before it runs")
    for arg, key in link.items():
        if not arg.startswith("--"):
            raise ConfigError(f"{file}: [sweep] link {arg!r}: an engine argument starts with --")
        if key not in crossed:
            raise ConfigError(f"{file}: [sweep] link {arg} = {key!r}: {key!r} is not a list in [benchmark]")
    return link


def _variants(server: Mapping[str, Any], variants_doc: Mapping[str, Any], link: Mapping[str, Any],
              file: str) -> dict[str, dict[str, Any]]:
    """Each variant's server: [server]'s keys with its own (a single "default" where none are named)."""
    variants: dict[str, dict[str, Any]] = {}
    for vname, own in (variants_doc or {"default": {}}).items():
        where = f"{file}: [variants.{vname}]"
        if not _NAME.fullmatch(vname):
            raise ConfigError(f"{where}: a variant's name must be letters, digits, '.', '_' or '-'")
        if not isinstance(own, dict):
            raise ConfigError(f"{where} must be a table, got {toml_type(own)}")
        for key in own:
            if key not in VARIANT_KEYS:
                raise ConfigError(f"{where} has no field {key!r} (it takes {', '.join(VARIANT_KEYS)})")
        variants[vname] = _variant_server(server, own, where)
        if link and _kind(variants[vname]) != "launch":
            raise ConfigError(f"{where}: [sweep] link sets engine arguments, but this variant is not launched")
    return variants


@dataclasses.dataclass
class _CellMaker:
    """Builds a grid point's cells for one variant, each config built and checked; keeps the notes they
    raise, and each series' values so that a search can make the cells of a load it chooses later."""

    file: str
    run_command: RunCommand
    parser: argparse.ArgumentParser
    by_key: Mapping[str, Option]
    settings: _Settings
    link: Mapping[str, Any]
    crossed: Sequence[str]
    load: str | None
    start: sweepstate.CellStart  # the sweep's seed, prompt reuse and the servers variants share
    check_store: bool
    notes: dict[str, None] = dataclasses.field(default_factory=dict)  # what the plan says before it runs, once each
    series_values: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = dataclasses.field(default_factory=dict)

    def make(self, vname: str, vserver: dict[str, Any], values: dict[str, Any]) -> tuple[dict[str, Any], list[Cell]]:
        """A grid point's cells (all repeats) for one variant, and its linked values."""
        from fastbench import api

        file, name, store = self.file, self.settings.name, self.settings.store
        kind = _kind(vserver)
        linked = {arg: values[key] for arg, key in self.link.items()}
        cell_server = dict(vserver)
        if linked:
            cell_server["args"] = _words(vserver.get("args", []), "args") + [f"{a}={v}" for a, v in linked.items()]
        argv = _server_argv(cell_server, self.by_key, f"{file}: [variants.{vname}]")
        for key, value in values.items():
            argv += _flags(self.by_key[key], value, f"{file}: [benchmark] {key}")
        config = _config(self.parser, self.run_command.config_from_args, argv, f"{file}: [variants.{vname}]")
        label = config.label or name
        shown = {key: values[key] for key in self.crossed}
        spec = grid.spec_hash({"server": cell_server, "benchmark": values})
        series = grid.canonical({"variant": vname, **{k: v for k, v in shown.items() if k != self.load}})
        load_value = values[self.load] if self.load else None
        where = _where(vserver, kind, linked)
        self.series_values[series] = (vname, vserver, values)
        cells = []
        for repeat in range(self.settings.repeats):
            cell = Cell(variant=vname, values=shown, repeat=repeat, config=config, spec=spec, series=series,
                        load=float(load_value) if isinstance(load_value, (int, float)) else None)
            config_here = dataclasses.replace(
                config, store=store, variant=vname, label=label,
                metadata={**config.metadata, "sweep": name, "sweep_cell": cell.key, "sweep_spec": spec,
                          "sweep_server": where})
            config_here, note = self.start.apply(config_here, vname, kind, values, shown, repeat)
            if note is not None:
                self.notes[note] = None
            cell = dataclasses.replace(cell, config=config_here)
            try:
                # a dry run's store is checked by nothing (validating it would create it)
                api.validate(cell.config if self.check_store else dataclasses.replace(cell.config, store=None))
            except FastbenchError as exc:
                raise ConfigError(f"{file}: [variants.{vname}] cell {grid.canonical(shown)}: {exc}") from None
            cells.append(cell)
        return linked, cells

    def at_load(self, cell: Cell, load_value: float) -> tuple[Cell, ...]:
        """The cells of ``cell``'s series at another load (a search's next point)."""
        assert self.load is not None
        vname, vserver, values = self.series_values[cell.series]
        value = int(load_value) if self.load == "concurrency" else load_value
        return tuple(self.make(vname, vserver, {**values, self.load: value})[1])


def _groups(cells: _CellMaker, variants: Mapping[str, dict[str, Any]], bench: Mapping[str, Any],
            takes_list: Any) -> list[Group]:
    """The cells, grouped by variant and linked engine arguments: one server lifecycle each."""
    groups = []
    for vname, vserver in variants.items():
        kind = _kind(vserver)
        by_linked: dict[str, list[Cell]] = {}
        linked_of: dict[str, dict[str, Any]] = {}
        for values in grid.cross(bench, takes_list):
            linked, made = cells.make(vname, vserver, values)
            lkey = grid.canonical(linked)
            by_linked.setdefault(lkey, []).extend(made)
            linked_of[lkey] = linked
        for lkey, grouped in by_linked.items():
            groups.append(Group(variant=vname, kind=kind, linked=linked_of[lkey], cells=tuple(grouped),
                                where=_where(vserver, kind, linked_of[lkey])))
    return groups


def _search(sweep: Mapping[str, Any], bench: dict[str, Any], file: str, find_max: str | None) -> Search | None:
    """The plan's search, if any; ``bench`` gets the ends the search starts from as its load list."""
    for key in ("request_rate", "max_concurrency"):
        if bench.get(key) == "auto":
            raise ConfigError(f"{file}: [benchmark] {key} = \"auto\": only concurrency takes \"auto\"")
    find_max = find_max or sweep.get("find_max")
    auto = bench.get("concurrency") == "auto"
    if find_max is None and not auto:
        for key in ("auto_points", "auto_max", "find_max_tolerance"):
            if key in sweep:
                raise ConfigError(f"{file}: [sweep] {key} is for concurrency = \"auto\" or find_max; neither is set")
        return None
    if find_max is not None and auto:
        raise ConfigError(f"{file}: find_max bisects between two listed loads; concurrency = \"auto\" lists none")
    if auto:
        points, top = sweep.get("auto_points", 6), sweep.get("auto_max", bench.get("num_prompts", 256))
        for key, value, least in (("auto_points", points, 2), ("auto_max", top, 2)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigError(f"{file}: [sweep] {key} must be a whole number >= {least}, got {value!r}"
                                  + (" (auto_max defaults to [benchmark] num_prompts)" if key == "auto_max" else ""))
        bench["concurrency"] = [1, top]
        return Search(kind="auto", axis="concurrency", points=points)
    if find_max not in FIND_MAX_AXES:
        raise ConfigError(f"{file}: [sweep] find_max must be one of {', '.join(FIND_MAX_AXES)}, got {find_max!r}")
    axis = FIND_MAX_AXES[find_max]
    ends = bench.get(axis)
    if not (isinstance(ends, list) and len(ends) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in ends) and ends[0] != ends[1]):
        raise ConfigError(f"{file}: find_max {find_max} bisects between two loads: give [benchmark] {axis} = "
                          f"[LOW, HIGH], got {ends!r}")
    tolerance = sweep.get("find_max_tolerance", 0.1)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 < tolerance <= 1:
        raise ConfigError(f"{file}: [sweep] find_max_tolerance must be a number above 0, at most 1, got {tolerance!r}")
    return Search(kind="find_max", axis=axis, tolerance=float(tolerance))


def _takes_list_checked(bench: Mapping[str, Any], by_key: Mapping[str, Option], file: str) -> Any:
    for key in bench:
        option = by_key.get(key)
        if option is None:
            raise ConfigError(f"{file}: [benchmark] has no option {key!r} (see fastbench --help)")
        if option.dest in OWNED:
            raise ConfigError(f"{file}: [benchmark] {key}: a sweep sets it per cell from {OWNED[option.dest]}")
        if option.flags[0] in SERVER_FLAGS:
            raise ConfigError(f"{file}: [benchmark] {key}: a server is given in [server] or [variants.NAME]")
    return _takes_list(by_key)


def _stop_rules(sweep: Mapping[str, Any], file: str) -> StopRules:
    rules = sweep.get("stop", list(STOP_RULES))
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise ConfigError(f"{file}: [sweep] stop must be an array of rule names ({', '.join(STOP_RULES)})")
    for rule in rules:
        if rule not in STOP_RULES:
            raise ConfigError(f"{file}: [sweep] stop has no rule {rule!r} (it takes {', '.join(STOP_RULES)})")
    numbers = {}
    for key, default in (("slo_attainment", 0.9), ("saturation", 0.05)):
        value = sweep.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ConfigError(f"{file}: [sweep] {key} must be a number from 0 to 1, got {value!r}")
        numbers[key] = float(value)
    return StopRules(rules=tuple(rules), **numbers)


def _server_argv(server: Mapping[str, Any], by_key: Mapping[str, Option], where: str) -> list[str]:
    argv: list[str] = []
    for key, value in server.items():
        flag = "--synthetic-args" if key == "synthetic_args" else server_flag(key, server) or SERVER_KEYS[key]
        argv += _flags(by_key[flag[2:]], value, f"{where} {key}")
    return argv


def _config(parser: argparse.ArgumentParser,
            config_from_args: Callable[[argparse.Namespace, Sequence[str]], BenchConfig],
            argv: list[str], where: str) -> BenchConfig:
    """The BenchConfig a cell's flags stand for, as the command line makes it; errors in one line."""
    messages: list[str] = []

    def error(message: str) -> Any:
        messages.append(message)
        raise SystemExit(2)

    parser.error = error  # type: ignore[method-assign]
    try:
        ns = parser.parse_args(argv)
    except SystemExit:
        raise ConfigError(f"{where}: {messages[0] if messages else 'invalid options'}") from None
    ns.config = None
    config: BenchConfig = config_from_args(ns, argv)
    return config


class _NoStore:
    """A store not made yet, as a dry run reads it: no runs."""

    def query(self, **filters: Any) -> list[Any]:
        return []

    def flat(self, run_ids: Sequence[str]) -> dict[str, Any]:
        return {}


async def _sweep_with_signals(plan: Plan, watchers: live.Watchers) -> list[Point]:
    """As a single run's Ctrl-C (cli/interrupts.py): the first ends the running cell early, keeping what
    it measured (marked interrupted, so a later sweep runs it again), and starts no other; one a
    second or more later abandons it."""
    from fastbench.api.sweeps import asweep

    with stop_on_signals("fastbench sweep: stopping after this cell's measured part; finished cells are kept "
                         "(signal again, a second later, to abandon)") as stop:
        view = watchers.view
        # the sweep's lines go above the view where both share the terminal, else where they always went
        say = view.say if isinstance(view, live.SweepView) and sys.stdout.isatty() else (
            lambda line: print(line, flush=True))
        return await asweep(plan, stop=stop, say=say, on_live=watchers.listeners, watch=view)


def main(argv: Sequence[str], run_command: RunCommand) -> int:
    """``fastbench sweep``; ``run_command``: the run's parser and its reading (cli/command.py's, passed in
    by it: this module is below it)."""
    ns = build_parser().parse_args(list(argv))
    try:
        plan, sweep_table = load_plan(ns.file, run_command, store=ns.store, name=ns.name, repeats=ns.repeats,
                                      find_max=ns.find_max, warmup=ns.warmup, check_store=not ns.dry_run)
        if ns.dry_run:  # reads the store where there is one, and writes nothing
            if not any((Path(plan.store) / name).exists() for name in (run_store.INDEX_NAME, run_store.RUNS_DIR)):
                print(render_plan(plan, _NoStore()))
                return 0
            with run_store.Store(plan.store) as store:
                print(render_plan(plan, store))
            return 0
        import uvloop

        print("\n".join(describe_start(plan)), flush=True)
        secrets = Secrets([value for cell in plan.cells for value in Secrets.of_config(cell.config).values])
        view = (live.SweepView([cell.key for cell in plan.cells], secrets)
                if live.view_wanted(ns.live, ns.progress) and live.rich_available() else None)
        watchers = live.start_watchers(ns.live, ns.progress, ns.metrics_port, ns.metrics_host, view=view,
                                       otlp_endpoint=ns.otlp_endpoint, secrets=secrets)
        try:  # asweep opens the store itself
            points = uvloop.run(_sweep_with_signals(plan, watchers))
        except (asyncio.CancelledError, KeyboardInterrupt):
            print("fastbench sweep: abandoned; finished cells are kept", file=sys.stderr)
            return 130
        finally:
            watchers.close()
        print(render_table(points))
        csv_paths = [Path(plan.store) / "sweeps" / f"{plan.name}.csv"]
        extra = ns.csv or sweep_table.get("csv")
        if extra:
            csv_paths.append(Path(str(extra)))
        for path in csv_paths:
            write_csv(points, path)
        print(f"summary: {', '.join(str(p) for p in csv_paths)}")
    except FastbenchError as exc:
        print(f"fastbench sweep: error: {exc}", file=sys.stderr)
        return 2
    statuses = {p["status"] for p in points}
    if "not run" in statuses or "interrupted" in statuses:
        return 130
    return 1 if statuses & {"failed", "incomplete"} else 0

