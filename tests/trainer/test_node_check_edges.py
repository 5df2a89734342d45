# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""More of the node check (verl/trainer/node_check.py) without a cluster: the paths of a reward model, a rubric's
functions and a judge, and what one node's look reports (its lock record, files that a shared filesystem shows late).
A mutation audit changed each line these pin and no other test failed."""

import threading
import time

from verl.trainer import node_check
from verl.trainer.config import PPOConfig


def test_a_reward_model_a_rubric_function_and_a_judge_are_paths_every_node_reads(tmp_path):
    reward_model, judge, rubric, template = tmp_path / "rm", tmp_path / "judge", tmp_path / "fmt.py", tmp_path / "t.j2"
    for folder in (reward_model, judge):
        folder.mkdir()
    for file in (rubric, template):
        file.write_text("")
    config = PPOConfig()
    reward = config.worker.reward
    reward.model.model_path = reward.model.tokenizer_path = str(reward_model)
    reward.run_in, reward.rubric = "actor", {"format": {"function": f"{rubric}:score", "weight": 1.0}}
    reward.judge.model_path, reward.judge.template = str(judge), str(template)  # a judge
    paths = node_check.rl_worker_paths(config, None)
    assert paths == {
        "worker.reward.model.model_path": str(reward_model),
        "worker.reward.model.tokenizer_path": str(reward_model),
        "worker.reward.rubric.format.function": str(rubric),
        "worker.reward.judge.model_path": str(judge),
        "worker.reward.judge.template": str(template),
    }


def test_a_chat_template_file_is_a_path_every_node_reads(tmp_path):
    template = tmp_path / "chat.jinja"
    template.write_text("")
    config = PPOConfig()
    config.data.override_chat_template = str(template)
    assert node_check.rl_worker_paths(config, None) == {"data.override_chat_template": str(template)}


def test_a_node_reads_the_drivers_lock_record_or_says_what_it_found(tmp_path):
    lock = tmp_path / ".run.lock"
    look = node_check._look
    assert look(str(lock), b"driver", {}, 0.0)["folder"] == "it has no .run.lock there"
    lock.write_bytes(b"driver")
    assert look(str(lock), b"driver", {}, 0.0)["folder"] is None
    lock.write_bytes(b"another run")
    assert look(str(lock), b"driver", {}, 0.0)["folder"] == "its .run.lock there records another run"


def test_a_node_waits_for_a_file_its_shared_filesystem_shows_late(tmp_path):
    lock, model = tmp_path / ".run.lock", tmp_path / "model"
    lock.write_bytes(b"driver")
    threading.Timer(1.0, model.mkdir).start()  # an attribute cache hides the new folder for a second
    start = time.monotonic()
    seen = node_check._look(str(lock), b"driver", {"worker.actor.model.model_path": str(model)}, 30.0)
    assert seen["missing"] == [] and seen["folder"] is None and 1.0 <= time.monotonic() - start < 10
    seen = node_check._look(str(lock), b"driver", {"worker.actor.model.model_path": str(tmp_path / "no")}, 1.0)
    assert seen["missing"] == ["worker.actor.model.model_path"]
