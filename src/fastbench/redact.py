"""Secrets kept out of everything fastbench shows or writes: command lines, log lines, result files.

A leaf: the launcher, the datasets and the writers all use it, and it imports nothing of fastbench.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

REDACTED = "***"
_SECRET_FLAGS = ("--api-key", "--hf-token")
# NAME_TOKEN=value, NAME_KEY=value, ... as in "--env HF_TOKEN=hf_abc" or "OPENAI_API_KEY=sk-..."
_ENV_SECRET = re.compile(r"\b([A-Z][A-Z0-9_]*(?:TOKEN|KEY|SECRET|PASSWORD)=)(?!\*\*\*)(\S+)")
_FLAG_SECRET = re.compile(r"(--(?:api-key|hf-token)(?:=|\s+))(?!\*\*\*)(\S+)")
# An HTTP header whose name says it carries a credential (--header Authorization=..., x-api-key=...).
_CREDENTIAL_HEADER = re.compile(r"(?i)[a-z0-9-]*(?:authorization|cookie|key|token|secret|password)[a-z0-9-]*")
_URL_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?!\*\*\*@)[^/@\s]+@")  # scheme://user:pass@


def redact_argv(argv: Sequence[str], secret: str | None = None) -> list[str]:
    """A command line with the API key replaced by ``***`` (``--api-key X``, ``--api-key=X``, literal)."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif arg in _SECRET_FLAGS:
            out.append(arg)
            hide_next = True
        elif arg.startswith(tuple(f"{flag}=" for flag in _SECRET_FLAGS)):
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)
        elif "=" in arg and _CREDENTIAL_HEADER.fullmatch(arg.split("=", 1)[0]):  # --header NAME=VALUE
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(redact_text(arg, secret))
    return out


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` with the value of each one whose name says it carries a credential replaced by ``***``."""
    return {name: REDACTED if _CREDENTIAL_HEADER.fullmatch(name) else value for name, value in headers.items()}


def redact_secret(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` replaced by ``***``: wherever it appears when it is 8 characters or
    more (a real key, which may sit inside an escape, a URL-encoded string or a longer token), and
    where it stands as a whole token when shorter, so that a local key such as "EMPTY" or "1"
    does not turn "EMPTYING" or "11-30 12:01" into a mangled log line."""
    if not secret:
        return text
    if len(secret) >= 8:
        return text.replace(secret, REDACTED)
    return re.sub(r"(?<![\w-])" + re.escape(secret) + r"(?![\w-])", REDACTED, text)


def redact_text(text: str, secret: str | None = None) -> str:
    """Free text (a shell command) with API keys, NAME_TOKEN=/NAME_KEY= values and a URL's
    user:password@ replaced by ``***``."""
    text = redact_secret(text, secret)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _FLAG_SECRET.sub(lambda m: m.group(1) + REDACTED, text)
    return _ENV_SECRET.sub(lambda m: m.group(1) + REDACTED, text)


def shell_join(argv: Sequence[str]) -> str:
    """Join a command line for display, quoting as a shell needs but leaving ``***`` readable."""
    parts = []
    for arg in argv:
        if arg == REDACTED or arg.endswith("=" + REDACTED):
            parts.append(arg)
        else:
            parts.append(shlex.quote(arg))
    return " ".join(parts)


def scrub(obj: Any, secret: str) -> Any:
    """Replace every literal occurrence of ``secret`` in the strings of a JSON-like object."""
    if isinstance(obj, str):
        return obj.replace(secret, REDACTED)
    if isinstance(obj, dict):
        return {key: scrub(value, secret) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(value, secret) for value in obj]
    return obj
