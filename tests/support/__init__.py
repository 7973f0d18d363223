"""What the tests share: servers scripted byte by byte, a hostile server (hostile/), a fake vLLM, raw-socket
clients, timing rounds, the C readers built for ctypes. Never a test file itself (no test file imports another:
what two share lives here).

tests/conftest.py puts tests/ on sys.path, so these import as ``support.NAME``."""
