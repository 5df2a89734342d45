# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The reward manager: per-sample inputs from a rollout batch, parallel scoring, score placement, metrics."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from tests.processes import alive, wait_gone
from verl.rewards.function import RewardFunctionError, RewardFunctionLoadError, load_reward_function
from verl.rewards.manager import FunctionRewardManager, build_reward_inputs, place_scores
from verl.workers.config import RewardConfig


LENGTH_REWARD = """
def score(sample, scale=1.0):
    return {"overall": scale * sample["response_length"], "chars": float(len(sample["response"]))}
"""

# Uses every field of the input, so equal results from the pool and inline mean equal inputs too.
EVERYTHING_REWARD = """
def score(sample):
    extra = sample["extra_info"]
    return {
        "overall": float(sample["response"] == sample["ground_truth"]) + 0.01 * sample["response_length"],
        "prompt_chars": float(len(sample["prompt"])),
        "difficulty": float(extra["difficulty"]),
        "uid_number": float(sample["uid"].removeprefix("group-")),
        "images": float(len((sample["multi_modal_data"] or {}).get("images", []))),
    }
"""


def manager_for(path: str, tokenizer, **config) -> FunctionRewardManager:
    return FunctionRewardManager(RewardConfig(reward_function=path, **config), tokenizer)


def test_score_lands_on_the_last_valid_response_token(make_batch, write_reward_file, tokenizer) -> None:
    batch = make_batch(["Q1", "Q2", "Q3"], ["four", "the answer is five", "red green blue"], stop=[True, True, False])
    manager = manager_for(f"{write_reward_file(LENGTH_REWARD)}:score", tokenizer)
    reward_tensor, metrics = manager.compute_reward(batch)

    lengths = batch.batch["response_mask"].sum(-1)
    assert reward_tensor.dtype == torch.float32
    assert reward_tensor.shape == batch.batch["responses"].shape
    expected = torch.zeros_like(reward_tensor)
    expected[torch.arange(3), lengths - 1] = lengths.float()
    torch.testing.assert_close(reward_tensor, expected, rtol=0, atol=0)
    assert metrics["overall"] == lengths.float().tolist()
    assert metrics["chars"] == [float(len(text)) for text in ("four", "the answer is five", "red green blue")]


def test_place_scores_handles_empty_and_full_responses() -> None:
    mask = torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    rewards = place_scores([0.5, -1.0, 2.0], mask)
    assert rewards.tolist() == [[0.5, 0, 0, 0], [0, 0, 0, -1.0], [0, 2.0, 0, 0]]


def test_kwargs_reach_the_function(make_batch, write_reward_file, tokenizer) -> None:
    batch = make_batch(["Q"], ["abc"])
    config = {"reward_function_kwargs": {"scale": 10.0}}
    _, metrics = manager_for(f"{write_reward_file(LENGTH_REWARD)}:score", tokenizer, **config).compute_reward(batch)
    assert metrics["overall"] == [10.0 * batch.batch["response_mask"].sum().item()]


POPPING_REWARD = """
def score(sample):
    answers, seen = sample["ground_truth"], sample["extra_info"]["seen"]
    seen.append(1)
    return {"overall": float(answers.pop(0) == "4"), "seen": float(len(seen))}
"""


def test_a_function_that_changes_its_input_leaves_the_other_samples_of_its_prompt_alone(
    make_batch, write_reward_file, tokenizer
) -> None:
    """The n samples of a prompt share its row's objects (DataProto.repeat): a function that popped the answer from
    a list scored the first sample 1 and the others 0 (or raised), and changed the batch's column."""
    row = make_batch(["Q"], ["4"], non_tensors={"ground_truth": [["4", "5"]], "seen": [[]]})
    batch = row.repeat(3, interleave=True)
    assert batch.non_tensor_batch["ground_truth"][0] is batch.non_tensor_batch["ground_truth"][2]  # shared
    _, metrics = manager_for(f"{write_reward_file(POPPING_REWARD)}:score", tokenizer).compute_reward(batch)
    assert metrics["overall"] == [1.0, 1.0, 1.0] and metrics["seen"] == [1.0, 1.0, 1.0]
    assert (
        list(batch.non_tensor_batch["ground_truth"][0]) == ["4", "5"] and list(batch.non_tensor_batch["seen"][0]) == []
    )


