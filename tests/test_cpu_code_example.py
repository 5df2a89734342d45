# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The CPU code example (`make demo-code`) end to end: synthetic tasks, format warm start (SFT), then GRPO steps whose
rewards come from running the model's programs in the sandbox against each row's stdin/stdout tests."""

import json
import os
import subprocess
import sys

import pytest

from tests.repo_files import load_repo_file
from verl.models.tiny_models import get_or_build_tiny_model
from verl.sft.config import load_sft_config
from verl.sft.main import run_sft
from verl.trainer.config import load_config
from verl.trainer.runner import run_ppo


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_tasks_have_one_passing_program_each(tmp_path):
    make_data = load_repo_file("examples/cpu_code/make_data.py", "cpu_code_make_data")
    make_data.write_split(str(tmp_path), "train", 12, seed=0)  # 12 tasks x 4 programs x 3 cases: 144 runs
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    operations = [next(op for op in make_data.OPERATIONS if op in row["problem"]) for row in rows]
    assert sorted(set(operations)) == sorted(make_data.OPERATIONS) and len(set(operations[:4])) > 1
    for row, operation in zip(rows, operations):
        tests = json.loads(row["answer"])
        passing = []
        for program in make_data.PROGRAMS:
            outputs = [
                subprocess.run([sys.executable, "-c", program], input=case, capture_output=True, text=True).stdout
                for case in tests["inputs"]
            ]
            passing.append(outputs == tests["outputs"])
        assert sum(passing) == 1, (row, passing)  # the four programs disagree on every row
        assert passing[list(make_data.OPERATIONS).index(operation)]
    # the warm start's data: every task with each program, in groups of four consecutive rows
    sft = [json.loads(line) for line in open(make_data.write_sft_split(str(tmp_path), "train"), encoding="utf-8")]
    assert len(sft) == 4 * len(rows)
    for index, row in enumerate(rows):
        group = sft[4 * index : 4 * index + 4]
        assert [conversation["messages"][0]["content"] for conversation in group] == [row["problem"]] * 4
        assert [c["messages"][1]["content"] for c in group] == [f"```python\n{p}\n```" for p in make_data.PROGRAMS]


@pytest.mark.slow
def test_code_example_trains_with_the_sandboxed_reward(tmp_path, local_ray):
    make_data = load_repo_file("examples/cpu_code/make_data.py", "cpu_code_make_data")
    data_dir = tmp_path / "data"
    make_data.write_split(str(data_dir), "train", 64, seed=0)
    make_data.write_split(str(data_dir), "val", 4, seed=1)
    make_data.write_sft_split(str(data_dir), "train")
    model = get_or_build_tiny_model("qwen2", str(tmp_path / "cache"))
    warm = tmp_path / "warm_start"
    run_sft(
        load_sft_config(
            [
                f"config={REPO}/examples/cpu_code/sft.yaml",
                f"data.train_files={data_dir / 'train_sft.jsonl'}",
                f"worker.model.model_path={model}",
                f"trainer.save_checkpoint_path={warm}",
                "trainer.max_steps=30",
            ]
        )
    )
    model_dir = warm / "huggingface"
    save = tmp_path / "run"
    config = load_config(
        [
            f"config={REPO}/examples/cpu_code/config.yaml",
            f"data.train_files={data_dir / 'train.jsonl'}",
            f"data.val_files={data_dir / 'val.jsonl'}",
            f"worker.actor.model.model_path={model_dir}",
            f"trainer.save_checkpoint_path={save}",
            "data.rollout_batch_size=4",
            "worker.actor.global_batch_size=4",
            "worker.rollout.n=4",
            "worker.actor.micro_batch_size_per_device_for_update=8",
            "worker.actor.micro_batch_size_per_device_for_experience=8",
            "trainer.max_steps=2",
            "trainer.val_before_train=false",
            "trainer.logger=[file]",
        ]
    )
    run_ppo(config)
    rows = [json.loads(line) for line in (save / "experiment_log.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "critic/score/mean" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert row["reward/has_code"] > 0.5  # the warm-started model writes code blocks ...
        assert row["rollout/response_length_limit"] == 48 and "actor/entropy_coeff" in row
        # ... that ran in the sandbox against the tests: every case either passed or failed by a named cause
        cases = sum(
            row[f"reward/{key}"]
            for key in ("num_wrong_answer", "num_runtime_error", "num_timeout", "num_process_limit")
        )
        assert row["reward/pass_rate"] > 0 or cases > 0
        assert row["reward/code/overall"] == pytest.approx(row["critic/score/mean"])
    assert any(0 < row["reward/pass_rate"] < 1 for row in steps)  # some programs pass, others do not
