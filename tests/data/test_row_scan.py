# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""scan_rows joins its chunks' results in row order, however the forked workers finish, and stops when told."""

import time

import pytest

from verl.data.row_scan import scan_rows


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