def test_reward_inputs_carry_the_whole_sample(make_batch, tokenizer) -> None:
    image = np.zeros((2, 2, 3), dtype=np.uint8)
    batch = make_batch(
        ["What is 2+2?", "Name the color."],
        ["4", "red"],
        non_tensors={
            "ground_truth": ["4", "blue"],
            "uid": ["group-0", "group-1"],
            "multi_modal_data": [None, {"images": [image]}],
            "difficulty": [np.int64(3), 7],
            "data_source": ["gsm8k", "colors"],
            "prompt_messages": [None, [{"role": "user", "content": "Name the color."}]],
            "raw_prompt_ids": [[1, 2], [3]],
            "multi_modal_inputs": [{}, {"pixel_values": "not for the reward function"}],
        },
    )
    first, second = build_reward_inputs(batch, tokenizer)
    assert first == {
        "response": "4",
        "response_length": len(tokenizer.encode("4")) + 1,  # + EOS
        "response_ids": tokenizer.encode("4", add_special_tokens=False) + [tokenizer.eos_token_id],
        "ground_truth": "4",
        "prompt": "What is 2+2?",
        "prompt_messages": None,  # the row's prompt was a string
        "multi_modal_data": None,
        "uid": "group-0",
        "extra_info": {"difficulty": 3, "data_source": "gsm8k"},
    }
    assert type(first["extra_info"]["difficulty"]) is int  # numpy scalars become Python scalars
    assert second["multi_modal_data"]["images"][0] is image
    assert (second["response"], second["ground_truth"], second["uid"]) == ("red", "blue", "group-1")
    assert second["prompt_messages"] == [{"role": "user", "content": "Name the color."}]
    assert second["extra_info"] == {"difficulty": 7, "data_source": "colors"}


def test_special_tokens_and_prompt_sources(make_batch, tokenizer) -> None:
    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    batch = make_batch([prompt], ["hello"])
    decoded = build_reward_inputs(batch, tokenizer, skip_special_tokens=False)[0]
    assert decoded["response"] == "hello<|im_end|>"
    assert decoded["prompt"] == prompt  # decoded from the ids, chat markers kept

    messages = [{"role": "user", "content": "Hi"}]
    batch = make_batch([prompt], ["hello"], non_tensors={"prompt_text": ["Hi"], "raw_prompt": [messages]})
    sample = build_reward_inputs(batch, tokenizer)[0]
    assert (sample["response"], sample["prompt"]) == ("hello", "Hi")
    assert sample["extra_info"] == {"raw_prompt": messages}


def test_extra_columns_and_uid_reach_the_function(make_batch, write_reward_file, tokenizer) -> None:
    batch = make_batch(
        ["Q0", "Q1"],
        ["yes", "no"],
        non_tensors={
            "ground_truth": ["yes", "yes"],
            "uid": ["group-4", "group-9"],
            "difficulty": [0.5, 2.0],
            "multi_modal_data": [{"images": ["a.png", "b.png"]}, None],
        },
    )
    _, metrics = manager_for(f"{write_reward_file(EVERYTHING_REWARD)}:score", tokenizer).compute_reward(batch)
    assert metrics["difficulty"] == [0.5, 2.0]
    assert metrics["uid_number"] == [4.0, 9.0]
    assert metrics["images"] == [2.0, 0.0]
    assert metrics["prompt_chars"] == [2.0, 2.0]
    lengths = batch.batch["response_mask"].sum(-1).tolist()
    assert metrics["overall"] == pytest.approx([1 + 0.01 * lengths[0], 0.01 * lengths[1]])


# verl's custom reward signature, as in its docs: the file works unchanged
VERL_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    if data_source == "openai/gsm8k":
        return float(solution_str == ground_truth) + bonus
    return {"score": 0.5, "index": float(extra_info["index"]), "pred": solution_str[:3]}
