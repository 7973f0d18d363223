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

from fastbench.results import modelcard
from fastbench.server import modelinfo
from fastbench.server.modelinfo import ModelInfoError, describe, family_of, locate

# lint, types, layout, plots, docs: no native path of their own (the sanitizer stage leaves them out)
pytestmark = pytest.mark.pure_python


def server_info(model: str, environ: dict[str, str] | None = None, revision: str | None = None) -> dict[str, Any]:
    """What a run against ``model`` puts in the result's server_info about it."""
    return modelcard.model_sections(modelinfo.facts_or_error(model, environ, revision))


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
    assert modelcard.parameters_text(facts) == "85K (dense)"
    rows = modelcard.model_rows(facts)
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
    assert modelcard.parameters_text(facts) == "67K / 42K (MoE)"


def test_fused_expert_tensors_are_routed_too(tmp_path: Path) -> None:
    tensors = {"model.embed_tokens.weight": zeros(100, 16),
               "model.layers.0.mlp.experts.gate_up_proj": zeros(4, 16, 64)}
    facts = describe(str(write_hf(tmp_path / "g", {"model_type": "gpt_oss", "num_local_experts": 4,
                                                   "num_experts_per_tok": 1}, [tensors])))
    assert facts is not None and facts.family == "gpt-oss"
    assert facts.active_params == 100 * 16 + 4 * 16 * 64 // 4


def test_quantisation_state_is_not_parameters(tmp_path: Path) -> None:
    scaled = {"model.layers.0.mlp.up_proj.weight": zeros(64, 64), "model.layers.0.mlp.up_proj.weight_scale": zeros(1),
              "model.layers.0.mlp.up_proj.weight_scale_inv": zeros(2, 2),
              "model.layers.0.mlp.up_proj.input_scale": zeros(1), "model.layers.0.self_attn.k_scale": zeros(1),
              "model.layers.0.mlp.down_proj.weight": zeros(64, 64, dtype=np.uint8)}  # a width fp8 does not state
    config = {"model_type": "mistral", "quantization_config": {"quant_method": "fp8"}}
    facts = describe(str(write_hf(tmp_path / "fp8", config, [scaled])))
    # U8 with no weight width stated: refused, not guessed
    assert facts is not None and facts.total_params is None and facts.precision == "fp8"
    assert facts.why_no_count == ("U8 weights (model.layers.0.mlp.down_proj.weight) with no weight width in "
                                  "quantization_config")
    assert modelcard.model_rows(facts)["Parameters"].startswith("not counted: U8 weights")
    del scaled["model.layers.0.mlp.down_proj.weight"]
    facts = describe(str(write_hf(tmp_path / "fp8b", config, [scaled])))
    assert facts is not None and facts.total_params == 64 * 64


# (quantization_config, packed tensors {name: (dtype, shape)}, parameters they hold)
PACKED = {
    "gptq 4-bit int32: 8 per element": (
        {"quant_method": "gptq", "bits": 4},
        {"l.qweight": (np.int32, (8, 64)), "l.qzeros": (np.int32, (1, 8)), "l.scales": (np.float16, (1, 64)),
         "l.g_idx": (np.int32, (64,))}, 64 * 64),
    "modelopt NVFP4 uint8: 2 per byte": (
        {"quant_method": "modelopt", "quant_algo": "NVFP4"},
        {"l.weight": (np.uint8, (64, 32)), "l.weight_scale": (np.float16, (64, 4)),
         "l.weight_scale_2": (np.float32, ()), "l.input_scale": (np.float32, ())}, 64 * 64),
    "compressed-tensors W4A16 int32": (
        {"quant_method": "compressed-tensors", "config_groups": {"g0": {"weights": {"num_bits": 4}}}},
        {"l.weight_packed": (np.int32, (64, 8)), "l.weight_scale": (np.float16, (64, 1)),
         "l.weight_shape": (np.int64, (2,)), "l.weight_zero_point": (np.int32, (64, 1))}, 64 * 64),
    "W8A8 int8: 1 per element": (
        {"quant_method": "compressed-tensors", "config_groups": {"g0": {"weights": {"num_bits": 8}}}},
        {"l.weight": (np.int8, (64, 64)), "l.weight_scale": (np.float32, (64, 1))}, 64 * 64),
    "gpt-oss MXFP4 blocks": (
        {"quant_method": "mxfp4"},
        {"l.mlp.experts.gate_up_proj_blocks": (np.uint8, (2, 64, 2, 16)),
         "l.mlp.experts.gate_up_proj_scales": (np.uint8, (2, 64, 2))}, 2 * 64 * 64),
    "bitsandbytes 4-bit": (
        {"quant_method": "bitsandbytes", "load_in_4bit": True},
        {"l.weight": (np.uint8, (2048, 1)), "l.weight.absmax": (np.float32, (64,)),
         "l.weight.quant_map": (np.float32, (16,)), "l.weight.quant_state.bitsandbytes__nf4": (np.uint8, (90,))},
        64 * 64),
}


