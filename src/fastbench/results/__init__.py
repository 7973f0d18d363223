"""Results: the records contract, the figures derived from it, and the files written from them.

``records`` is the contract with the native core (the per-request columns, error classes, the HDR
layout); ``definitions`` holds the written definition of every figure; ``result`` the typed ``Result``;
``figures`` derives every figure from the records, by those definitions, and ``notes`` words what the
result says about the run; ``vllm_keys`` flattens a result into ``vllm bench serve``'s keys; ``writers``
turns a ``Result`` into the JSON file, the run card, the console summary and the per-request JSONL.
Imports nothing of the server wing or the load generator.
"""
