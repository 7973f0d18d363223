"""The synthetic server's engine model: sequences decoding together in steps whose time grows with the batch.

Part of the synthetic server (see ``fastbench.synthetic``); imports nothing from the fastbench client.

Off unless one of its options is given (``--step-ms``, ``--step-per-seq-ms``, ``--step-per-token-ms``,
``--max-num-seqs``, ``--spec-tokens``, ``--spec-acceptance``, ``--draft-ms``): without them each request
keeps its own fixed schedule (``generation``). With them the server runs one engine step at a time, as a
memory-bandwidth-bound decoder batched by vLLM's scheduler does:

* a step takes ``step_ms + per_seq_ms x B + per_token_ms x (K + 1) x D + K x draft_ms + P / prefill_tok_s``:
  B the sequences in it, D those of them decoding (past their first token), K the draft tokens a decoding
  sequence verifies (``--spec-tokens``; the draft term only when D > 0), P the prompt tokens of the
  sequences joining in it that the prefix cache does not hold (free without ``--prefill-tok-s``). The
  fixed part stands for reading the weights once a step, the per-sequence part for each one's KV cache,
  the per-token part for the compute of every token verified;
* at most ``--max-num-seqs`` sequences run; later requests wait in arrival order and join, prefilled whole
  in one step (as a chunked-prefill scheduler with a budget above the prompt), when a place frees;
* at a step's end every sequence in it sends one chunk, all due at that instant: a joining sequence its
  first token (the prefill's), a decoding one ``1 + accepted`` tokens, each of its K draft tokens accepted
  with probability ``--spec-acceptance`` while every one before it was (so draft position i is accepted
  at A^(i+1), and vLLM's per-position counters fall as a real drafter's do), drawn from ``--seed``;
* the next step starts at that instant, an absolute timeline (the server's write lateness never
  accumulates into it); a request arriving during a step joins the next one; with nothing to run the
  engine idles until a request is ready (``--ttft-ms`` after it was read, default 0 here).

So per stream, decoding at batch B runs at ``(1 + E[accepted]) / step`` tokens/s: speculation is ahead
while the fixed part dominates the step (batch 1 is latency-bound), and behind once the per-token part
does, since it pays for K + 1 tokens per sequence and gets ``1 + E[accepted]`` (less than K + 1) back.
"""

from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastbench.synthetic.contracts import ServerConfig, StepHost
    from fastbench.synthetic.generation import Generation

__all__ = ("EngineModel", "StepCosts", "expected_accepted")

_now = time.monotonic_ns


@dataclass(frozen=True)
class StepCosts:
    """What one engine step costs, in ns (see the module's docstring for the formula)."""

    step_ns: float
    per_seq_ns: float
    per_token_ns: float
    draft_ns: float  # per draft position, once a step
    prefill_ns: float  # per prompt token prefilled; 0 without --prefill-tok-s
    spec_tokens: int

    @classmethod
    def of(cls, cfg: ServerConfig) -> StepCosts:
        step_ms = cfg.itl_ms if cfg.step_ms is None else cfg.step_ms
        return cls(step_ms * 1e6, cfg.step_per_seq_ms * 1e6, cfg.step_per_token_ms * 1e6, cfg.draft_ms * 1e6,
                   1e9 / cfg.prefill_tok_s if cfg.prefill_tok_s else 0.0, cfg.spec_tokens)

    def step_time_ns(self, seqs: int, decoding: int, prefill_tokens: int) -> int:
        """One step of ``seqs`` sequences, ``decoding`` of them past their first token."""
        k = self.spec_tokens
        t = (self.step_ns + self.per_seq_ns * seqs + self.per_token_ns * (k + 1) * decoding
             + self.prefill_ns * prefill_tokens)
        if decoding and k:
            t += self.draft_ns * k
        return int(t)


def expected_accepted(spec_tokens: int, acceptance: float) -> float:
    """Mean accepted draft tokens per step of one sequence: A + A^2 + ... + A^K."""
    return sum(acceptance ** (i + 1) for i in range(spec_tokens))


