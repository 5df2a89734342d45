# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Reward loading, calling and placement that a mutation audit of verl/rewards/manager.py and function.py found
unpinned: config fields reaching the manager, where a score lands, what a function's output becomes."""

import os

import pytest
import torch

from verl.rewards.function import RewardFunctionError, RewardFunctionLoadError, load_reward_function
from verl.rewards.manager import FunctionRewardManager, RewardSettings, create_reward_manager
from verl.workers.config import RewardConfig


RESPONSE = """
def score(sample):
    return {"overall": 1.0, "chars": float(len(sample["response"]))}
"""


def test_skip_special_tokens_from_the_config_reaches_the_function(make_batch, write_reward_file, tokenizer) -> None:
    batch = make_batch(["Q"], ["hello"])  # ends with the EOS token
    spec = f"{write_reward_file(RESPONSE)}:score"
    _, kept = FunctionRewardManager(
        RewardConfig(reward_function=spec, skip_special_tokens=False), tokenizer
    ).compute_reward(batch)
    _, skipped = FunctionRewardManager(RewardConfig(reward_function=spec), tokenizer).compute_reward(batch)
    assert skipped["chars"] == [5.0]
    assert kept["chars"] == [float(len("hello" + tokenizer.eos_token))]


KWARGS = """
def score(sample, bonus=0.0):
    return {"overall": 1.0 + bonus}
"""


def test_the_default_functions_kwargs_reach_it_in_a_rubric_and_in_routes(
    make_batch, write_reward_file, tokenizer
) -> None:
    spec = f"{write_reward_file(KWARGS)}:score"
    batch = make_batch(["Q"], ["a"], non_tensors={"data_source": ["other"]})
    rubric = RewardConfig(
        reward_function=spec, reward_function_kwargs={"bonus": 0.5}, rubric={"part": {"function": spec, "weight": 2.0}}
    )
    _, columns = create_reward_manager(RewardSettings.from_config(rubric), tokenizer).compute_reward(batch)
    assert columns == {"overall": [3.5], "part/overall": [1.0], "reward/overall": [1.5]}
    routes = RewardConfig(
        reward_function=spec, reward_function_kwargs={"bonus": 0.5}, routes={"math": spec}, routes_kwargs={}
    )
    _, columns = create_reward_manager(RewardSettings.from_config(routes), tokenizer).compute_reward(batch)
    assert columns == {"overall": [1.5]}  # the default function's row: no route column


LENGTH = """
def score(sample):
    return {"overall": float(sample["response_length"]), "ids": float(len(sample["response_ids"]))}
"""


def test_a_multi_turn_rows_length_counts_the_models_tokens_and_its_score_lands_on_the_models_last(
    make_batch, write_reward_file, tokenizer
) -> None:
    batch = make_batch(["Q"], ["call result so 42"], stop=[False])
    ids = tokenizer.encode("call result so 42", add_special_tokens=False)
    start = len(tokenizer.encode("call", add_special_tokens=False))
    end = start + len(tokenizer.encode(" result", add_special_tokens=False))
    batch.batch["response_mask"][0, start:end] = 0  # the environment's tokens
    batch.batch["response_mask"][0, len(ids) - 1] = 0  # the last token is the environment's too
    reward, columns = FunctionRewardManager(
        RewardConfig(reward_function=f"{write_reward_file(LENGTH)}:score"), tokenizer
    ).compute_reward(batch)
    model_tokens = len(ids) - (end - start) - 1
    assert columns == {"overall": [float(model_tokens)], "ids": [float(len(ids))]}
    expected = torch.zeros_like(reward)
    expected[0, len(ids) - 2] = model_tokens
    assert torch.equal(reward, expected)


def test_a_batch_without_response_mask_scores_the_attended_response_tokens(
    make_batch, write_reward_file, tokenizer
) -> None:
    """Batches made before response_mask existed: the response's part of attention_mask."""
    batch = make_batch(["Q1", "Q2"], ["four", "the answer is five"])
    lengths = batch.batch["response_mask"].sum(-1).tolist()
    del batch.batch["response_mask"]
    reward, columns = FunctionRewardManager(
        RewardConfig(reward_function=f"{write_reward_file(LENGTH)}:score"), tokenizer
    ).compute_reward(batch)
    assert columns["overall"] == [float(n) for n in lengths]
    expected = torch.zeros_like(reward)
    expected[0, lengths[0] - 1], expected[1, lengths[1] - 1] = lengths[0], lengths[1]
    assert torch.equal(reward, expected)


