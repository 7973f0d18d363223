"""The figures of an agentic trace replay (``--dataset-name weka``): coding-agent traces, each a tree of
agents (a root agent, subagents it spawned and joined back, subagents left running in the background), every
call of every agent one row of the request table.

Derived after the run from the request table and the workload's map of rows to trees, agents, roles and
turns: per tree (how far each got, how long it took, its calls and tokens), per agent, per role, and TTFT
against the context length and against the share of the prompt the server's prefix cache served.
Definitions in ``definitions.DEFINITIONS`` (``agent_tree``, ``tree_duration``, ``tree_calls``,
``tree_tokens``, ``agent_duration``, ``agent_turns``, ``agent_tokens``, ``role_figures``,
``request_cached_share``, ``agentic_cached_share``, ``ttft_by_context``, ``ttft_by_cached_share``).
The server's /metrics hit rate is the ``prefix_cache`` section's (``results.cache``), not repeated here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastbench.results.cache import with_template_tokens
from fastbench.results.records import COL, ErrorClass
from fastbench.results.sessions import value_summary

# The datasets whose runs replay agent trees (config.dataset_name).
AGENTIC_DATASETS: tuple[str, ...] = ("weka",)
# The workload's per-row maps of an agentic run, and its trees' names: this section's, not the result's workload.
AGENTIC_WORKLOAD_KEYS: tuple[str, ...] = ("tree_of_row", "agent_of_row", "role_of_row", "agent_turn_of_row",
                                          "tool_result_of_row", "trees")
ROLES: tuple[str, ...] = ("root", "subagent", "background")  # role_of_row's 0, 1, 2
# Edges of the cached-share bins: [0, 0.25), [0.25, 0.5), ..., [0.99, 1] (the last one holds 1). Finer at the
# top, where an agent's calls, each its history plus a tool result, mostly lie.
CACHED_SHARE_EDGES: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)
# Where a request's cached tokens came from (cached_share_requests' keys).
SERVER_USAGE = "server_usage"
WORKLOAD = "workload"

TREE_STATES = ("completed", "ended by failure", "cut short", "not started")


@dataclasses.dataclass(frozen=True)
class _Calls:
    """The request table's rows as calls of agents: their outcome, latency, tokens and cached share."""

    tree: np.ndarray  # per row, its tree (0..T-1)
    agent: np.ndarray  # per row, a run-wide agent id (one per (tree, agent) pair)
    role: np.ndarray  # per row, 0 root, 1 subagent joined back, 2 background subagent
    started: np.ndarray
    completed: np.ndarray
    failed: np.ndarray  # ended with an error other than CANCELLED
    has_ttft: np.ndarray  # completed, and an output event arrived
    origin: np.ndarray  # where latency counts from: the arrival in open loop, the send in closed loop
    end: np.ndarray
    ttft_ms: np.ndarray
    e2el_ms: np.ndarray
    prompt: np.ndarray  # the server's prompt tokens, else the workload's, -1 unknown
    output: np.ndarray
    tool_result: np.ndarray
    share: np.ndarray  # the request's cached share (request_cached_share), NaN where not counted
    cached: np.ndarray  # the cached tokens behind it, 0 where not counted
    share_from: np.ndarray  # per row: "" (not counted), SERVER_USAGE or WORKLOAD

    @classmethod
    def of(cls, rows: np.ndarray, info: Mapping[str, Any], open_loop: bool) -> _Calls:
        rows = np.asarray(rows, dtype=np.int64).reshape(-1, len(COL))
        n = len(rows)
        col = {name: rows[:, i] for name, i in COL.items()}
        started = np.asarray(rows.any(axis=1), dtype=bool)
        error = col["error"]
        completed = started & (error == ErrorClass.OK) & (col["end_ns"] > 0)
        failed = started & (error != ErrorClass.OK) & (error != ErrorClass.CANCELLED)
        origin = col["scheduled_ns"] if open_loop else col["sent_ns"]
        prompt = col["prompt_tokens"].copy()
        lens = _per_row(info.get("prompt_lens"), n)
        prompt = np.where(prompt >= 0, prompt, lens)
        tree = _per_row(info["tree_of_row"], n)
        agent_in_tree = _per_row(info.get("agent_of_row"), n, 0)
        # one id per (tree, agent) pair, in order of tree then agent
        pairs, agent = np.unique(np.stack([tree, agent_in_tree], axis=1), axis=0, return_inverse=True)
        cached, share_from = _cached_tokens(rows, prompt, completed, info)
        counted = share_from != ""
        share = np.full(n, np.nan)
        share[counted] = np.clip(cached[counted] / prompt[counted], 0.0, 1.0)
        return cls(
            tree=tree, agent=np.asarray(agent, dtype=np.int64).reshape(n), role=_per_row(info.get("role_of_row"), n, 0),
            started=started, completed=completed, failed=failed,
            has_ttft=completed & (col["first_token_ns"] > 0), origin=origin, end=col["end_ns"],
            ttft_ms=(col["first_token_ns"] - origin) / 1e6, e2el_ms=(col["end_ns"] - origin) / 1e6,
            prompt=prompt, output=col["output_tokens"], tool_result=_per_row(info.get("tool_result_of_row"), n, 0),
            share=share, cached=cached, share_from=share_from,
        )


