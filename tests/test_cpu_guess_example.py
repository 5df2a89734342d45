# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The CPU guess-the-number example (`make demo-guess`) end to end: games from 1 to 7 in 3 guesses, a warm start on
games played mostly at random inside the allowed interval (SFT), then GRPO in the GuessNumber environment, where the
tiny model's win rate goes up."""

import collections
import json
import os

import pytest

from tests.repo_files import load_repo_file
from verl.envs import load_environment
from verl.models.tiny_models import get_or_build_tiny_model
from verl.sft.config import load_sft_config
from verl.sft.main import run_sft
from verl.trainer.config import load_config
from verl.trainer.runner import run_ppo


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GAME = os.path.join(REPO, "examples", "envs", "guess_number.py")


def play(env, target: int, guesses: list[int]) -> tuple[dict, list[str]]:
    """Play `guesses` in the environment until it says done; returns the final state and its replies (one after each
    guess that did not end the game)."""
    state, replies = env.reset({"ground_truth": str(target)}), []
    for guess in guesses:
        step = env.step(state, str(guess))
        if step.done:
            break
        replies.append(step.messages[0]["content"])
    return state, replies


def test_games_are_balanced_and_the_warm_start_plays_them_validly(tmp_path):
    make_data = load_repo_file("examples/cpu_guess/make_data.py", "cpu_guess_make_data")
    make_data.write_split(str(tmp_path), "train", 70, seed=0)
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert collections.Counter(row["answer"] for row in rows) == {str(n): 10 for n in range(1, 8)}
    assert all(row["problem"] == make_data.PROMPT for row in rows)
    conversations = [json.loads(line)["messages"] for line in open(make_data.write_sft_split(str(tmp_path)))]
    assert len(conversations) == 4 * len(rows)
    env = load_environment(f"{GAME}:GuessNumber")
    first_guesses = collections.Counter()
    for index, messages in enumerate(conversations):
        target = int(rows[index // 4]["answer"])
        assert messages[0] == {"role": "user", "content": make_data.PROMPT}
        guesses = [int(m["content"]) for m in messages[1::2]]
        assert [m["role"] for m in messages[1::2]] == ["assistant"] * len(guesses)
        first_guesses[guesses[0]] += 1
        # the environment gives exactly the demonstrated feedback, and the game ends at the hit or the last turn
        state, replies = play(env, target, guesses)
        assert replies[: len(guesses) - 1] == [m["content"] for m in messages[2::2]]
        assert state["solved"] == (guesses[-1] == target)
        assert len(guesses) == make_data.MAX_TURNS or state["solved"]
        # each guess lies inside the interval the feedback so far allows
        low, high = make_data.LOW, make_data.HIGH
        for guess, reply in zip(guesses, [*replies, None]):
            assert low <= guess <= high
            low, high = (guess + 1, high) if reply == "higher" else (low, guess - 1)
    assert len(first_guesses) == 7 and first_guesses[4] == max(first_guesses.values())  # random, the middle favoured


def test_binary_search_wins_every_game_within_the_turn_budget():
    make_data = load_repo_file("examples/cpu_guess/make_data.py", "cpu_guess_make_data")
    game = load_repo_file("examples/envs/guess_number.py", "guess_number")
    env = load_environment(f"{GAME}:GuessNumber")
    for target in range(make_data.LOW, make_data.HIGH + 1):
        low, high, turns = make_data.LOW, make_data.HIGH, 0
        state = env.reset({"ground_truth": str(target)})
        while True:
            guess, turns = (low + high) // 2, turns + 1
            step = env.step(state, str(guess))
            if step.done:
                break
            low, high = (guess + 1, high) if step.messages[0]["content"] == "higher" else (low, guess - 1)
        assert state["solved"] and turns <= make_data.MAX_TURNS
        sample = {"extra_info": {"env_solved": 1.0, "env_turns": float(turns)}}
        assert game.compute_score(sample, per_turn=False) == {"overall": 1.0, "solved": 1.0}
        assert game.compute_score(sample)["overall"] == pytest.approx(1.0 / turns)


@pytest.mark.slow
def test_guess_example_learns_the_game(tmp_path, local_ray):
    """The example as `make demo-guess` runs it (same data, warm start and GRPO run), stopped after 30 of its 40
    steps to keep the suite short (114 s on an idle 2-core machine).

    Measured with these seeds (the numbers repeat run to run): validation win rate (448 sampled games) 0.511 before
    training, 0.788 after 30 steps (0.855 after the example's 40); training reward 0.41 over the first 5 steps, 0.84
    over steps 26-30. With two other seed sets (README, 40 steps): 0.469 -> 0.714 and 0.498 -> 0.996. The margins below
    are under 60% of the measured gains at step 30 (0.28 and 0.43); 448 validation games put the noise of a win rate at
    about 0.025.
    At step 20 the gain is only 0.11 with this warm start: too close to the noise to test there.
    """
    make_data = load_repo_file("examples/cpu_guess/make_data.py", "cpu_guess_make_data")
    data_dir = tmp_path / "data"
    make_data.write_split(str(data_dir), "train", 512, seed=0)
    make_data.write_split(str(data_dir), "val", 448, seed=1)
    make_data.write_sft_split(str(data_dir), "train", seed=0)
    model = get_or_build_tiny_model("qwen2", str(tmp_path / "cache"))
    warm = tmp_path / "warm_start"
    run_sft(
        load_sft_config(
            [
                f"config={REPO}/examples/cpu_guess/sft.yaml",
                f"data.train_files={data_dir / 'train_sft.jsonl'}",
                f"worker.model.model_path={model}",
                f"trainer.save_checkpoint_path={warm}",
            ]
        )
    )
    save = tmp_path / "run"
    config = load_config(
        [
            f"config={REPO}/examples/cpu_guess/config.yaml",
            f"data.train_files={data_dir / 'train.jsonl'}",
            f"data.val_files={data_dir / 'val.jsonl'}",
            f"worker.actor.model.model_path={warm / 'huggingface'}",
            f"trainer.save_checkpoint_path={save}",
            "trainer.logger=[file]",
            # the first 30 of the example's 40 steps (see the docstring)
            "trainer.max_steps=30",
            "trainer.val_freq=30",
        ]
    )
    run_ppo(config)
    rows = [json.loads(line) for line in (save / "experiment_log.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "critic/score/mean" in row]
    validations = [row for row in rows if "val/solved_reward" in row]
    assert [row["step"] for row in validations] == [0, 30]
    for row in steps:
        assert row["env/turns/mean"] > 1 and row["env/turns/mean"] <= 3  # multi-turn games within the budget
        assert row["reward/solved"] == pytest.approx(row["env/solved/mean"])
    first = sum(row["critic/score/mean"] for row in steps[:5]) / 5
    last = sum(row["critic/score/mean"] for row in steps[-5:]) / 5
    before, after = validations[0]["val/solved_reward"], validations[-1]["val/solved_reward"]
    assert 0.3 < before < 0.65, before  # the warm start wins about half of the games
    assert after > before + 0.15, (before, after)
    assert last > first + 0.15, (first, last)