def test_a_user_turn_without_prompt_content_is_the_prompt_decoded_without_special_tokens(
    make_batch, tokenizer
) -> None:
    import numpy as np

    from verl.rewards.manager import user_messages

    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    contents = np.empty(2, dtype=object)
    contents[:] = ["Plain prompt", None]  # the second row has none
    batch = make_batch([prompt, prompt], ["a", "b"], non_tensors={"prompt_content": contents})
    assert user_messages(batch, tokenizer) == ["Plain prompt", "user\nHi\nassistant\n"]


def test_the_prompt_text_comes_from_a_text_column_prompt_text_first(make_batch, tokenizer) -> None:
    from verl.rewards.manager import build_reward_inputs

    prompt = "<|im_start|>user\nHi<|im_end|>\n"
    messages = [{"role": "user", "content": "Hi"}]
    (sample,) = build_reward_inputs(make_batch([prompt], ["a"], non_tensors={"raw_prompt": [messages]}), tokenizer)
    assert sample["prompt"] == prompt and sample["extra_info"] == {"raw_prompt": messages}  # messages: not text
    both = make_batch([prompt], ["a"], non_tensors={"prompt_text": ["from prompt_text"], "raw_prompt": ["raw"]})
    (sample,) = build_reward_inputs(both, tokenizer)
    assert sample["prompt"] == "from prompt_text" and sample["extra_info"] == {"raw_prompt": "raw"}
    hidden = make_batch([prompt], ["a"], non_tensors={"prompt_content": ["Hi"], "topic": ["greeting"]})
    assert build_reward_inputs(hidden, tokenizer)[0]["extra_info"] == {"topic": "greeting"}  # the pipeline's own


POPPING = """
def score(sample):
    answer = sample["ground_truth"].pop("answer", None)
    sample["prompt_messages"].append({"role": "assistant", "content": sample["response"]})
    return {"overall": float(answer == "4"), "turns": float(len(sample["prompt_messages"]))}
"""


def test_a_function_that_pops_from_a_dict_answer_leaves_the_other_samples_alone(
    make_batch, write_reward_file, tokenizer
) -> None:
    messages = [{"role": "user", "content": "Q"}]
    row = make_batch(["Q"], ["4"], non_tensors={"ground_truth": [{"answer": "4"}], "prompt_messages": [messages]})
    batch = row.repeat(3, interleave=True)
    _, columns = FunctionRewardManager(
        RewardConfig(reward_function=f"{write_reward_file(POPPING)}:score"), tokenizer
    ).compute_reward(batch)
    assert columns == {"overall": [1.0, 1.0, 1.0], "turns": [2.0, 2.0, 2.0]}
    assert batch.non_tensor_batch["ground_truth"][0] == {"answer": "4"}
    assert list(batch.non_tensor_batch["prompt_messages"][0]) == [{"role": "user", "content": "Q"}]


def test_numpy_scalars_in_the_own_fields_reach_the_function_as_python_values(make_batch, tokenizer) -> None:
    import numpy as np

    from verl.rewards.manager import build_reward_inputs

    uids = np.array(["group-0"], dtype=object)
    uids[0] = np.str_("group-0")
    batch = make_batch(["Q"], ["4"], non_tensors={"ground_truth": [np.int64(4)], "uid": uids})
    (sample,) = build_reward_inputs(batch, tokenizer)
    assert type(sample["ground_truth"]) is int and sample["ground_truth"] == 4
    assert type(sample["uid"]) is str and sample["uid"] == "group-0"


def test_the_routes_functions_share_the_settings_of_the_whole(write_reward_file, tokenizer) -> None:
    """num_cpus gives each sequential route its own pool (started on first use), and closing the whole closes each."""
    spec = f"{write_reward_file(KWARGS)}:score"
    config = RewardConfig(reward_function=spec, routes={"math": spec}, num_cpus=2)
    manager = create_reward_manager(RewardSettings.from_config(config), tokenizer)
    assert manager.managers["math"]._pool is not None and manager.managers[None]._pool is not None
    closed = []
    for key, part in manager.managers.items():
        part.close = lambda key=key: closed.append(key)
    manager.close()
    assert sorted(closed, key=str) == [None, "math"]


