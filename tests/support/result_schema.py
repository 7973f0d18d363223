"""The checker of docs/result-schema.md against a result file: the key paths of a JSON document that the
doc does not name. How a key counts as documented (the depth rule, the headings, the maps named by data
and the opaque ones) is in tests/results/test_result_schema.py's docstring; the multi-turn tests check
their own results with it too."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "result-schema.md"

NAMED_BY_DATA = {
    "fastbench.errors",
    "fastbench.counts.failed_by_class",
    "fastbench.usage.by_source",
    "fastbench.throughput.goodput_slos_ms",
    "fastbench.config.goodput",
    "fastbench.workers.per_worker[].errors",
    "fastbench.config.random_mm.limit_mm_per_prompt",
    "fastbench.server.synthetic_stats.requests_by_model",
}
OPAQUE = {
    "fastbench.config.extra_body",
    "fastbench.server.load",
    "fastbench.server.card_config",
    "fastbench.server.model_card",
    "fastbench.server.server_model_meta",
    "fastbench.server.server_metrics.cache_config",
    "fastbench.server.spec_decode",
    "fastbench.server.server_metrics_card",
    "fastbench.server.memory",
    "fastbench.server.spec_decode_stats.server_log.per_line[]",
}

Path_ = tuple[str, ...]


def key_paths(obj: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every checked key path of a JSON value (see the module docstring)."""
    if isinstance(obj, list):
        for item in obj:
            if isinstance(item, dict):
                yield from key_paths(item, prefix[:-1] + (prefix[-1] + "[]",))
        return
    if not isinstance(obj, dict) or ".".join(prefix) in OPAQUE:
        return
    by_data = ".".join(prefix) in NAMED_BY_DATA
    for key, value in obj.items():
        path = prefix + ("*" if by_data else str(key),)
        if not by_data:
            yield path
        yield from key_paths(value, path)


def expand(text: str) -> list[str]:
    """Shell-style brace expansion: ``{a,b}_x`` -> ``a_x``, ``b_x``."""
    parts = re.split(r"(\{[^{}]*\})", text)
    choices = [p[1:-1].split(",") if p.startswith("{") and p.endswith("}") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def doc_sections(text: str) -> list[tuple[list[Path_], set[str]]]:
    """(heading paths, documented names) per section: heading paths are the backticked
    ``fastbench...`` paths of the heading (the root for "Top level"), names the expanded backticked
    tokens in the first cell of each table row."""
    sections: list[tuple[list[Path_], set[str]]] = []
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip()
            paths = [tuple(t.strip('"').split(".")) for t in re.findall(r"`([^`]+)`", title)]
            paths = [p for p in paths if p[0] == "fastbench"]
            if title.startswith("Top level"):
                paths = [()]
            names = set()
            sections.append((paths, names))
        elif line.startswith("|") and sections:
            first_cell = line.split("|")[1]
            for token in re.findall(r"`([^`]+)`", first_cell):
                names.update(expand(token))
    return sections


def _matches(pattern: Path_, path: Path_) -> bool:
    return len(pattern) == len(path) and all(p in ("*", q) for p, q in zip(pattern, path))


def undocumented(doc: dict[str, Any], prefix: Path_ = ()) -> list[str]:
    """Key paths of ``doc`` (placed at ``prefix``) that docs/result-schema.md does not name."""
    sections = doc_sections(DOC.read_text())
    missing = []
    for path in key_paths(doc, prefix):
        found = False
        for heading_paths, names in sections:
            for heading in heading_paths:
                cut = len(heading)
                if cut < len(path) and _matches(heading, path[:cut]) and ".".join(path[cut:]) in names:
                    found = True
        if not found:
            missing.append(".".join(path))
    return missing
