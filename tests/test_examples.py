# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The example configs and recipes resolve and validate (what `--dry-run` checks), run from the repository root."""

import glob
import json
import os
import subprocess
import sys
import tempfile

import pytest

from verl.trainer.config import load_config
from verl.utils.config import ConfigError


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = sorted(glob.glob(os.path.join(REPO, "examples", "recipes", "*.sh")))


def recipe_args(path: str, *extra: str) -> list[str]:
    """The arguments a recipe passes to `python3 -m verl.trainer.main`, as bash expands them (its variables and
    defaults included): the recipe runs with a `python3` on PATH that only writes its arguments out."""
    with tempfile.TemporaryDirectory() as bin_dir:
        fake = os.path.join(bin_dir, "python3")
        with open(fake, "w", encoding="utf-8") as f:
            f.write("#!/bin/sh\nprintf '%s\\0' \"$@\"\n")
        os.chmod(fake, 0o755)
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        out = subprocess.run(["bash", path, *extra], env=env, capture_output=True, text=True, check=True).stdout
    words = out.split("\0")[:-1]
    assert words[:2] == ["-m", "verl.trainer.main"], words[:2]
    return words[2:]


def test_there_are_recipes_for_every_algorithm():
    names = " ".join(os.path.basename(path) for path in RECIPES)
    for algorithm in (
        "grpo",
        "dapo",
        "gspo",
        "cispo",
        "sapo",
        "gmpo",
        "reinforce_pp",
        "rloo",
        "ppo_gae",
        "multi_image",
        "async",
        "own_algorithm",
    ):
        assert algorithm in names, algorithm


@pytest.mark.parametrize("recipe", RECIPES, ids=os.path.basename)
def test_recipe_config_is_valid(recipe, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    args = recipe_args(recipe)
    if "multi_image" in recipe or "or1" in recipe:  # needs the user's own (or prepared) data, which the check names
        with pytest.raises(ConfigError, match="data.train_files"):
            load_config(args)
        if "or1" in recipe:  # data prepared by examples/recipes/prepare_or1_data.py: with it, the rest is valid
            prepared = tmp_path / "train.jsonl"
            prepared.write_text('{"prompt": "1 + 1?", "answer": "2", "data_source": "math"}\n')
            args = [arg for arg in args if not arg.startswith("data.train_files=")]
            config = load_config([*args, f"data.train_files={prepared}"])
            assert set(config.worker.reward.routes) == {"math", "code"}
            assert all(spec.startswith(REPO) for spec in config.worker.reward.routes.values())
            assert config.data.response_length_schedule[700] == config.data.max_response_length
            assert_validation_columns(config)
            assert_fits_the_model(config)
        return
    config = load_config(args)
    assert config.worker.reward.reward_function.startswith(REPO)
    assert config.data.format_prompt is None or os.path.isfile(config.data.format_prompt)
    assert_validation_columns(config)
    assert_fits_the_model(config)


MODEL_POSITIONS = {"Qwen/Qwen2.5-7B-Instruct": 32768, "Qwen/Qwen2.5-VL-7B-Instruct": 128000, "Qwen/Qwen3-4B": 40960}
"""max_position_embeddings of the hub models the recipes name (their config.json): the config check reads a local
model's, not a hub id's offline, so a recipe asking for more than its model takes passed here and failed at start."""


def assert_fits_the_model(config) -> None:
    model = config.worker.actor.model.model_path
    assert model in MODEL_POSITIONS, f"add {model}'s max_position_embeddings to MODEL_POSITIONS"
    assert config.data.max_prompt_length + config.data.max_response_length <= MODEL_POSITIONS[model], model


def assert_validation_columns(config) -> None:
    """One data.prompt_key / answer_key serves both files: a recipe that renames the columns of its training set
    must not keep the base config's validation set (math12k: `problem`, `answer`), which stopped the run at start."""
    base = load_config([f"config={REPO}/examples/config.yaml"]).data
    if config.data.val_files == base.val_files:
        assert (config.data.prompt_key, config.data.answer_key) == (base.prompt_key, base.answer_key)


def test_dapo_recipe_gives_its_reward_the_runs_response_budget(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("MAX_RESPONSE_LENGTH", "4096")
    config = load_config(recipe_args(os.path.join(REPO, "examples", "recipes", "qwen3_4b_math_dapo.sh")))
    assert config.data.max_response_length == 4096
    assert config.worker.reward.reward_function_kwargs["max_response_length"] == 4096
    assert config.worker.reward.reward_function_kwargs["overlong_buffer_len"] == 512
    # dynamic sampling filters on a key the reward returns in [0, 1] (its `overall` adds the length penalty: a
    # window of (0.01, 0.99) over it dropped every group with one to half of its answers right)
    from tests.repo_files import load_repo_file

    dapo = load_repo_file("examples/reward_function/dapo.py", "dapo_reward")
    kwargs = config.worker.reward.reward_function_kwargs
    algorithm = config.algorithm
    for response, length in (("Answer: 34", 1900), ("So", 4096)):  # right but long; cut off
        sample = {"response": response, "response_length": length, "ground_truth": "34", "prompt": ""}
        score = dapo.compute_score(sample, **kwargs)[algorithm.filter_key]
        assert algorithm.online_filtering and 0.0 <= score <= 1.0 and score == (response == "Answer: 34")


def test_prepare_or1_data_converts_verl_style_rows():
    from tests.repo_files import load_repo_file

    prepare = load_repo_file("examples/recipes/prepare_or1_data.py", "prepare_or1_data")
    rows = [
        {
            "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 1+1?"}],
            "reward_model": {"ground_truth": "2", "style": "rule"},
            "ability": "math",
        },
        {
            "prompt": [{"role": "user", "content": "Print a+b."}],
            "reward_model": {"ground_truth": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})},
            "data_source": "coder1",
        },
        {
            "prompt": "Write f.",
            "reward_model": {"ground_truth": json.dumps({"fn_name": "f", "inputs": [[1, [2]]], "outputs": [3]})},
            "ability": "code",
        },
    ]
    math_row, stdio_row, call_row = prepare.convert(rows)
    assert math_row == {"prompt": "What is 1+1?", "answer": "2", "data_source": "math"}
    assert stdio_row["data_source"] == "code" and json.loads(stdio_row["answer"])["outputs"] == ["3\n"]
    assert json.loads(call_row["answer"]) == {"fn_name": "f", "inputs": [[1, [2]]], "outputs": [3]}
    unnamed = {"fn_name": "", "inputs": ["1\n"], "outputs": ["1\n"]}
    assert json.loads(prepare.code_tests(json.dumps(unnamed))) == {"inputs": ["1\n"], "outputs": ["1\n"]}
    with pytest.raises(ValueError, match="row 0 of the source: cannot tell whether the row is math or code"):
        list(prepare.convert([{"prompt": "p", "answer": "1", "ability": "chat"}]))
    # a LeetCode row's tests (code to run against an entry point) are in no form the code reward runs: left out, said
    leetcode = {"import_prefix": "import math", "test_code": "def check(f): ...", "entry_point": "Solution().f"}
    leetcode_row = {"prompt": "Write f.", "answer": json.dumps(leetcode), "ability": "code"}
    skipped: list[str] = []
    assert list(prepare.convert([leetcode_row, rows[1]], "code", skipped=skipped)) == [stdio_row]
    assert len(skipped) == 1 and skipped[0].startswith("row 0 of code: ground_truth has keys ['entry_point',")
    with pytest.raises(ValueError, match="row 0 of code: ground_truth has keys"):
        list(prepare.convert([leetcode_row], "code"))


