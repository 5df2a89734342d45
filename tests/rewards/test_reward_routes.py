# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Mixed datasets: worker.reward.routes scores each row with the function its data_source names."""

import math

import pytest

from verl.rewards.function import RewardFunctionError
from verl.rewards.manager import FunctionRewardManager, RewardSettings, RoutedRewardManager, create_reward_manager
from verl.trainer.metrics import applicable_values, reduce_metrics
from verl.workers.config import RewardConfig


MATH = """
REWARD_TYPE = "sequential"

def score(sample, bonus=0.0):
    correct = float(sample["response"].strip() == sample["ground_truth"])
    return {"overall": correct + bonus, "accuracy": correct}
"""

CODE = """
REWARD_TYPE = "batch"

def score(samples):
    return [
        {"overall": 0.5, "accuracy": 0.0, "pass_rate": float(len(s["response"])) / 100.0} for s in samples
    ]
"""

DEFAULT = """
def score(sample):
    return {"overall": -1.0, "accuracy": 0.0}
"""


def routed(write_reward_file, tokenizer, default: bool = False) -> RoutedRewardManager:
    config = RewardConfig(
        reward_function=f"{write_reward_file(DEFAULT, 'default.py')}:score" if default else None,
        routes={
            "math": f"{write_reward_file(MATH, 'm.py')}:score",
            "code": f"{write_reward_file(CODE, 'c.py')}:score",
        },
        routes_kwargs={"math": {"bonus": 0.25}},
    )
    manager = create_reward_manager(RewardSettings.from_config(config), tokenizer)
    assert isinstance(manager, RoutedRewardManager)
    return manager


def test_rows_are_scored_by_their_route(make_batch, write_reward_file, tokenizer) -> None:
    batch = make_batch(
        ["Q1", "Q2", "Q3", "Q4"],
        ["4", "print(1)", "5", "x"],
        non_tensors={"ground_truth": ["4", "-", "6", "-"], "data_source": ["math", "code", "math", "code"]},
    )
    reward_tensor, columns = routed(write_reward_file, tokenizer).compute_reward(batch)
    assert columns["overall"] == [1.25, 0.5, 0.25, 0.5]  # math kwargs reach only the math route
    assert reward_tensor.sum(-1).tolist() == [1.25, 0.5, 0.25, 0.5]
    assert columns["accuracy"] == [1.0, 0.0, 0.0, 0.0]  # a key every route returns: one value per row
    assert math.isnan(columns["pass_rate"][0]) and columns["pass_rate"][1] == pytest.approx(0.08)
    assert [math.isnan(v) for v in columns["math/overall"]] == [False, True, False, True]
    reduced = reduce_metrics(applicable_values(columns))
    assert reduced["pass_rate"] == pytest.approx((0.08 + 0.01) / 2)  # over the code rows only
    assert reduced["math/overall"] == pytest.approx(0.75) and reduced["code/overall"] == 0.5


def test_an_unknown_route_is_named_or_goes_to_the_default(make_batch, write_reward_file, tokenizer) -> None:
    batch = make_batch(
        ["Q1", "Q2"], ["4", "4"], non_tensors={"ground_truth": ["4", "4"], "data_source": ["math", "geo"]}
    )
    with pytest.raises(
        RewardFunctionError, match=r"Sample 1 has data_source='geo', which is not a route.*\['code', 'math'\]"
    ):
        routed(write_reward_file, tokenizer).compute_reward(batch)
    _, columns = routed(write_reward_file, tokenizer, default=True).compute_reward(batch)
    assert columns["overall"] == [1.25, -1.0] and "geo/overall" not in columns


def test_without_routes_the_single_function_manager_is_used(write_reward_file, tokenizer) -> None:
    settings = RewardSettings.from_config(RewardConfig(reward_function=f"{write_reward_file(MATH)}:score"))
    manager = create_reward_manager(settings, tokenizer)
    assert type(manager) is FunctionRewardManager and manager.function.name == "score"


FORMAT = """
def score(sample):
    ok = float(sample["response"].strip().isdigit())
    return {"overall": ok, "digits_only": ok}
"""


def test_a_rubric_combines_its_parts_by_weight(make_batch, write_reward_file, tokenizer) -> None:
    from verl.rewards.manager import RubricRewardManager

    config = RewardConfig(
        reward_function=f"{write_reward_file(MATH, 'm.py')}:score",  # one more part, "reward", weight 1
        rubric={
            "format": {"function": f"{write_reward_file(FORMAT, 'f.py')}:score", "weight": 0.5},
            "bonus": {"function": f"{write_reward_file(MATH, 'b.py')}:score", "weight": 2.0, "kwargs": {"bonus": 1.0}},
        },
    )
    manager = create_reward_manager(RewardSettings.from_config(config), tokenizer)
    assert isinstance(manager, RubricRewardManager)
    batch = make_batch(["Q1", "Q2"], ["4", "four"], non_tensors={"ground_truth": ["4", "4"]})
    reward_tensor, columns = manager.compute_reward(batch)
    # row 0: format 1 x 0.5 + bonus (1 + 1) x 2 + reward 1 x 1; row 1: 0 + (0 + 1) x 2 + 0
    assert columns["overall"] == [5.5, 2.0] and reward_tensor.sum(-1).tolist() == [5.5, 2.0]
    assert columns["format/digits_only"] == [1.0, 0.0] and columns["bonus/overall"] == [2.0, 1.0]
    assert columns["reward/accuracy"] == [1.0, 0.0]


