"""What a run card says of the model itself: family and parameter count, read from its local files.

Nothing is downloaded. A model is found as a local directory (Hugging Face layout: ``config.json``
and ``*.safetensors``), a GGUF file, or a Hugging Face id already in the local hub cache (where a
server on this machine put it). Parameters are counted from the weight files' headers, which list
every tensor's shape without reading the weights:

- safetensors: the JSON header at the start of each file (``model.safetensors.index.json`` names the
  shards). Packed integer weights (GPTQ/AWQ int32, NVFP4 uint8) hold several parameters per element,
  so a count over them would be wrong: then no count is given.
- GGUF: the tensor table after the metadata; its dimensions are logical elements whatever the
  quantisation, so quantised files are counted exactly.

A mixture of experts (config ``num_experts_per_tok`` of ``num_local_experts`` / ``num_experts`` /
``n_routed_experts``; GGUF ``expert_used_count`` of ``expert_count``) is given as total / active,
active counting ``k / E`` of the routed experts' tensors, as the published cards do ("26B / 4B (MoE)").
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

# A header this large is not a model's: refuse rather than read it (the largest real ones are a few MB).
MAX_HEADER_BYTES = 256 * 1024 * 1024

# safetensors dtypes whose element is one parameter (floats, FP8 included)
_FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"})

# per-tensor or per-block data of quantised weights (FP8 scale_inv, NVFP4 weight_scale_2, GPTQ qzeros/g_idx,
# compressed-tensors weight_zero_point/weight_shape)
_QUANT_BOOKKEEPING = re.compile(r"(_scale(_\d+|_inv)?|\.scales|qzeros|\.g_idx|_zero_point|_shape)$")

# model_type / GGUF architecture prefixes -> family as the published cards write it (longest first)
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

# names of routed-expert tensors: HF ("mlp.experts.3.w1", fused "mlp.experts.gate_up_proj"), GGUF
# ("blk.0.ffn_up_exps.weight"); shared experts ("shared_experts", "ffn_up_shexp") are always active
_EXPERT_TENSOR = re.compile(r"(^|\.)experts\.|_exps\.")


class ModelInfoError(Exception):
    """A model file that is not what its name says (a bad header, a truncated table)."""


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """What the model's local files say. ``total_params`` is None where the weights cannot be counted."""

    source: str  # the directory or file read
    family: str | None
    model_type: str | None
    total_params: int | None
    active_params: int | None  # MoE only
    experts: tuple[int, int] | None  # (used per token, total) for a MoE
    precision: str | None  # "bfloat16", "fp8", "gptq 4-bit", "Q4_K_M"...
    why_no_count: str | None = None

    def parameters_text(self) -> str | None:
        """``"268M (dense)"``, ``"26B / 4B (MoE)"``, or None without a count."""
        if self.total_params is None:
            return None
        if self.active_params is not None and self.experts is not None:
            return f"{_size(self.total_params)} / {_size(self.active_params)} (MoE)"
        return f"{_size(self.total_params)} (dense)"


def _size(n: int) -> str:
    """Parameters as model cards write them: 268M, 1.5B, 33B (a decimal below 10 of a unit)."""
    for unit, suffix in ((10**9, "B"), (10**6, "M"), (10**3, "K")):
        if n >= unit:
            value = n / unit
            return f"{value:.0f}{suffix}" if value >= 9.95 else f"{value:.1f}{suffix}"
    return str(n)


def family_of(model_type: str | None) -> str | None:
    """``gemma3_text`` -> ``Gemma``; an unknown type is returned capitalised, without its version digits."""
    if not model_type:
        return None
    key = model_type.lower()
    for prefix, family in _FAMILIES:
        if key.startswith(prefix):
            return family
    stem = re.split(r"[\d_\-.]", model_type, maxsplit=1)[0]
    return (stem[:1].upper() + stem[1:]) if stem else model_type


# -- finding the files --------------------------------------------------------------------------------