@pytest.mark.parametrize("case", PACKED)
def test_packed_weights_count_the_parameters_they_hold(tmp_path: Path, case: str) -> None:
    quant, packed, held = PACKED[case]
    tensors = {"model.norm.weight": zeros(64), **{name: zeros(*shape, dtype=dtype)
                                                  for name, (dtype, shape) in packed.items()}}
    facts = describe(str(write_hf(tmp_path / "q", {"model_type": "llama", "quantization_config": quant}, [tensors])))
    assert facts is not None and facts.why_no_count is None
    assert facts.total_params == 64 + held


def test_an_unquantised_models_integer_buffers_and_mtp_layers_are_not_counted(tmp_path: Path) -> None:
    tensors = {"model.embed_tokens.weight": zeros(100, 8),
               "vision.embeddings.position_ids": zeros(1, 50, dtype=np.int64),
               "model.layers.0.mlp.up_proj.weight": zeros(8, 8), "model.layers.1.mlp.up_proj.weight": zeros(8, 8),
               "model.layers.0.rotary_emb.inv_freq": zeros(4)}
    config = {"model_type": "deepseek_v3", "num_hidden_layers": 1, "num_nextn_predict_layers": 1}
    facts = describe(str(write_hf(tmp_path / "m", config, [tensors])))
    assert facts is not None and facts.total_params == 100 * 8 + 8 * 8  # layer 1 is the MTP layer
    del config["num_nextn_predict_layers"]
    facts = describe(str(write_hf(tmp_path / "m2", config, [tensors])))
    assert facts is not None and facts.total_params == 100 * 8 + 2 * 8 * 8


@pytest.mark.parametrize(("config", "expert_name"), [
    ({"model_type": "gemma4", "text_config": {"num_experts": 8, "top_k_experts": 2}}, "layers.0.experts.gate_up_proj"),
    ({"model_type": "dbrx", "ffn_config": {"moe_num_experts": 8, "moe_top_k": 2}}, "blocks.0.ffn.experts.mlp.w1"),
    ({"model_type": "ernie4_5_moe", "moe_num_experts": 8, "moe_k": 2}, "layers.0.mlp.experts.0.up_proj.weight"),
    ({"model_type": "hunyuan_v1_moe", "num_experts": 8, "moe_topk": [2, 2]}, "layers.0.mlp.experts.0.up.weight"),
    ({"model_type": "granitemoe", "num_local_experts": 8, "num_experts_per_tok": 2},
     "layers.0.block_sparse_moe.input_linear.weight"),
])
def test_expert_counts_and_tensors_as_each_architecture_names_them(tmp_path: Path, config: dict[str, Any],
                                                                   expert_name: str) -> None:
    tensors = {"embed.weight": zeros(10, 10), expert_name: zeros(8, 10, 10)}
    facts = describe(str(write_hf(tmp_path / "m", config, [tensors])))
    assert facts is not None and facts.experts == (2, 8)
    assert facts.active_params == 100 + 800 * 2 // 8


def test_a_moe_whose_expert_tensors_are_not_recognised_is_not_called_dense(tmp_path: Path) -> None:
    config = {"model_type": "newmoe", "num_local_experts": 8, "num_experts_per_tok": 2}
    facts = describe(str(write_hf(tmp_path / "m", config, [{"layers.0.moe.w": zeros(8, 10, 10)}])))
    assert facts is not None and facts.active_params is None
    assert modelcard.parameters_text(facts) == "800 (MoE; active not told by the tensor names)"


