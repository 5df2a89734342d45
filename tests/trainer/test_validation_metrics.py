# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The validation's per-prompt and per-source figures: best@n over each prompt's samples, and the mean per source."""

import pytest

from verl.trainer.metrics import validation_score_metrics


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
