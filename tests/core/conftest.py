from typing import Any

import pytest

from support.core_runs import LOOPS


@pytest.fixture(params=sorted(LOOPS))
def loop_factory(request: pytest.FixtureRequest) -> Any:
    """A new event loop's maker: each test that takes it runs on uvloop and on asyncio's own loop."""
    return LOOPS[request.param]
