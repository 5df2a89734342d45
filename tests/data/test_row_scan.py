# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""scan_rows joins its chunks' results in row order, however the forked workers finish, stops when told, and says
when a worker died."""

import os
import signal
import time

import pytest

from verl.data.row_scan import ScanWorkerDied, scan_rows


def _rows_slow_first(start: int, stop: int) -> list[int]:
    if start == 0:  # the first chunk finishes last
        time.sleep(0.3)
    return list(range(start, stop))


def test_forked_chunks_come_back_in_row_order_when_the_first_finishes_last():
    assert scan_rows(_rows_slow_first, 8, workers=2) == list(range(8))


def _first_row(start: int, stop: int) -> list[int]:
    return [start]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_scan_stops_after_the_chunk_that_gives_enough(workers):
    found = scan_rows(_first_row, 8, workers=workers, one_at_a_time=True, enough=lambda found: len(found) >= 2)
    assert found == [0, 1]


def _killed_at_row_8(start: int, stop: int) -> list[int]:
    if start == 8:  # as the kernel's out-of-memory killer takes a worker
        os.kill(os.getpid(), signal.SIGKILL)
    return list(range(start, stop))


def test_a_worker_that_dies_is_an_error_naming_the_rows_not_a_wait_without_end():
    with pytest.raises(ScanWorkerDied) as raised:
        scan_rows(_killed_at_row_8, 64, workers=2, setting=" data.filter_overlong_prompts_workers sets how many.")
    message = str(raised.value)
    assert message.startswith("A process checking the dataset's rows died while rows from ")
    assert int(message.split("rows from ")[1].split()[0]) <= 8  # the chunk that died is at or after the rows named
    assert message.endswith(
        "(out of memory?) or it crashed. Free memory, or check with fewer processes (2 ran). "
        "data.filter_overlong_prompts_workers sets how many."
    )


def _raises_at_row_8(start: int, stop: int) -> list[int]:
    if start == 8:
        raise ValueError(f"row {start}: unreadable")
    return list(range(start, stop))


def test_an_error_raised_in_a_worker_reaches_the_caller_as_itself():
    with pytest.raises(ValueError, match="^row 8: unreadable$"):
        scan_rows(_raises_at_row_8, 64, workers=2)
