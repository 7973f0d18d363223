"""The ``[sweep]`` keys that set what each cell starts from (docs/sweep.md, "Prompts and the prefix
cache"): ``seed`` and ``prompt_reuse`` (which prompts a cell draws), ``reset_prefix_cache`` (whether the
server's prefix cache is emptied before it). Read and checked here, each error naming its key; the
rules themselves are ``study.cellstate``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from fastbench.api.lookups import prompts_vary, with_prefix_cache_reset
from fastbench.cli.argtypes import Option
from fastbench.cli.tomlconfig import toml_type
from fastbench.config import BenchConfig
from fastbench.exceptions import ConfigError
from fastbench.study import cellstate

__all__ = ("CellStart", "read")


@dataclasses.dataclass(frozen=True)
class CellStart:
    """The sweep's choices for its cells' prompts and the prefix cache."""

    prompt_reuse: str  # "fresh" or "shared"
    sweep_seed: int
    seed_key: str | None  # the [benchmark] key that sets the seed, when given (crossed or not)
    reset_key: str | None  # the [benchmark] key that sets reset_prefix_cache, when given
    reset_asked: bool | None  # [sweep] reset_prefix_cache; None: the default by the variant's kind
    shared_servers: frozenset[str]  # the variants attached to a server another variant attaches to too

    def seed(self, variant: str, values: Mapping[str, Any], shown: Mapping[str, Any], repeat: int) -> int:
        """The seed of a cell's prompts: ``values``, all its [benchmark] values; ``shown``, the crossed ones."""
        if self.prompt_reuse == "shared":
            return int(values[self.seed_key]) if self.seed_key else self.sweep_seed
        own = variant if variant in self.shared_servers else None
        return cellstate.cell_seed(self.sweep_seed, shown, repeat, variant=own)

    def apply(self, config: BenchConfig, variant: str, kind: str, values: Mapping[str, Any],
              shown: Mapping[str, Any], repeat: int) -> tuple[BenchConfig, str | None]:
        """The cell's config with its seed, its reset (and what its engine needs for one) and what
        they were recorded as; and a note for the plan when its dataset cannot vary the prompts."""
        if self.reset_key is not None:
            reset = config.reset_prefix_cache
            why = f"{'on' if reset else 'off'}: [benchmark] {self.reset_key} = {str(reset).lower()}"
        else:
            engine = config.launch.engine if config.launch is not None else None
            reset, why = cellstate.reset_rule(kind, engine, self.reset_asked, self.prompt_reuse)
        launch = config.launch
        if reset and launch is not None:
            launch = with_prefix_cache_reset(launch)
        config = dataclasses.replace(
            config, seed=self.seed(variant, values, shown, repeat), reset_prefix_cache=reset, launch=launch,
            metadata={**config.metadata, "sweep_seed": str(self.sweep_seed), "prompt_reuse": self.prompt_reuse,
                      "sweep_prefix_cache_reset": why})
        if self.prompt_reuse == "shared" or prompts_vary(config):
            return config, None
        cache = ("the server's prefix cache is emptied before each cell" if reset else
                 "a server that caches prefixes serves every cell after the first from its cache "
                 "([sweep] reset_prefix_cache = true empties it before each, where the server allows)")
        text = f"--dataset-order file sends the file's prompts in order: every cell sends the same ones; {cache}"
        return dataclasses.replace(config, card_notes=(*config.card_notes, f"Prompts: {text}")), f"{variant}: {text}"


def read(sweep: Mapping[str, Any], bench: Mapping[str, Any], by_key: Mapping[str, Option],
         variants: Mapping[str, Mapping[str, Any]], file: str) -> CellStart:
    """The [sweep] table's ``seed``, ``prompt_reuse`` and ``reset_prefix_cache``, checked (ConfigError,
    one line, naming the key)."""
    reuse = sweep.get("prompt_reuse", "fresh")
    if reuse not in cellstate.PROMPT_REUSE:
        raise ConfigError(f"{file}: [sweep] prompt_reuse must be \"fresh\" or \"shared\", got {toml_type(reuse)}")
    seed_key = next((key for key in bench if by_key[key].dest == "seed"), None)
    reset_key = next((key for key in bench if by_key[key].dest == "reset_prefix_cache"), None)
    if "seed" in sweep and seed_key is not None:
        raise ConfigError(f"{file}: [sweep] seed and [benchmark] {seed_key} both give the seed: give one "
                          "([sweep] seed: the one each cell's is derived from)")
    if "reset_prefix_cache" in sweep and reset_key is not None:
        raise ConfigError(f"{file}: [sweep] reset_prefix_cache and [benchmark] {reset_key} both say whether the "
                          "cache is reset: give one")
    given = bench.get(seed_key) if seed_key is not None else None
    seed = sweep.get("seed", given if isinstance(given, int) else 0)  # a crossed [benchmark] seed: 0
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"{file}: [sweep] seed must be a whole number >= 0, got {toml_type(seed)}")
    asked = sweep.get("reset_prefix_cache")
    if asked is not None and not isinstance(asked, bool):
        raise ConfigError(f"{file}: [sweep] reset_prefix_cache must be true or false, got {toml_type(asked)}")
    urls: dict[str, list[str]] = {}
    for name, server in variants.items():
        if "base_url" in server:
            urls.setdefault(str(server["base_url"]).rstrip("/"), []).append(name)
    shared = frozenset(name for names in urls.values() if len(names) > 1 for name in names)
    return CellStart(prompt_reuse=reuse, sweep_seed=seed, seed_key=seed_key, reset_key=reset_key,
                     reset_asked=asked, shared_servers=shared)