"""


def test_a_function_in_verls_signature_works_unchanged(make_batch, write_reward_file, tokenizer) -> None:
    """verl calls compute_score(data_source, solution_str, ground_truth, extra_info) with the row's data_source and
    extra_info columns, and takes a float, or a dict whose `score` is the reward (non-numeric keys such as an
    extracted answer are not metrics here)."""
    batch = make_batch(
        ["Q0", "Q1", "Q2"],
        ["yes", "no", "maybe"],
        non_tensors={
            "ground_truth": ["yes", "yes", "yes"],
            "data_source": ["openai/gsm8k", "openai/gsm8k", "other"],
            "extra_info": [{"index": 0}, {"index": 1}, {"index": 7}],
        },
    )
    spec = f"{write_reward_file(VERL_REWARD)}:compute_score"
    manager = manager_for(spec, tokenizer, reward_function_kwargs={"bonus": 0.25})
    with pytest.raises(
        RewardFunctionError, match=r"for sample 2 keys \['index', 'overall'\], but sample 0 returned \['overall'\]"
    ):
        manager.compute_reward(batch)
    _, metrics = manager.compute_reward(batch[:2])
    assert metrics["overall"] == [1.25, 0.25]
    _, metrics = manager.compute_reward(batch[2:])
    assert metrics == {"overall": [0.5], "index": [7.0]}
    with pytest.raises(RewardFunctionLoadError, match="do not fit the signature"):
        manager_for(spec, tokenizer, reward_function_kwargs={"scale": 1.0})


# TRL's reward signature (GRPOTrainer's reward_funcs): lists by name, one float (or None) per completion
TRL_REWARDS = """
def accuracy(completions, solution, **kwargs):
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [None if s is None else float(t == s) for t, s in zip(texts, solution)]

def shapes(prompts, completions, difficulty):
    # without **kwargs: only what it names; 1 per message-list completion, + 10 per message-list prompt
    return [float(isinstance(c, list)) + 10 * isinstance(p, list) + d for p, c, d in zip(prompts, completions, difficulty)]

def overlong(completion_ids, **kwargs):
    # a length penalty on the token ids, as TRL's docs write one: the ids end with the EOS token where the reply stopped
    return [-0.1 * len(ids) - 100 * (ids[-1] != EOS) for ids in completion_ids]

def by_step(completions, trainer_state):
    return [0.0 for _ in completions]
"""


def test_a_function_in_trls_signature_works_unchanged(make_batch, write_reward_file, tokenizer) -> None:
    """TRL calls reward(prompts=..., completions=..., **columns) once per batch: a row whose prompt was given as
    messages gets its completion as [{"role": "assistant", ...}] (a multi-turn episode: its messages), the answers come
    under data.answer_key's name, every other column by its own, and a None reward counts 0."""
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q1"}]
    episode = [
        {"role": "assistant", "content": "<call>"},
        {"role": "tool", "content": "7"},
        {"role": "assistant", "content": "yes"},
    ]
    batch = make_batch(
        ["Q0", "Q1", "Q2"],
        ["yes", "yes", "no"],
        non_tensors={
            "ground_truth": ["yes", "yes", None],
            "prompt_messages": [None, conversation, conversation],
            "difficulty": [0.25, 0.5, 0.75],
            "episode_messages": [None, None, episode],
        },
    )
    path = write_reward_file(TRL_REWARDS)
    accuracy = manager_for(f"{path}:accuracy", tokenizer, answer_key="solution")
    assert accuracy.function.trl and accuracy.function.reward_type == "batch"
    assert "takes TRL's arguments" in accuracy.function.reward_type_note
    _, metrics = accuracy.compute_reward(batch)
    assert metrics == {"overall": [1.0, 1.0, 0.0]}  # the episode's last turn "yes" has no answer: None, so 0
    _, metrics = manager_for(f"{path}:shapes", tokenizer).compute_reward(batch)
    assert metrics["overall"] == [0.25, 11.5, 11.75]
    ids = [tokenizer.encode(text, add_special_tokens=False) for text in ("yes", "yes", "no")]
    overlong = write_reward_file(f"EOS = {tokenizer.eos_token_id}\n" + TRL_REWARDS, "overlong.py")
    _, metrics = manager_for(f"{overlong}:overlong", tokenizer).compute_reward(batch)
    assert metrics["overall"] == pytest.approx([-0.1 * (len(row) + 1) for row in ids])  # the EOS token counted
    with pytest.raises(RewardFunctionLoadError, match="takes TRL's trainer_state, which this trainer does not pass"):
        manager_for(f"{path}:by_step", tokenizer)
    text_only = [{"response": "yes", "response_ids": None, "prompt": "Q0", "ground_truth": "no", "extra_info": {}}]
    with pytest.raises(RewardFunctionError, match="overlong takes TRL's completion_ids, and these samples have text"):
        load_reward_function(f"{overlong}:overlong")(text_only)
    assert load_reward_function(f"{path}:accuracy", answer_key="solution")(text_only) == [{"overall": 0.0}]
    with pytest.raises(RewardFunctionLoadError, match="do not fit the signature"):
        manager_for(f"{path}:shapes", tokenizer, reward_function_kwargs={"scale": 2.0})
    sequential = write_reward_file('REWARD_TYPE = "sequential"\n' + TRL_REWARDS)  # the same file, rewritten
    with pytest.raises(RewardFunctionLoadError, match="REWARD_TYPE='sequential'; remove it"):
        manager_for(f"{sequential}:accuracy", tokenizer)


