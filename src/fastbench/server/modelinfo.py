"""What the model's local files say of it: family, parameter count, precision (results/modelcard.py words them).

Nothing is downloaded. A model is found as a local directory (Hugging Face layout: ``config.json``
and ``*.safetensors``), a GGUF file, or a Hugging Face id already in the local hub cache (where a
server on this machine put it). Parameters are counted from the weight files' headers, which list
every tensor's shape without reading the weights:

- safetensors: the JSON header at the start of each file (``model.safetensors.index.json`` names the
  shards). Integer weights pack ``element bits / weight bits`` parameters per element (GPTQ/AWQ
  int32 at 4 bits: 8; NVFP4 / MXFP4 uint8: 2; W8A8 int8: 1), the weight bits taken from the
  config's ``quantization_config``; where it does not say, no count is given. Scales, zero points
  and other quantisation state are not parameters. Multi-token-prediction layers shipped beside
  the model (DeepSeek V3, GLM-4.5: ``num_nextn_predict_layers``) are left out, as their makers'
  figures leave them out (DeepSeek V3: 671B), and so is an ``lm_head`` stored again though tied.
  Only the model's own files count (``model*.safetensors``, or what the index names), not an
  adapter or a draft head beside them; a LoRA adapter's directory is described by its base model.
- GGUF: the tensor table after the metadata (of every shard of a split file); its dimensions are
  logical elements whatever the quantisation, so quantised files are counted exactly.

Only regular files are opened (a FIFO or a device named like a weight file would block the run).

A mixture of experts (the config's expert count and top-k, under whichever of their names the
architecture uses; GGUF ``expert_used_count`` of ``expert_count``) is given as total / active,
active counting ``k / E`` of the routed experts' tensors, as the published cards do ("26B / 4B (MoE)").
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import stat
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard

from fastbench.results.observations import ModelFacts

# A header this large is not a model's: refuse rather than read it (the largest real ones are a few MB).
MAX_HEADER_BYTES = 256 * 1024 * 1024

# safetensors dtypes whose element is one parameter (floats of any width; shapes are logical)
_FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
                           "F6_E2M3", "F6_E3M2", "F4"})
# integer dtypes a quantiser packs weights into: their width in bits
_PACKED_DTYPE_BITS = {"I8": 8, "U8": 8, "I16": 16, "U16": 16, "I32": 32, "U32": 32, "I64": 64, "U64": 64}

# per-tensor or per-block state of quantised weights: FP8 weight_scale(_inv), NVFP4 weight_scale_2 and
# input_scale, GPTQ/AWQ qzeros/scales/g_idx, compressed-tensors weight_zero_point/weight_shape/
# weight_global_scale/weight_g_idx, MXFP4 *_scales, bitsandbytes absmax/quant_map/nested_*/quant_state/SCB/
# weight_format; and buffers that are not parameters (position_ids, rotary inv_freq)
_QUANT_BOOKKEEPING = re.compile(
    r"(_scale(_\d+|_inv)?|[._]scales|qzeros|g_idx|_zero_point|_shape|\.absmax|\.quant_map|\.nested_\w+"
    r"|\.quant_state\.\w+|\.SCB|\.weight_format|position_ids|\.inv_freq)$")
# F8_E8M0 holds only MX block scales, never weights
_SCALE_DTYPES = frozenset({"F8_E8M0"})

# model_type / GGUF architecture prefixes -> family as the published cards write it
_FAMILIES = (
    ("recurrentgemma", "Gemma"), ("paligemma", "Gemma"), ("gemma", "Gemma"), ("codellama", "Llama"),
    ("llama", "Llama"), ("mllama", "Llama"), ("qwen", "Qwen"), ("mixtral", "Mixtral"), ("mistral", "Mistral"),
    ("ministral", "Mistral"), ("pixtral", "Mistral"), ("deepseek", "DeepSeek"), ("gpt_oss", "gpt-oss"),
    ("gpt-oss", "gpt-oss"), ("phi", "Phi"), ("granite", "Granite"), ("olmo", "OLMo"), ("falcon", "Falcon"),
    ("cohere", "Command"), ("command", "Command"), ("glm", "GLM"), ("chatglm", "GLM"), ("kimi", "Kimi"),
    ("minimax", "MiniMax"), ("ernie", "ERNIE"), ("internlm", "InternLM"), ("baichuan", "Baichuan"),
    ("yi", "Yi"), ("starcoder", "StarCoder"), ("smollm", "SmolLM"), ("nemotron", "Nemotron"),
    ("exaone", "EXAONE"), ("hunyuan", "Hunyuan"), ("jamba", "Jamba"), ("mamba", "Mamba"), ("gpt2", "GPT-2"),
    ("opt", "OPT"), ("bloom", "BLOOM"),
)

# names of routed-expert tensors: HF ("mlp.experts.3.w1", fused "mlp.experts.gate_up_proj", Granite's
# fused "block_sparse_moe.input_linear"), GGUF ("blk.0.ffn_up_exps.weight", before 2024 one tensor per
# expert: "blk.0.ffn_up.3.weight"); shared experts ("shared_experts", "ffn_up_shexp") are always active
_EXPERT_TENSOR = re.compile(
    r"(^|\.)experts\.|block_sparse_moe\.(input|output)_linear\.|_exps\.|\.ffn_(gate|up|down)\.\d+\.")
# a decoder layer's index in a tensor name (HF "model.layers.61.", GGUF "blk.61.")
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|blk)\.(\d+)\.")


NO_WEIGHTS = "no safetensors weights in the directory"


class ModelInfoError(Exception):
    """A model file that is not what its name says (a bad header, a truncated table)."""


def family_of(model_type: str | None) -> str | None:
    """``gemma3_text`` -> ``Gemma``; an unknown type is returned capitalised, without its version digits."""
    if not model_type:
        return None
    key = model_type.lower()
    for prefix, family in _FAMILIES:
        if key.startswith(prefix):
            return family
    stem = re.sub(r"[\d_.-]+$", "", model_type) or model_type  # "zamba2" -> "zamba"
    return stem[:1].upper() + stem[1:]


# -- finding the files --------------------------------------------------------------------------------


def hub_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where Hugging Face's hub cache is, as huggingface_hub resolves it: HF_HUB_CACHE, the older
    HUGGINGFACE_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub."""
    env = os.environ if environ is None else environ

    def expand(value: str) -> Path:
        return Path(os.path.expanduser(_expandvars(value, env)))

    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(name):
            return expand(env[name])
    if env.get("HF_HOME"):
        return expand(env["HF_HOME"]) / "hub"
    base = expand(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _expandvars(value: str, env: Mapping[str, str]) -> str:
    """os.path.expandvars against ``env`` ($NAME and ${NAME}; unknown names stay as they are)."""
    return re.sub(r"\$(\w+|\{(\w+)\})", lambda m: env.get(m.group(2) or m.group(1), m.group(0)), value)


def locate(model: str, environ: Mapping[str, str] | None = None, revision: str | None = None) -> Path | None:
    """The local directory or GGUF file behind ``model`` (a path, or an ``org/name`` id in the hub
    cache), or None. Never touches the network. In the hub cache: the snapshot ``revision`` names (a
    branch or tag under ``refs/``, or a commit), else ``refs/main``'s, else the newest one."""
    path = Path(os.path.expanduser(model))  # (Path.expanduser raises for an unknown ~user)
    if _is_regular(path) and path.suffix.lower() == ".gguf":
        return path
    if _is_regular(path / "config.json"):
        return path
    if model.count("/") != 1 or model.startswith(("/", ".", "~")):
        return None
    repo = hub_cache_dir(environ) / ("models--" + model.replace("/", "--"))
    wanted = revision or "main"
    try:
        commit = (repo / "refs" / wanted).read_text().strip()
    except (OSError, ValueError):
        commit = wanted if revision else ""  # a revision given as a commit has no ref
    candidates = [repo / "snapshots" / commit] if commit and "/" not in commit else []
    if revision is None:
        try:  # no refs/main (a pinned revision was fetched): the newest snapshot
            candidates += sorted((repo / "snapshots").iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            pass
    for snapshot in candidates:
        if _is_regular(snapshot / "config.json"):
            return snapshot
    return None


def _is_regular(path: Path) -> bool:
    """A regular file (after symlinks, as the hub cache links its blobs): never a FIFO or a device,
    whose open or read could block the run."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except (OSError, ValueError):
        return False


# -- safetensors ---------------------------------------------------------------------------------------


def _read_exact(f: BinaryIO, n: int, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ModelInfoError(f"{what}: truncated")
    return data


def safetensors_tensors(path: Path) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    """(name, dtype, shape) of every tensor in one safetensors file, from its header alone."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", _read_exact(f, 8, str(path)))
        if length > MAX_HEADER_BYTES:
            raise ModelInfoError(f"{path}: a {length}-byte header is not a safetensors header")
        try:
            header = json.loads(_read_exact(f, length, str(path)))
        except ValueError as exc:
            raise ModelInfoError(f"{path}: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise ModelInfoError(f"{path}: header is not a JSON object")
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ModelInfoError(f"{path}: tensor {name!r} has no valid shape")
        yield name, str(entry.get("dtype")), tuple(shape)


def _weight_files(directory: Path) -> list[Path]:
    """The model's own weight files: the shards the index names, else ``model*.safetensors``, else
    Mistral's ``consolidated*.safetensors`` (which its repositories carry beside the HF files). Other
    safetensors in the directory (an adapter, an EAGLE head) are not the model's."""
    index = directory / "model.safetensors.index.json"
    if _is_regular(index):
        try:
            weight_map = json.loads(index.read_text()).get("weight_map")
        except (ValueError, AttributeError, OSError) as exc:
            raise ModelInfoError(f"{index}: {exc}") from None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise ModelInfoError(f"{index}: no weight_map of tensor names to files")
        names = sorted(set(weight_map.values()))
        outside = next((n for n in names if Path(n).is_absolute() or ".." in Path(n).parts), None)
        if outside is not None:
            raise ModelInfoError(f"{index}: names a shard outside the model's directory ({outside})")
        files = [directory / name for name in names]
    else:
        files = sorted(directory.glob("model*.safetensors")) or sorted(directory.glob("consolidated*.safetensors"))
    not_regular = next((f for f in files if not _is_regular(f)), None)
    if not_regular is not None:
        raise ModelInfoError(f"{not_regular}: missing, or not a regular file")
    return files


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal config keeps the language model's settings under ``text_config``."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


# (experts, top-k) as architectures name them: Mixtral/Llama 4/gpt-oss/Granite, Qwen MoE/OLMoE/Hunyuan,
# DeepSeek/GLM MoE, ERNIE 4.5, Gemma 4, DBRX (under ffn_config)
_EXPERT_KEYS = (("num_local_experts", "num_experts_per_tok"), ("num_experts", "num_experts_per_tok"),
                ("n_routed_experts", "num_experts_per_tok"), ("num_experts", "moe_topk"),
                ("moe_num_experts", "moe_k"), ("num_experts", "top_k_experts"), ("moe_num_experts", "moe_top_k"))


def _experts(config: Mapping[str, Any]) -> tuple[int, int] | None:
    ffn = config.get("ffn_config")
    for cfg in (_text_config(config), config, ffn if isinstance(ffn, dict) else {}):
        for total_key, used_key in _EXPERT_KEYS:
            total, used = cfg.get(total_key), cfg.get(used_key)
            if isinstance(used, list) and used and all(u == used[0] for u in used):
                used = used[0]  # Hunyuan: one top-k per layer
            if _positive_int(total) and _positive_int(used) and total > 1 and used <= total:
                return used, total
    return None


def _positive_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _quant_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    quant = config.get("quantization_config") or _text_config(config).get("quantization_config")
    return quant if isinstance(quant, dict) else {}


def _weight_bits(quant: Mapping[str, Any]) -> int | None:
    """Bits per weight a quantisation config states: GPTQ/AWQ ``bits``/``w_bit``, compressed-tensors'
    ``config_groups`` (one width for all), bitsandbytes ``load_in_4bit``/``8bit``, FP4 schemes
    (modelopt ``quant_algo`` NVFP4, ``mxfp4``)."""
    for key in ("bits", "w_bit", "weight_bits"):
        if _positive_int(quant.get(key)):
            return int(quant[key])
    groups = quant.get("config_groups")
    if isinstance(groups, dict):
        widths = {g.get("weights", {}).get("num_bits") for g in groups.values()
                  if isinstance(g, dict) and isinstance(g.get("weights"), dict)}
        if len(widths) == 1 and _positive_int(next(iter(widths))):
            return int(next(iter(widths)))
    if quant.get("load_in_4bit") is True:
        return 4
    if quant.get("load_in_8bit") is True:
        return 8
    scheme = f"{quant.get('quant_algo') or ''} {quant.get('quant_method') or ''}".upper()
    return 4 if "FP4" in scheme else None


def _hf_precision(config: Mapping[str, Any]) -> str | None:
    quant = _quant_config(config)
    if quant.get("quant_method"):
        method = str(quant["quant_method"])
        algo = quant.get("quant_algo")
        bits = _weight_bits(quant)
        if isinstance(algo, str) and algo:
            return f"{method} {algo}"
        return f"{method} {bits}-bit" if bits else method
    dtype = config.get("torch_dtype") or config.get("dtype") or _text_config(config).get("torch_dtype")
    return str(dtype) if isinstance(dtype, str) and dtype else None


def _mtp_first_layer(config: Mapping[str, Any]) -> int | None:
    """The first layer index of the multi-token-prediction layers a checkpoint ships after the model's
    own (DeepSeek V3, GLM-4.5), or None."""
    cfg = _text_config(config)
    if _positive_int(cfg.get("num_nextn_predict_layers")) and _positive_int(cfg.get("num_hidden_layers")):
        return int(cfg["num_hidden_layers"])
    return None


def describe_hf_dir(directory: Path) -> ModelFacts:
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelInfoError(f"{directory / 'config.json'}: {exc}") from None
    if not isinstance(config, dict):
        raise ModelInfoError(f"{directory / 'config.json'}: not a JSON object")
    model_type = next((t for t in (config.get("model_type"), _text_config(config).get("model_type"))
                       if isinstance(t, str) and t), None)
    # tied: lm_head shares the embedding; a checkpoint that stores it anyway holds it twice
    tied = config.get("tie_word_embeddings", _text_config(config).get("tie_word_embeddings")) is True
    experts = _experts(config)
    quant = _quant_config(config)
    weight_bits = _weight_bits(quant)
    mtp_from = _mtp_first_layer(config)
    total = routed = 0
    why = None
    files = _weight_files(directory)
    if not files:
        why = NO_WEIGHTS
    for file in files:
        if why is not None:
            break
        for name, dtype, shape in safetensors_tensors(file):
            if _QUANT_BOOKKEEPING.search(name) or dtype in _SCALE_DTYPES:
                continue  # scales and zero points of quantised weights are not parameters
            if tied and name.endswith("lm_head.weight"):
                continue
            layer = _LAYER_INDEX.search(name)
            if mtp_from is not None and layer is not None and int(layer.group(1)) >= mtp_from:
                continue
            per_element = 1
            if dtype not in _FLOAT_DTYPES:
                bits = _PACKED_DTYPE_BITS.get(dtype)
                if bits is not None and not quant:
                    continue  # an unquantised model's integer buffer (token type ids...), not a parameter
                if bits is None or weight_bits is None or bits % weight_bits:
                    why = (f"{dtype} weights ({name}) with no weight width in quantization_config"
                           if bits is not None else f"tensor {name} has dtype {dtype}")
                    break
                per_element = bits // weight_bits
            n = math.prod(shape) * per_element
            total += n
            if experts is not None and _EXPERT_TENSOR.search(name):
                routed += n
    facts = _facts(str(directory), model_type, None if why else total, routed, experts, _hf_precision(config), why)
    return dataclasses.replace(facts, modalities=_modalities(config), weights_found=bool(files))


def _modalities(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The inputs a config has towers for: text, plus image (``vision_config``) and audio (``audio_config``)."""
    found = ["text"]
    found += [kind for key, kind in (("vision_config", "image"), ("audio_config", "audio"))
              if isinstance(config.get(key), dict)]
    return tuple(found)


def _hub_origin(path: Path) -> tuple[str, str] | None:
    """("org/name", commit) for a path inside a hub cache snapshot (.../models--org--name/snapshots/C)."""
    parts = path.parts
    for i in range(len(parts) - 2):
        if parts[i].startswith("models--") and parts[i + 1] == "snapshots" and parts[i].count("--") == 2:
            return parts[i][len("models--"):].replace("--", "/"), parts[i + 2]
    return None


def _facts(source: str, model_type: str | None, total: int | None, routed: int,
           experts: tuple[int, int] | None, precision: str | None, why: str | None) -> ModelFacts:
    active = None
    if total is not None and experts is not None and routed:
        used, count = experts
        active = total - routed + routed * used // count
    return ModelFacts(source=source, family=family_of(model_type), model_type=model_type, total_params=total,
                      active_params=active, experts=experts, precision=precision, why_no_count=why)


# -- GGUF ----------------------------------------------------------------------------------------------

# value type -> struct format for GGUF's scalar types (byte order added); 8 is a string, 9 an array
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
# llama.cpp's llama_ftype numbers -> names, for general.file_type (4-6 and 33-35 were removed upstream)
_GGUF_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
                    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
                    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
                    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
                    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
                    38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0"}
# a split file's shards: NAME-00001-of-00003.gguf (llama.cpp's gguf-split naming)
_GGUF_SHARD = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$", re.IGNORECASE)


class _GGUFReader:
    def __init__(self, f: BinaryIO, path: Path) -> None:
        self.f = f
        self.path = path
        self.order = "<"  # GGUF v3 may be big-endian: told by the version's bytes

    def unpack(self, fmt: str) -> Any:
        fmt = self.order + fmt
        return struct.unpack(fmt, _read_exact(self.f, struct.calcsize(fmt), str(self.path)))[0]

    def string(self) -> str:
        n = self.unpack("Q")
        if n > MAX_HEADER_BYTES:
            raise ModelInfoError(f"{self.path}: a {n}-byte string is not GGUF's")
        return _read_exact(self.f, n, str(self.path)).decode("utf-8", "replace")

    def value(self, vtype: int, keep: bool) -> Any:
        if vtype in _GGUF_SCALARS:
            return self.unpack(_GGUF_SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype, count = self.unpack("I"), self.unpack("Q")
            if etype in _GGUF_SCALARS and not keep:  # e.g. 262k token scores: skip, not decode
                self.f.seek(struct.calcsize(_GGUF_SCALARS[etype]) * count, os.SEEK_CUR)
                return None
            values = [self.value(etype, keep) for _ in range(count)]
            return values if keep else None
        raise ModelInfoError(f"{self.path}: unknown GGUF value type {vtype}")


def _gguf_tables(path: Path) -> tuple[dict[str, Any], list[tuple[str, int]]]:
    """One GGUF file's metadata (tokenizer arrays skipped) and its tensors' (name, elements)."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelInfoError(f"{path}: not a GGUF file")
        r = _GGUFReader(f, path)
        version = r.unpack("I")
        if version & 0xFFFF == 0 and version >> 16:  # a small version read in the wrong byte order
            r.order, version = ">", int.from_bytes(version.to_bytes(4, "little"), "big")
        if version < 2:
            raise ModelInfoError(f"{path}: GGUF version {version} is not read (2 and later are)")
        tensor_count, kv_count = r.unpack("Q"), r.unpack("Q")
        meta: dict[str, Any] = {}
        for _ in range(kv_count):
            key = r.string()
            meta[key] = r.value(r.unpack("I"), keep=not key.startswith("tokenizer."))
        tensors = []
        for _ in range(tensor_count):
            name = r.string()
            dims = [r.unpack("Q") for _ in range(r.unpack("I"))]
            r.unpack("I")  # ggml type
            r.unpack("Q")  # offset
            tensors.append((name, math.prod(dims)))
    return meta, tensors


def describe_gguf(path: Path) -> ModelFacts:
    meta, tensors = _gguf_tables(path)
    why = None
    shards = meta.get("split.count")
    if _positive_int(shards) and shards > 1:  # every shard's table, the first one's metadata
        match = _GGUF_SHARD.match(path.name)
        if match is None:
            why = f"a split GGUF ({shards} shards) whose name is not NAME-00001-of-{shards:05d}.gguf"
        else:
            for i in range(2, shards + 1):
                shard = path.with_name(f"{match['stem']}-{i:05d}-of-{shards:05d}.gguf")
                if not shard.is_file():
                    why = f"shard {shard.name} of the split GGUF is not there"
                    break
                tensors += _gguf_tables(shard)[1]
            expected = meta.get("split.tensors.count")
            if why is None and _positive_int(expected) and expected != len(tensors):
                why = f"the split GGUF's shards hold {len(tensors)} tensors, not the {expected} it names"
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    count, used = meta.get(f"{arch}.expert_count"), meta.get(f"{arch}.expert_used_count")
    experts = None
    if _positive_int(count) and _positive_int(used) and count > 1 and used <= count:
        experts = (used, count)
    total = sum(n for _, n in tensors)
    routed = sum(n for name, n in tensors if _EXPERT_TENSOR.search(name))
    file_type = meta.get("general.file_type")
    precision = _GGUF_FILE_TYPES.get(file_type, f"GGUF file type {file_type}") if isinstance(file_type, int) else None
    return _facts(str(path), arch, None if why else total, routed, experts, precision, why)


def describe(model: str, environ: Mapping[str, str] | None = None, revision: str | None = None,
             _adapter_of: str | None = None) -> ModelFacts | None:
    """The facts of ``model``'s local files (at ``revision`` in the hub cache, see :func:`locate`),
    or None where none are found. A LoRA adapter's directory is described by its base model's files.

    :raises ModelInfoError: files found but unreadable as what they claim to be.
    """
    found = locate(model, environ, revision)
    if found is None:
        return None
    adapter = found / "adapter_config.json"
    if _adapter_of is None and _is_regular(adapter):
        try:
            base = json.loads(adapter.read_text()).get("base_model_name_or_path")
        except (OSError, ValueError, AttributeError) as exc:
            raise ModelInfoError(f"{adapter}: {exc}") from None
        if not isinstance(base, str) or not base:
            raise ModelInfoError(f"{adapter}: a LoRA adapter that names no base model")
        return describe(base, environ, _adapter_of=str(found))
    try:
        facts = describe_gguf(found) if found.is_file() else describe_hf_dir(found)
    except OSError as exc:
        raise ModelInfoError(f"{found}: {exc}") from None
    origin = _hub_origin(found)
    if origin:
        facts = dataclasses.replace(facts, hub_repo=origin[0], revision=origin[1])
    return dataclasses.replace(facts, adapter=_adapter_of) if _adapter_of else facts


def facts_or_error(model: str, environ: Mapping[str, str] | None = None,
                   revision: str | None = None) -> ModelFacts | str | None:
    """:func:`describe`, for the result: the facts of ``model`` (the launch's model, or an attached
    server's model name), or one line that says why files that are there could not be read, or None
    where there are none (``results.modelcard`` words them for the card)."""
    try:
        return describe(model, environ, revision)
    except ModelInfoError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - the card's extras never stop a measured run
        return f"{model}: {type(exc).__name__}: {exc}"