def write_gguf(path: Path, arch: str, tensors: dict[str, np.ndarray], writer_args: dict[str, Any] | None = None,
               **meta: int) -> Path:
    writer = gguf.GGUFWriter(str(path), arch, **(writer_args or {}))
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
    rows = modelcard.model_rows(facts)
    assert rows["Parameters"].endswith("counted from the GGUF tensor table")
    assert rows["Quant / precision"] == "Q4_K_M, from the GGUF"

    dense = describe(str(write_gguf(tmp_path / "d.gguf", "gemma3", {"t.weight": zeros(10, 10, dtype=np.float32)})))
    assert dense is not None and modelcard.parameters_text(dense) == "100 (dense)" and dense.family == "Gemma"


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
    assert describe("acme/other", env) is None and server_info("acme/other", env) == {}
    assert locate(str(tmp_path / "missing"), env) is None
    info = server_info("acme/tiny-7b", env)
    assert info["model_files"]["total_params"] == 2 and info["model_card"]["Parameters"].startswith("2 (dense)")
    assert (info["model_files"]["hub_repo"], info["model_files"]["revision"]) == ("acme/tiny-7b", "aaa")
    assert info["model_card"]["Download"] == "acme/tiny-7b (revision aaa, from this machine's hub cache)"
    assert "Download" not in server_info(str(tmp_path / "hub" / "models--acme--tiny-7b"))


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
    info = server_info(str(directory))
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
    assert modelcard.size_text(n) == text


def test_a_header_nested_too_deep_is_an_error_not_a_crash(tmp_path: Path) -> None:
    directory = write_hf(tmp_path / "m", {"model_type": "llama"}, [{"w": zeros(4)}])
    header = b"[" * 100_000 + b"]" * 100_000
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    info = server_info(str(directory))
    assert "model_card" not in info and info["model_files"]["error"].startswith(str(directory))


F32_TENSORS = {name: zeros(*shape, dtype=np.float32) for name, shape in (
    ("token_embd.weight", (300, 16)), ("blk.0.attn_q.weight", (16, 16)), ("blk.0.ffn_up.weight", (64, 16)),
    ("output.weight", (300, 16)))}
F32_TOTAL = sum(a.size for a in F32_TENSORS.values())


@pytest.mark.parametrize("small_first_shard", [False, True])
def test_a_split_gguf_counts_every_shard(tmp_path: Path, small_first_shard: bool) -> None:
    write_gguf(tmp_path / "m.gguf", "llama", F32_TENSORS,
               {"split_max_tensors": 2, "small_first_shard": small_first_shard})
    shards = sorted(tmp_path.glob("m-*-of-*.gguf"))
    assert len(shards) >= 2
    facts = describe(str(shards[0]))
    assert facts is not None and facts.total_params == F32_TOTAL and facts.precision == "Q4_K_M"
    shards[-1].unlink()
    facts = describe(str(shards[0]))
    assert facts is not None and facts.total_params is None
    assert facts.why_no_count == f"shard {shards[-1].name} of the split GGUF is not there"
    renamed = shards[0].rename(tmp_path / "first.gguf")
    facts = describe(str(renamed))
    assert facts is not None and facts.total_params is None and "whose name is not" in str(facts.why_no_count)


def test_a_big_endian_gguf(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "be.gguf", "llama", F32_TENSORS, {"endianess": gguf.GGUFEndian.BIG}, expert_count=1)
    facts = describe(str(path))
    assert facts is not None and facts.total_params == F32_TOTAL and facts.precision == "Q4_K_M"


def test_a_gguf_with_one_tensor_per_expert(tmp_path: Path) -> None:
    """Mixtral GGUFs made before 2024 name each expert's tensor: blk.0.ffn_up.3.weight."""
    tensors = {"token_embd.weight": zeros(100, 16, dtype=np.float32),
               **{f"blk.0.ffn_up.{e}.weight": zeros(32, 16, dtype=np.float32) for e in range(8)}}
    facts = describe(str(write_gguf(tmp_path / "mx.gguf", "llama", tensors, expert_count=8, expert_used_count=2)))
    assert facts is not None and facts.experts == (2, 8)
    assert facts.active_params == 100 * 16 + 8 * 32 * 16 * 2 // 8