TRL = """
def accuracy(completions, solution, **kwargs):
    return [float(c == s) for c, s in zip(completions, solution)]
"""


def test_a_routes_trl_function_gets_the_answers_under_answer_key(make_batch, write_reward_file, tokenizer) -> None:
    config = RewardConfig(routes={"math": f"{write_reward_file(TRL)}:accuracy"}, answer_key="solution")
    batch = make_batch(["Q", "Q"], ["4", "5"], non_tensors={"ground_truth": ["4", "4"], "data_source": ["math"] * 2})
    _, columns = create_reward_manager(RewardSettings.from_config(config), tokenizer).compute_reward(batch)
    assert columns == {"overall": [1.0, 0.0], "math/overall": [1.0, 0.0]}


def test_a_routes_load_error_names_the_options_as_the_caller_does(tmp_path, tokenizer) -> None:
    from verl.rewards.function import RewardNames
    from verl.rewards.manager import RoutedRewardManager

    names = RewardNames(function="--reward", kwargs="--reward-kwargs", remote=False)
    settings = RewardSettings(None, routes={"math": str(tmp_path / "missing.py")}, names=names)
    with pytest.raises(RewardFunctionLoadError, match=r"^--reward='.*missing.py': the file .* does not exist on "):
        RoutedRewardManager(settings, tokenizer)


COLUMNS = """
REWARD_TYPE = "batch"

def score(samples):
    return {"overall": [1.0 for _ in samples]}  # columns, not one dict per sample
"""


def test_a_batch_function_returning_columns_is_refused(make_batch, write_reward_file, tokenizer) -> None:
    manager = FunctionRewardManager(RewardConfig(reward_function=f"{write_reward_file(COLUMNS)}:score"), tokenizer)
    with pytest.raises(RewardFunctionError, match="returned a dict for a batch of 2 samples; a batch function must"):
        manager.compute_reward(make_batch(["Q", "Q"], ["a", "b"]))


ROUTE = """
def score(sample):
    return {"overall": 2.0}
"""

RAISING_BATCH = """
REWARD_TYPE = "batch"

def score(samples):
    raise ValueError("the grader is down")
"""


def test_a_route_is_the_columns_value_as_text_and_a_batch_functions_error_passes_unchanged(
    make_batch, write_reward_file, tokenizer
) -> None:
    config = RewardConfig(
        routes={
            "1": f"{write_reward_file(ROUTE, 'r.py')}:score",
            "2": f"{write_reward_file(RAISING_BATCH, 'b.py')}:score",
        }
    )
    manager = create_reward_manager(RewardSettings.from_config(config), tokenizer)
    _, columns = manager.compute_reward(make_batch(["Q"], ["a"], non_tensors={"data_source": [1]}))
    assert columns == {"overall": [2.0], "1/overall": [2.0]}
    with pytest.raises(RewardFunctionError, match=r"raised ValueError on a batch of 1 samples .*the grader is down"):
        manager.compute_reward(make_batch(["Q"], ["a"], non_tensors={"data_source": [2]}))


TAGGING = """
def score(sample):
    sample["extra_info"]["tags"].append("seen")  # changes a nested value in place
    return {"overall": float(len(sample["extra_info"]["tags"]))}
"""


def test_a_rubric_part_that_changes_a_nested_value_leaves_the_next_parts_alone(
    make_batch, write_reward_file, tokenizer
) -> None:
    spec = f"{write_reward_file(TAGGING)}:score"
    config = RewardConfig(rubric={"first": {"function": spec}, "second": {"function": spec}})
    manager = create_reward_manager(RewardSettings.from_config(config), tokenizer)
    _, columns = manager.compute_reward(make_batch(["Q"], ["a"], non_tensors={"tags": [["given"]]}))
    assert columns == {"overall": [4.0], "first/overall": [2.0], "second/overall": [2.0]}


