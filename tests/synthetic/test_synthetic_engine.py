"""The synthetic server's engine model (fastbench.synthetic.stepmodel): a step's time grows with the batch as
configured (judged from the server's own send stamps), speculative decoding sends 1 + accepted tokens a chunk
with usage and vLLM's counters agreeing, a batch cap makes requests wait, and a baseline and a speculative
variant measured by fastbench cross where fastbench's crossing finds them."""

from __future__ import annotations

import asyncio
import re
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.synthetic_helpers import RawConn, Response, stream_body
from support.timing import until_a_round_passes
from fastbench import BenchConfig, run
from fastbench.cli import command
from fastbench.study.figures_data import all_crossings, group_series, load_points, log_axis
from fastbench.study.plots import PER_STREAM_KEY
from fastbench.synthetic import SyntheticServer, SyntheticStartError, build_parser, config_from_args
from fastbench.synthetic.stepmodel import StepCosts, expected_accepted

LABEL = 'engine="0",model_name="fastbench-synthetic"'
STUDY_FILE = Path(__file__).resolve().parents[2] / "bench" / "crossover_study.toml"


def metrics(s: SyntheticServer) -> dict[str, float]:
    out = {}
    for line in s.metrics().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def streams(base_url: str, n: int, max_tokens: int, **extra: Any) -> list[Response]:
    """``n`` streaming completions at once, one connection each."""

    async def go() -> list[Response]:
        conns = [await RawConn(base_url).connect() for _ in range(n)]
        rs = await asyncio.gather(*(c.request("POST", "/v1/completions", stream_body(max_tokens, **extra))
                                    for c in conns))
        for c in conns:
            c.close()
        return list(rs)

    return asyncio.run(go())


def token_chunks(r: Response) -> list[dict[str, Any]]:
    return [c for c in r.chunks() if c.get("choices")]


def chunk_tokens(r: Response) -> list[int]:
    """Tokens per chunk, from the per-chunk usage, each checked against the chunk's text."""
    sizes, before = [], 0
    for c in token_chunks(r):
        done = c["usage"]["completion_tokens"]
        assert done - before == len(c["choices"][0]["text"].split())
        sizes.append(done - before)
        before = done
    return sizes


# --------------------------------------------------------------------------------------------------
# the model alone


def test_step_cost_formula() -> None:
    costs = StepCosts(step_ns=4e6, per_seq_ns=0.2e6, per_token_ns=0.5e6, draft_ns=0.3e6, prefill_ns=1e4,
                      spec_tokens=3)
    # 8 sequences, 6 decoding (4 tokens each verified), 2 joining with 100 prompt tokens in all
    assert costs.step_time_ns(8, 6, 100) == int(4e6 + 8 * 0.2e6 + 6 * 4 * 0.5e6 + 3 * 0.3e6 + 100 * 1e4)
    assert costs.step_time_ns(2, 0, 0) == int(4e6 + 2 * 0.2e6)  # only joining: nothing drafted or verified
    assert StepCosts(4e6, 0, 0.5e6, 0, 0, 0).step_time_ns(3, 3, 0) == int(4e6 + 3 * 0.5e6)
    assert expected_accepted(3, 0.5) == pytest.approx(0.5 + 0.25 + 0.125)
    assert expected_accepted(0, 0.9) == 0


