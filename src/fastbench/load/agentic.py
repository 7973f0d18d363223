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
By default its prompt stays plain tokens: a ``tools`` list or a tool message would add tokens of the server's
chat template that the trace never counted, and the trace's counts are what the replay keeps exact. On chat,
``--agentic-tool-messages`` sends every call as the turns of its history instead (``toolturns``): the same
tokens cut into user, assistant, tool-call and tool messages, with a tools list.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from fastbench.config import BenchConfig
from fastbench.datasetoptions import AgenticOptions
from fastbench.exceptions import ConfigError
from fastbench.load import sharing, toolturns
from fastbench.load.screening import Candidate, screening_limit
from fastbench.load.sources import gc_paused
from fastbench.load.sources.trace import TokenBlocks
from fastbench.load.sources.weka import Corpus, WekaTrace, read_corpus
from fastbench.load.tokens import SOURCE_TOKEN_IDS, SOURCE_WORDS

__all__ = ("AgenticBuild", "TreePlan", "build_trees", "check")

CHAT_ENDPOINT = "/v1/chat/completions"  # the one API whose messages --agentic-tool-messages sends


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

    def session_ids(self) -> list[str]:
        """Per row, the session its agent is: the tree's name for the root, ``TREE::AGENT`` for a subagent (its
        index in the tree), as printable ASCII (an HTTP header's value)."""
        names = ["".join(c if c.isascii() and c.isprintable() else "_" for c in name) for name in self.trees]
        return [names[t] if a == 0 else f"{names[t]}::{a}"
                for t, a in zip(self.tree_of_row.tolist(), self.agent_of_row.tolist())]

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
    """The corpus reads (DatasetError naming the file and field if not), and its options fit the endpoint."""
    if config.options(AgenticOptions).tool_messages and config.endpoint != CHAT_ENDPOINT:
        raise ConfigError(f"--agentic-tool-messages sends chat messages: give --endpoint {CHAT_ENDPOINT}, not "
                          f"{config.endpoint}")
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
        cut_out, skipped = _choose_calls(tree, start, config, mml)
        screened += cut_out
        before_start += skipped
        trees.append(tree)
    warm = [tree for tree in trees if tree.warmup >= 0]
    warm_calls = _Calls.of(warm, dense, warmups=True)
    calls = _Calls.of(trees, dense, tail=warm_calls.ids)
    plan, order = _lay_out(calls, trees, options, slots)
    n_rows = len(plan.gap_ns)
    if n_rows == 0:
        raise ConfigError(f"weka:{path}: no call to send: every tree's first call was screened out by max_model_len "
                          f"{mml}")
    cut = _message_cuts(trees, warm, calls, order, warm_calls) if options.tool_messages else None
    measured, warmups, shared = _prompts(calls, order, warm_calls, config, chat, cut)
    _note(notes, corpus, trees, plan, options, screened, before_start, len(warm), mml, path, chat)
    return AgenticBuild(plan, measured, warmups, shared, f"weka:{path}", screened)


def _dense_ids(corpus: Corpus) -> tuple[dict[tuple[int, int], np.ndarray], dict[int, int], int]:
    """Each agent's hash ids numbered densely, per trace (hash_id_scope local) or over the global traces: a
    replay's blocks are then the numbers plus a base of its own, which cannot collide with another's. Ids
    dense already (captures number their blocks from 0) are their own numbers, less the lowest; others are
    numbered by np.unique (a sort)."""
    dense: dict[tuple[int, int], np.ndarray] = {}
    strides: dict[int, int] = {}
    groups = [[t] for t in corpus.traces if not t.shared_scope]
    shared = [t for t in corpus.traces if t.shared_scope]
    if shared:
        groups.append(shared)
    global_stride = 0
    for group in groups:
        agents = [(id(t), a, agent) for t in group for a, agent in enumerate(t.agents)]
        flat = np.concatenate([agent.hash_ids for _, _, agent in agents])
        if not flat.size:
            numbers, span = flat, 1
        else:
            low = int(flat.min())
            span = int(flat.max()) - low + 1
            if span <= 4 * flat.size + (1 << 16):
                numbers = flat - low
            else:
                distinct, inverse = np.unique(flat, return_inverse=True)
                numbers, span = inverse.reshape(-1).astype(np.int64), len(distinct)
        at = 0
        for key, a, agent in agents:
            dense[(key, a)] = numbers[at:at + len(agent.hash_ids)]
            at += len(agent.hash_ids)
        for t in group:
            strides[id(t)] = span
        if group is shared:
            global_stride = span
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


