# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the worker config checks (verl/workers/config.py), section by section: a rule weight beside a judge
alone, a rubric weight that is a boolean, a reward model whose config names no architecture, and a reward model
weight that is not finite."""

import math

import pytest

from tests.model_folders import config_only_model
from verl.rewards.llm_judge import JudgeConfig
from verl.utils.config import ConfigError
from verl.workers.config import RewardConfig, RewardModelConfig


def test_a_rule_weight_beside_a_judge_alone_is_accepted():
    """rule_weight weighs the rule functions against a reward model or a judge: a judge alone is one of the two."""
    RewardConfig(rule_weight=0.5, judge=JudgeConfig(model_path="judge/model")).validate("worker.reward.")
    with pytest.raises(ConfigError, match=r"worker.reward.rule_weight=0.5 weighs the rule-based functions"):
        RewardConfig(rule_weight=0.5).validate("worker.reward.")


def test_a_rubric_weight_that_is_a_boolean_is_refused(tmp_path):
    """YAML's `weight: yes` is a boolean, which Python would count as 1: refused as not a number."""
    scorer = tmp_path / "score.py"
    scorer.write_text("def score(sample):\n    return {'overall': 1.0}\n")
    config = RewardConfig(rubric={"fmt": {"function": f"{scorer}:score", "weight": True}})
    with pytest.raises(ConfigError, match=r"worker.reward.rubric.fmt.weight must be a finite number, got True"):
        config.check_rubric("worker.reward.")
    RewardConfig(rubric={"fmt": {"function": f"{scorer}:score", "weight": 2}}).check_rubric("worker.reward.")


def test_a_reward_model_whose_config_names_no_architecture_is_judged_by_its_labels(tmp_path):
    """Without `architectures` the class is not known: the one-label rule alone applies."""
    one = config_only_model(tmp_path / "one", {"model_type": "qwen2", "num_labels": 1})
    RewardModelConfig(model_path=str(one)).check_files("worker.reward.model.")
    two = config_only_model(tmp_path / "two", {"model_type": "qwen2", "num_labels": 2})
    with pytest.raises(ConfigError, match=r"has 2 labels; a reward model gives one score"):
        RewardModelConfig(model_path=str(two)).check_files("worker.reward.model.")


@pytest.mark.parametrize("weight", [math.inf, -math.inf])
def test_an_infinite_reward_model_weight_is_refused(weight):
    """inf x rm_score is an infinite reward (or nan for a score of 0): refused before anything starts."""
    config = RewardModelConfig(model_path="rm/model", weight=weight)
    with pytest.raises(ConfigError, match=rf"'worker.reward.model.weight' must be a finite number, got {weight}"):
        config.validate("worker.reward.model.")
    RewardModelConfig(model_path="rm/model", weight=-0.5).validate("worker.reward.model.")  # any finite factor