def test_flags_turn_the_model_on_with_their_defaults_and_refuse_what_contradicts_it() -> None:
    p = build_parser()
    assert not config_from_args(p.parse_args([])).engine_model  # today's schedule unless asked
    cfg = config_from_args(p.parse_args(["--step-per-token-ms", "0.5"]))
    assert cfg.engine_model and cfg.ttft_ms == 0 and cfg.max_num_seqs == 256 and cfg.spec_k == 0
    assert StepCosts.of(cfg).step_ns == 20e6  # --step-ms defaults to --itl-ms
    cfg = config_from_args(p.parse_args(["--spec-tokens", "4", "--spec-acceptance", "0.8"]))
    assert cfg.spec_k == 4 and cfg.spec_acceptance == 0.8
    text = p.format_help()
    for flag in ("--step-ms MS", "--step-per-seq-ms MS", "--step-per-token-ms MS", "--max-num-seqs N",
                 "--spec-tokens K", "--spec-acceptance A", "--draft-ms MS"):
        assert flag in text
    for bad, words in ((["--step-ms", "-1"], "--step-ms must be"), (["--max-num-seqs", "0"], "--max-num-seqs"),
                       (["--spec-tokens", "99"], "--spec-tokens must be"),
                       (["--spec-tokens", "2", "--spec-acceptance", "1.5"], "--spec-acceptance must be"),
                       (["--draft-ms", "1"], "need --spec-tokens"),
                       (["--spec-tokens", "2", "--tokens-per-chunk", "1-3"], "--tokens-per-chunk"),
                       (["--step-ms", "5", "--fault", "stall"], "--fault stall")):
        with pytest.raises(SyntheticStartError) as e:
            SyntheticServer(*bad, startup_timeout_s=10).start()
        assert words in str(e.value), (bad, str(e.value))


# --------------------------------------------------------------------------------------------------
# steps against the server's own stamps


def _step_gaps_ms(rs: list[Response]) -> list[float]:
    gaps = []
    for r in rs:
        sent = [c["fb_sent_ns"] for c in token_chunks(r)]
        gaps += [(b - a) / 1e6 for a, b in zip(sent, sent[1:])]
    return gaps


@pytest.mark.timing
def test_step_time_grows_with_the_batch_as_configured() -> None:
    """Concurrency 1, 4 and 12: every stream's chunks are one step apart, the step as the formula says."""
    step, per_seq, per_token = 3.0, 0.2, 0.5
    with SyntheticServer(step_ms=step, step_per_seq_ms=per_seq, step_per_token_ms=per_token) as s:

        def one_round() -> None:
            for n in (1, 4, 12):
                steps_before = s.stats()["engine_model"]["steps"]
                rs = streams(s.base_url, n, 30)
                # the requests reach the server over a few ms: the later ones may join a step late and
                # run alone at the end; the steps of a full batch are the middle ones
                gaps = _step_gaps_ms(rs)
                expect = step + n * (per_seq + per_token)
                assert statistics.median(gaps) == pytest.approx(expect, abs=0.25), (n, statistics.median(gaps))
                # the streams step together: 30 steps, a few more for requests that joined a step late
                steps = s.stats()["engine_model"]["steps"] - steps_before
                assert 30 <= steps <= 36, (n, steps)
            st = s.stats()["engine_model"]
            assert st["max_batch"] == 12 and st["running"] == 0 and st["waiting"] == 0

        until_a_round_passes(one_round)


def test_batch_cap_makes_later_requests_wait_their_turn() -> None:
    with SyntheticServer(step_ms=4, max_num_seqs=2) as s:
        rs = streams(s.base_url, 4, 12)
        spans = sorted((token_chunks(r)[0]["fb_sent_ns"], token_chunks(r)[-1]["fb_sent_ns"]) for r in rs)
        # two run at a time: the third starts once a place frees, after the first two's last chunks
        assert spans[2][0] > spans[0][1] and spans[2][0] > spans[1][1] - 5_000_000
        assert s.stats()["engine_model"]["max_batch"] == 2
        m = metrics(s)
        assert m[f"vllm:num_requests_running{{{LABEL}}}"] == 0 and m[f"vllm:num_requests_waiting{{{LABEL}}}"] == 0