@dataclasses.dataclass
class _Calls:
    """The calls sent, as columns, agent by agent (each agent's sent calls in its order) and tree by tree."""

    tree: np.ndarray  # int64 per call: its tree's index among those given
    agent: np.ndarray
    role: np.ndarray
    turn: np.ndarray  # the call's index among its agent's calls
    starts: np.ndarray  # float64 recorded t
    ends: np.ndarray  # float64 recorded t + api_time (NaN: unknown)
    think: np.ndarray  # float64 (NaN: none)
    inputs: np.ndarray
    outputs: np.ndarray  # int64 recorded out
    grew: np.ndarray  # int64: the tokens a tool's result added to its input (0: not a tool turn)
    block: np.ndarray  # int64: tokens per hash id
    ids: np.ndarray  # int64: every call's block numbers, base included, in this order
    id_count: np.ndarray  # int64 per call
    first_of: dict[tuple[int, int], int]  # (tree, agent) -> the position of its first call sent

    @classmethod
    def of(cls, trees: list[_Tree], dense: dict[tuple[int, int], np.ndarray], warmups: bool = False,
           tail: np.ndarray | None = None) -> _Calls:
        """The calls ``trees`` send (``warmups``: each tree's warm-up call only). ``tail``: block numbers to lay
        after the calls' own in ``ids`` (the warm-ups'), so that the prompts draw from one array: at 100,000
        calls of long contexts it holds tens of millions of ids, and every copy costs its page faults."""
        pieces: list[list[np.ndarray]] = [[] for _ in range(12)]
        first_of: dict[tuple[int, int], int] = {}
        segments: list[tuple[np.ndarray, int, int, int]] = []  # (an agent's numbers, from, to, base)
        at = 0
        for k, tree in enumerate(trees):
            for a, agent in enumerate(tree.trace.agents):
                f, u = (tree.warmup, tree.warmup + 1) if warmups else (tree.first[a], tree.upto[a])
                if warmups and a:
                    break
                if u <= f:
                    continue
                first_of[(k, a)] = at
                at += u - f
                id_from = int(agent.ids_end[f - 1]) if f else 0
                id_to = int(agent.ids_end[u - 1])
                before = agent.inputs[f - 1:u - 1] + agent.outputs[f - 1:u - 1] if f else np.concatenate(
                    ([agent.inputs[0]], agent.inputs[:u - 1] + agent.outputs[:u - 1]))
                grew = np.where(agent.tool_result[f:u], np.maximum(agent.inputs[f:u] - before, 0), 0)
                counts = np.diff(agent.ids_end[f - 1:u]) if f else np.diff(agent.ids_end[:u], prepend=0)
                segments.append((dense[(id(tree.trace), a)], id_from, id_to, tree.id_base))
                for column, values in zip(pieces, (
                        np.full(u - f, k), np.full(u - f, a), np.full(u - f, agent.role), np.arange(f, u),
                        agent.starts[f:u], agent.ends[f:u], agent.think[f:u], agent.inputs[f:u], agent.outputs[f:u],
                        grew, np.full(u - f, tree.trace.block), counts)):
                    column.append(values)
        extra = np.zeros(0, np.int64) if tail is None else tail
        all_ids = np.empty(sum(to - at for _, at, to, _ in segments) + len(extra), dtype=np.int64)
        filled = 0
        for numbers, id_from, id_to, base in segments:
            piece = all_ids[filled:filled + id_to - id_from]
            np.add(numbers[id_from:id_to], base, out=piece)
            filled += len(piece)
        all_ids[filled:] = extra
        floats = [np.concatenate(c).astype(np.float64) if c else np.zeros(0) for c in pieces[4:7]]
        tree_, agent_, role, turn, inputs, outputs, grew_, block, counts = (
            np.concatenate(c).astype(np.int64) if c else np.zeros(0, np.int64) for i, c in enumerate(pieces)
            if i not in (4, 5, 6))
        starts, ends, think = floats
        return cls(tree_, agent_, role, turn, starts, ends, think, inputs, outputs, grew_, block, all_ids, counts,
                   first_of)


