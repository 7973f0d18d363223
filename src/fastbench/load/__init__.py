"""Load generation: what is sent and when.

``datasets`` turns prompts into request bodies before the run (the datasets themselves are the
modules of ``sources``; ``tokens`` counts prompts, ``screening`` fits them to the context); ``pacer``
draws the open loop's arrival schedule; ``driver`` runs the closed or open loop on the native core
(``fastbench._core``) and hands back the run's records (``fastbench.results.records``). Nothing here
formats or summarises.
"""
