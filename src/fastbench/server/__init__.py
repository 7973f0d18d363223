"""The server wing: everything about the server under test that is not the measured requests.

``launch`` starts, watches and tears down a vLLM, SGLang or llama.cpp server (or attaches to one);
``prom`` reads its /metrics, ``specdecode`` analyses those reads (speculative decoding, engine gauges);
``memory`` samples the machine's and the server's memory in a co-process; ``modelinfo`` reads the
served model's files. Results are handed back as data; ``fastbench.results`` writes them.
"""
