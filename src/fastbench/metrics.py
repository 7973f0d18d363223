"""``from fastbench.metrics import to_vllm_keys``, as documented: the result's figures under the flat
key names of ``vllm bench serve``. The figures themselves live in ``fastbench.results.figures``."""

from fastbench.results.figures import to_vllm_keys

__all__ = ("to_vllm_keys",)
