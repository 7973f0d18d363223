"""The server wing: everything about the server under test that is not the measured requests.

``control`` is the one client of the server's control plane (/health, /v1/models, /version,
/tokenize, and the session /metrics is read with). ``launch`` starts, watches and tears down a server
(``engines``: vLLM, SGLang, llama.cpp), ``external`` attaches to one already running; ``processes``
handles its process group and port, ``serverlog`` its log and what the log says. ``monitor`` watches
the measured window: ``prom`` reads /metrics, ``specdecode`` analyses those reads (speculative
decoding, engine gauges). ``memory`` samples the machine's and the server's memory in a co-process
(``memoryrun`` is its glue to a run); ``modelinfo`` reads the served model's files.

What was seen is handed back as typed records (``fastbench.results.observations``, below both wings);
``fastbench.results`` words the card from them and writes the files.
"""