def _per_row(values: Sequence[Any] | np.ndarray | None, n: int, missing: int = -1) -> np.ndarray:
    """A per-row list or array as int64 (None entries, and rows past its end: ``missing``)."""
    if values is None:
        return np.full(n, missing, dtype=np.int64)
    listed = list(values)
    return np.asarray([missing if i >= len(listed) or listed[i] is None else int(listed[i]) for i in range(n)],
                      dtype=np.int64).reshape(n)


def _cached_tokens(rows: np.ndarray, prompt: np.ndarray, completed: np.ndarray,
                   info: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the cached tokens its cached share counts, and where they came from (definition
    ``request_cached_share``): the server's usage where it carried cached_tokens, else the workload's
    shared_prompt_tokens; "" where neither is known or the row did not complete with a known prompt."""
    n = len(rows)
    reported = rows[:, COL["cached_tokens"]]
    eligible = completed & (prompt > 0)
    # vLLM leaves prompt_tokens_details out when nothing was cached: where some request of the run carried it,
    # a request whose usage came without it had 0 cached (as results.cache counts it)
    any_reported = bool((eligible & (reported >= 0)).any())
    from_server = eligible & ((reported >= 0) | (any_reported & (rows[:, COL["prompt_tokens"]] >= 0)))
    shared = _per_row(info.get("shared_prompt_tokens"), n)
    workload = with_template_tokens(rows, prompt, np.maximum(shared, 0), info.get("prompt_lens"))
    from_workload = eligible & ~from_server & (shared >= 0)
    cached = np.where(from_server, np.maximum(reported, 0), np.where(from_workload, workload, 0)).astype(np.int64)
    share_from = np.full(n, "", dtype=object)
    share_from[from_server] = SERVER_USAGE
    share_from[from_workload] = WORKLOAD
    return cached, share_from


def agentic_figures(rows: np.ndarray, workload_info: Mapping[str, Any], open_loop: bool) -> dict[str, Any]:
    """The ``agentic`` section of the result.

    :param rows: the request table (one row per call of every agent of every tree).
    :param workload_info: the workload's per-row maps ``tree_of_row``, ``agent_of_row``, ``role_of_row``,
        ``agent_turn_of_row``, ``tool_result_of_row``, its ``trees`` (names) and ``agentic_slots``, and
        where known ``prompt_lens`` and ``shared_prompt_tokens`` (per row).
    :param open_loop: latency counts from the scheduled time (else from the send), as for TTFT.
    """
    calls = _Calls.of(rows, workload_info, open_loop)
    names = [str(name) for name in workload_info.get("trees") or []]
    slots = workload_info.get("agentic_slots")
    counted = calls.share_from != ""
    cached_sum, prompt_sum = sum(calls.cached[counted].tolist()), sum(calls.prompt[counted].tolist())
    by_source = {source: int((calls.share_from == source).sum()) for source in (SERVER_USAGE, WORKLOAD)}
    return {
        "slots": None if slots is None else int(slots),
        **_trees(calls, names),
        "agents": _agents(calls),
        "per_role": {name: _role(calls, calls.role == code) for code, name in enumerate(ROLES)},
        "ttft_by_context": _by_context(calls),
        "cached_share": cached_sum / prompt_sum if prompt_sum > 0 else None,
        "cached_share_source": _source_word(by_source),
        "cached_share_requests": by_source,
        "ttft_by_cached_share": _by_cached_share(calls),
    }


def _source_word(by_source: Mapping[str, int]) -> str | None:
    server, workload = by_source[SERVER_USAGE], by_source[WORKLOAD]
    if server and workload:
        return "server usage, else workload"
    return SERVER_USAGE if server else WORKLOAD if workload else None


# -- per tree and per agent -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Groups:
    """Per group of rows (a tree, or an agent): its calls, how far it got, its span and tokens."""

    calls: np.ndarray
    done_calls: np.ndarray
    began: np.ndarray
    finished: np.ndarray  # every call completed
    had_failure: np.ndarray
    duration_s: np.ndarray  # NaN unless finished
    input_tokens: np.ndarray  # of its completed calls
    output_tokens: np.ndarray

    @classmethod
    def of(cls, group: np.ndarray, n: int, calls: _Calls) -> _Groups:
        """``group``: per row, its group 0..n-1 (a row of none: -1, left out)."""
        group = np.where(group >= 0, group, n)  # one spare group past the end holds the rows of none
        size = max(n + 1, int(group.max()) + 1 if group.size else 0)
        count = np.bincount(group, minlength=size)[:n]
        done = np.bincount(group, weights=calls.completed, minlength=size)[:n].astype(np.int64)
        began = np.bincount(group, weights=calls.started, minlength=size)[:n] > 0
        had_failure = np.bincount(group, weights=calls.failed, minlength=size)[:n] > 0
        finished = (done == count) & (count > 0)
        # a group's span: its first call's start to its last call's end (finished groups only)
        first = np.full(size, np.iinfo(np.int64).max)
        np.minimum.at(first, group[calls.started], calls.origin[calls.started])
        last = np.zeros(size, dtype=np.int64)
        np.maximum.at(last, group[calls.completed], calls.end[calls.completed])
        duration = np.where(finished, (last[:n] - np.where(finished, first[:n], 0)) / 1e9, np.nan)
        tokens_in, tokens_out = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
        np.add.at(tokens_in, group[calls.completed], np.maximum(calls.prompt[calls.completed], 0))
        np.add.at(tokens_out, group[calls.completed], np.maximum(calls.output[calls.completed], 0))
        return cls(calls=count, done_calls=done, began=began, finished=finished, had_failure=had_failure,
                   duration_s=duration, input_tokens=tokens_in[:n], output_tokens=tokens_out[:n])

    def state(self, i: int) -> str:
        if self.finished[i]:
            return TREE_STATES[0]
        if not self.began[i]:
            return TREE_STATES[3]
        return TREE_STATES[1] if self.had_failure[i] else TREE_STATES[2]


def _trees(calls: _Calls, names: list[str]) -> dict[str, Any]:
    n = max(len(names), int(calls.tree.max()) + 1 if calls.tree.size else 0)
    trees = _Groups.of(calls.tree, n, calls)
    tree_of_agent = np.full(int(calls.agent.max()) + 1 if calls.agent.size else 0, -1)
    tree_of_agent[calls.agent] = calls.tree
    agents = np.bincount(tree_of_agent[tree_of_agent >= 0], minlength=n)[:n]
    early = trees.began & ~trees.finished
    per_tree = [{
        "name": names[i] if i < len(names) else f"tree {i}",
        "state": trees.state(i),
        "agents": int(agents[i]),
        "calls": int(trees.calls[i]),
        "calls_completed": int(trees.done_calls[i]),
        "duration_s": None if np.isnan(trees.duration_s[i]) else float(trees.duration_s[i]),
        "input_tokens": int(trees.input_tokens[i]),
        "output_tokens": int(trees.output_tokens[i]),
    } for i in range(n)]
    return {
        "trees": n,
        "completed": int(trees.finished.sum()),
        "ended_early": int(early.sum()),
        "ended_by_failure": int((early & trees.had_failure).sum()),
        "cut_short": int((early & ~trees.had_failure).sum()),
        "not_started": int((~trees.began).sum()),
        "tree_duration_s": value_summary(trees.duration_s[trees.finished]),
        "tree_calls": value_summary(trees.calls.astype(np.float64)),
        "tree_calls_completed": value_summary(trees.done_calls[trees.began].astype(np.float64)),
        "tree_input_tokens": value_summary(trees.input_tokens[trees.finished].astype(np.float64)),
        "tree_output_tokens": value_summary(trees.output_tokens[trees.finished].astype(np.float64)),
        "per_tree": per_tree,
    }


def _agents(calls: _Calls) -> dict[str, Any]:
    n = int(calls.agent.max()) + 1 if calls.agent.size else 0
    agents = _Groups.of(calls.agent, n, calls)
    role = np.zeros(n, dtype=np.int64)
    role[calls.agent] = calls.role
    return {
        "agents": n,
        "by_role": {name: int((role == code).sum()) for code, name in enumerate(ROLES)},
        "completed": int(agents.finished.sum()),
        "ended_early": int((agents.began & ~agents.finished).sum()),
        "duration_s": value_summary(agents.duration_s[agents.finished]),
        "turns": value_summary(agents.calls.astype(np.float64)),
        "turns_completed": value_summary(agents.done_calls[agents.began].astype(np.float64)),
        "input_tokens": value_summary(agents.input_tokens[agents.finished].astype(np.float64)),
        "output_tokens": value_summary(agents.output_tokens[agents.finished].astype(np.float64)),
    }


# -- per role, and TTFT against the context and the cached share -------------------------------------------


def _role(calls: _Calls, at: np.ndarray) -> dict[str, Any]:
    done = at & calls.completed
    ttfts = calls.ttft_ms[at & calls.has_ttft]
    prompts = calls.prompt[done]
    prompts = prompts[prompts >= 0]
    shares = calls.share[done & (calls.share_from != "")]
    return {
        "requests": int(at.sum()),
        "started": int((at & calls.started).sum()),
        "completed": int(done.sum()),
        "failed": int((at & calls.failed).sum()),
        **_ttft(ttfts),
        "e2el_ms_p50": float(np.percentile(calls.e2el_ms[done], 50)) if done.any() else None,
        "mean_prompt_tokens": float(prompts.mean()) if prompts.size else None,
        "mean_tool_result_tokens": float(calls.tool_result[done].mean()) if done.any() else None,
        "mean_cached_share": float(shares.mean()) if shares.size else None,
    }


def _ttft(ttfts: np.ndarray) -> dict[str, float | None]:
    if not ttfts.size:
        return {"ttft_ms_p50": None, "ttft_ms_p99": None}
    p50, p99 = (float(x) for x in np.percentile(ttfts, [50.0, 99.0]))
    return {"ttft_ms_p50": p50, "ttft_ms_p99": p99}


def _by_context(calls: _Calls) -> list[dict[str, Any]]:
    """TTFT per power-of-two bin of prompt tokens, every bin from the lowest to the highest one used."""
    at = calls.has_ttft & (calls.prompt > 0)
    prompts, ttfts = calls.prompt[at], calls.ttft_ms[at]
    if not prompts.size:
        return []
    power = np.asarray([int(p).bit_length() - 1 for p in prompts.tolist()], dtype=np.int64)
    out = []
    for k in range(int(power.min()), int(power.max()) + 1):
        inside = power == k
        out.append({"min_prompt_tokens": 1 << k, "max_prompt_tokens": (1 << (k + 1)) - 1,
                    "requests": int(inside.sum()), **_ttft(ttfts[inside])})
    return out


def _by_cached_share(calls: _Calls) -> list[dict[str, Any]]:
    """TTFT per bin of the request's cached share (CACHED_SHARE_EDGES), every bin listed."""
    at = calls.has_ttft & (calls.share_from != "")
    shares, ttfts = calls.share[at], calls.ttft_ms[at]
    edges = CACHED_SHARE_EDGES
    out = []
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        last = i == len(edges) - 2
        inside = (shares >= lo) & ((shares <= hi) if last else (shares < hi))
        out.append({"min_share": lo, "max_share": hi, "requests": int(inside.sum()), **_ttft(ttfts[inside])})
    return out


# -- how the console and the run card show it --------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.3f}" if value < 1 else f"{value:,.1f}"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def _share_bin(b: Mapping[str, Any]) -> str:
    return f"{100 * b['min_share']:g}-{100 * b['max_share']:g} %"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def _source(section: Mapping[str, Any]) -> str:
    """Whose counts the run's cached share is of, in brackets."""
    source = section["cached_share_source"]
    return f" ({source.replace('_', ' ')})" if source else ""


def _share_text(section: Mapping[str, Any]) -> str:
    share = section["cached_share"]
    return ("n/a" if share is None else f"{100 * share:.1f}") + _source(section)


def _cached_text(section: Mapping[str, Any], hit_rate: float | None) -> str:
    return (f"{_percent(section['cached_share'])}{_source(section)}; the server's /metrics hit rate "
            f"{_percent(hit_rate)} (fastbench.prefix_cache)")


def console_lines(section: Mapping[str, Any], hit_rate: float | None = None) -> list[str]:
    """The agentic block of the console summary: trees, TTFT per role and per cached-share bin.

    :param hit_rate: the server's /metrics prefix-cache hit rate (the prefix_cache section's), shown beside.
    """
    duration = section["tree_duration_s"]
    lines = [f"{'Agent trees':-^50}",
             f"{'Trees completed / failed / cut short:':<40} {section['completed']} / "
             f"{section['ended_by_failure']} / {section['cut_short']}",
             f"{'Tree duration, median (s):':<40} {_seconds(duration['median'])}",
             f"{'Cached share (%):':<40} {_share_text(section)}",
             f"{'Server prefix cache hit rate (%):':<40} {'n/a' if hit_rate is None else f'{100 * hit_rate:.1f}'}",
             f"{'Role':<11} {'done':>6} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12}"]
    for name, r in section["per_role"].items():
        if r["requests"]:
            lines.append(f"{name:<11} {r['completed']:>6} {_ms(r['ttft_ms_p50']):>12} {_ms(r['ttft_ms_p99']):>12}")
    lines.append(f"{'Cached':<11} {'done':>6} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12}")
    for b in section["ttft_by_cached_share"]:
        if b["requests"]:
            lines.append(f"{_share_bin(b):<11} {b['requests']:>6} {_ms(b['ttft_ms_p50']):>12} "
                         f"{_ms(b['ttft_ms_p99']):>12}")
    return lines


def card_lines(section: Mapping[str, Any], hit_rate: float | None = None) -> list[str]:
    """The run card's agent trees: a table like the others, then TTFT per role and per cached-share bin."""
    duration, agents = section["tree_duration_s"], section["agents"]
    slots = section["slots"]
    lines = [
        f"| Trees | {section['trees']} ({section['completed']} completed, {section['ended_by_failure']} ended by a "
        f"failed call, {section['cut_short']} cut short by the run's end, {section['not_started']} not started"
        + (f"; {slots} at once" if slots is not None else "") + ") |",
        "|---|---|",
        f"| Agents | {agents['agents']} (" + ", ".join(f"{k} {v}" for k, v in agents["by_role"].items()) + ") |",
        f"| Tree duration (s) | median {_seconds(duration['median'])} · p99 {_seconds(duration['p99'])} |",
        f"| Cached share | {_cached_text(section, hit_rate)} |",
        "", "| Role | Completed | TTFT p50 (ms) | TTFT p99 (ms) | E2E p50 (ms) | Mean prompt tokens | "
        "Mean cached share |", "|---|---|---|---|---|---|---|",
    ]
    for name, r in section["per_role"].items():
        prompt = "n/a" if r["mean_prompt_tokens"] is None else f"{r['mean_prompt_tokens']:,.0f}"
        lines.append(f"| {name} | {r['completed']}/{r['requests']} | {_ms(r['ttft_ms_p50'])} | "
                     f"{_ms(r['ttft_ms_p99'])} | {_ms(r['e2el_ms_p50'])} | {prompt} | "
                     f"{_percent(r['mean_cached_share'])} |")
    lines += ["", "| Cached share | Requests | TTFT p50 (ms) | TTFT p99 (ms) |", "|---|---|---|---|"]
    for b in section["ttft_by_cached_share"]:
        lines.append(f"| {_share_bin(b)} | {b['requests']} | {_ms(b['ttft_ms_p50'])} | {_ms(b['ttft_ms_p99'])} |")
    return lines
