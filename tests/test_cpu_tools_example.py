# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The CPU tool-use example (`make demo-tools`) end to end: "What is a * b?" tasks, a warm start on worked tool
conversations (SFT with the tools' schemas in the prompt), then GRPO steps in the Multiplier tool environment where
the model's <tool_call>s run and their results come back as tool messages."""

import json
import os

import pytest

from tests.repo_files import load_repo_file
from verl.models.tiny_models import get_or_build_tiny_model
from verl.sft.config import load_sft_config
from verl.sft.main import run_sft
from verl.trainer.config import load_config
from verl.trainer.runner import run_ppo


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_warm_start_conversations_call_the_tool_the_rl_prompts_describe(tmp_path):
    from transformers import AutoTokenizer

    from verl.envs import load_environment, parse_tool_calls

    make_data = load_repo_file("examples/cpu_tools/make_data.py", "cpu_tools_make_data")
    make_data.write_split(str(tmp_path), "train", 8, seed=0)
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    conversations = [json.loads(line) for line in open(make_data.write_sft_split(str(tmp_path)), encoding="utf-8")]
    env = load_environment(make_data.ENV)
    tokenizer = AutoTokenizer.from_pretrained(get_or_build_tiny_model("qwen2", str(tmp_path / "models")))
    for row, conversation in zip(rows, conversations):
        assert row["answer"] == str(row["a"] * row["b"])
        messages = conversation["messages"]
        # the SFT prompt is the RL prompt: the same tools rendered by the same template
        assert conversation["tools"] == env.tool_schemas()
        sft_prompt = tokenizer.apply_chat_template(
            messages[:1], tools=conversation["tools"], add_generation_prompt=True, tokenize=False
        )
        rl_prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": row["problem"]}],
            tools=env.tool_schemas(),
            add_generation_prompt=True,
            tokenize=False,
        )
        assert sft_prompt == rl_prompt
        # the demonstrated call runs in the environment and gives the tool message of the conversation
        step = env.step(env.reset({"ground_truth": row["answer"]}), messages[1]["content"])
        assert parse_tool_calls(messages[1]["content"])[0]["name"] == "multiply"
        assert step.tool_calls == 1 and step.tool_errors == 0
        assert step.messages == [{"role": "tool", "content": messages[2]["content"]}]
        assert messages[3] == {"role": "assistant", "content": row["answer"]}


@pytest.mark.slow
def test_tools_example_runs_the_models_tool_calls(tmp_path, local_ray):
    make_data = load_repo_file("examples/cpu_tools/make_data.py", "cpu_tools_make_data")
    data_dir = tmp_path / "data"
    make_data.write_split(str(data_dir), "train", 128, seed=0)
    make_data.write_split(str(data_dir), "val", 8, seed=1)
    make_data.write_sft_split(str(data_dir), "train")
    model = get_or_build_tiny_model("qwen2", str(tmp_path / "cache"))
    warm = tmp_path / "warm_start"
    run_sft(
        load_sft_config(
            [
                f"config={REPO}/examples/cpu_tools/sft.yaml",
                f"data.train_files={data_dir / 'train_sft.jsonl'}",
                f"worker.model.model_path={model}",
                f"trainer.save_checkpoint_path={warm}",
                "trainer.max_steps=30",
            ]
        )
    )
    save = tmp_path / "run"
    config = load_config(
        [
            f"config={REPO}/examples/cpu_tools/config.yaml",
            f"data.train_files={data_dir / 'train.jsonl'}",
            f"data.val_files={data_dir / 'val.jsonl'}",
            f"worker.actor.model.model_path={warm / 'huggingface'}",
            f"trainer.save_checkpoint_path={save}",
            "data.rollout_batch_size=4",
            "worker.actor.global_batch_size=4",
            "worker.actor.micro_batch_size_per_device_for_update=8",
            "trainer.max_steps=2",
            "trainer.val_before_train=false",
            "trainer.val_freq=-1",
            "trainer.logger=[file]",
        ]
    )
    run_ppo(config)
    rows = [json.loads(line) for line in (save / "experiment_log.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "critic/score/mean" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        # the warm-started model calls the tool; the calls ran and their results came back as tool messages
        assert row["env/tool_calls/mean"] > 0.5 and row["env/tool_errors/mean"] < row["env/tool_calls/mean"]
        assert row["env/turns/mean"] > 1.5 and row["env/env_tokens/mean"] > 0
        assert row["reward/tool_use"] > 0.5
