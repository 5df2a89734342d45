# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The verifiers example (`make demo-verifiers`): the tasks it exports and the config it trains with resolve and
validate, from the repository root, as examples/cpu_verifiers.sh runs them (its one GRPO step on this taskset is
tests/envs/test_verifiers_env.py's)."""

import os
import shlex

import pytest


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def script_overrides(names: dict[str, str]) -> list[str]:
    """The key=value arguments examples/cpu_verifiers.sh gives the trainer, its shell variables filled in."""
    with open(os.path.join(REPO, "examples", "cpu_verifiers.sh"), encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if "verl.trainer.main" in line]
    for name, value in names.items():
        line = line.replace(f"${name}", value).replace(f"${{{name}}}", value)
    words = shlex.split(line)
    return [word for word in words[words.index("verl.trainer.main") + 1 :] if word != "$@"]


def test_the_demo_config_validates_on_the_exported_tasks(tmp_path, monkeypatch):
    pytest.importorskip("verifiers", reason="needs the verifiers extra (pip install -e '.[verifiers]')")
    from verl.envs.verifiers_env import main as verifiers_main
    from verl.models.tiny_models import build_tiny_model
    from verl.trainer.config import load_config

    monkeypatch.chdir(REPO)
    out = tmp_path / "out"
    build_tiny_model(str(out / "tiny-qwen2"))
    taskset = "examples/envs/verifiers_sum.py:SumTaskset"
    assert verifiers_main(["export", "--env", taskset, "--output", str(out / "sum.jsonl")]) == 0
    config = load_config(script_overrides({"OUT": str(out)}))
    assert config.data.prompt_key == "prompt" and config.worker.rollout.env.endswith("verifiers_sum.py:SumTaskset")
    assert config.worker.reward.reward_function.endswith("verifiers_env.py:rubric_reward")
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as f:
        assert "demo-verifiers: install\n\tbash examples/cpu_verifiers.sh" in f.read()
