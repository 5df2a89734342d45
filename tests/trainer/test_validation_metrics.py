# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The validation's per-prompt and per-source figures: best@n over each prompt's samples, and the mean per source;
the samples it logs."""

import pytest

from verl.trainer.metrics import reduce_metrics, rows_to_log, validation_score_metrics


def test_best_of_n_takes_each_prompts_best_sample_and_sources_split_the_set():
    scores = [0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0]
    prompts = ["a", "a", "b", "b", "c", "c", "d", "d"]
    sources = ["math", "math", "math", "math", "code", "code", "code", "code"]
    metrics = validation_score_metrics(scores, prompts, sources)
    assert metrics == pytest.approx(
        {
            "val/reward_score/best@2": (1.0 + 0.0 + 1.0 + 0.5) / 4,
            "val/math/reward_score": 0.25,
            "val/math/reward_score/best@2": 0.5,
            "val/code/reward_score": 0.625,
            "val/code/reward_score/best@2": 0.75,
        }
    )


def test_one_sample_and_one_source_add_nothing():
    assert validation_score_metrics([1.0, 0.0], ["a", "b"], ["math", "math"]) == {}
    assert validation_score_metrics([1.0, 0.0], ["a", "b"], None) == {}
    assert validation_score_metrics([], [], None) == {}
    assert validation_score_metrics([1.0, 0.0, 0.0, 0.0], ["a", "a", "b", "b"], None) == {
        "val/reward_score/best@2": 0.5
    }


def test_ranks_reports_are_averaged_but_a_maximum_is_the_largest_and_a_minimum_the_smallest():
    reported = {
        "rollout/weight_sync_max_gap": [0.001, 0.4, 0.002],  # each rank's largest gap: the run's is 0.4
        "rollout/weight_sync_mean_gap": [0.001, 0.1, 0.002],
        "async/staleness_max": [1.0, 2.0],
        "global_seqlen/minmax_diff": [4.0, 6.0],
        "timing_s/sync_weights": [1.0, 3.0],
        "global_seqlen/balanced_min": [2.0, 1.0, 3.0],
        "reward/max_len_penalty": [0.0, -1.0],  # a user's per-sample column: averaged whatever its name
        "perf/terminal_memory": [1.0, 2.0],  # "min" inside a word is not a minimum
    }
    assert reduce_metrics(reported) == pytest.approx(
        {
            "rollout/weight_sync_max_gap": 0.4,
            "rollout/weight_sync_mean_gap": 0.103 / 3,
            "async/staleness_max": 2.0,
            "global_seqlen/minmax_diff": 5.0,
            "timing_s/sync_weights": 2.0,
            "global_seqlen/balanced_min": 1.0,
            "reward/max_len_penalty": -0.5,
            "perf/terminal_memory": 1.5,
        }
    )


def test_the_samples_to_log_are_drawn_once_and_are_the_same_at_every_validation():
    picked = rows_to_log(1000, 3)
    assert len(picked) == 3 and all(0 <= row < 1000 for row in picked)
    assert rows_to_log(1000, 3) == picked  # the next validation logs the same samples
    assert picked != set(range(3))  # drawn over the whole set, not its first rows
    assert rows_to_log(5, 10) == set(range(5))
    assert rows_to_log(5, 0) == set() and rows_to_log(0, 2) == set()
