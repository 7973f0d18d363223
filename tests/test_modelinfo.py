"""modelinfo: family and parameter count from a model's local files, written here by the formats' own
libraries (safetensors, gguf) so that the readers are checked against them, not against themselves."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from safetensors.numpy import save_file

from fastbench import modelinfo
from fastbench.modelinfo import ModelInfoError, describe, family_of, locate


def write_hf(directory: Path, config: dict[str, Any], shards: list[dict[str, np.ndarray]]) -> Path:
    """A Hugging Face model directory: config.json and the shards (an index when there are several)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    if len(shards) == 1:
        save_file(shards[0], str(directory / "model.safetensors"))
        return directory
    weight_map = {}
    for i, tensors in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(tensors, str(directory / name))
        weight_map.update(dict.fromkeys(tensors, name))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return directory


def zeros(*shape: int, dtype: Any = np.float16) -> np.ndarray:
    return np.zeros(shape, dtype=dtype)


def test_a_dense_model_in_shards(tmp_path: Path) -> None:
    shards = [
        {"model.embed_tokens.weight": zeros(1000, 64), "model.layers.0.self_attn.q_proj.weight": zeros(64, 64)},
        {"model.layers.0.mlp.up_proj.weight": zeros(256, 64), "model.norm.weight": zeros(64)},
    ]
    # a stray file the index does not name is not counted
    directory = write_hf(tmp_path / "m", {"model_type": "llama", "torch_dtype": "bfloat16"}, shards)
    save_file({"x": zeros(10**6)}, str(directory / "unused.safetensors"))
    facts = describe(str(directory))
    assert facts is not None
    assert facts.total_params == 1000 * 64 + 64 * 64 + 256 * 64 + 64
    assert (facts.family, facts.model_type, facts.precision) == ("Llama", "llama", "bfloat16")
    assert facts.parameters_text() == "85K (dense)"
    rows = modelinfo.card_rows(facts)
    assert rows["Family"] == "Llama (llama)"
    assert rows["Parameters"] == "85K (dense), counted from the safetensors headers"
    assert rows["Quant / precision"] == "bfloat16, from config.json"
    assert rows["Model files"] == str(directory)


def test_a_mixture_of_experts_counts_k_of_e_routed_experts_as_active(tmp_path: Path) -> None:
    tensors = {"model.embed_tokens.weight": zeros(500, 32), "lm_head.weight": zeros(500, 32),
               "model.layers.0.mlp.gate.weight": zeros(8, 32),
               "model.layers.0.mlp.shared_experts.up_proj.weight": zeros(64, 32)}
    for e in range(8):
        tensors[f"model.layers.0.mlp.experts.{e}.up_proj.weight"] = zeros(64, 32)
        tensors[f"model.layers.0.mlp.experts.{e}.down_proj.weight"] = zeros(32, 64)
    # a multimodal config keeps the language model's settings under text_config
    config = {"model_type": "qwen3_vl_moe", "text_config": {"num_experts": 8, "num_experts_per_tok": 2}}
    facts = describe(str(write_hf(tmp_path / "moe", config, [tensors])))
    assert facts is not None
    routed = 8 * 2 * 64 * 32
    dense = 2 * 500 * 32 + 8 * 32 + 64 * 32
    assert facts.total_params == dense + routed
    assert facts.active_params == dense + routed * 2 // 8
    assert facts.experts == (2, 8) and facts.family == "Qwen"
    assert facts.parameters_text() == "67K / 42K (MoE)"


def test_fused_expert_tensors_are_routed_too(tmp_path: Path) -> None:
    tensors = {"model.embed_tokens.weight": zeros(100, 16),
               "model.layers.0.mlp.experts.gate_up_proj": zeros(4, 16, 64)}
    facts = describe(str(write_hf(tmp_path / "g", {"model_type": "gpt_oss", "num_local_experts": 4,
                                                   "num_experts_per_tok": 1}, [tensors])))
    assert facts is not None and facts.family == "gpt-oss"
    assert facts.active_params == 100 * 16 + 4 * 16 * 64 // 4


def test_quantisation_scales_are_not_parameters_and_packed_weights_are_not_counted(tmp_path: Path) -> None:
    scaled = {"model.layers.0.mlp.up_proj.weight": zeros(64, 64), "model.layers.0.mlp.up_proj.weight_scale": zeros(1),
              "model.layers.0.mlp.up_proj.weight_scale_inv": zeros(2, 2), "model.layers.0.mlp.up_proj.input_scale":
              zeros(1)}
    facts = describe(str(write_hf(tmp_path / "fp8", {"model_type": "mistral", "quantization_config":
                                                     {"quant_method": "fp8"}}, [scaled])))
    assert facts is not None and facts.total_params == 64 * 64 and facts.precision == "fp8"

    packed = {"model.layers.0.mlp.up_proj.qweight": zeros(8, 64, dtype=np.int32),
              "model.layers.0.mlp.up_proj.scales": zeros(1, 64), "model.norm.weight": zeros(64)}
    config = {"model_type": "llama", "quantization_config": {"quant_method": "gptq", "bits": 4}}
    facts = describe(str(write_hf(tmp_path / "gptq", config, [packed])))
    assert facts is not None and facts.total_params is None and facts.parameters_text() is None
    assert facts.precision == "gptq 4-bit"
    assert modelinfo.card_rows(facts)["Parameters"] == (
        "not counted: I32 weights (model.layers.0.mlp.up_proj.qweight) may pack several parameters per element")