ASYNC_REWARDS = """
import asyncio
in_flight = peak = 0

async def judge(sample):  # e.g. a request to a grading service per sample
    global in_flight, peak
    in_flight += 1
    peak = max(peak, in_flight)
    await asyncio.sleep(0.01)
    in_flight -= 1
    if sample["response"] == "boom":
        raise ValueError("the service said no")
    return {"overall": float(sample["response"] == sample["ground_truth"]), "peak": float(peak)}

async def trl_judge(completions, **kwargs):
    await asyncio.sleep(0)
    return [float(len(c)) for c in completions]

async def verl_judge(solution_str, ground_truth):
    await asyncio.sleep(0)
    return {"score": float(solution_str == ground_truth), "pred_length": len(solution_str)}
"""


def test_async_functions_score_a_batchs_samples_concurrently(make_batch, write_reward_file, tokenizer) -> None:
    """`async def` reward functions (ours, TRL's and verl's signatures): a sequential one gets every sample of the
    batch at once (the first sample's peak in-flight count is the batch size), and an error names its sample."""
    answers = ["yes", "no", "yes", "yes", "no", "yes"]
    batch = make_batch([f"Q{i}" for i in range(6)], answers, non_tensors={"ground_truth": ["yes"] * 6})
    path = write_reward_file(ASYNC_REWARDS)
    judge = manager_for(f"{path}:judge", tokenizer)
    assert judge.function.is_async
    _, metrics = judge.compute_reward(batch)
    assert metrics["overall"] == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert metrics["peak"][-1] == 6.0  # all six were awaited together
    failing = make_batch(["Q0", "Q1", "Q2"], ["yes", "yes", "boom"], non_tensors={"ground_truth": ["yes"] * 3})
    with pytest.raises(RewardFunctionError, match="raised ValueError on sample 2: the service said no"):
        judge.compute_reward(failing)
    _, metrics = manager_for(f"{path}:trl_judge", tokenizer).compute_reward(batch)
    assert metrics["overall"] == [float(len(answer)) for answer in answers]
    _, metrics = manager_for(f"{path}:verl_judge", tokenizer).compute_reward(batch)
    assert metrics == {"overall": [1.0, 0.0, 1.0, 1.0, 0.0, 1.0], "pred_length": [3.0, 2.0, 3.0, 3.0, 2.0, 3.0]}


def test_parallel_scoring_equals_inline(make_batch, write_reward_file, tokenizer) -> None:
    responses = ["yes", "no", "maybe", "yes yes", "42", "blue", "x", "yes"]
    batch = make_batch(
        [f"Q{i}" for i in range(8)],
        responses,
        stop=[i % 3 != 0 for i in range(8)],
        non_tensors={
            "ground_truth": ["yes"] * 8,
            "uid": [f"group-{i // 2}" for i in range(8)],
            "difficulty": list(range(8)),
            "multi_modal_data": [None] * 8,
        },
    )
    path = f"{write_reward_file(EVERYTHING_REWARD)}:score"
    inline = manager_for(path, tokenizer, num_cpus=1)
    parallel = manager_for(path, tokenizer, num_cpus=2)
    try:
        assert parallel._pool is not None and inline._pool is None
        inline_rewards, inline_metrics = inline.compute_reward(batch)
        parallel_rewards, parallel_metrics = parallel.compute_reward(batch)
        assert parallel_metrics == inline_metrics
        torch.testing.assert_close(parallel_rewards, inline_rewards, rtol=0, atol=0)
    finally:
        parallel.close()


