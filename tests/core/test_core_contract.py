"""The native core's copy of the records contract: the request table's columns it writes and the codes it
stores in them have the names, order and values that fastbench.results.records gives them. (The core
writes no TimestampSource: the driver picks that one from the core's read counters.)"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import pytest

from fastbench._core import COLUMN_ORDER, Recorder, RunState, engine
from fastbench.results.records import COLUMNS, NCOLS, ErrorClass, UsageSource, new_histogram


def _core_codes(core_enum: Any, prefix: str) -> dict[str, int]:
    return {name.removeprefix(prefix): int(value) for name, value in core_enum.__members__.items()}


def _contract_codes(contract_enum: type[enum.IntEnum]) -> dict[str, int]:
    return {member.name: member.value for member in contract_enum}


def test_the_core_writes_the_contracts_columns_in_order() -> None:
    assert COLUMN_ORDER == COLUMNS


@pytest.mark.parametrize("core_name,prefix,contract", [
    ("ErrorClass", "ERR_", ErrorClass),
    ("UsageSource", "USAGE_", UsageSource),
])
def test_the_core_codes_match_the_contract(core_name: str, prefix: str, contract: type[enum.IntEnum]) -> None:
    assert _core_codes(getattr(engine, core_name), prefix) == _contract_codes(contract)


def test_a_table_of_another_width_is_refused() -> None:
    """The core writes whole rows in its own layout: a table that is not that wide would be overrun."""
    recorders = [Recorder(new_histogram()) for _ in range(3)]
    RunState(np.zeros((2, NCOLS), dtype=np.int64), *recorders)
    for width in (NCOLS - 1, NCOLS + 1):
        with pytest.raises(ValueError, match=f"{width} columns, not {NCOLS}"):
            RunState(np.zeros((2, width), dtype=np.int64), *recorders)
