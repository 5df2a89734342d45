# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The request loop's choice of groups under the staleness bound (earliest deadline first), without an engine: the
cases here are decided from the groups already complete (the engine-driven cases are in test_async_rollout.py)."""

import pytest

from verl.workers.rollout.request_loop import RequestLoop, resume_seed


def _loop(versions: list[int], complete: list[bool]) -> RequestLoop:
    loop = RequestLoop(llm=None, render=lambda prompt: prompt)  # never stepped in these cases
    for version, done in zip(versions, complete):
        loop.admit({"prompt_token_ids": [1]}, None, [7, 8], version, budget=4)
        for sample in loop.groups[max(loop.groups)].samples:
            sample.finished = done
    return loop


def test_a_burst_admitted_at_once_may_train_in_any_order_until_its_deadline():
    """max_staleness=2, quota 2: 6 groups admitted at version 0 (the pipeline filled at start) have deadline 2; the
    two oldest are still running, so the step takes two later ones instead of waiting."""
    loop = _loop([0] * 6, [False, False, True, True, True, True])
    picked = loop.run(quota=2, version=0, make_params=None, max_staleness=2)
    assert [group.key for group in picked] == [2, 3]
    assert sorted(loop.groups) == [0, 1, 4, 5]


def test_groups_at_their_deadline_are_required():
    """Version 2: the 2 oldest groups reach their deadline; the complete newer ones cannot take their place."""
    loop = _loop([0, 0, 1, 1, 2, 2], [False, False, True, True, True, True])
    assert not loop._feasible([2, 3], {k: g.admitted_version + 2 for k, g in loop.groups.items()}, 2, 2)
    assert loop._feasible([0, 1], {k: g.admitted_version + 2 for k, g in loop.groups.items()}, 2, 2)


def test_earliest_deadlines_first_among_complete_groups():
    loop = _loop([1, 0, 1, 0], [True, True, True, True])
    assert [group.key for group in loop.run(quota=2, version=1, make_params=None, max_staleness=3)] == [1, 3]


def test_an_overfull_loop_is_refused():
    loop = _loop([0] * 5, [True] * 5)
    with pytest.raises(ValueError, match="5 groups with deadlines up to version 1 cannot all train"):
        loop.run(quota=2, version=0, make_params=None, max_staleness=1)


def test_resumed_samples_draw_fresh_seeds():
    assert resume_seed(None, 5) is None
    seeds = {resume_seed(11, generated) for generated in range(50)} | {11}
    assert len(seeds) == 51 and all(0 <= seed < 2**62 for seed in seeds)


def test_complete_groups_are_handed_over_for_scoring_once():
    """Streamed rewards: each complete group once, whether it is still in the loop or was just taken out of it."""
    loop = _loop([0, 0, 0], [True, False, True])
    assert loop.has_newly_complete()
    assert [group.key for group in loop.newly_complete()] == [0, 2]
    assert not loop.has_newly_complete() and loop.newly_complete() == []
    for sample in loop.groups[1].samples:
        sample.finished = True
    taken = loop.pop([1, 2])  # group 1 completed and was taken before it was handed over; group 2 was handed over
    assert [group.key for group in loop.newly_complete(taken)] == [1]
    assert loop.newly_complete() == [] and sorted(loop.groups) == [0]  # group 0 was handed over already