def _lay_out(calls: _Calls, trees: list[_Tree], options: AgenticOptions,
             slots: int | None) -> tuple[TreePlan, np.ndarray]:
    """The rows (the calls sent, tree by tree, in the order of their recorded starts), their dependencies and
    gaps; and ``order``: row r is call ``order[r]``."""
    n = len(calls.tree)
    order = np.lexsort((calls.starts, calls.tree))  # stable: equal starts keep the agents' order
    row_of = np.empty(n, dtype=np.int64)
    row_of[order] = np.arange(n, dtype=np.int64)
    # (waiter, dependency), as calls: an agent's call waits for the one before; a subagent's first for the call
    # that spawned it; a joining call for the last call of each subagent it joins
    later = np.ones(n, dtype=bool)
    later[list(calls.first_of.values())] = False
    waiters = [np.flatnonzero(later)]
    deps = [waiters[0] - 1]
    extra_waiters: list[int] = []
    extra_deps: list[int] = []
    for (k, a), at in calls.first_of.items():
        agent = trees[k].trace.agents[a]
        if not a:
            continue
        parent_first = trees[k].first[agent.parent]
        spawn = calls.first_of[(k, agent.parent)] + agent.spawn - parent_first
        extra_waiters.append(at)
        extra_deps.append(spawn)
        if agent.join >= 0 and agent.join < trees[k].upto[agent.parent]:
            extra_waiters.append(calls.first_of[(k, agent.parent)] + agent.join - parent_first)
            extra_deps.append(at + trees[k].upto[a] - trees[k].first[a] - 1)
    waiter = row_of[np.concatenate([*waiters, np.array(extra_waiters, dtype=np.int64)])]
    dep = row_of[np.concatenate([*deps, np.array(extra_deps, dtype=np.int64)])]
    by_waiter = np.argsort(waiter, kind="stable")
    deps_first = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(waiter, minlength=n), out=deps_first[1:])
    # the gap: think_time where recorded; else from the latest recorded end of its dependencies, where all are known
    starts, ends, think = calls.starts[order], calls.ends[order], calls.think[order]
    latest = np.full(n, -np.inf)
    np.fmax.at(latest, waiter, ends[dep])  # fmax: a NaN end (unknown) leaves it; ``unknown`` says so
    unknown = np.zeros(n, dtype=bool)
    np.logical_or.at(unknown, waiter, np.isnan(ends[dep]))
    has_deps = deps_first[1:] > deps_first[:-1]
    from_ends = np.where(has_deps & ~unknown, np.maximum(starts - latest, 0.0), 0.0)
    gap_s = np.where(np.isnan(think), from_ends, think) * options.time_scale
    if options.idle_gap_cap is not None:
        gap_s = np.minimum(gap_s, options.idle_gap_cap)
    tree_first = np.searchsorted(calls.tree[order], np.arange(len(trees) + 1)).astype(np.int64)
    plan = TreePlan(tree_first, deps_first, dep[by_waiter], np.round(gap_s * 1e9).astype(np.int64),
                    calls.tree[order], calls.agent[order], calls.role[order], calls.turn[order], calls.grew[order],
                    [tree.name for tree in trees], slots)
    return plan, order


