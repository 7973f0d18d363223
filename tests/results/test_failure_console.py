"""The console names a run's most common failure with the server's own words and what to check: a run whose
every request is refused (a wrong --api-key) says HTTP 401 and --api-key in front of the user, not only a
count by class, and never shows the key the server echoed."""

from __future__ import annotations

import asyncio
import json

from support.scripted import ScriptedServer
from fastbench import BenchConfig, api
from fastbench.results import failures, writers

KEY = "wrong-key-9999"
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "max_model_len": 4096}]}).encode()


def _answer(status: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body)


def _refuse_the_key(n: int, body: bytes) -> list[bytes]:
    """/v1/models open (a GET has no body), every generation refused, the key echoed as some servers do."""
    if not body:
        return [_answer("200 OK", MODELS)]
    return [_answer("401 Unauthorized", json.dumps({"error": f"Unauthorized: key {KEY} is not valid"}).encode())]


def test_an_all_401_run_names_the_status_the_message_and_the_key_to_check() -> None:
    async def measure() -> api.Result:
        async with ScriptedServer(_refuse_the_key) as server:
            return await api.arun(BenchConfig(base_url=server.base_url, model="m", api_key=KEY, num_prompts=12,
                                              concurrency=3, random_input_len=8, random_output_len=4))

    result = asyncio.run(measure())
    assert result.counts.completed == 0 and result.counts.failed_by_class == {"HTTP_STATUS": 12}
    console = writers.render_console(result)
    top = console.splitlines()[:8]
    assert top[1] == "COLLAPSED RUN: no request completed"
    text = " ".join(" ".join(top).split())
    assert '12/12 requests failed with HTTP 401: {"error": "Unauthorized: key *** is not valid"}' in text
    assert "check: the server refused the credentials: check --api-key" in text
    assert KEY not in console


def test_each_failure_points_to_its_own_cause() -> None:
    assert "--api-key" in failures.failure_hint("HTTP_STATUS", "HTTP 403: forbidden")
    assert "--model" in failures.failure_hint("HTTP_STATUS", "HTTP 404: {}")
    assert "rate limiting" in failures.failure_hint("HTTP_STATUS", "HTTP 429: slow down")
    assert "its log" in failures.failure_hint("HTTP_STATUS", "HTTP 503: overloaded")
    assert "--base-url" in failures.failure_hint("CONNECT", "connect to 127.0.0.1:1 failed: Connection refused")
    assert "--request-timeout" in failures.failure_hint("TIMEOUT", "no complete response within 1 s")
