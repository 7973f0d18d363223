"""Agentic replay (``--dataset-name weka``): coding-agent traces replayed as agent trees, each call sent when
the calls it depends on have ended and its recorded gap has passed.

A tree is one trace (``fastbench.load.sources.weka``): a root agent and the subagents it spawns. A call
depends on its agent's call before it; a subagent's first call on the parent's call that spawned it; and
the parent's call that joins a subagent on that subagent's last call (a background subagent is joined by
nothing and runs on). The gap before a call, counted from the end of the last of its dependencies: its
recorded ``think_time``, else the recorded time between its dependencies' ends (``t`` + ``api_time``) and
its ``t``, else nothing; times ``--agentic-time-scale`` and at most ``--agentic-idle-gap-cap`` seconds. So
the replay keeps the trace's pauses and its parallelism, while every wait for the server is the server's
own.

``--num-prompts`` counts trees. Closed loop: ``--concurrency`` slots, each running one tree until it
drains (every call ended), then the next; open loop (``--request-rate``): trees start at the rate's
arrivals, at most ``--max-concurrency`` calls in flight. Trees past the corpus replay its traces again,
each replay with blocks of its own (``name#2``), so that a replay does not measure the cache its first
play filled.

Steady state (``--agentic-start staggered``, the default in closed loop): a run whose slots all start at
their trees' first calls measures the ramp of empty caches and short contexts, which no long-running
server sees. Instead the first ``concurrency`` trees start part-way along, tree k of S at root call
``k x calls // S``, the root's call before that sent first as an unmeasured warm-up: its prompt holds the
context so far, so the server's prefix cache holds what a tree running since the start would have left
there. Subagents spawned before the start point are not sent.

Prompts: each call's ``hash_ids`` name its prompt's leading blocks (as ``timed_trace``'s, built by the same
``TokenBlocks``): calls sharing a block share exactly its tokens, cut at ``in``, the rest the call's own.
A call whose prompt and output do not fit the context is screened out with the rest of its agent (the
calls after it would carry a history it never had) and the subagents it would have spawned; counted.

Tool turns: a call whose input is a tool's result (``input_types`` holds ``tool_result``, or the call
before stopped for ``tool_use``) is marked, with the tokens its input grew by (the tool result's share).
Its prompt stays plain tokens: a ``tools`` list or a tool message would add tokens of the server's chat
template that the trace never counted, and the trace's counts are what the replay keeps exact.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from fastbench.config import BenchConfig
from fastbench.datasetoptions import AgenticOptions
from fastbench.exceptions import ConfigError
from fastbench.load import sharing
from fastbench.load.screening import Candidate, screening_limit
from fastbench.load.sharing import SharedBlocks
from fastbench.load.sources import gc_paused
from fastbench.load.sources.trace import TokenBlocks
from fastbench.load.sources.weka import Corpus, WekaTrace, read_corpus
from fastbench.load.tokens import SOURCE_TOKEN_IDS, SOURCE_WORDS

__all__ = ("AgenticBuild", "TreePlan", "build_trees", "check")


@dataclasses.dataclass
class TreePlan:
    """What the schedule needs of the agent trees (``fastbench.load.trees``), and what the figures read.
    A tree's rows are consecutive, in the order of their recorded starts."""

    tree_first: np.ndarray  # int64, trees + 1: each tree's first row (and the end of the one before)
    deps_first: np.ndarray  # int64, rows + 1: where each row's dependencies start in ``deps``
    deps: np.ndarray  # int64: rows that must have ended before a row is due
    gap_ns: np.ndarray  # int64 per row: its wait after the last of its dependencies ended
    tree_of_row: np.ndarray  # int64 per row
    agent_of_row: np.ndarray  # the agent within its tree (0: the root)
    role_of_row: np.ndarray  # the agent's role (weka.ROOT, JOINED, BACKGROUND)
    agent_turn_of_row: np.ndarray  # the call's index within its agent's calls
    tool_result_of_row: np.ndarray  # tokens a tool's result added to the call's input (0: not a tool turn)
    trees: list[str]  # each tree's name
    slots: int | None  # closed loop: trees run at once; None in open loop

    def dependants(self) -> tuple[np.ndarray, np.ndarray]:
        """The reverse of ``deps``: (first, rows): the rows waiting on row r are ``rows[first[r]:first[r+1]]``."""
        n = len(self.gap_ns)
        waiting = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.deps_first))
        order = np.argsort(self.deps, kind="stable")
        first = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.deps, minlength=n), out=first[1:])
        return first, waiting[order]


