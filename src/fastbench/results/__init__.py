"""Results: the records contract, the figures derived from it, and the files written from them.

``records`` is the contract with the native core (the per-request columns, error classes, the HDR
layout); ``definitions`` holds the written definition of every figure; ``distribution`` one figure's
summary over the requests; ``result`` the typed ``Result``; ``figures`` derives every figure from the
records, by those definitions, and ``notes`` words what the result says about the run; ``vllm_keys``
flattens a result into ``vllm bench serve``'s keys; ``card`` words every line of the run card (the
server's sections included, from the typed records the server wing hands over); ``writers`` turns a
``Result`` into the JSON file, the console summary and the per-request JSONL; ``environment`` what the
result records about the machine it ran on. Imports nothing of the server wing or the load generator,
not even for type checking: the server's records it words live here (``observations``).
"""
