# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Loading a reward function from `file.py:function`, and the checks on what it returns."""

import math
import os

import numpy as np
import pytest

from verl.rewards.function import (
    RewardFunctionError,
    RewardFunctionLoadError,
    RewardFunctionNotFoundError,
    check_reward_function,
    check_scores,
    load_reward_function,
    parse_reward_function_spec,
    score_batch,
    score_sequential,
)


EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "reward_function")

SEQUENTIAL = """
def score(sample, bonus=0.0):
    return {"overall": float(len(sample["response"])) + bonus}
"""


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("rewards/math.py:compute_score", ("rewards/math.py", "compute_score")),
        ("rewards/math.py", ("rewards/math.py", "main")),
        ("/abs/odd:dir/file.py", ("/abs/odd:dir/file.py", "main")),
        ("/abs/odd:dir/file.py:fn", ("/abs/odd:dir/file.py", "fn")),
    ],
)
def test_parse_spec(spec: str, expected: tuple[str, str]) -> None:
    assert parse_reward_function_spec(spec) == expected


def test_parse_spec_rejects_bad_function_name() -> None:
    with pytest.raises(RewardFunctionLoadError, match="'2fast' is not a valid Python function name"):
        parse_reward_function_spec("file.py:2fast")


def test_load_defaults(write_reward_file) -> None:
    path = write_reward_file("def main(sample):\n    return {'overall': 1.0}\n")
    function = load_reward_function(path)
    assert (function.name, function.reward_type, function.reward_name) == ("main", "sequential", "main")
    assert function.path == path
    assert function({"response": "x"}) == {"overall": 1.0}


def test_load_reads_module_attributes_and_binds_kwargs(write_reward_file) -> None:
    path = write_reward_file("REWARD_TYPE = 'batch'\nREWARD_NAME = 'length'\n" + SEQUENTIAL)
    function = load_reward_function(f"{path}:score", {"bonus": 2.0})
    assert (function.reward_type, function.reward_name) == ("batch", "length")
    assert function({"response": "abc"}) == {"overall": 5.0}


def test_relative_path_is_resolved_from_the_working_directory(write_reward_file, tmp_path, monkeypatch) -> None:
    write_reward_file(SEQUENTIAL, name="rel.py")
    monkeypatch.chdir(tmp_path)
    assert load_reward_function("rel.py:score").path == str(tmp_path / "rel.py")


def test_missing_file(tmp_path) -> None:
    missing = tmp_path / "nowhere.py"
    with pytest.raises(RewardFunctionNotFoundError, match=r"nowhere\.py does not exist") as info:
        load_reward_function(f"{missing}:score")
    assert isinstance(info.value, FileNotFoundError)
    assert "worker.reward.reward_function" in str(info.value)
    import socket

    assert f"does not exist on {socket.gethostname()} (a reward actor on another node" in str(info.value)  # where


def test_missing_function_lists_what_the_file_defines(write_reward_file) -> None:
    path = write_reward_file(SEQUENTIAL + "\ndef helper():\n    pass\n")
    with pytest.raises(RewardFunctionLoadError, match="has no function 'compute_score'") as info:
        load_reward_function(f"{path}:compute_score")
    assert path in str(info.value)
    assert "helper, score" in str(info.value)


def test_missing_default_main(write_reward_file) -> None:
    path = write_reward_file(SEQUENTIAL)
    with pytest.raises(RewardFunctionLoadError, match="has no function 'main'"):
        load_reward_function(path)


def test_not_callable(write_reward_file) -> None:
    path = write_reward_file("score = 3\n")
    with pytest.raises(RewardFunctionLoadError, match="'score' in .* is a int, not a function"):
        load_reward_function(f"{path}:score")


def test_unknown_reward_type(write_reward_file) -> None:
    path = write_reward_file("REWARD_TYPE = 'parallel'\n" + SEQUENTIAL)
    with pytest.raises(RewardFunctionLoadError, match="REWARD_TYPE='parallel' .* is not one of sequential, batch"):
        load_reward_function(f"{path}:score")