class EngineModel:
    """The batch of one synthetic engine: decides when each sequence's chunks go out, and how many tokens
    each carries; the ``Generation`` writes them (and stamps them) as it does on its own schedule."""

    def __init__(self, eng: StepHost) -> None:
        cfg = eng.cfg
        if cfg.fault == "stall":  # a stall moves one request's own schedule, which this model replaces
            raise ValueError("--fault stall needs each request's own schedule, not the engine model")
        self.eng = eng
        self.costs = StepCosts.of(cfg)
        self.max_num_seqs = cfg.max_num_seqs
        self.acceptance = cfg.spec_acceptance
        self.jitter_ns = eng.jitter_ns
        # its own stream of draws, so that the acceptance leaves the other seeded choices as they were
        self.rng = random.Random(f"engine-model {cfg.seed}")
        self.waiting: deque[tuple[Generation, int]] = deque()  # (request, its prompt tokens to prefill)
        self.batch: list[Generation] = []  # the step in progress's sequences
        self.pending = 0  # requests read but not yet ready (--ttft-ms)
        self.busy = False
        self.last_end = 0
        self.steps = 0
        self.seqs_stepped = 0  # sum over steps of the batch size
        self.max_batch = 0

    # -- requests ---------------------------------------------------------------------------------

    def admit(self, g: Generation, prefill_tokens: int, ready_ns: int) -> None:
        """A request read (its response head written); it may join a step from ``ready_ns`` on."""
        if ready_ns > _now():  # a --ttft-ms delay still ahead
            self.pending += 1

            def ready(due: int) -> None:
                self.pending -= 1
                self._enqueue(g, prefill_tokens, due)

            self.eng.sched.push(ready_ns, ready)
            return
        self._enqueue(g, prefill_tokens, ready_ns)

    def _enqueue(self, g: Generation, prefill_tokens: int, ready_ns: int) -> None:
        self.waiting.append((g, prefill_tokens))
        if not self.busy:
            self._start(max(ready_ns, self.last_end))

    # -- steps ------------------------------------------------------------------------------------

    def _start(self, t0: int) -> None:
        """Form the step that begins at ``t0`` and schedule its end; idle if there is nothing to run."""
        batch = [g for g in self.batch if not g.ended]
        decoding = len(batch)
        prefill = 0
        waiting = self.waiting
        while waiting and len(batch) < self.max_num_seqs:
            g, tokens = waiting.popleft()
            if not g.ended:  # its client may have gone while it waited
                batch.append(g)
                prefill += tokens
        self.batch = batch
        if not batch:
            self.busy = False
            self.last_end = t0
            return
        self.busy = True
        d = self.costs.step_time_ns(len(batch), decoding, prefill)
        if self.jitter_ns:
            d = max(0, d + int(self.eng.rng.uniform(-self.jitter_ns, self.jitter_ns)))
        self.steps += 1
        self.seqs_stepped += len(batch)
        self.max_batch = max(self.max_batch, len(batch))
        self.eng.sched.push(t0 + d, self._end)

    def _end(self, due: int) -> None:
        """The step is over: each of its sequences sends its chunk, then the next step begins."""
        k_max = self.costs.spec_tokens
        a = self.acceptance
        rand = self.rng.random
        for g in self.batch:
            if g.ended:
                continue
            k = 1
            if g.idx > 0:  # decoding: the verified token, and the accepted run of drafts before it
                while k <= k_max and rand() < a:
                    k += 1
            if g.streamed:
                g.engine_k = k
                g.step(due)
            else:
                self._whole_step(g, k, due)
        self._start(due)

    @staticmethod
    def _whole_step(g: Generation, k: int, due: int) -> None:
        """A non-streaming request steps as a streaming one would, and is answered whole at its last step."""
        k = min(k, g.n_out - g.emitted)
        g.sizes.append(k)
        g.emitted += k
        g.idx += 1
        if g.emitted >= g.n_out:
            g.finish_whole(due)

    # -- reports ----------------------------------------------------------------------------------

    def running(self) -> int:
        return sum(1 for g in self.batch if not g.ended)

    def waiting_count(self) -> int:
        return self.pending + sum(1 for g, _ in self.waiting if not g.ended)

    def stats(self) -> dict[str, float | int]:
        return {"steps": self.steps, "mean_batch": self.seqs_stepped / self.steps if self.steps else 0.0,
                "max_batch": self.max_batch, "running": self.running(), "waiting": self.waiting_count()}