def write_gguf(path: Path, arch: str, tensors: dict[str, np.ndarray], **meta: int) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_file_type(15)  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    writer.add_token_list([f"tok{i}" for i in range(3000)])  # a string array the reader must skip over
    writer.add_token_scores([0.5] * 3000)
    for key, value in meta.items():
        writer.add_uint32(f"{arch}.{key}", value)
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_files_tensor_table(tmp_path: Path) -> None:
    f32 = np.float32
    tensors = {"token_embd.weight": zeros(300, 16, dtype=f32), "blk.0.attn_q.weight": zeros(16, 16, dtype=f32),
               "blk.0.ffn_up_exps.weight": zeros(4, 32, 16, dtype=f32),
               "blk.0.ffn_up_shexp.weight": zeros(32, 16, dtype=f32)}
    path = write_gguf(tmp_path / "m.gguf", "qwen3moe", tensors, expert_count=4, expert_used_count=1)
    facts = describe(str(path))
    assert facts is not None
    assert facts.total_params == 300 * 16 + 16 * 16 + 4 * 32 * 16 + 32 * 16
    assert facts.active_params == 300 * 16 + 16 * 16 + 32 * 16 + 32 * 16
    assert (facts.family, facts.model_type, facts.precision) == ("Qwen", "qwen3moe", "Q4_K_M")
    rows = modelinfo.card_rows(facts)
    assert rows["Parameters"].endswith("counted from the GGUF tensor table")
    assert rows["Quant / precision"] == "Q4_K_M, from the GGUF"

    dense = describe(str(write_gguf(tmp_path / "d.gguf", "gemma3", {"t.weight": zeros(10, 10, dtype=np.float32)})))
    assert dense is not None and dense.parameters_text() == "100 (dense)" and dense.family == "Gemma"


def test_a_hub_id_is_found_in_the_local_cache_only(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--acme--tiny-7b"
    old = write_hf(repo / "snapshots" / "aaa", {"model_type": "llama"}, [{"w": zeros(2)}])
    new = write_hf(repo / "snapshots" / "bbb", {"model_type": "llama"}, [{"w": zeros(3)}])
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    os.utime(old, (1, 1))
    assert locate("acme/tiny-7b", env) == new  # no refs/main: the newest snapshot
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("aaa\n")
    assert locate("acme/tiny-7b", env) == old  # the revision refs/main names
    assert locate("acme/tiny-7b", {"HF_HOME": str(tmp_path)}) == old  # HF_HOME/hub
    assert locate("acme/other", env) is None
    assert describe("acme/other", env) is None and modelinfo.server_info("acme/other", env) == {}
    assert locate(str(tmp_path / "missing"), env) is None
    info = modelinfo.server_info("acme/tiny-7b", env)
    assert info["model_files"]["total_params"] == 2 and info["model_card"]["Parameters"].startswith("2 (dense)")


def test_broken_files_give_one_line_errors(tmp_path: Path) -> None:
    directory = write_hf(tmp_path / "m", {"model_type": "llama"}, [{"w": zeros(4)}])
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:20])  # header cut short
    with pytest.raises(ModelInfoError, match="truncated"):
        describe(str(directory))
    weights.write_bytes(struct.pack("<Q", 2**40) + b"{}")
    with pytest.raises(ModelInfoError, match="not a safetensors header"):
        describe(str(directory))
    weights.write_bytes(struct.pack("<Q", 4) + b"{no}")
    with pytest.raises(ModelInfoError, match="not JSON"):
        describe(str(directory))
    weights.write_bytes(struct.pack("<Q", 26) + b'{"w": {"shape": [-1, 2]}} ')
    with pytest.raises(ModelInfoError, match="no valid shape"):
        describe(str(directory))
    info = modelinfo.server_info(str(directory))
    assert "no valid shape" in info["model_files"]["error"] and "model_card" not in info

    (directory / "config.json").write_text("[1]")
    with pytest.raises(ModelInfoError, match="not a JSON object"):
        describe(str(directory))
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GGUG" + bytes(20))
    with pytest.raises(ModelInfoError, match="not a GGUF file"):
        describe(str(path))
    path.write_bytes(write_gguf(tmp_path / "ok.gguf", "llama", {"t": zeros(4, dtype=np.float32)}).read_bytes()[:100])
    with pytest.raises(ModelInfoError, match="truncated"):
        describe(str(path))


def test_families() -> None:
    assert family_of("gemma3_text") == "Gemma" and family_of("mixtral") == "Mixtral"
    assert family_of("deepseek_v3") == "DeepSeek" and family_of("llama4") == "Llama"
    assert family_of("zamba2") == "Zamba" and family_of(None) is None


@pytest.mark.parametrize(("n", "text"), [(268_098_176, "268M"), (1_000_000, "1.0M"), (1_540_000_000, "1.5B"),
                                         (32_700_000_000, "33B"), (3_840_000_000, "3.8B"), (999, "999"),
                                         (9_960_000, "10M")])
def test_sizes_as_model_cards_write_them(n: int, text: str) -> None:
    assert modelinfo._size(n) == text


def test_a_header_nested_too_deep_is_an_error_not_a_crash(tmp_path: Path) -> None:
    directory = write_hf(tmp_path / "m", {"model_type": "llama"}, [{"w": zeros(4)}])
    header = b"[" * 100_000 + b"]" * 100_000
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    info = modelinfo.server_info(str(directory))
    assert "model_card" not in info and info["model_files"]["error"].startswith(str(directory))