STRIPPING = """
def score(sample):
    sample["response"] = sample["response"].replace("<b>", "")  # changes its input in place
    return {"overall": 1.0}
"""

NAN = """
def score(sample):
    return {"overall": float("nan")}
"""

EXACT = """
def score(sample):
    return {"overall": float(sample["response"] == "<b>4")}
"""


@pytest.mark.parametrize("num_cpus", [1, 2])
def test_a_rubric_part_that_changes_its_input_leaves_the_next_parts_alone(
    make_batch, write_reward_file, tokenizer, num_cpus
) -> None:
    """The parts shared the sample dicts inline (num_cpus=1), not in a pool: the reward depended on num_cpus."""
    rubric = {
        "strip": {"function": f"{write_reward_file(STRIPPING, 's.py')}:score"},
        "exact": {"function": f"{write_reward_file(EXACT, 'e.py')}:score"},
    }
    config = RewardConfig(rubric=rubric, num_cpus=num_cpus)
    manager = create_reward_manager(RewardSettings.from_config(config), tokenizer)
    try:
        _, columns = manager.compute_reward(make_batch(["Q1"], ["<b>4"]))
    finally:
        manager.close()
    assert columns["exact/overall"] == [1.0] and columns["overall"] == [2.0]


def test_a_routed_functions_error_names_the_batchs_sample(make_batch, write_reward_file, tokenizer) -> None:
    """A route's function sees its rows only: its error numbered them within the route."""
    nan = f"{write_reward_file(NAN, 'n.py')}:score"
    config = RewardConfig(routes={"math": nan, "code": f"{write_reward_file(CODE, 'c.py')}:score"})
    manager = create_reward_manager(RewardSettings.from_config(config), tokenizer)
    batch = make_batch(["Q"] * 3, ["a", "b", "c"], non_tensors={"data_source": ["code", "code", "math"]})
    with pytest.raises(RewardFunctionError, match=r"Route 'math''s sample 0 is sample 2 of the batch") as error:
        manager.compute_reward(batch)
    assert error.value.sample_index == 2


def test_rubric_config_errors_name_the_part(tmp_path, write_reward_file) -> None:
    from verl.utils.config import ConfigError

    def _check_rubric(config: RewardConfig) -> None:
        config.check_files("worker.reward.")

    good = f"{write_reward_file(FORMAT, 'f.py')}:score"
    with pytest.raises(ConfigError, match=r"rubric.fmt must be \{function"):
        _check_rubric(RewardConfig(rubric={"fmt": {"weight": 1.0}}))
    with pytest.raises(ConfigError, match=r"rubric.fmt.weight must be a finite number"):
        _check_rubric(RewardConfig(rubric={"fmt": {"function": good, "weight": "high"}}))
    with pytest.raises(ConfigError, match=r"rubric.fmt.weight must be a finite number, got inf"):
        _check_rubric(RewardConfig(rubric={"fmt": {"function": good, "weight": math.inf}}))
    with pytest.raises(ConfigError, match=r"rubric.fmt has unknown key\(s\) \['wieght'\]"):
        _check_rubric(RewardConfig(rubric={"fmt": {"function": good, "wieght": 1}}))
    with pytest.raises(ConfigError, match=r"^worker.reward.rubric.fmt.function='.*has no function 'nope'"):
        _check_rubric(RewardConfig(rubric={"fmt": {"function": good.replace(":score", ":nope")}}))
    with pytest.raises(ConfigError, match="cannot be combined"):
        _check_rubric(RewardConfig(rubric={"fmt": {"function": good}}, routes={"a": good}))
    # a part named "reward" beside reward_function replaced the function (and its kwargs) silently
    with pytest.raises(
        ConfigError, match=r'rubric.reward: with worker.reward.reward_function set, the rubric\'s part "reward"'
    ):
        _check_rubric(RewardConfig(rubric={"reward": {"function": good}}, reward_function=good))


def test_the_shipped_math_and_code_rewards_score_one_mixed_batch(make_batch, tokenizer) -> None:
    """The OR1-style mix with the real reward files (math-verify, the code sandbox), routed by another column."""
    from tests.repo_files import REPO

    config = RewardConfig(
        routes={
            "math": f"{REPO}/examples/reward_function/math_verify.py:compute_score",
            "code": f"{REPO}/examples/reward_function/code.py:compute_score",
        },
        route_key="task",
        routes_kwargs={"code": {"max_workers": 2}},
    )
    manager = create_reward_manager(RewardSettings.from_config(config), tokenizer)
    tests = '{"inputs": ["2 3\\n"], "outputs": ["5\\n"]}'
    program = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    batch = make_batch(
        ["Q1", "Q2", "Q3", "Q4"],
        ["The answer is \\boxed{\\frac{1}{2}}.", program, "\\boxed{0.4}", program.replace("+", "*")],
        non_tensors={"ground_truth": ["0.5", tests, "2/5", tests], "task": ["math", "code", "math", "code"]},
        response_length=48,
    )
    reward_tensor, columns = manager.compute_reward(batch)
    assert columns["overall"][:3] == [1.0, 1.0, 1.0] and columns["overall"][3] < 1.0
    assert reward_tensor.sum(-1).tolist() == pytest.approx(columns["overall"])
    assert columns["code/overall"][1] == 1.0 and math.isnan(columns["code/overall"][0])
    assert columns["num_wrong_answer"][3] == 1.0 and math.isnan(columns["num_wrong_answer"][0])