def test_a_spec_without_a_colon_is_a_path_to_main() -> None:
    from verl.rewards.function import parse_reward_function_spec

    assert parse_reward_function_spec("rewards/score") == ("rewards/score", "main")
    assert parse_reward_function_spec("reward") == ("reward", "main")  # a file without .py, not a function
    assert parse_reward_function_spec(" reward.py ") == ("reward.py", "main")
    assert parse_reward_function_spec("/data/v1:2/reward") == ("/data/v1:2/reward", "main")  # a colon in a folder


def test_the_judges_text_keeps_special_tokens_when_asked(make_batch, tokenizer) -> None:
    from verl.rewards.manager import decode_responses

    batch = make_batch(["Q"], ["hello"])
    assert decode_responses(batch, tokenizer) == ["hello"]
    assert decode_responses(batch, tokenizer, skip_special_tokens=False) == ["hello<|im_end|>"]


def test_reasoning_is_read_from_its_last_opening_and_closing() -> None:
    from verl.rewards.function import after_reasoning, model_turn, opens_reasoning

    assert after_reasoning("<think>a</think>draft</think> final") == " final"
    assert opens_reasoning("<think>\n") and opens_reasoning("Q<|im_start|>assistant\n<think>\n")
    assert not opens_reasoning("<think>a</think> answer") and not opens_reasoning("no reasoning")
    prompt = "Answer inside <think> tags.<|im_start|>assistant\n<think>\n"  # the system prompt names the tag
    assert model_turn({"prompt": prompt, "response": "a</think> 4"}) == "<think>\na</think> 4"
    assert model_turn({"prompt": "Q", "response": "4"}) == "4"


VERL_STYLE = """
def with_kwargs(solution_str, **kwargs):
    return float(sorted(kwargs) == ["data_source", "extra_info", "ground_truth"])

def without_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"acc": 1.0}

def needs_threshold(solution_str, threshold):
    return 1.0
"""


def test_verls_signature_with_kwargs_gets_every_argument_and_its_dict_needs_score(write_reward_file) -> None:
    path = write_reward_file(VERL_STYLE)
    sample = {"response": "4", "ground_truth": "4", "extra_info": {"data_source": "gsm8k"}}
    assert load_reward_function(f"{path}:with_kwargs")(sample) == {"overall": 1.0}
    assert load_reward_function(f"{path}:without_score")(sample) == {"acc": 1.0}  # check_scores names what lacks
    with pytest.raises(RewardFunctionLoadError, match="missing a required argument: 'threshold'"):
        load_reward_function(f"{path}:needs_threshold")


TRL_STYLE = """
import numpy as np

def turns(completions, **kwargs):
    return [float(len(c)) if isinstance(c, list) else 0.0 for c in completions]

def answers(completions, solution, scale=1.0, **kwargs):
    return [scale * float(c == s) for c, s in zip(completions, solution)]

def names(completions, **kwargs):
    return [float("answer.text" in kwargs) for _ in completions]

def as_array(completions):
    return np.array([1.0 for _ in completions])
"""


def test_trls_signature_gets_episodes_answers_and_kwargs_in_their_order(write_reward_file) -> None:
    path = write_reward_file(TRL_STYLE)
    episode = [{"role": "assistant", "content": "call"}, {"role": "tool", "content": "7"}]
    sample = {"response": "4", "response_ids": [1], "prompt": "Q", "ground_truth": "4", "prompt_messages": None}
    assert load_reward_function(f"{path}:turns")([{**sample, "extra_info": {"episode_messages": episode}}]) == [
        {"overall": 2.0}
    ]
    with_column = {**sample, "extra_info": {"solution": "5"}}  # the dataset's own column of the name wins
    assert load_reward_function(f"{path}:answers", answer_key="solution")([with_column]) == [{"overall": 0.0}]
    scaled = {**sample, "extra_info": {"solution": "4", "scale": 9.0}}  # the configured kwargs win over a column
    assert load_reward_function(f"{path}:answers", {"scale": 2.0}, answer_key="solution")([scaled]) == [
        {"overall": 2.0}
    ]
    plain = {**sample, "extra_info": {}}
    assert load_reward_function(f"{path}:names", answer_key="answer.text")([plain]) == [{"overall": 0.0}]
    assert load_reward_function(f"{path}:as_array")([plain, plain]) == [{"overall": 1.0}, {"overall": 1.0}]