def test_gguf_file_type_names_are_llama_cpps() -> None:
    for file_type in gguf.LlamaFileType:
        if file_type.value in modelinfo._GGUF_FILE_TYPES:
            assert file_type.name.endswith(modelinfo._GGUF_FILE_TYPES[file_type.value]), file_type
        else:
            assert file_type.name == "GUESSED", f"{file_type} is missing"


def test_the_hub_cache_as_huggingface_hub_finds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = write_hf(tmp_path / "hub" / "models--acme--m" / "snapshots" / "r1", {"model_type": "llama"},
                        [{"w": zeros(2)}])
    assert locate("acme/m", {"HUGGINGFACE_HUB_CACHE": str(tmp_path / "hub")}) == snapshot  # the older name
    assert locate("acme/m", {"ROOT": str(tmp_path), "HF_HUB_CACHE": "${ROOT}/hub"}) == snapshot
    assert locate("acme/m", {"XDG_CACHE_HOME": str(tmp_path / "x")}) is None
    (tmp_path / "x" / "huggingface").mkdir(parents=True)
    (tmp_path / "x" / "huggingface" / "hub").symlink_to(tmp_path / "hub")
    xdg_snapshot = tmp_path / "x" / "huggingface" / "hub" / "models--acme--m" / "snapshots" / "r1"
    assert locate("acme/m", {"XDG_CACHE_HOME": str(tmp_path / "x")}) == xdg_snapshot
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert modelinfo.hub_cache_dir({}) == tmp_path / "home" / ".cache" / "huggingface" / "hub"


def test_server_info_never_raises(tmp_path: Path) -> None:
    # an unknown ~user (pathlib raises RuntimeError for it) is just not a model here
    assert server_info("~no-such-user-here/m") == {}
    assert server_info("acme/m", {"HF_HUB_CACHE": "~no-such-user-here/hub"}) == {}
    odd = write_hf(tmp_path / "odd", {"model_type": 7, "torch_dtype": ["x"]}, [{"w": zeros(2)}])
    facts = describe(str(odd))
    assert facts is not None and facts.family is None and facts.precision is None and facts.total_params == 2
    (odd / "model.safetensors.index.json").write_text('{"weight_map": ["model.safetensors"]}')
    assert "no weight_map" in server_info(str(odd))["model_files"]["error"]


def test_input_modalities_are_the_towers_the_config_declares(tmp_path: Path) -> None:
    config = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}, "vision_config": {"x": 1}}
    facts = describe(str(write_hf(tmp_path / "mm", config, [{"w": zeros(2)}])))
    assert facts is not None and facts.modalities == ("text", "image") and facts.family == "Gemma"
    assert modelcard.model_rows(facts)["Input modalities"] == "text, image (the towers config.json declares)"
    config = {"model_type": "qwen2_5_omni", "vision_config": {}, "audio_config": {}}
    facts = describe(str(write_hf(tmp_path / "omni", config, [{"w": zeros(2)}])))
    assert facts is not None and facts.modalities == ("text", "image", "audio")
    gguf_facts = describe(str(write_gguf(tmp_path / "t.gguf", "llama", {"t": zeros(4, dtype=np.float32)})))
    assert gguf_facts is not None and gguf_facts.modalities is None
    assert "Input modalities" not in modelcard.model_rows(gguf_facts)


def test_files_that_could_block_or_lead_outside_are_refused(tmp_path: Path) -> None:
    directory = write_hf(tmp_path / "m", {"model_type": "llama"}, [{"w": zeros(2)}])
    (directory / "model.safetensors").unlink()
    os.mkfifo(directory / "model.safetensors")  # opening it would wait for a writer forever
    with pytest.raises(ModelInfoError, match="not a regular file"):
        describe(str(directory))
    (directory / "model.safetensors").unlink()
    (directory / "model.safetensors.index.json").write_text('{"weight_map": {"w": "/dev/stdin"}}')
    with pytest.raises(ModelInfoError, match=r"outside the model's directory \(/dev/stdin\)"):
        describe(str(directory))
    (directory / "model.safetensors.index.json").write_text('{"weight_map": {"w": "model-1.safetensors"}}')
    with pytest.raises(ModelInfoError, match=r"model-1.safetensors: missing"):
        describe(str(directory))
    fifo = tmp_path / "x.gguf"
    os.mkfifo(fifo)
    assert locate(str(fifo)) is None