def test_sequential_function_runs_in_parallel_processes(make_batch, write_reward_file, tokenizer, tmp_path) -> None:
    # Each call waits until two different processes have checked in: this only finishes if samples run concurrently.
    path = write_reward_file("""
        import os, time

        def meet(sample, sync_dir):
            open(os.path.join(sync_dir, str(os.getpid())), "w").close()
            deadline = time.monotonic() + 60
            while len(os.listdir(sync_dir)) < 2:
                if time.monotonic() > deadline:
                    raise TimeoutError("no second process showed up")
                time.sleep(0.01)
            return {"overall": float(sample["response_length"]), "pid": float(os.getpid())}
    """)
    sync_dir = tmp_path / "sync"
    sync_dir.mkdir()
    batch = make_batch(["Q"] * 4, ["a", "bb", "ccc", "dddd"])
    manager = manager_for(f"{path}:meet", tokenizer, num_cpus=2, reward_function_kwargs={"sync_dir": str(sync_dir)})
    try:
        _, metrics = manager.compute_reward(batch)
    finally:
        manager.close()
    assert metrics["overall"] == batch.batch["response_mask"].sum(-1).float().tolist()
    worker_pids = {float(entry.name) for entry in sync_dir.iterdir()}
    assert len(worker_pids) == 2
    assert set(metrics["pid"]) == worker_pids
    assert float(os.getpid()) not in worker_pids


def test_pool_workers_leave_ctrl_c_to_the_trainer(make_batch, write_reward_file, tokenizer) -> None:
    # Ctrl-C in a terminal reaches the pool's workers too; they keep scoring, and the trainer decides what happens.
    path = write_reward_file("import os\ndef score(sample):\n    return {'overall': 1.0, 'pid': float(os.getpid())}\n")
    # A process started in the background inherits SIGINT ignored, and so would the workers: start them as a
    # terminal's foreground process would.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    manager = manager_for(f"{path}:score", tokenizer, num_cpus=2)
    try:
        batch = make_batch(["Q"] * 4, ["a", "b", "c", "d"])
        _, before = manager.compute_reward(batch)
        workers = {int(pid) for pid in before["pid"]}
        for pid in workers:
            os.kill(pid, signal.SIGINT)
        time.sleep(0.5)
        assert all(alive(pid) for pid in workers)
        _, after = manager.compute_reward(batch)
        assert after["overall"] == [1.0] * 4
    finally:
        manager.close()
        signal.signal(signal.SIGINT, previous)


RAISES_ON_NO = """
def score(sample):
    if sample["response"] == "no":
        raise KeyError("missing rubric")
    return {"overall": 1.0}
"""


@pytest.mark.parametrize("num_cpus", [1, 2])
def test_exception_names_the_sample_inline_and_in_the_pool(make_batch, write_reward_file, tokenizer, num_cpus) -> None:
    batch = make_batch(["Q"] * 5, ["yes", "yes", "yes", "no", "yes"], non_tensors={"uid": list("abcde")})
    manager = manager_for(f"{write_reward_file(RAISES_ON_NO)}:score", tokenizer, num_cpus=num_cpus)
    try:
        with pytest.raises(RewardFunctionError, match="'score' in .* raised KeyError on sample 3 \\(uid d\\)") as info:
            manager.compute_reward(batch)
    finally:
        manager.close()
    assert info.value.sample_index == 3
    assert isinstance(info.value.__cause__, KeyError)


@pytest.mark.parametrize("num_cpus", [1, 2])
def test_bad_output_through_the_manager(make_batch, write_reward_file, tokenizer, num_cpus) -> None:
    path = write_reward_file("""
        def score(sample):
            return {"overall": float("inf") if sample["response"] == "no" else 1.0}
    """)
    manager = manager_for(f"{path}:score", tokenizer, num_cpus=num_cpus)
    try:
        with pytest.raises(RewardFunctionError, match="sample 1 'overall': inf") as info:
            manager.compute_reward(make_batch(["Q", "Q"], ["yes", "no"]))
    finally:
        manager.close()
    assert info.value.sample_index == 1


