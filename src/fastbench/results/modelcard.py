"""The run card's rows about the model, worded here from what the server wing found: the facts of the
model's local files (``results.observations.ModelFacts``, read by ``server.modelinfo``) and what the
server says of the model it loaded (llama.cpp's /v1/models ``meta``). Each row says where its figure
came from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the record only: results imports nothing of the server wing at run time
    from fastbench.results.observations import ModelFacts

__all__ = ("model_rows", "model_sections", "parameters_text", "size_text")


def size_text(n: int) -> str:
    """Parameters as model cards write them: 268M, 1.5B, 33B (a decimal below 10 of a unit)."""
    for unit, suffix in ((10**9, "B"), (10**6, "M"), (10**3, "K")):
        if n >= unit:
            value = n / unit
            return f"{value:.0f}{suffix}" if value >= 9.95 else f"{value:.1f}{suffix}"
    return str(n)


def parameters_text(facts: ModelFacts) -> str | None:
    """``"268M (dense)"``, ``"26B / 4B (MoE)"``, or None without a count."""
    if facts.total_params is None:
        return None
    if facts.experts is None:
        return f"{size_text(facts.total_params)} (dense)"
    if facts.active_params is None:  # experts declared, but no tensor named as one
        return f"{size_text(facts.total_params)} (MoE; active not told by the tensor names)"
    return f"{size_text(facts.total_params)} / {size_text(facts.active_params)} (MoE)"


def model_rows(facts: ModelFacts | None, server_meta: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Configuration rows for the run card. ``server_meta``: the server's own account (``n_params``,
    ``ftype``): beside a count of our own, whether the server agrees; without one, its figures, marked
    as its."""
    rows: dict[str, str] = {}
    counted = None
    if facts is not None:
        counted = facts.total_params
        gguf = facts.source.lower().endswith(".gguf")
        if facts.family:
            rows["Family"] = f"{facts.family} ({facts.model_type})" if facts.model_type else facts.family
        params = parameters_text(facts)
        if params:
            how = "GGUF tensor table" if gguf else "safetensors headers"
            rows["Parameters"] = f"{params}, counted from the {how}"
            if facts.adapter:
                rows["Parameters"] += f" (the base model of the LoRA adapter {facts.adapter})"
        elif facts.why_no_count and facts.weights_found:  # no weights here (elsewhere): nothing to say
            rows["Parameters"] = f"not counted: {facts.why_no_count}"
        if facts.precision:
            rows["Quant / precision"] = f"{facts.precision}, from {'the GGUF' if gguf else 'config.json'}"
        if facts.modalities:
            rows["Input modalities"] = f"{', '.join(facts.modalities)} (the towers config.json declares)"
        if facts.hub_repo:
            rows["Download"] = f"{facts.hub_repo} (revision {facts.revision}, from this machine's hub cache)"
        rows["Model files"] = facts.source
    meta = server_meta or {}
    n_params, ftype = meta.get("n_params"), meta.get("ftype")
    if isinstance(n_params, int) and not isinstance(n_params, bool) and n_params > 0:
        if counted is not None:
            agree = "the same" if counted == n_params else f"{n_params:,} (ours: {counted:,})"
            rows["Parameters"] += f"; the server reports {agree}"
        else:
            rows["Parameters"] = f"{size_text(n_params)} total, as the server reports (n_params)"
    if isinstance(ftype, str) and ftype and "Quant / precision" not in rows:
        rows["Quant / precision"] = f"{ftype}, as the server reports (ftype)"
    return rows


def model_sections(found: ModelFacts | str | None, server_meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What goes into ``Result.server_info`` about the model: ``model_files`` (the facts as JSON, or
    ``{"error": ...}`` where the files are there but unreadable) and ``model_card`` (the rows); nothing
    where there are neither files nor the server's word."""
    facts = None if isinstance(found, str) else found
    sections: dict[str, Any] = {}
    if isinstance(found, str):
        sections["model_files"] = {"error": found}
    elif facts is not None:
        sections["model_files"] = {**dataclasses.asdict(facts), "parameters": parameters_text(facts)}
    rows = model_rows(facts, server_meta)
    if rows:
        sections["model_card"] = rows
    return sections