@dataclasses.dataclass
class AgenticBuild:
    plan: TreePlan
    measured: list[Candidate]  # one per row
    warmups: list[Candidate]
    shared_prompt_tokens: list[int]  # per row (load.sharing)
    dataset: str
    screened_out: int  # calls left out: past the context, or of an agent cut there


def check(config: BenchConfig) -> None:
    """The corpus reads (DatasetError naming the file and field if not)."""
    read_corpus(os.fspath(config.dataset_path or ""))


@dataclasses.dataclass
class _Tree:
    """One tree to replay: its trace, which of each agent's calls are sent, and its blocks' numbering."""

    trace: WekaTrace
    name: str
    first: list[int]  # per agent, its first call sent
    upto: list[int]  # per agent, the end of its calls sent (first == upto: none)
    id_base: int  # added to the trace's dense block numbers: each replay's blocks are its own
    warmup: int  # the root call sent as a warm-up, or -1


def build_trees(config: BenchConfig, chat: bool, mml: int | None, notes: list[str]) -> AgenticBuild:
    with gc_paused():
        return _build(config, chat, mml, notes)


def _build(config: BenchConfig, chat: bool, mml: int | None, notes: list[str]) -> AgenticBuild:
    options = config.options(AgenticOptions)
    path = os.fspath(config.dataset_path or "")
    corpus = read_corpus(path)
    n_trees = config.num_prompts
    slots = None if config.open_loop else min(config.effective_concurrency or 1, n_trees)
    staggered = slots is not None and options.start == "staggered"
    dense, strides, global_stride = _dense_ids(corpus)
    trees: list[_Tree] = []
    screened = before_start = 0
    next_base = 0
    global_bases: dict[int, int] = {}
    for k in range(n_trees):
        trace = corpus.traces[k % len(corpus.traces)]
        replay = k // len(corpus.traces)
        root_calls = trace.agents[0].calls
        start = (k * root_calls) // slots if staggered and slots and k < slots else 0
        if trace.shared_scope:
            if replay not in global_bases:
                global_bases[replay] = next_base
                next_base += global_stride
            base = global_bases[replay]
        else:
            base = next_base
            next_base += strides[id(trace)]
        tree = _Tree(trace, trace.name + (f"#{replay + 1}" if replay else ""), [], [], base, start - 1)
        cut, skipped = _choose_calls(tree, start, config, mml)
        screened += cut
        before_start += skipped
        trees.append(tree)
    plan, order = _lay_out(trees, options, slots)
    n_rows = len(plan.gap_ns)
    if n_rows == 0:
        raise ConfigError(f"weka:{path}: no call to send: every tree's first call was screened out by max_model_len "
                          f"{mml}")
    warm: list[_Call] = [(tree, 0, tree.warmup) for tree in trees if tree.warmup >= 0]
    candidates = _candidates([*warm, *order], config, chat, dense)
    warmups, measured = candidates[:len(warm)], candidates[len(warm):]
    shared = sharing.shared_prompt_tokens("weka", candidates, range(len(candidates)), n_rows) or [0] * n_rows
    _note(notes, corpus, trees, plan, options, screened, before_start, len(warm), mml, path, chat)
    return AgenticBuild(plan, measured, warmups, shared, f"weka:{path}", screened)


def _dense_ids(corpus: Corpus) -> tuple[dict[tuple[int, int, int], np.ndarray], dict[int, int], int]:
    """Each call's hash ids numbered densely, per trace (hash_id_scope local) or over the global traces: a
    replay's blocks are then the numbers plus a base of its own, which cannot collide with another's."""
    dense: dict[tuple[int, int, int], np.ndarray] = {}
    strides: dict[int, int] = {}
    groups = [[t] for t in corpus.traces if not t.shared_scope]
    shared = [t for t in corpus.traces if t.shared_scope]
    if shared:
        groups.append(shared)
    global_stride = 0
    for group in groups:
        keys = [(id(t), a, i) for t in group for a, agent in enumerate(t.agents) for i in range(agent.calls)]
        arrays = [t.agents[a].hash_ids[i] for t in group for a, agent in enumerate(t.agents)
                  for i in range(agent.calls)]
        lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        flat = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
        distinct, numbers = np.unique(flat, return_inverse=True)
        ends = np.cumsum(lengths)
        for key, end, n in zip(keys, ends.tolist(), lengths.tolist()):
            dense[key] = numbers[end - n:end]
        for t in group:
            strides[id(t)] = len(distinct)
        if group is shared:
            global_stride = len(distinct)
    return dense, strides, global_stride


