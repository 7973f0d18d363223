"""``from fastbench.metrics import to_vllm_keys``, the earlier path of ``fastbench.to_vllm_keys``, kept
working: the result's figures under the flat key names of ``vllm bench serve``. The adapter lives in
``fastbench.results.vllm_keys``."""

from fastbench.results.vllm_keys import to_vllm_keys

__all__ = ("to_vllm_keys",)
