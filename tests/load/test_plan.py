"""A run's LoadPlan from its config and workload (LoadPlan.from_config): what each option becomes in the
plan the generator runs."""

from __future__ import annotations

import pytest

from fastbench.config import BenchConfig
from fastbench.load.datasets import build_workload_sync
from fastbench.load.plan import LoadPlan


def _plan(**options: object) -> tuple[LoadPlan, BenchConfig]:
    config = BenchConfig(random_input_len=8, random_output_len=6, **options)  # type: ignore[arg-type]
    return LoadPlan.from_config(config, build_workload_sync(config, "m", max_model_len=None)), config


def test_an_uncapped_open_loop_ramp_gets_a_slot_per_request_and_the_auto_tick() -> None:
    plan, _ = _plan(num_prompts=4, concurrency=None, coalesce_ms="auto", ramp_up_strategy="linear",
                    ramp_up_start_rps=1, ramp_up_end_rps=4, num_warmups=2)
    assert plan.concurrency == 4 and len(plan.bodies) == 4 and len(plan.warmup_bodies) == 2
    assert plan.coalesce_s == "auto" and plan.ramp_up == ("linear", 1, 4) and plan.request_rate is None
    assert plan.expected_output_tokens == [6, 6, 6, 6]  # max_tokens is the server's limit: trusted
    assert plan.verify_tls and not plan.whole_answers and plan.row_header is None


def test_a_capped_run_keeps_its_cap_and_trusts_no_limit_extra_body_lifts() -> None:
    plan, config = _plan(num_prompts=5, concurrency=3, request_rate=2.0, burstiness=0.5, seed=7, coalesce_ms=2,
                         extra_body={"max_tokens": None}, insecure=True, per_request_arrays=True, max_seconds=9.0,
                         result_json="r.json")
    assert (plan.concurrency, plan.request_rate, plan.burstiness, plan.seed) == (3, 2.0, 0.5, 7)
    assert plan.coalesce_s == pytest.approx(0.002) and plan.max_seconds == 9.0
    assert plan.expected_output_tokens is None  # --extra-body lifts max_tokens: the usage is the truth
    assert not plan.verify_tls and plan.save_outputs and plan.keep_chunk_stamps  # vllm's texts and itls
    assert plan.endpoint == config.endpoint and plan.on_progress is None and plan.stop_event is None



def test_the_server_gone_rule_reaches_the_plan() -> None:
    plan, _ = _plan(num_prompts=2, server_gone_s=3.5)
    assert plan.server_gone_s == 3.5
    plan, _ = _plan(num_prompts=2, server_gone_s=0)
    assert plan.server_gone_s == 0  # 0 turns the rule off
