# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of scripts/train_reward_model.py that tests/rewards/test_reward_model.py leaves open (found by a mutation
audit of the script)."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.repo_files import load_repo_file
from verl.models.tiny_models import get_or_build_tiny_model


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "train_reward_model.py")
SMALL = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "intermediate_size": 128}


def test_a_tie_is_no_win_in_the_train_and_val_accuracy(tmp_path):
    """Accuracy counts the pairs whose chosen answer scores strictly above the rejected one: a pair of two identical
    answers scores the same twice, which is no win (a 0.5 chance guess is not 1.0)."""
    lm_dir = get_or_build_tiny_model("qwen2", str(tmp_path / "models"), **SMALL)
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"prompt": f"What is {i} + {i}?", "chosen": str(2 * i), "rejected": str(2 * i)} for i in range(4)]
    pairs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = ["--model", lm_dir, "--init-from-lm", "--train", str(pairs), "--val", str(pairs)]
    args += ["--output", str(tmp_path / "rm"), "--batch-size", "4", "--max-length", "64", "--device", "cpu"]
    proc = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["train_accuracy"] == 0.0 and result["val_accuracy_initial"] == 0.0 and result["val_accuracy"] == 0.0
    assert abs(result["train_loss"] - 0.6931) < 1e-3  # -log sigmoid(0): nothing to learn


def test_pair_messages_of_the_wrong_role_are_refused(tmp_path):
    """A conversational answer must be an assistant message, and an implicit-prompt conversation a user turn then
    its answer: the other way round, the answer would be scored as the question."""
    script = load_repo_file("scripts/train_reward_model.py")
    user, answer = {"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}
    wrong = {"role": "user", "content": "4"}
    for name, row, got in (
        ("explicit", {"prompt": "2 + 2?", "chosen": [wrong], "rejected": [answer]}, "['user']"),
        ("implicit", {"chosen": [answer, user], "rejected": [user, answer]}, "['assistant', 'user']"),
    ):
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps(row) + "\n")
        with pytest.raises(script.PairFileError, match=r"row 0, key 'chosen': must be .* got roles " + re.escape(got)):
            script.read_pairs(str(path))


def test_answers_that_are_numbers_are_their_text(tmp_path):
    """A CSV column whose cells are all plain numbers ("42") is read as numbers, as the trainer reads data files: the
    answers of a short-answer preference file were refused as "must be a string", naming a cell the user wrote as
    text. A number in JSON is its text too, as a numeric answer reaches a reward function; a bool is no answer."""
    script = load_repo_file("scripts/train_reward_model.py")
    path = tmp_path / "pairs.csv"
    path.write_text("prompt,chosen,rejected\nWhat is 6 * 7?,42,41\nWhat is 1 / 2?,0.5,2\n")
    assert script.read_pairs(str(path)) == [
        {"prompt": "What is 6 * 7?", "chosen": "42", "rejected": "41"},
        {"prompt": "What is 1 / 2?", "chosen": "0.5", "rejected": "2"},
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"prompt": "6 * 7?", "chosen": 42, "rejected": 41.0}) + "\n")
    assert script.read_pairs(str(path)) == [{"prompt": "6 * 7?", "chosen": "42", "rejected": "41"}]
    path.write_text(json.dumps({"prompt": "Is 7 prime?", "chosen": True, "rejected": "no"}) + "\n")
    with pytest.raises(script.PairFileError, match=r"row 0, key 'chosen': must be a string .* got bool"):
        script.read_pairs(str(path))


def _refused_in_one_line(args: list[str]) -> str:
    """Run the script on the CPU at --max-length 64; it must exit 2 without a traceback: its last line of stderr."""
    command = [sys.executable, SCRIPT, *args, "--device", "cpu", "--max-length", "64"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return proc.stderr.strip().splitlines()[-1]


def test_a_vision_language_model_is_one_line_not_a_traceback(tmp_path):
    """Journey: pairs -> `scripts/train_reward_model.py --init-from-lm` -> worker.reward.model, started from the model a
    user has at hand after the README's VLM journey (the quickstart's Qwen2.5-VL warm start). Reward models of
    vision-language models are not supported (verl.rewards.model_worker says so, naming the model), but the script let
    that NotImplementedError out as a traceback with exit status 1, where every other refusal of its inputs is one line
    `train_reward_model: ...` with status 2 (its docstring; tests/rewards/test_reward_model*.py). Real script, real tiny
    model, as tests/rewards/test_reward_model_edges.py runs it."""
    model = get_or_build_tiny_model("qwen2_5_vl", str(tmp_path / "models"))
    pairs = tmp_path / "pairs.jsonl"
    rows = [
        {
            "prompt": f"What is {i} + {i}?",
            "chosen": str(2 * i),
            "rejected": str(2 * i + 1),
        }
        for i in range(4)
    ]
    pairs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = [
        "--model",
        model,
        "--init-from-lm",
        "--train",
        str(pairs),
        "--output",
        str(tmp_path / "rm"),
    ]
    last_line = _refused_in_one_line(args)
    assert last_line.startswith(f"train_reward_model: Reward model '{model}' is a 'qwen2_5_vl' vision-language model")


def test_a_max_length_past_learned_positions_is_one_line_not_an_index_error(tmp_path):
    """GPT-2's family has n_positions learned positions: the worker's config check refuses a longer
    worker.reward.model.max_length, but the script trained until the first longer conversation, then died in the
    embedding with "IndexError: index out of range in self" (on a GPU, a device-side assert). Real script, a tiny
    GPT-2 built here with the tiny Qwen2 tokenizer."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(get_or_build_tiny_model("qwen2", str(tmp_path / "models"), **SMALL))
    model = str(tmp_path / "gpt2")
    ids = dict.fromkeys(("pad_token_id", "bos_token_id", "eos_token_id"), tokenizer.pad_token_id)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=32, n_layer=1, n_head=2, **ids)
    GPT2LMHeadModel(config).save_pretrained(model)
    tokenizer.save_pretrained(model)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": "What is 2 + 2? " * 8, "chosen": "4 " * 10, "rejected": "5"}) + "\n")
    args = ["--model", model, "--init-from-lm", "--train", str(pairs), "--output", str(tmp_path / "rm")]
    last_line = _refused_in_one_line(args)
    assert last_line == (
        f"train_reward_model: --max-length 64 is longer than the 32 positions --model '{model}' has (n_positions, "
        "learned): its forward would fail on a longer conversation; give --max-length 32 (conversations keep their "
        "last tokens)."
    )