SIGNATURES = """
from collections.abc import Mapping

def mapping(sample: Mapping[str, float]):
    return {"overall": 1.0}

def star(*reward_inputs):
    return {"overall": 1.0}

def public():
    pass

def _helper():
    pass

check_setup = "not a function"
"""


def test_a_signature_decides_the_reward_type_only_by_its_first_positional_parameter(write_reward_file) -> None:
    path = write_reward_file(SIGNATURES)
    mapping = load_reward_function(f"{path}:mapping")
    assert (mapping.reward_type, mapping.reward_type_source) == ("sequential", "inferred")
    star = load_reward_function(f"{path}:star")
    assert (star.reward_type, star.reward_type_source) == ("sequential", "defaulted")
    assert star.check_setup is None  # not callable: no setup check
    from verl.rewards.function import check_reward_function

    check_reward_function(f"{path}:star")
    with pytest.raises(
        RewardFunctionLoadError, match=r"has no function 'missing' \(functions defined there: mapping, public, star\)"
    ):
        load_reward_function(f"{path}:missing")


def test_a_reward_path_may_start_at_home_and_a_folder_is_not_a_file(write_reward_file, tmp_path, monkeypatch) -> None:
    from verl.rewards.function import RewardFunctionNotFoundError

    path = write_reward_file(SIGNATURES)
    monkeypatch.setenv("HOME", os.path.dirname(path))
    assert load_reward_function(f"~/{os.path.basename(path)}:star").path == path
    with pytest.raises(RewardFunctionNotFoundError, match="does not exist on"):
        load_reward_function(f"{tmp_path}:main")


ASYNC_EXIT = """
import sys

async def score(sample):
    sys.exit(3)
"""


def test_an_async_function_that_exits_names_the_batchs_samples(write_reward_file) -> None:
    from verl.rewards.function import score_sequential

    function = load_reward_function(f"{write_reward_file(ASYNC_EXIT)}:score")
    with pytest.raises(RewardFunctionError, match=r"raised SystemExit on one of samples 4-4: it called sys.exit\(3\)"):
        score_sequential(function, [{"response": "a"}], start=4)


SORTING = """
def score(samples):
    samples.sort(key=len)  # a batch function, REWARD_TYPE not declared: handed one dict
    return [{"overall": 1.0} for _ in samples]
"""


def test_an_undeclared_batch_function_failing_with_attribute_error_is_told_to_set_reward_type(
    write_reward_file,
) -> None:
    from verl.rewards.function import score_sequential

    function = load_reward_function(f"{write_reward_file(SORTING)}:score")
    with pytest.raises(RewardFunctionError, match="raised AttributeError on sample 0.*set REWARD_TYPE = .batch."):
        score_sequential(function, [{"response": "a"}])


BATCH = """
REWARD_TYPE = "batch"

def score(samples):
    return [{"overall": 1.0} for _ in samples]
"""


def test_check_scores_takes_a_tuple_and_wants_the_same_keys_of_every_sample(write_reward_file) -> None:
    from verl.rewards.function import check_scores, uid_note

    function = load_reward_function(f"{write_reward_file(BATCH)}:score")
    samples = [{"uid": 0}, {"uid": "g1"}]
    assert check_scores(function, ({"overall": 1}, 0.5), samples) == {"overall": [1.0, 0.5]}
    with pytest.raises(
        RewardFunctionError, match=r"sample 1 \(uid g1\) keys \['b', 'overall'\], but sample 0 returned"
    ):
        check_scores(function, [{"overall": 1.0, "a": 1.0}, {"overall": 1.0, "b": 1.0}], samples)
    with pytest.raises(RewardFunctionError) as error:  # a batch function's list per sample: no REWARD_TYPE hint
        check_scores(function, [[1.0], [1.0]], samples)
    assert "returned for sample 0 (uid 0) a list" in str(error.value) and "REWARD_TYPE" not in str(error.value)
    assert uid_note({"uid": 0}) == " (uid 0)" and uid_note({"uid": None}) == ""
