# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The staged response length and the adaptive entropy coefficient, and their config checks."""

import pytest

from tests.model_folders import config_only_model
from verl.algorithms.schedules import EntropyController, check_response_length_schedule, response_length_at
from verl.trainer.config import load_config
from verl.utils.config import ConfigError


def test_response_length_follows_the_stages() -> None:
    schedule = {0: 8, 3: 16, 10: 32}
    lengths = [response_length_at(schedule, step, 99) for step in range(12)]
    assert lengths == [8, 8, 8, 16, 16, 16, 16, 16, 16, 16, 32, 32]
    assert response_length_at({}, 5, 99) == 99


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ({1: 8}, "first stage must start at step 0"),
        ({0: 8, 5: 64}, "above data.max_response_length=32"),
        ({0: 0}, "positive numbers of tokens"),
        ({-1: 8}, "training steps (as logged) where a stage starts"),
    ],
)
def test_bad_schedules_are_named(schedule: dict, message: str) -> None:
    assert message in check_response_length_schedule(schedule, 32)


def test_schedule_and_entropy_control_keys_are_validated(tmp_path) -> None:
    (tmp_path / "train.jsonl").write_text('{"prompt": "1 + 1 =", "answer": "2"}\n')
    config_only_model(tmp_path / "model")
    (tmp_path / "reward.py").write_text("def compute_score(sample):\n    return {'overall': 1.0}\n")
    base = [
        f"data.train_files={tmp_path / 'train.jsonl'}",
        f"worker.actor.model.model_path={tmp_path / 'model'}",
        f"worker.reward.reward_function={tmp_path / 'reward.py'}:compute_score",
        "data.max_response_length=32",
        "worker.rollout.n=2",
    ]
    config = load_config([*base, "data.response_length_schedule={0: 8, 4: 32}"])
    assert config.data.response_length_schedule == {0: 8, 4: 32}
    with pytest.raises(ConfigError, match=r"data.response_length_schedule=\{0: 8, 4: 64\} gives step 4"):
        load_config([*base, "data.response_length_schedule={0: 8, 4: 64}"])
    with pytest.raises(ConfigError, match="entropy_coeff_min=0.1 and entropy_coeff_max=0.05"):
        load_config([*base, "algorithm.entropy_control=true", "algorithm.entropy_coeff_min=0.1"])
    with pytest.raises(ConfigError, match="target_entropy=0.0"):
        load_config([*base, "algorithm.entropy_control=true", "algorithm.target_entropy=0"])


def test_entropy_coefficient_moves_towards_the_target_within_bounds() -> None:
    ctrl = EntropyController(init_coef=0.0, target=0.5, delta=0.01, min_coef=0.0, max_coef=0.025)
    assert ctrl.update(0.9) == 0.0  # entropy above target: already at the lower bound
    assert ctrl.update(0.1) == pytest.approx(0.01)  # below target: more bonus
    assert ctrl.update(0.1) == pytest.approx(0.02)
    assert ctrl.update(0.1) == pytest.approx(0.025)  # capped
    assert ctrl.update(0.5) == pytest.approx(0.025)  # at the target: unchanged
    # above the target the bonus is off (Skywork-OR1's gate), while the coefficient steps down: it was applied at
    # 0.015, still pushing the entropy up past the target
    assert ctrl.update(0.7) == 0.0 and ctrl.coef == pytest.approx(0.015)
    restored = EntropyController(init_coef=0.0, target=0.5, delta=0.01, min_coef=0.0, max_coef=0.025)
    restored.load_state_dict(ctrl.state_dict())
    assert (restored.coef, restored.applied) == (ctrl.coef, 0.0)
    assert ctrl.update(0.3) == pytest.approx(0.025)  # below again: on, at the coefficient