# A file without REWARD_TYPE: the first parameter decides when its name and annotation agree (EasyR1 files name it
# reward_inputs / reward_input), else the sequential default stands.
@pytest.mark.parametrize(
    "source, reward_type, how",
    [
        ("def score(reward_inputs, format_weight=0.1):", "batch", "inferred"),
        ("def score(samples: list[dict]):", "batch", "inferred"),
        ("from typing import Any, List\ndef score(samples: List[dict[str, Any]]):", "batch", "inferred"),
        ("from collections.abc import Sequence\ndef score(samples: Sequence[dict], /):", "batch", "inferred"),
        ("from __future__ import annotations\ndef score(group: list[Undefined]):", "batch", "inferred"),
        ("def score(reward_input):", "sequential", "inferred"),
        ("from verl.rewards.function import RewardInput\ndef score(x: RewardInput):", "sequential", "inferred"),
        ("def score(sample):", "sequential", "defaulted"),
        ("def score(reward_inputs: dict):", "sequential", "defaulted"),  # name and annotation disagree: no guess
        ("def score(samples: str):", "sequential", "defaulted"),
        ("def score(*samples):", "sequential", "defaulted"),
    ],
)
def test_reward_type_without_declaration(write_reward_file, source: str, reward_type: str, how: str) -> None:
    path = write_reward_file(source + "\n    return None\n")
    function = load_reward_function(f"{path}:score")
    assert (function.reward_type, function.reward_type_source) == (reward_type, how)


def test_declared_reward_type_wins_over_the_signature(write_reward_file, caplog) -> None:
    path = write_reward_file("REWARD_TYPE = 'sequential'\ndef score(reward_inputs: list):\n    return None\n")
    function = load_reward_function(f"{path}:score")
    assert (function.reward_type, function.reward_type_source) == ("sequential", "declared")
    assert "REWARD_TYPE='sequential', but the first parameter of its function looks like a list" in caplog.text


# An EasyR1 batch function whose parameter name says nothing, in a file without REWARD_TYPE: called with one dict,
# it iterates over the dict's keys.
UNDECLARED_BATCH_RAISES = """
def score(batch):
    return [{"overall": float(item["response_length"])} for item in batch]
"""
UNDECLARED_BATCH_RETURNS_LIST = """
def score(batch):
    return [{"overall": 1.0} for _ in batch]
"""


def test_undeclared_batch_function_that_raises_is_told_to_set_reward_type(write_reward_file) -> None:
    path = write_reward_file(UNDECLARED_BATCH_RAISES)
    function = load_reward_function(f"{path}:score")
    with pytest.raises(RewardFunctionError, match="raised TypeError on sample 0") as info:
        score_sequential(function, SAMPLES)
    message = str(info.value)
    assert f'set REWARD_TYPE = "batch" in {path}' in message
    assert "no REWARD_TYPE in the file" in message and message.splitlines()[-1].startswith("TypeError: ")


def test_undeclared_batch_function_that_returns_a_list_is_told_to_set_reward_type(write_reward_file) -> None:
    path = write_reward_file(UNDECLARED_BATCH_RETURNS_LIST)
    function = load_reward_function(f"{path}:score")
    with pytest.raises(RewardFunctionError, match=r"returned for sample 0 \(uid u0\) a list") as info:
        check_scores(function, score_sequential(function, SAMPLES), SAMPLES)
    assert f'set REWARD_TYPE = "batch" in {path}' in str(info.value)
    assert str(info.value).endswith(".")


@pytest.mark.parametrize(
    "source",
    [
        "REWARD_TYPE = 'sequential'\ndef score(sample):\n    return sample['response'] + 1\n",  # declared
        "def score(sample):\n    raise ValueError('bad answer')\n",  # not an error a list argument would cause
    ],
)
def test_genuine_sequential_errors_get_no_reward_type_hint(write_reward_file, source: str) -> None:
    function = load_reward_function(f"{write_reward_file(source)}:score")
    with pytest.raises(RewardFunctionError, match="Fix the function") as info:
        score_sequential(function, SAMPLES)
    assert "REWARD_TYPE" not in str(info.value)