def _choose_calls(tree: _Tree, start: int, config: BenchConfig, mml: int | None) -> tuple[int, int]:
    """Which calls of each agent the tree sends; returns (calls screened out, calls before the start)."""
    screened = before = 0
    for a, agent in enumerate(tree.trace.agents):
        first = start if a == 0 else 0
        if a:  # sent only when the call that spawns it is
            parent = agent.parent
            if not tree.first[parent] <= agent.spawn < tree.upto[parent]:
                tree.first.append(0)
                tree.upto.append(0)
                if agent.spawn < tree.first[parent]:
                    before += agent.calls
                else:
                    screened += agent.calls
                continue
        upto = agent.calls
        if mml is not None:
            outs = _max_tokens(agent.outputs, config)
            limits = np.fromiter((screening_limit(n, config.extra_body) for n in outs.tolist()), np.int64, len(outs))
            unfit = np.flatnonzero(agent.inputs[first:] + limits[first:] > mml)
            if unfit.size:
                upto = first + int(unfit[0])
        tree.first.append(first)
        tree.upto.append(upto)
        before += first
        screened += agent.calls - upto
    return screened, before


def _max_tokens(outputs: np.ndarray, config: BenchConfig) -> np.ndarray:
    if config.max_tokens:
        return np.full(len(outputs), config.max_tokens, dtype=np.int64)
    asked: np.ndarray = np.maximum(outputs, 1)  # a recorded out of 0 (a call that was cut) asks for one token
    return asked


_Call = tuple[_Tree, int, int]  # a tree, an agent of it, one of the agent's calls


def _lay_out(trees: list[_Tree], options: AgenticOptions, slots: int | None) -> tuple[TreePlan, list[_Call]]:
    """The rows of every tree in order, their dependencies and gaps; and each row's (tree, agent, call)."""
    order: list[_Call] = []
    tree_first = [0]
    deps_first = [0]
    deps: list[int] = []
    gaps: list[float] = []
    columns: list[list[int]] = [[], [], [], [], []]  # tree, agent, role, turn, tool result tokens
    cap = options.idle_gap_cap if options.idle_gap_cap is not None else math.inf
    for k, tree in enumerate(trees):
        agents = tree.trace.agents
        calls = [(float(agents[a].starts[i]), a, i) for a in range(len(agents))
                 for i in range(tree.first[a], tree.upto[a])]
        calls.sort()
        base = len(order)
        row_of = {(a, i): base + r for r, (_, a, i) in enumerate(calls)}
        recorded_end = [float(agents[a].ends[i]) for _, a, i in calls]  # t + api_time, NaN where unknown
        joined: dict[tuple[int, int], list[int]] = {}  # (parent, join call) -> the children's last rows
        for c, agent in enumerate(agents):
            if c and agent.join >= 0 and tree.upto[c] > tree.first[c]:
                joined.setdefault((agent.parent, agent.join), []).append(row_of[(c, tree.upto[c] - 1)])
        for t, a, i in calls:
            agent = agents[a]
            mine = [row_of[(a, i - 1)]] if i > tree.first[a] else (
                [row_of[(agent.parent, agent.spawn)]] if a else [])
            mine += joined.get((a, i), [])
            deps.extend(mine)
            deps_first.append(len(deps))
            gaps.append(min(cap, _gap(agent.think[i], t, [recorded_end[d - base] for d in mine]) * options.time_scale))
            order.append((tree, a, i))
            grew = int(agent.inputs[i] - agent.inputs[i - 1] - agent.outputs[i - 1]) if i else 0
            for column, value in zip(columns, (k, a, agent.role, i,
                                               max(0, grew) if agent.tool_result[i] else 0)):
                column.append(value)
        tree_first.append(len(order))
    tree_of, agent_of, role_of, turn_of, tool_of = (np.array(column, dtype=np.int64) for column in columns)
    plan = TreePlan(np.array(tree_first, dtype=np.int64), np.array(deps_first, dtype=np.int64),
                    np.array(deps, dtype=np.int64), np.round(np.array(gaps, dtype=np.float64) * 1e9).astype(np.int64),
                    tree_of, agent_of, role_of, turn_of, tool_of, [tree.name for tree in trees], slots)
    return plan, order