def test_only_the_models_own_weight_files_are_counted(tmp_path: Path) -> None:
    directory = write_hf(tmp_path / "m", {"model_type": "llama", "tie_word_embeddings": True},
                         [{"model.embed_tokens.weight": zeros(100, 10), "lm_head.weight": zeros(100, 10)}])
    save_file({"lora_A": zeros(10, 10)}, str(directory / "adapter_model.safetensors"))
    save_file({"fc": zeros(50, 10)}, str(directory / "eagle_head.safetensors"))
    facts = describe(str(directory))
    # tied: lm_head is the embedding, stored twice; the adapter and the draft head are not the model's
    assert facts is not None and facts.total_params == 1000

    weights_elsewhere = write_hf(tmp_path / "cfg-only", {"model_type": "llama"}, [{"w": zeros(2)}])
    (weights_elsewhere / "model.safetensors").unlink()
    facts = describe(str(weights_elsewhere))
    assert facts is not None and facts.total_params is None
    assert "Parameters" not in modelcard.model_rows(facts) and modelcard.model_rows(facts)["Family"] == "Llama (llama)"


def test_a_lora_adapter_is_described_by_its_base_model(tmp_path: Path) -> None:
    base = write_hf(tmp_path / "base", {"model_type": "qwen2"}, [{"w": zeros(1000)}])
    adapter = tmp_path / "lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base), "r": 8}))
    (adapter / "config.json").write_text('{"model_type": "qwen2"}')  # some adapters carry the base's config
    save_file({"lora_A": zeros(8, 64)}, str(adapter / "adapter_model.safetensors"))
    facts = describe(str(adapter))
    assert facts is not None and facts.total_params == 1000 and facts.source == str(base)
    assert facts.adapter == str(adapter)
    assert modelcard.model_rows(facts)["Parameters"] == (
        f"1.0K (dense), counted from the safetensors headers (the base model of the LoRA adapter {adapter})")
    (adapter / "adapter_config.json").write_text('{"r": 8}')
    with pytest.raises(ModelInfoError, match="names no base model"):
        describe(str(adapter))
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/not-here"}))
    assert describe(str(adapter)) is None


def test_the_revision_the_server_loaded(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "models--acme--m"
    write_hf(repo / "snapshots" / "c-main", {"model_type": "llama"}, [{"w": zeros(2)}])
    gptq = write_hf(repo / "snapshots" / "c-gptq", {"model_type": "llama"}, [{"w": zeros(3)}])
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c-main")
    (repo / "refs" / "gptq-4bit").write_text("c-gptq")
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    assert locate("acme/m", env, "gptq-4bit") == gptq  # a branch, through its ref
    assert locate("acme/m", env, "c-gptq") == gptq  # a commit
    assert locate("acme/m", env, "v9") is None  # not here: not another revision in its place
    info = server_info("acme/m", env, "gptq-4bit")
    assert info["model_files"]["total_params"] == 3 and info["model_files"]["revision"] == "c-gptq"


def test_what_the_server_says_of_its_model_is_checked_against_our_count_or_stands_in_for_it(tmp_path: Path) -> None:
    """llama.cpp's /v1/models meta: n_params and ftype of the GGUF it loaded."""
    facts = describe(str(write_gguf(tmp_path / "m.gguf", "llama", F32_TENSORS)))
    assert facts is not None and facts.total_params is not None
    n = facts.total_params
    same = modelcard.model_rows(facts, {"n_params": n, "ftype": "Q4_K - Medium"})
    assert same["Parameters"].endswith("tensor table; the server reports the same")
    assert same["Quant / precision"].endswith("from the GGUF")  # the file's own word stays
    other = modelcard.model_rows(facts, {"n_params": n + 1})
    assert other["Parameters"].endswith(f"; the server reports {n + 1:,} (ours: {n:,})")
    # no files here (a remote server): the server's figures, marked as its
    remote = modelcard.model_sections(None, {"n_params": 7_241_732_096, "ftype": "Q8_0"})
    assert remote == {"model_card": {"Parameters": "7.2B total, as the server reports (n_params)",
                                     "Quant / precision": "Q8_0, as the server reports (ftype)"}}
    assert modelcard.model_sections(None, {"n_params": "many", "ftype": 3}) == {}
    assert modelcard.model_sections(None, None) == {}