@pytest.mark.parametrize(
    "bad_row, message",
    [
        ({"prompt": [{"role": "system", "content": "s"}], "answer": "3", "ability": "math"}, "no user message"),
        ({"prompt": "p", "answer": "3", "ability": "chat"}, "cannot tell whether the row is math or code"),
    ],
)
def test_prepare_or1_data_stops_at_a_bad_row_in_one_line_writing_no_part_of_the_set(tmp_path, bad_row, message):
    """A row it cannot convert stopped the script with a traceback and left a train.jsonl of the rows before it,
    which the OR1 recipe then trained on as if it were the whole set."""
    source = tmp_path / "source.jsonl"
    good = {
        "prompt": [{"role": "user", "content": "1 + 1?"}],
        "reward_model": {"ground_truth": "2"},
        "ability": "math",
    }
    source.write_text("".join(json.dumps(row) + "\n" for row in (good, bad_row)))
    output = tmp_path / "or1"
    script = os.path.join(REPO, "examples", "recipes", "prepare_or1_data.py")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, script, "--source", str(source), "--output", str(output)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("prepare_or1_data: row 1 of the source: ") and message in last, last
    assert last.endswith(f"nothing was written to {output / 'train.jsonl'}."), last
    assert not (output / "train.jsonl").exists() and not list(output.glob("*.partial"))
    # a source it cannot read (here the hub, offline) is one line too
    command = [sys.executable, script, "--source", "no-such-owner/no-such-set", "--output", str(output)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith("prepare_or1_data: cannot read no-such-owner/no-such-set")


@pytest.mark.parametrize(
    "last_turn, answer, correct",
    [
        ("The product of 123 and 456 is 56,088.", "56088", 1.0),  # scored as 88: a right answer at 0
        ("6 * 7 = 42", "42", 1.0),
        ("So the result is -1,234.5", "-1234.5", 1.0),
        ("It is 1,2345", "12345", 0.0),  # no thousands separator: the numbers 1 and 2345
        ("12 times 3 is 36, which is the answer", "36", 1.0),
        ("I do not know", "42", 0.0),
    ],
)
def test_the_calculator_reward_reads_a_number_with_thousands_separators(last_turn, answer, correct):
    from tests.repo_files import load_repo_file

    calculator = load_repo_file("examples/envs/calculator.py", "example_calculator")
    sample = {"response": last_turn, "ground_truth": answer, "extra_info": {"last_turn": last_turn}}
    assert calculator.compute_score(sample)["accuracy"] == correct