def hub_cache_dirs(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Where Hugging Face's hub cache is, as huggingface_hub resolves it (HF_HUB_CACHE, HF_HOME/hub,
    XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub)."""
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return [Path(env["HF_HUB_CACHE"]).expanduser()]
    if env.get("HF_HOME"):
        return [Path(env["HF_HOME"]).expanduser() / "hub"]
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return [base / "huggingface" / "hub"]


def locate(model: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """The local directory or GGUF file behind ``model`` (a path, or an ``org/name`` id in the hub
    cache at the revision ``refs/main`` names), or None. Never touches the network."""
    path = Path(model).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return path
    if (path / "config.json").is_file():
        return path
    if model.count("/") != 1 or model.startswith(("/", ".", "~")):
        return None
    for cache in hub_cache_dirs(environ):
        repo = cache / ("models--" + model.replace("/", "--"))
        try:
            revision = (repo / "refs" / "main").read_text().strip()
        except OSError:
            revision = ""
        candidates = [repo / "snapshots" / revision] if revision else []
        try:  # no refs/main (a pinned revision was fetched): the newest snapshot
            candidates += sorted((repo / "snapshots").iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            pass
        for snapshot in candidates:
            if (snapshot / "config.json").is_file():
                return snapshot
    return None


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
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            return [directory / name for name in sorted(set(weight_map.values()))]
        except (ValueError, KeyError, TypeError, OSError) as exc:
            raise ModelInfoError(f"{index}: no weight_map ({exc})") from None
    files = sorted(directory.glob("*.safetensors"))
    # Mistral's repositories carry the same weights twice: consolidated.safetensors beside HF shards
    if len(files) > 1:
        files = [f for f in files if not f.name.startswith("consolidated")] or files
    return files


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """A multimodal config keeps the language model's settings under ``text_config``."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def _experts(config: Mapping[str, Any]) -> tuple[int, int] | None:
    for cfg in (_text_config(config), config):
        total = next((cfg[k] for k in ("num_local_experts", "num_experts", "n_routed_experts")
                      if isinstance(cfg.get(k), int) and cfg[k] > 1), None)
        used = cfg.get("num_experts_per_tok")
        if total is not None and isinstance(used, int) and 0 < used <= total:
            return used, total
    return None


def _hf_precision(config: Mapping[str, Any]) -> str | None:
    quant = config.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method"):
        method = str(quant["quant_method"])
        bits = quant.get("bits") or quant.get("w_bit")
        return f"{method} {bits}-bit" if isinstance(bits, int) else method
    dtype = config.get("torch_dtype") or config.get("dtype") or _text_config(config).get("torch_dtype")
    return str(dtype) if dtype else None


def describe_hf_dir(directory: Path) -> ModelFacts:
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ModelInfoError(f"{directory / 'config.json'}: {exc}") from None
    if not isinstance(config, dict):
        raise ModelInfoError(f"{directory / 'config.json'}: not a JSON object")
    model_type = config.get("model_type") or _text_config(config).get("model_type")
    experts = _experts(config)
    total = routed = 0
    why = None
    files = _weight_files(directory)
    if not files:
        why = "no safetensors weights in the directory"
    for file in files:
        if why is not None:
            break
        for name, dtype, shape in safetensors_tensors(file):
            if _QUANT_BOOKKEEPING.search(name):
                continue  # scales and zero points of quantised weights are not parameters
            if dtype not in _FLOAT_DTYPES:
                why = f"{dtype} weights ({name}) may pack several parameters per element"
                break
            n = math.prod(shape)
            total += n
            if experts is not None and _EXPERT_TENSOR.search(name):
                routed += n
    return _facts(str(directory), model_type, None if why else total, routed, experts, _hf_precision(config), why)


def _facts(source: str, model_type: str | None, total: int | None, routed: int,
           experts: tuple[int, int] | None, precision: str | None, why: str | None) -> ModelFacts:
    active = None
    if total is not None and experts is not None and routed:
        used, count = experts
        active = total - routed + routed * used // count
    return ModelFacts(source=source, family=family_of(model_type), model_type=model_type, total_params=total,
                      active_params=active, experts=experts if active is not None else None,
                      precision=precision, why_no_count=why)


# -- GGUF ----------------------------------------------------------------------------------------------

# value type -> struct format for GGUF's scalar types; 8 is a string, 9 an array
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
# llama.cpp's LLAMA_FTYPE numbers -> names, for general.file_type
_GGUF_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
                    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
                    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
                    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
                    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4"}