def _gap(think: float, start: float, dep_ends: list[float]) -> float:
    """Seconds between the last dependency's end and the call (see the module's docstring)."""
    if not math.isnan(think):
        return think
    known = [end for end in dep_ends if not math.isnan(end)]
    if not dep_ends or len(known) < len(dep_ends):
        return 0.0
    return max(0.0, start - max(known))


def _candidates(calls: list[_Call], config: BenchConfig, chat: bool,
                dense: dict[tuple[int, int, int], np.ndarray]) -> list[Candidate]:
    """Each call's prompt (its blocks laid out with every other call's, ``TokenBlocks``) as a Candidate."""
    source = SOURCE_WORDS if chat else SOURCE_TOKEN_IDS
    by_block: dict[int, list[int]] = {}
    for k, (tree, _, _) in enumerate(calls):
        by_block.setdefault(tree.trace.block, []).append(k)
    out: list[Candidate | None] = [None] * len(calls)
    for block, members in by_block.items():
        ids = [dense[(id(calls[k][0].trace), calls[k][1], calls[k][2])] + calls[k][0].id_base for k in members]
        inputs = np.fromiter((int(calls[k][0].trace.agents[calls[k][1]].inputs[calls[k][2]]) for k in members),
                             np.int64, len(members))
        counts = np.fromiter(map(len, ids), np.int64, len(ids))
        blocks = TokenBlocks(block, chat, np.random.default_rng([config.seed, 0xA6E7, block]))
        blocks.draw(np.concatenate(ids) if ids else np.zeros(0, np.int64), np.cumsum(counts) - counts, counts, inputs)
        prompts = blocks.prompts(inputs.tolist())
        for k, prompt, n_in, chain in zip(members, prompts, inputs.tolist(), ids):
            tree, a, i = calls[k]
            n_out = int(_max_tokens(tree.trace.agents[a].outputs[i:i + 1], config)[0])
            out[k] = Candidate(prompt, n_in, n_out, source, None, SharedBlocks(chain, block))
    return [c for c in out if c is not None]


def _note(notes: list[str], corpus: Corpus, trees: list[_Tree], plan: TreePlan, options: AgenticOptions,
          screened: int, before_start: int, warmups: int, mml: int | None, path: str, chat: bool) -> None:
    rows = len(plan.gap_ns)
    roles = np.bincount(plan.role_of_row, minlength=3).tolist()
    notes.append(f"weka: {len(corpus.traces)} traces in {path}; {len(trees)} agent trees, {rows} calls ({roles[0]} "
                 f"root, {roles[1]} by subagents joined back, {roles[2]} by background subagents); gaps from the "
                 f"trace x {options.time_scale:g}"
                 + (f", capped at {options.idle_gap_cap:g} s" if options.idle_gap_cap is not None else "")
                 + (f"; trees start staggered: {warmups} warm-up calls fill the cache, {before_start} calls before "
                    "the start points not sent" if plan.slots is not None and options.start == "staggered" else ""))
    if corpus.skipped:
        notes.append(f"weka: {corpus.skipped} defective traces skipped; the first: {corpus.first_defect}")
    dropped = sum(t.dropped_subagents for t in corpus.traces)
    if dropped:
        notes.append(f"weka: {dropped} subagent markers with no parent call before them dropped (nothing spawned "
                     "them)")
    if corpus.relative_subagents:
        notes.append(f"weka: {corpus.relative_subagents} subagents' inner times read as relative to their marker")
    if screened:
        notes.append(f"weka: {screened} calls screened out (prompt + output past max_model_len {mml}): each with "
                     "the rest of its agent and the subagents it would have spawned")
    if len(trees) > len(corpus.traces):
        notes.append(f"weka: {len(trees)} trees from {len(corpus.traces)} traces: replays carry blocks of their own "
                     "(name#2, ...), so that none measures the cache an earlier play filled")
    if chat:
        notes.append("weka on chat: prompts are random common words, one word taken as one token; the server's "
                     "chat template adds its own tokens before them")
    tool_turns = int((plan.tool_result_of_row > 0).sum())
    if tool_turns:
        notes.append(f"weka: {tool_turns} calls carry a tool's result, sent as plain prompt tokens (the trace's "
                     "counts kept exact)")
    if plan.tree_first[-1] and np.any(plan.tree_first[1:] == plan.tree_first[:-1]):
        notes.append("weka: some trees send no call (their first calls screened out)")