def test_batch_function(make_batch, write_reward_file, tokenizer) -> None:
    path = write_reward_file("""
        REWARD_TYPE = "batch"

        def score(samples):
            # a batch function sees the whole group, e.g. to rank responses against each other
            longest = max(sample["response_length"] for sample in samples)
            return [{"overall": float(sample["response_length"] == longest)} for sample in samples]
    """)
    batch = make_batch(["Q"] * 3, ["a", "a b c d", "a b"])
    rewards, metrics = manager_for(f"{path}:score", tokenizer, num_cpus=2).compute_reward(batch)
    assert metrics == {"overall": [0.0, 1.0, 0.0]}
    assert rewards.sum(-1).tolist() == [0.0, 1.0, 0.0]


# Written in the shape of EasyR1's batch examples (REWARD_NAME, no REWARD_TYPE since batch is EasyR1's default,
# a list of inputs named reward_inputs, keyword arguments after it).
EASYR1_STYLE_BATCH = """
from typing import Any

REWARD_NAME = "longest"


def compute_score(reward_inputs: list[dict[str, Any]], bonus: float = 0.0) -> list[dict[str, float]]:
    longest = max(reward_input["response_length"] for reward_input in reward_inputs)
    return [
        {"overall": float(reward_input["response_length"] == longest) + bonus, "accuracy": 1.0}
        for reward_input in reward_inputs
    ]
"""


@pytest.mark.parametrize("num_cpus", [1, 2])
def test_easyr1_batch_file_without_reward_type(make_batch, write_reward_file, tokenizer, num_cpus, caplog) -> None:
    path = write_reward_file(EASYR1_STYLE_BATCH)
    config = {"num_cpus": num_cpus, "reward_function_kwargs": {"bonus": 0.5}}
    caplog.set_level("INFO")
    manager = manager_for(f"{path}:compute_score", tokenizer, **config)
    try:
        assert manager.function.reward_type == "batch" and manager._pool is None
        rewards, metrics = manager.compute_reward(make_batch(["Q"] * 3, ["a", "a b c d", "a b"]))
    finally:
        manager.close()
    assert metrics == {"overall": [0.5, 1.5, 0.5], "accuracy": [1.0, 1.0, 1.0]}
    assert rewards.sum(-1).tolist() == [0.5, 1.5, 0.5]
    assert "inferred from the first parameter of compute_score" in caplog.text


@pytest.mark.parametrize("num_cpus", [1, 2])
def test_undeclared_batch_function_error_names_reward_type(make_batch, write_reward_file, tokenizer, num_cpus) -> None:
    path = write_reward_file("def score(group):\n    return [{'overall': 1.0} for _ in group]\n")
    manager = manager_for(f"{path}:score", tokenizer, num_cpus=num_cpus)
    try:
        with pytest.raises(RewardFunctionError, match=r'a list .*set REWARD_TYPE = "batch" in ') as info:
            manager.compute_reward(make_batch(["Q", "Q"], ["a", "b"]))
    finally:
        manager.close()
    assert info.value.sample_index == 0


def test_batch_function_returning_too_few(make_batch, write_reward_file, tokenizer) -> None:
    path = write_reward_file("REWARD_TYPE = 'batch'\ndef score(samples):\n    return [{'overall': 1.0}]\n")
    with pytest.raises(RewardFunctionError, match="returned 1 scores for 2 samples"):
        manager_for(f"{path}:score", tokenizer).compute_reward(make_batch(["Q", "Q"], ["a", "b"]))


def test_missing_reward_function_setting(tokenizer) -> None:
    with pytest.raises(RewardFunctionLoadError, match="worker.reward.reward_function is not set"):
        FunctionRewardManager(RewardConfig(), tokenizer)


def test_pool_workers_exit_with_their_parent(write_reward_file, tmp_path) -> None:
    # A reward actor killed by ray.kill gets no chance to close its pool: the workers must notice on their own.
    path = write_reward_file("def main(sample):\n    return {'overall': 1.0}\n")
    script = tmp_path / "parent.py"
    script.write_text(
        "import multiprocessing, os\n"
        "from verl.rewards.function import load_reward_function\n"
        "from verl.rewards.parallel import SequentialPool\n"
        "if __name__ == '__main__':\n"
        f"    pool = SequentialPool(load_reward_function({path!r}), 2)\n"
        "    assert pool.score([{}] * 4) == [{'overall': 1.0}] * 4\n"
        "    print(' '.join(str(child.pid) for child in multiprocessing.active_children()), flush=True)\n"
        "    os._exit(0)\n"
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True)
    worker_pids = [int(pid) for pid in result.stdout.split()]
    assert len(worker_pids) >= 2  # the two workers (and possibly the resource tracker)
    assert wait_gone(worker_pids, 30) == []


