"""Whether this test process runs under AddressSanitizer (make test-asan preloads its runtime)."""

import os

UNDER_SANITIZER = "libasan" in os.environ.get("LD_PRELOAD", "")
SANITIZER_REASON = "under AddressSanitizer memory and timing figures measure the sanitizer, not fastbench"