def test_import_failure_is_chained(write_reward_file) -> None:
    path = write_reward_file("import package_that_is_not_installed\n" + SEQUENTIAL)
    with pytest.raises(RewardFunctionLoadError, match="importing .* failed with ModuleNotFoundError") as info:
        load_reward_function(f"{path}:score")
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


@pytest.mark.parametrize(
    "kwargs, problem",
    [
        ({"scale": 1.0, "malus": 2.0}, "unexpected keyword argument 'malus'"),
        ({}, "missing a required argument: 'scale'"),
    ],
)
def test_kwargs_must_fit_the_signature(write_reward_file, kwargs: dict, problem: str) -> None:
    path = write_reward_file("def score(sample, *, scale):\n    return {'overall': scale}\n")
    with pytest.raises(RewardFunctionLoadError, match=problem):
        load_reward_function(f"{path}:score", kwargs)


def test_check_reward_function_accepts_the_examples() -> None:
    check_reward_function(os.path.join(EXAMPLES, "math.py:compute_score"))
    check_reward_function(os.path.join(EXAMPLES, "r1v.py:compute_score"))
    check_reward_function(
        os.path.join(EXAMPLES, "dapo.py:compute_score"), {"max_response_length": 64, "overlong_buffer_len": 16}
    )
    with pytest.raises(RewardFunctionLoadError, match="max_response_length"):
        check_reward_function(os.path.join(EXAMPLES, "dapo.py:compute_score"))


def test_a_file_s_check_setup_runs_before_training_with_the_kwargs(write_reward_file) -> None:
    source = (
        "def check_setup(backend='local', **kwargs):\n"
        "    if backend != 'local':\n"
        "        raise RuntimeError(f'backend {backend} is not installed here')\n"
        "def score(sample, backend='local'):\n    return {'overall': 1.0}\n"
    )
    path = write_reward_file(source)
    check_reward_function(f"{path}:score")
    with pytest.raises(RewardFunctionLoadError, match=r"cannot run on this machine: backend remote is not installed"):
        check_reward_function(f"{path}:score", {"backend": "remote"})


def test_check_setup_is_the_files_own_whatever_the_function_is(write_reward_file, tmp_path) -> None:
    """check_setup was read from the function's globals: a functools.partial or a callable object (which load and
    score) crashed the config check with an AttributeError, and a function imported from a library ran the library's
    check_setup instead of the file's. A check_setup that takes none of the kwargs says so."""
    (tmp_path / "scoring_lib.py").write_text("def score(sample):\n    return {'overall': 1.0}\n")
    imported = write_reward_file(
        f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\nfrom scoring_lib import score\n"
        "def check_setup(**kwargs):\n    raise RuntimeError('the sandbox is missing')\n",
        "imported.py",
    )
    with pytest.raises(RewardFunctionLoadError, match="cannot run on this machine: the sandbox is missing"):
        check_reward_function(f"{imported}:score")
    forms = write_reward_file(
        "import functools\n"
        "def _score(sample, weight):\n    return {'overall': weight}\n"
        "partial_score = functools.partial(_score, weight=0.5)\n"
        "class Scorer:\n    def __call__(self, sample):\n        return {'overall': 0.25}\n"
        "object_score = Scorer()\n"
        "class AsyncScorer:\n    async def __call__(self, sample):\n        return {'overall': 0.75}\n"
        "async_object_score = AsyncScorer()\n",
        "forms.py",
    )
    for name, value in (("partial_score", 0.5), ("object_score", 0.25), ("async_object_score", 0.75)):
        check_reward_function(f"{forms}:{name}")
        loaded = load_reward_function(f"{forms}:{name}")
        assert score_sequential(loaded, [{}, {}]) == [{"overall": value}] * 2, name
    strict = write_reward_file(
        "def check_setup():\n    pass\ndef score(sample, weight=1.0):\n    return {'overall': weight}\n", "strict.py"
    )
    with pytest.raises(
        RewardFunctionLoadError, match=r"check_setup in .*strict.py cannot take .*\(weight\).*\*\*kwargs"
    ):
        check_reward_function(f"{strict}:score", {"weight": 0.5})


