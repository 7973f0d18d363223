"""What the console says about a run's failures: the most common one, the server's own words, what to check.

The counts by class are in the notes; a user whose every request was refused needs the status, the server's
message and the likely cause in front of them, not in the result file. The message is shown scrubbed of the
run's secrets (redact.Secrets: it echoes what the server said, and some servers echo the key they refused).
"""

from __future__ import annotations

import re

from fastbench.redact import Secrets
from fastbench.results.result import Result

# Longest server message shown; the result file and --requests-jsonl keep up to the core's own limit.
MESSAGE_CHARS = 240
_STATUS = re.compile(r"^HTTP (\d{3})\b")

# What to check first, per HTTP status class of the most common failure.
_STATUS_HINTS = {
    401: "the server refused the credentials: check --api-key (default: $OPENAI_API_KEY)",
    403: "the server refused the credentials: check --api-key (default: $OPENAI_API_KEY)",
    404: "no such route or model there: check --base-url, --endpoint/--backend and --model",
    400: "the server rejected the request: check --max-tokens, --extra-body and the prompt lengths",
    422: "the server rejected the request: check --max-tokens, --extra-body and the prompt lengths",
    429: "the server is rate limiting: lower --concurrency or --request-rate",
}
_CLASS_HINTS = {
    "CONNECT": "no connection: check --base-url and that the server is up and listening",
    "TIMEOUT": "answers took longer than --request-timeout at this load",
    "PROTOCOL": "the answers are not this API's stream: check --endpoint/--backend, or the server broke off",
    "SERVER_ERROR": "the server reported an error inside its stream: see its log",
    "CONTEXT_LENGTH": "prompt plus --max-tokens exceed the model's context: shorten them or give --max-model-len",
    "WORKER_LOST": "a --workers process died: see the messages before the table",
}


def most_common_failure(result: Result) -> tuple[str, str] | None:
    """The run's most common failure (its class, count and the server's message scrubbed of the API key),
    and what to check; None when no request failed."""
    counts = result.counts.failed_by_class
    if not counts:
        return None
    name, count = max(counts.items(), key=lambda item: item[1])
    examples = result.errors[name].examples if name in result.errors else []
    message = " ".join(Secrets.of_config(result.config).log(examples[0]).split()) if examples else ""
    if len(message) > MESSAGE_CHARS:
        message = message[:MESSAGE_CHARS - 2] + " …"
    finished = result.counts.completed + result.counts.failed
    status = _STATUS.match(message)
    if status is not None:  # "HTTP 401: {...}": the status says it, the class adds nothing
        head = f"{count}/{finished} requests failed with {message}"
    else:
        head = f"{count}/{finished} requests failed with {name}" + (f": {message}" if message else "")
    return head, failure_hint(name, message)


def failure_hint(error_class: str, message: str) -> str:
    """What to check first for a failure of this class with this message."""
    status = _STATUS.match(message)
    if error_class == "HTTP_STATUS" and status is not None:
        code = int(status.group(1))
        if code in _STATUS_HINTS:
            return _STATUS_HINTS[code]
        if code >= 500:
            return "the server failed the requests: see its log"
    return _CLASS_HINTS.get(error_class, "the server's log, and the result file's errors")