def _message_cuts(trees: list[_Tree], warm_trees: list[_Tree], calls: _Calls, order: np.ndarray,
                  warm: _Calls) -> _Cuts:
    """Where each prompt (the warm-ups', then the rows') is cut into its messages (``toolturns``)."""
    traces: dict[int, WekaTrace] = {id(t.trace): t.trace for t in trees}
    number = {key: k for k, key in enumerate(traces)}  # replays of a trace share its agents' columns
    trace_of_tree = np.array([number[id(t.trace)] for t in trees], dtype=np.int64)
    trace_of_warm = np.array([number[id(t.trace)] for t in warm_trees], dtype=np.int64)
    trace = np.concatenate([trace_of_warm[warm.tree], trace_of_tree[calls.tree[order]]])
    agent = np.concatenate([warm.agent, calls.agent[order]])
    turn = np.concatenate([warm.turn, calls.turn[order]])
    width = int(agent.max()) + 1
    pairs, which = np.unique(trace * width + agent, return_inverse=True)
    listed = list(traces.values())
    agents = [listed[int(p) // width].agents[int(p) % width] for p in pairs.tolist()]
    sizes = np.array([a.calls for a in agents], dtype=np.int64)
    agent_first = np.cumsum(sizes) - sizes
    prompt, token, literal, turns = toolturns.cuts(
        np.concatenate([a.inputs for a in agents]), np.concatenate([a.outputs for a in agents]),
        np.concatenate([a.tool_result for a in agents]), agent_first, agent_first[which.reshape(-1)] + turn)
    return _Cuts(prompt, token, literal, toolturns.Literals(turns))


@dataclasses.dataclass
class _Cuts:
    prompt: np.ndarray
    token: np.ndarray
    literal: np.ndarray
    literals: toolturns.Literals


def _prompts(calls: _Calls, order: np.ndarray, warm: _Calls, config: BenchConfig, chat: bool,
             cut: _Cuts | None) -> tuple[list[Candidate], list[Candidate], list[int]]:
    """The rows' and the warm-ups' prompts, laid out together (``TokenBlocks``: calls sharing a block share its
    tokens), and what each row shares with the calls sent before it (the warm-ups, then the rows in order).
    Requests are taken in that order; their block numbers stay where ``calls.ids`` holds them (the warm-ups'
    last), each request's a run of it from its start. ``cut``: each prompt cut into its messages."""
    source = SOURCE_WORDS if chat else SOURCE_TOKEN_IDS
    own = len(calls.ids) - len(warm.ids)
    counts = np.concatenate([warm.id_count, calls.id_count[order]])
    starts = np.concatenate([own + np.cumsum(warm.id_count) - warm.id_count,
                             (np.cumsum(calls.id_count) - calls.id_count)[order]])
    ids = calls.ids
    inputs = np.concatenate([warm.inputs, calls.inputs[order]])
    outputs = _max_tokens(np.concatenate([warm.outputs, calls.outputs[order]]), config)
    blocks = np.concatenate([warm.block, calls.block[order]])
    prompts: list[Any] = [None] * len(inputs)
    for block in np.unique(blocks).tolist():  # a corpus's traces have one block size, as a rule
        members = np.flatnonzero(blocks == block)
        layout = TokenBlocks(block, chat, np.random.default_rng([config.seed, 0xA6E7, block]))
        if len(members) == len(inputs):
            layout.draw(ids, starts, counts, inputs, cut.literals.bytes if cut else b"")
            _cut_into_messages(layout, cut, members)
            prompts = layout.prompts(inputs.tolist())
            break
        layout.draw(ids, starts[members], counts[members], inputs[members], cut.literals.bytes if cut else b"")
        _cut_into_messages(layout, cut, members)
        for k, prompt in zip(members.tolist(), layout.prompts(inputs[members].tolist())):
            prompts[k] = prompt
    candidates = [Candidate(prompt, n_in, n_out, source) for prompt, n_in, n_out
                  in zip(prompts, inputs.tolist(), outputs.tolist())]
    shared = sharing.shared_by_ids(ids, counts, inputs, blocks, starts)[len(warm.inputs):]
    return candidates[len(warm.inputs):], candidates[:len(warm.inputs)], shared


def _cut_into_messages(layout: TokenBlocks, cut: _Cuts | None, members: np.ndarray) -> None:
    """The cuts of the prompts ``layout`` drew (``members``, sorted) made in its runs."""
    if cut is None:
        return
    if members[-1] + 1 == len(members):  # every prompt (one block size, as a rule)
        prompt, token, literal = cut.prompt, cut.token, cut.literal
    else:
        mine = np.flatnonzero(np.isin(cut.prompt, members))
        prompt, token, literal = np.searchsorted(members, cut.prompt[mine]), cut.token[mine], cut.literal[mine]
    at = layout.literals_at
    layout.insert(prompt, token, at + cut.literals.starts[literal], at + cut.literals.ends[literal])


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
    if options.tool_messages:
        notes.append(f"weka: each call sent as the turns of its history, with a tools list; {tool_turns} calls "
                     "answer a tool call with a tool message. The chat template adds its tokens for the messages and "
                     "the tools (the prompt tokens are the server's usage)")
    elif tool_turns:
        notes.append(f"weka: {tool_turns} calls carry a tool's result, sent as plain prompt tokens (the trace's "
                     "counts kept exact; --agentic-tool-messages sends them as tool messages)")
    if plan.tree_first[-1] and np.any(plan.tree_first[1:] == plan.tree_first[:-1]):
        notes.append("weka: some trees send no call (their first calls screened out)")