def test_two_files_with_the_same_function_name_stay_apart(write_reward_file) -> None:
    first = load_reward_function(write_reward_file("def main(s):\n    return {'overall': 1.0}\n", "a.py"))
    second = load_reward_function(write_reward_file("def main(s):\n    return {'overall': 2.0}\n", "b.py"))
    assert (first({}), second({})) == ({"overall": 1.0}, {"overall": 2.0})


def test_a_file_runs_once_per_process_until_it_changes(write_reward_file, tmp_path) -> None:
    """The driver loads the reward file for the config check and again for training: its top level (a model loaded
    there, a counter) ran each time. A changed file runs again."""
    runs = tmp_path / "runs.txt"
    source = f"open({str(runs)!r}, 'a').write('x')\ndef main(s):\n    return {{'overall': {{}}}}\n"
    path = write_reward_file(source.replace("{}", "1.0"))
    check_reward_function(path, {})
    first, second = load_reward_function(path), load_reward_function(path)
    assert runs.read_text() == "x"
    assert first.function is second.function
    write_reward_file(source.replace("{}", "2.0"))
    assert load_reward_function(path)({}) == {"overall": 2.0}
    assert runs.read_text() == "xx"


# ------------------------------------------------------------------ scoring and output checks


@pytest.fixture
def function(write_reward_file):
    return load_reward_function(f"{write_reward_file(SEQUENTIAL)}:score")


SAMPLES = [{"response": "a", "uid": "u0"}, {"response": "bb", "uid": "u1"}]


def test_check_scores_converts_numbers_to_float_columns(function) -> None:
    scores = [
        {"overall": 1, "format": True, "accuracy": np.float32(0.5)},
        {"overall": np.int64(0), "format": np.bool_(False), "accuracy": 0.25},
    ]
    columns = check_scores(function, scores, SAMPLES)
    assert columns == {"overall": [1.0, 0.0], "format": [1.0, 0.0], "accuracy": [0.5, 0.25]}
    assert all(type(value) is float for values in columns.values() for value in values)
    # a bare number is the overall reward alone, as verl's functions return it (it was an error)
    assert check_scores(function, [1, np.float32(0.5)], SAMPLES) == {"overall": [1.0, 0.5]}


@pytest.mark.parametrize(
    "scores, index, message",
    [
        ([{"overall": 1.0}], None, "returned 1 scores for 2 samples"),
        ([{"overall": 1.0}] * 3, None, "returned 3 scores for 2 samples"),
        ({"overall": [1.0, 1.0]}, None, "returned a dict for a batch of 2 samples"),
        ([{"overall": 1.0}, "0.5"], 1, "sample 1 \\(uid u1\\) a str"),
        ([{"overall": 1.0, "accuracy": 1.0}, 0.5], 1, "keys \\['overall'\\], but sample 0 returned"),
        ([{"overall": 1.0}, {"accuracy": 1.0}], 1, "without 'overall'"),
        ([{"overall": float("nan")}, {"overall": 1.0}], 0, "sample 0 \\(uid u0\\) 'overall': nan"),
        ([{"overall": 1.0, "f": 0.0}, {"overall": 1.0, "f": -math.inf}], 1, "'f': -inf; rewards must be finite"),
        # finite in Python, infinite in the trainer's float32 scores (NaN advantages); an int past float's range
        ([{"overall": 1.0}, {"overall": 1e39}], 1, "'overall': 1e\\+39 \\(beyond float32's range"),
        ([{"overall": -(10**400)}, {"overall": 1.0}], 0, "'overall': -inf; rewards must be finite"),
        ([{"overall": 1.0}, {"overall": "1.0"}], 1, "'overall': '1.0' of type str"),
        ([{"overall": 1.0}, {"overall": None}], 1, "of type NoneType"),
        ([{"overall": 1.0, "format": 1.0}, {"overall": 1.0}], 1, "keys \\['overall'\\], but sample 0 returned"),
        ([{"overall": 1.0, 3: 1.0}, {"overall": 1.0}], 0, "every key must be a string"),
    ],
)
def test_check_scores_rejects(function, scores, index: int | None, message: str) -> None:
    with pytest.raises(RewardFunctionError, match=message) as info:
        check_scores(function, scores, SAMPLES)
    assert info.value.sample_index == index
    assert "reward function 'score' in" in str(info.value)
    assert str(info.value).endswith(".")