def test_waiting_gauge_counts_the_queue() -> None:
    running, waiting = f"vllm:num_requests_running{{{LABEL}}}", f"vllm:num_requests_waiting{{{LABEL}}}"

    async def go(s: SyntheticServer) -> tuple[list[tuple[float, float]], list[Response]]:
        conns = [await RawConn(s.base_url).connect() for _ in range(5)]
        tasks = [asyncio.ensure_future(c.request("POST", "/v1/completions", stream_body(60))) for c in conns]
        seen = []
        for _ in range(25):  # the first two take 60 steps of 10 ms; the first may step alone at first
            await asyncio.sleep(0.02)
            gauges = await asyncio.to_thread(metrics, s)
            seen.append((gauges[running], gauges[waiting]))
            if seen[-1] == (2, 3):
                break
        rs = await asyncio.gather(*tasks)
        for c in conns:
            c.close()
        return seen, list(rs)

    with SyntheticServer(step_ms=10, max_num_seqs=2) as s:
        seen, rs = asyncio.run(go(s))
    assert seen[-1] == (2, 3), seen  # two in the batch, three queued
    assert all(r <= 2 and r + w <= 5 for r, w in seen), seen
    assert all(sum(chunk_tokens(r)) == 60 for r in rs)


# --------------------------------------------------------------------------------------------------
# speculative decoding


@pytest.fixture(scope="module")
def spec() -> Iterator[SyntheticServer]:
    with SyntheticServer(step_ms=1, step_per_token_ms=0.05, spec_tokens=3, spec_acceptance=0.6, seed=3) as s:
        yield s


def test_speculative_chunks_carry_one_plus_accepted_and_the_counters_agree(spec: SyntheticServer) -> None:
    before = metrics(spec)
    rs = streams(spec.base_url, 8, 240)
    K, A = 3, 0.6
    decode: list[int] = []  # tokens of every decode chunk but each stream's last (cut at max_tokens)
    drafts = accepted = 0
    per_pos = [0] * K
    for r in rs:
        sizes = chunk_tokens(r)
        assert sizes[0] == 1 and sum(sizes) == 240  # the prefill's token, then decode steps
        assert all(1 <= k <= K + 1 for k in sizes)
        assert r.chunks()[-1]["usage"]["completion_tokens"] == 240  # usage counts every token sent
        decode += sizes[1:-1]
        drafts += len(sizes) - 1
        accepted += sum(k - 1 for k in sizes[1:])
        for k in sizes[1:]:
            for j in range(k - 1):
                per_pos[j] += 1
    mean = statistics.mean(decode)
    assert mean == pytest.approx(1 + expected_accepted(K, A), abs=0.15), mean  # ~870 steps: sd of the mean 0.04
    for j in range(K):  # position j accepted when every one before it was: A^(j+1) of the drafts
        share = sum(1 for k in decode if k >= j + 2) / len(decode)
        assert share == pytest.approx(A ** (j + 1), abs=0.06), (j, share)
    after = metrics(spec)

    def delta(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    assert delta(f"vllm:spec_decode_num_drafts_total{{{LABEL}}}") == drafts
    assert delta(f"vllm:spec_decode_num_draft_tokens_total{{{LABEL}}}") == K * drafts
    assert delta(f"vllm:spec_decode_num_accepted_tokens_total{{{LABEL}}}") == accepted
    for j in range(K):
        assert delta(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABEL},position="{j}"}}') == per_pos[j]
    assert delta(f"vllm:generation_tokens_total{{{LABEL}}}") == 8 * 240


def test_a_whole_response_steps_as_a_stream_would(spec: SyntheticServer) -> None:
    async def go() -> Response:
        async with RawConn(spec.base_url) as c:
            return await c.request("POST", "/v1/completions", {"prompt": "a b c", "max_tokens": 50,
                                                               "ignore_eos": True})

    before = metrics(spec)
    r = asyncio.run(go())
    body = r.json()
    assert body["usage"]["completion_tokens"] == 50 and len(body["choices"][0]["text"].split()) == 50
    after = metrics(spec)
    drafts, acc = (after[f"vllm:spec_decode_num_{name}_total{{{LABEL}}}"]
                   - before[f"vllm:spec_decode_num_{name}_total{{{LABEL}}}"] for name in ("drafts", "accepted_tokens"))
    assert drafts + acc == 49  # each decode step's tokens: 1 + its accepted; the first token is the prefill's
    assert drafts < 49 * 0.75  # speculation took fewer steps than tokens