def test_a_closed_pool_leaves_no_semaphore_to_release_after_its_close(write_reward_file, tmp_path) -> None:
    """A reward actor (run_in=actor, num_cpus=2) printed an ignored BrokenPipeError at the end of a run that succeeded:
    `close` returned while the executor's manager thread still held the pool's queues (the first, non-waiting
    shutdown drops the executor's handle on it, so the waiting one joined nothing); their semaphores were released
    when that thread ended, which could be after ray.kill had killed the actor's child processes, multiprocessing's
    resource tracker among them, so telling the tracker failed. Closed, the pool holds nothing for it to end later:
    here the tracker is killed right after `close` (as ray.kill does) and nothing is printed."""
    path = write_reward_file("def main(sample):\n    return {'overall': 1.0}\n")
    script = tmp_path / "closing.py"
    script.write_text(
        "import gc, os, sys, threading\n"
        "from concurrent.futures.process import _ExecutorManagerThread\n"
        "import psutil\n"
        "from verl.rewards.function import load_reward_function\n"
        "from verl.rewards.parallel import SequentialPool\n"
        "if __name__ == '__main__':\n"
        f"    pool = SequentialPool(load_reward_function({path!r}), 2)\n"
        "    for _ in range(5):\n"
        "        assert pool.score([{}] * 4) == [{'overall': 1.0}] * 4\n"
        "        pool.close()\n"
        "        managers = [t for t in threading.enumerate() if isinstance(t, _ExecutorManagerThread)]\n"
        "        assert not managers, managers\n"
        "    for child in psutil.Process().children():  # ray.kill: the actor's children first, then its exit\n"
        "        child.kill()\n"
        "        child.wait()\n"
        "    gc.collect()\n"
        "    sys.stderr.flush()\n"
        "    os._exit(0)\n"
    )
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0 and "BrokenPipeError" not in result.stderr, result.stderr


def test_pool_workers_leave_the_drivers_group_and_a_pool_whose_worker_died_idle_starts_again(
    write_reward_file,
) -> None:
    """A signal to the launcher's process group (`timeout`, a closed terminal) is the driver's to handle: it killed the
    workers; and a pool whose worker died between steps raised a bare BrokenProcessPool on every later call (no save
    before the failed step, a traceback)."""
    from verl.rewards.parallel import SequentialPool

    path = write_reward_file("def main(sample):\n    return {'overall': 1.0}\n")
    pool = SequentialPool(load_reward_function(path), 2)
    try:
        assert pool.score([{}] * 4) == [{"overall": 1.0}] * 4
        pids = sorted(pool._worker_pids())
        assert pids and all(os.getpgid(pid) != os.getpgrp() for pid in pids)
        os.kill(pids[0], signal.SIGKILL)
        assert wait_gone(pids[:1], 5) == []
        deadline = time.monotonic() + 10
        while not pool._executor._broken and time.monotonic() < deadline:  # the manager thread's mark
            time.sleep(0.05)
        assert pool.score([{}] * 4) == [{"overall": 1.0}] * 4
    finally:
        pool.close()


def test_closing_the_pool_does_not_wait_on_a_hung_function(make_batch, write_reward_file, tokenizer, tmp_path) -> None:
    # The trainer gives up on a hung reward after worker.reward.timeout_s and closes the pool before it reports the
    # error: the close must kill the stuck worker rather than wait for it.
    hanging = tmp_path / "hanging"
    path = write_reward_file(f"""
        import os, time

        def score(sample):
            if sample["response"] == "hang":
                open({str(hanging)!r}, "w").close()
                time.sleep(3600)
            return {{"overall": 1.0, "pid": float(os.getpid())}}
    """)
    manager = manager_for(f"{path}:score", tokenizer, num_cpus=2)
    _, metrics = manager.compute_reward(make_batch(["Q"] * 2, ["a", "b"]))
    workers = {int(pid) for pid in metrics["pid"]}
    ended: list[BaseException] = []

    def score_the_hung_batch() -> None:
        try:
            manager.compute_reward(make_batch(["Q"] * 2, ["hang", "b"]))
        except BaseException as error:  # the call the close cut short
            ended.append(error)

    scoring = threading.Thread(target=score_the_hung_batch, daemon=True)
    scoring.start()
    deadline = time.monotonic() + 60
    while not hanging.exists():  # the hung chunk is inside the function now
        assert time.monotonic() < deadline, "the hung chunk never reached the function"
        time.sleep(0.05)
    closing = threading.Thread(target=manager.close, daemon=True)
    closing.start()
    closing.join(timeout=30)
    assert not closing.is_alive(), "closing the pool waited on the hung reward function"
    scoring.join(timeout=30)
    assert not scoring.is_alive()
    assert [type(error) for error in ended] == [RewardFunctionError]  # an error, neither a hang nor scores
    assert wait_gone(workers, 10) == []