class _GGUFReader:
    def __init__(self, f: BinaryIO, path: Path) -> None:
        self.f = f
        self.path = path

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, _read_exact(self.f, struct.calcsize(fmt), str(self.path)))[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        if n > MAX_HEADER_BYTES:
            raise ModelInfoError(f"{self.path}: a {n}-byte string is not GGUF's")
        return _read_exact(self.f, n, str(self.path)).decode("utf-8", "replace")

    def value(self, vtype: int, keep: bool) -> Any:
        if vtype in _GGUF_SCALARS:
            return self.unpack(_GGUF_SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype, count = self.unpack("<I"), self.unpack("<Q")
            if etype in _GGUF_SCALARS and not keep:  # e.g. 262k token scores: skip, not decode
                self.f.seek(struct.calcsize(_GGUF_SCALARS[etype]) * count, os.SEEK_CUR)
                return None
            values = [self.value(etype, keep) for _ in range(count)]
            return values if keep else None
        raise ModelInfoError(f"{self.path}: unknown GGUF value type {vtype}")


def describe_gguf(path: Path) -> ModelFacts:
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelInfoError(f"{path}: not a GGUF file")
        r = _GGUFReader(f, path)
        version = r.unpack("<I")
        if version < 2:
            raise ModelInfoError(f"{path}: GGUF version {version} is not read (2 and later are)")
        tensor_count, kv_count = r.unpack("<Q"), r.unpack("<Q")
        meta: dict[str, Any] = {}
        for _ in range(kv_count):
            key = r.string()
            meta[key] = r.value(r.unpack("<I"), keep=not key.startswith("tokenizer."))
        total = routed = 0
        for _ in range(tensor_count):
            name = r.string()
            dims = [r.unpack("<Q") for _ in range(r.unpack("<I"))]
            r.unpack("<I")  # ggml type
            r.unpack("<Q")  # offset
            n = math.prod(dims)
            total += n
            if _EXPERT_TENSOR.search(name):
                routed += n
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    count, used = meta.get(f"{arch}.expert_count"), meta.get(f"{arch}.expert_used_count")
    experts = None
    if isinstance(count, int) and isinstance(used, int) and count > 1 and 0 < used <= count:
        experts = (used, count)
    file_type = meta.get("general.file_type")
    precision = _GGUF_FILE_TYPES.get(file_type, f"GGUF file type {file_type}") if isinstance(file_type, int) else None
    return _facts(str(path), arch, total, routed, experts, precision, None)


def describe(model: str, environ: Mapping[str, str] | None = None) -> ModelFacts | None:
    """The facts of ``model``'s local files, or None where none are found.

    :raises ModelInfoError: files found but unreadable as what they claim to be.
    """
    found = locate(model, environ)
    if found is None:
        return None
    try:
        return describe_gguf(found) if found.is_file() else describe_hf_dir(found)
    except OSError as exc:
        raise ModelInfoError(f"{found}: {exc.strerror or exc}") from None


def card_rows(facts: ModelFacts) -> dict[str, str]:
    """Configuration rows for the run card, each saying where it came from."""
    rows: dict[str, str] = {}
    gguf = facts.source.lower().endswith(".gguf")
    if facts.family:
        rows["Family"] = f"{facts.family} ({facts.model_type})" if facts.model_type else facts.family
    params = facts.parameters_text()
    if params:
        how = "GGUF tensor table" if gguf else "safetensors headers"
        rows["Parameters"] = f"{params}, counted from the {how}"
    elif facts.why_no_count:
        rows["Parameters"] = f"not counted: {facts.why_no_count}"
    if facts.precision:
        rows["Quant / precision"] = f"{facts.precision}, from {'the GGUF' if gguf else 'config.json'}"
    rows["Model files"] = facts.source
    return rows


def server_info(model: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What goes into ``Result.server_info`` for ``model`` (the launch's model, or an attached server's
    model name): ``model_files`` (the facts, as JSON) and ``model_card`` (the card's rows), or a note
    where the files are there but unreadable; nothing where there are none."""
    try:
        facts = describe(model, environ)
    except ModelInfoError as exc:
        return {"model_files": {"error": str(exc)}}
    except (OSError, ValueError, RecursionError) as exc:  # an unreadable cache entry: the run goes on
        return {"model_files": {"error": f"{model}: {exc}"}}
    if facts is None:
        return {}
    return {"model_files": {**dataclasses.asdict(facts), "parameters": facts.parameters_text()},
            "model_card": card_rows(facts)}