# --------------------------------------------------------------------------------------------------
# the crossing, as fastbench measures and computes it


@pytest.mark.timing
def test_a_baseline_and_a_speculative_variant_cross_where_fastbench_finds_it(tmp_path: Path) -> None:
    """Batch 1 is latency-bound (the fixed step dominates): speculation is ahead per stream. At 16 the
    per-token compute dominates and speculation, paying for 4 tokens a sequence to keep ~2.5, is behind.

    The figures are the yardstick's schedule, which its engine keeps on an absolute timeline; what a busy
    host moves is when a chunk is written, the first one's lateness shortening a request's decode interval
    (at 32 tokens a request, batch 1's base rate read 415-489 tok/s beside four busy loops against 392 on
    the schedule). 128 tokens a request make that a quarter as large, and a host stall that still moves one
    run fails one round, not the test."""
    until_a_round_passes(lambda: _cross_where_fastbench_finds_it(tmp_path))


def _cross_where_fastbench_finds_it(tmp_path: Path) -> None:
    model = ("--step-ms", "2", "--step-per-seq-ms", "0.05", "--step-per-token-ms", "0.5")
    variants = {"base": model, "eagle3": (*model, "--spec-tokens", "3", "--spec-acceptance", "0.7",
                                          "--draft-ms", "0.3")}
    files = []
    for name, args in variants.items():
        for conc in (1, 16):
            out = tmp_path / f"{name}-{conc}.json"
            run(BenchConfig(num_prompts=max(4, conc), concurrency=conc, random_input_len=16,  # type: ignore[arg-type]
                            random_output_len=128, ignore_eos=True, synthetic_args=args, variant=name,
                            result_json=out, progress=False))
            files.append(str(out))
    points = load_points(files, None, {})
    series = group_series(points, PER_STREAM_KEY)
    base, eagle = ({c.load: c.mean for c in series[v]} for v in ("base", "eagle3"))
    # step 2.55 ms at 1 (392 tok/s) against 4.95 ms for 2.53 tokens (512); 10.8 ms (93) against 35.7 (71) at
    # 16, where the lines meet near 3.3 with every place decoding
    assert eagle[1] > 1.15 * base[1] and eagle[16] < 0.9 * base[16], (base, eagle)
    loads = [c.load for cells in series.values() for c in cells]
    (crossing,) = all_crossings(series, log_x=log_axis(loads))
    assert (crossing.first, crossing.second) == ("base", "eagle3") and not crossing.first_above_before
    assert 1 < crossing.load < 16
    accept = {p.variant: p.value("spec_decode_acceptance_length") for p in points if p.concurrency == 1}
    assert accept["base"] is None and accept["eagle3"] == pytest.approx(1 + expected_accepted(3, 0.7), abs=0.25)


def test_the_study_sweep_file_plans_its_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """bench/crossover_study.toml (docs/sweep.md's crossover figure) stays a valid sweep: 2 variants x 7 loads
    x 2 repeats."""
    rc = command.main(["sweep", str(STUDY_FILE), "--store", str(tmp_path / "store"), "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "28 cells (14 points x 2 repeats)" in out
    servers = [line for line in out.splitlines() if ": start per run the built-in synthetic server" in line]
    assert [line.split(":")[0] for line in servers] == ["base", "eagle3"]
    assert "--spec-tokens" not in servers[0] and "--spec-tokens 3" in servers[1]
    assert sorted({int(c) for c in re.findall(r'\{"concurrency":(\d+)\}', out)}) == [1, 2, 4, 8, 16, 32, 64]