EXITS_ON_NO = """
import sys

def score(sample):
    if sample["response"] == "no":
        sys.exit(0)  # e.g. an exec'd program or a helper that ends with exit()
    return {"overall": 1.0}
"""


@pytest.mark.parametrize("num_cpus", [1, 2])
def test_sys_exit_in_a_reward_function_stops_the_run_naming_function_and_sample(
    make_batch, write_reward_file, tokenizer, num_cpus
) -> None:
    """SystemExit(0) is no Exception: it used to pass through the reward thread to the trainer, which then exited
    with status 0 after the step, as a success, with no message."""
    batch = make_batch(["Q"] * 3, ["yes", "no", "yes"], non_tensors={"uid": list("abc")})
    manager = manager_for(f"{write_reward_file(EXITS_ON_NO)}:score", tokenizer, num_cpus=num_cpus)
    try:
        with pytest.raises(
            RewardFunctionError,
            match=r"'score' in .* raised SystemExit on sample 1 \(uid b\): it called sys.exit\(0\)",
        ) as info:
            manager.compute_reward(batch)
    finally:
        manager.close()
    assert info.value.sample_index == 1


def test_sys_exit_in_a_batch_reward_function_is_an_error(make_batch, write_reward_file, tokenizer) -> None:
    path = write_reward_file("REWARD_TYPE = 'batch'\ndef score(samples):\n    raise SystemExit(3)\n")
    manager = manager_for(f"{path}:score", tokenizer)
    with pytest.raises(RewardFunctionError, match=r"raised SystemExit on a batch of 2 samples .*sys.exit\(3\)"):
        manager.compute_reward(make_batch(["Q", "Q"], ["yes", "no"]))


def test_a_prompt_given_as_messages_reaches_reward_models_and_judges_as_its_user_turn():
    """A row's prompt given as messages (a system prompt, few-shot turns) kept them in `prompt_content`; the reward
    model and the judge got the whole templated prompt decoded instead, role names in their user turn."""
    import numpy as np

    from verl.protocol import DataProto
    from verl.rewards.manager import user_messages

    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1 + 1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "What is 29 plus 32?"},
    ]
    picture = [{"type": "image"}, {"type": "text", "text": "What colour is the car?"}]  # a VL prompt's parts
    contents = np.empty(4, dtype=object)
    contents[:] = [messages, "Plain prompt", picture, [*messages[:1], {"role": "user", "content": picture}]]
    data = DataProto.from_dict(non_tensors={"prompt_content": contents})
    # a VL prompt's parts were no text, and fell back to the decoded template (role names and all)
    car = "<image>What colour is the car?"
    assert user_messages(data, tokenizer=None) == ["What is 29 plus 32?", "Plain prompt", car, car]


def test_a_pool_scored_from_several_threads_at_once_starts_once(write_reward_file) -> None:
    """Streamed rewards (worker.reward.stream, async modes) score each completed group in a thread of its own: with
    num_cpus > 1 two groups reaching the pool before it had started each started one, the first one's queue was
    dropped, and its workers died unpickling it ("A worker process of the reward pool ... died")."""
    from verl.rewards.parallel import SequentialPool

    path = write_reward_file("import time\n\ndef main(sample):\n    time.sleep(0.01)\n    return {'overall': 1.0}\n")
    pool = SequentialPool(load_reward_function(path), 2)
    results: list = []
    errors: list = []
    start = threading.Barrier(4)

    def score() -> None:
        start.wait()
        try:
            results.append(pool.score([{}] * 4))
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=score) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == [] and results == [[{"overall": 1.0}] * 4] * 4
        assert len(pool._worker_pids()) == 2
    finally:
        pool.close()
