"""A server that repeats the secrets it is sent, and an engine that logs its own: what would put a key on
disk if any file fastbench writes skipped the scrubber.

``KEY_ECHO_ENGINE`` is a script run as ``--engine-bin`` (``write_key_echo_engine``): started as
``ENGINE serve MODEL --host H --port P ...``, it prints its argv and every environment variable whose
name says it is a secret, as vLLM prints its arguments, then serves on loopback: /health, /v1/models
(listing --served-model-name) and /version answer; every POST gets a 401 whose JSON body echoes the
Authorization and x-api-key headers and the key the engine was given, as OpenAI's "Incorrect API key
provided: Bearer sk-..." does, and a WARNING line in its log with the same.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

KEY_ECHO_ENGINE = r'''
import http.server
import json
import os
import re
import sys
import threading


def opt(args, name, default=None):
    value = default
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
    return value


LOCK = threading.Lock()


def log(line):  # one write per line: the server answers in several threads
    with LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def serve(args):
    host, port = opt(args, "--host", "127.0.0.1"), int(opt(args, "--port", "8000"))
    served = opt(args, "--served-model-name", args[0])
    engine_key = opt(args, "--api-key")
    log(f"INFO 12-07 10:00:00 [api_server.py:1] non-default args: {args}")
    for name, value in sorted(os.environ.items()):
        if re.search(r"(?i)(token|key|secret|password)$", name):
            log(f"INFO 12-07 10:00:00 [envs.py:2] environment {name}={value}")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status, doc):
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self.answer(200, {})
            elif self.path == "/v1/models":
                self.answer(200, {"object": "list", "data": [{"id": served, "object": "model"}]})
            elif self.path == "/version":
                self.answer(200, {"version": "0.0.0+keyecho"})
            else:
                self.answer(404, {"error": "not found"})

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            given = self.headers.get("Authorization")
            x_api_key = self.headers.get("x-api-key")
            message = f"Incorrect API key provided: {given}; x-api-key {x_api_key}; expected {engine_key}"
            log(f"WARNING 12-07 10:00:01 [auth.py:3] refused: {message}")
            self.answer(401, {"error": {"message": message, "type": "invalid_request_error",
                                        "code": "invalid_api_key"}})

        def log_message(self, *a):
            pass

    http.server.ThreadingHTTPServer((host, port), Handler).serve_forever()


if sys.argv[1:2] == ["serve"]:
    serve(sys.argv[2:])
else:
    sys.exit("usage: ENGINE serve MODEL [--host H] [--port P] [--api-key K] ...")
'''


def write_key_echo_engine(directory: Path) -> Path:
    """Write the key-echoing engine (see the module docstring) into ``directory``; return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "keyecho-engine"
    path.write_text(f"#!{sys.executable}\n{KEY_ECHO_ENGINE}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path
