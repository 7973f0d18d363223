"""The API layer: where a run, a client validation and a sweep start, for the command line and for any
other harness alike. The command line (fastbench.cli) parses, calls these, and prints.

- :func:`run` / :func:`arun`: one benchmark run (:mod:`fastbench.api.runs`);
- :func:`validate_client` / :func:`avalidate_client`: the client's own timing error against the
  built-in synthetic server (:mod:`fastbench.api.validation`);
- :func:`check`: a run's options checked before anything starts.

Each chooses its load generator (one process, worker processes, Ray actors) through
:func:`fastbench.load.generators.make_generator`.
"""

from __future__ import annotations

from fastbench.api.runs import arun, check, run, store_run, write_outputs
from fastbench.api.validation import avalidate_client, validate_client

__all__ = ("arun", "avalidate_client", "check", "run", "store_run", "validate", "validate_client",
           "write_outputs")

# The earlier name of check(): "validate" also names the client's validation (validate_client).
validate = check