def test_exception_in_sequential_function_names_the_sample(write_reward_file) -> None:
    path = write_reward_file("""
        def score(sample):
            if sample["response"] == "bad":
                raise ValueError("cannot parse")
            return {"overall": 1.0}
    """)
    function = load_reward_function(f"{path}:score")
    samples = [{"response": "ok", "uid": "g0"}, {"response": "bad", "uid": "g1"}]
    with pytest.raises(RewardFunctionError, match="'score' in .* raised ValueError on sample 4 \\(uid g1\\)") as info:
        score_sequential(function, samples, start=3)
    assert info.value.sample_index == 4
    assert isinstance(info.value.__cause__, ValueError)
    assert str(info.value.__cause__) == "cannot parse"
    # the message carries where the function raised (it crosses processes, where a traceback does not): the user's
    # frames only, from the function down to the raising line
    where = str(info.value).split("where it raised (most recent call last):\n")[1]
    assert where.startswith(f'  File "{path}", line 4, in score') and "verl" + os.sep not in where, where
    assert where.endswith('raise ValueError("cannot parse")\nValueError: cannot parse'), where


def test_exception_in_batch_function(write_reward_file) -> None:
    path = write_reward_file("REWARD_TYPE = 'batch'\ndef score(samples):\n    return 1 / 0\n")
    function = load_reward_function(f"{path}:score")
    with pytest.raises(RewardFunctionError, match="raised ZeroDivisionError on a batch of 2 samples") as info:
        score_batch(function, SAMPLES)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    message = str(info.value)  # where it raised, in the function's file
    assert f'File "{path}", line 3, in score\n    return 1 / 0\n' in message, message
    assert message.endswith("ZeroDivisionError: division by zero") and "verl" + os.sep not in message, message


def test_sys_exit_while_importing_or_checking_the_file_is_a_load_error(write_reward_file) -> None:
    path = write_reward_file("import sys\nsys.exit(0)\ndef score(sample):\n    return {'overall': 1.0}\n")
    with pytest.raises(RewardFunctionLoadError, match=r"importing .* failed with SystemExit: it called sys.exit\(0\)"):
        check_reward_function(f"{path}:score")
    path = write_reward_file(
        "def check_setup():\n    exit()\ndef score(sample):\n    return {'overall': 1.0}\n", name="setup.py"
    )
    with pytest.raises(RewardFunctionLoadError, match=r"cannot run on this machine: it called sys.exit\(None\)"):
        check_reward_function(f"{path}:score")


def test_a_function_in_verls_signature_is_called_one_sample_at_a_time(write_reward_file) -> None:
    """verl's `compute_score(solution_str, ground_truth, ...)`: the arguments by name, one sample per call; a number
    becomes `overall`. A REWARD_TYPE that says batch contradicts it."""
    path = write_reward_file("""
        def compute_score(solution_str, ground_truth, method="strict", format_score=0.0, score=1.0):
            return score if solution_str.strip() == ground_truth else format_score
    """)
    function = load_reward_function(f"{path}:compute_score", {"format_score": 0.1})
    assert (function.reward_type, function.verl_arguments) == ("sequential", ("solution_str", "ground_truth"))
    assert "takes verl's arguments (solution_str, ground_truth)" in function.reward_type_note
    samples = [{"response": " 4", "ground_truth": "4"}, {"response": "5", "ground_truth": "4"}]
    scores = score_sequential(function, samples)
    assert check_scores(function, scores, samples) == {"overall": [1.0, 0.1]}
    batch = write_reward_file(
        'REWARD_TYPE = "batch"\ndef compute_score(solution_str, ground_truth):\n    return 0.0\n'
    )
    with pytest.raises(RewardFunctionLoadError, match="takes verl's arguments .* sets REWARD_TYPE='batch'; remove it"):
        load_reward_function(f"{batch}:compute_score")
