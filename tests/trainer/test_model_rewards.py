# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Model-based rewards in the trainer: pairs -> reward model (scripts/train_reward_model.py) -> GRPO whose reward goes
up, with the reward model and a rule function combined; and the combination with a judge's scores."""

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import ray
import torch

from verl.models.tiny_models import get_or_build_tiny_model
from verl.protocol import DataProto
from verl.rewards.function import RewardFunctionError
from verl.rewards.scoring import BatchScorer
from verl.workers.config import RewardConfig


# Ray workers cannot import pytest's test modules; ship this module's classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = "Pick a number from 1 to 4."
RULE = """
REWARD_TYPE = "sequential"

def compute_score(sample):
    return {"overall": float(sample["response"].strip() in {"1", "2", "3", "4"})}


def clashing(sample):
    return {"overall": 1.0, "judge_score": 0.123}
"""


def scored_batch(tokenizer, responses: list[str]) -> DataProto:
    """A rollout batch of PROMPT with each of `responses`, right-padded, no ground truth."""
    rows = [tokenizer.encode(text) for text in responses]
    response_ids = torch.full((len(rows), max(4, *map(len, rows))), tokenizer.pad_token_id)
    response_mask = torch.zeros_like(response_ids)
    for row, ids in enumerate(rows):
        response_ids[row, : len(ids)], response_mask[row, : len(ids)] = torch.tensor(ids, dtype=torch.long), 1
    prompt_ids = torch.tensor([tokenizer.encode(PROMPT)] * len(rows))
    return DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": response_ids,
            "response_mask": response_mask,
            "attention_mask": torch.cat([torch.ones_like(prompt_ids), response_mask], dim=-1),
        },
        non_tensors={"ground_truth": np.array([None] * len(rows), dtype=object)},
    )


class FixedJudge:
    """A stand-in for JudgeActor's `grade` (the real judge runs in tests/rewards/test_llm_judge.py): the
    combination only reads its three columns."""

    def grade(self, prompts: list[str], responses: list[str], ground_truths: list) -> dict[str, list[float]]:
        return {
            "judge_score": [0.7 if r else 0.0 for r in responses],
            "judge_grade": [7.0 if r else float("nan") for r in responses],
            "judge_parse_error": [0.0 if r else 1.0 for r in responses],
        }


def test_rule_and_judge_scores_combine_with_their_weights(local_ray, tmp_path) -> None:
    from transformers import AutoTokenizer

    from verl.rewards.ray_actor import ActorReward, create_reward_actor

    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    tokenizer = AutoTokenizer.from_pretrained(model)
    (tmp_path / "rule.py").write_text(RULE)
    config = RewardConfig(reward_function=f"{tmp_path / 'rule.py'}:compute_score", rule_weight=0.5)
    config.judge.weight = 2.0
    batch = scored_batch(tokenizer, ["3", "hello", ""])
    rule_actor = ActorReward(create_reward_actor(config, model))
    judge = ray.remote(FixedJudge).remote()
    try:
        scorer = BatchScorer(config, tokenizer, rule_actor, None, judge, lambda handle, part: ray.get(handle))
        scores, columns = scorer.score(batch)
    finally:
        rule_actor.close()
        ray.kill(judge)
    assert columns["rule_overall"] == [1.0, 0.0, 0.0]
    assert columns["overall"] == pytest.approx([0.5 + 1.4, 1.4, 0.0])
    assert scores.sum(-1).tolist() == pytest.approx(columns["overall"])
    assert columns["judge_parse_error"] == [0.0, 0.0, 1.0]
    # a function's key named like the judge's column was replaced by the judge's, silently
    config.reward_function = f"{tmp_path / 'rule.py'}:clashing"
    rule_actor = ActorReward(create_reward_actor(config, model))
    judge = ray.remote(FixedJudge).remote()
    try:
        scorer = BatchScorer(config, tokenizer, rule_actor, None, judge, lambda handle, part: ray.get(handle))
        with pytest.raises(RewardFunctionError, match=r"returns \['judge_score'\], which name the combined reward"):
            scorer.score(batch)
    finally:
        rule_actor.close()
        ray.kill(judge)


class AnswerJudge:
    """A stand-in for JudgeActor's `grade` that gives 1 to the responses that read "42" exactly."""

    def grade(self, prompts: list[str], responses: list[str], ground_truths: list) -> dict[str, list[float]]:
        return {
            "judge_score": [float(r == "42") for r in responses],
            "judge_grade": [10.0 * float(r == "42") for r in responses],
            "judge_parse_error": [0.0 for _ in responses],
        }


@pytest.mark.parametrize("strip_reasoning", [False, True])
def test_judge_strip_reasoning_reaches_the_judge(local_ray, tmp_path, strip_reasoning) -> None:
    from transformers import AutoTokenizer

    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    tokenizer = AutoTokenizer.from_pretrained(model)
    config = RewardConfig()
    config.judge.strip_reasoning = strip_reasoning
    batch = scored_batch(tokenizer, ["<think>so</think>42", "42"])
    judge = ray.remote(AnswerJudge).remote()
    try:
        _, columns = BatchScorer(config, tokenizer, None, None, judge, lambda handle, part: ray.get(handle)).score(
            batch
        )
    finally:
        ray.kill(judge)
    assert columns["judge_score"] == [float(strip_reasoning), 1.0]


def _write_jsonl(path, rows) -> None:
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


@pytest.mark.slow
def test_pairs_to_reward_model_to_grpo_whose_reward_goes_up(local_ray, tmp_path) -> None:
    """A reward model trained on pairs that prefer the answer "3" drives GRPO towards "3" (rule: any digit)."""
    from verl.sft.config import load_sft_config
    from verl.sft.main import run_sft
    from verl.trainer.config import load_config
    from verl.trainer.runner import run_ppo

    base = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    # 1. a policy that answers with one digit from 1 to 4, each about as often (SFT on every answer per prompt)
    _write_jsonl(
        tmp_path / "sft.jsonl",
        [
            {"messages": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": answer}]}
            for _ in range(16)
            for answer in "1234"
        ],
    )
    run_sft(
        load_sft_config(
            [
                f"config={REPO}/examples/sft.yaml",
                f"data.train_files={tmp_path / 'sft.jsonl'}",
                f"worker.model.model_path={base}",
                f"trainer.save_checkpoint_path={tmp_path / 'sft'}",
                "data.max_length=48",
                "data.batch_size=16",
                "data.shuffle=false",
                "worker.model.enable_gradient_checkpointing=false",
                "worker.optim.lr=2e-3",
                "worker.optim.lr_warmup_ratio=0",
                "trainer.device=cpu",
                "trainer.n_gpus_per_node=2",
                "trainer.max_steps=12",
                "trainer.logger=[file]",
            ]
        )
    )
    policy = str(tmp_path / "sft" / "huggingface")
    # 2. a reward model from pairs: "3" is preferred to every other answer
    pairs = [{"prompt": PROMPT, "chosen": "3", "rejected": other} for other in "124" for _ in range(16)]
    _write_jsonl(tmp_path / "pairs.jsonl", pairs)
    _write_jsonl(tmp_path / "pairs_val.jsonl", [{"prompt": PROMPT, "chosen": "3", "rejected": o} for o in "124"])
    rm_dir = tmp_path / "rm"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "train_reward_model.py"), "--model", base, "--init-from-lm"]
        + ["--train", str(tmp_path / "pairs.jsonl"), "--val", str(tmp_path / "pairs_val.jsonl")]
        + ["--output", str(rm_dir), "--epochs", "2", "--batch-size", "16", "--lr", "3e-3", "--max-length", "64"],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["val_accuracy"] > 0.5, result  # better than chance on the held-out pairs
    # 3. GRPO on the policy with the reward model (weight 1) plus the rule (weight 0.5)
    _write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": PROMPT, "answer": "3"} for _ in range(32)])
    (tmp_path / "rule.py").write_text(RULE)
    save = tmp_path / "grpo"
    run_ppo(
        load_config(
            [
                f"data.train_files={tmp_path / 'prompts.jsonl'}",
                "data.max_prompt_length=48",
                "data.max_response_length=4",
                "data.rollout_batch_size=8",
                "data.dataloader_num_workers=0",
                f"worker.actor.model.model_path={policy}",
                "worker.actor.model.enable_gradient_checkpointing=false",
                "worker.actor.global_batch_size=8",
                "worker.actor.micro_batch_size_per_device_for_update=32",
                "worker.actor.micro_batch_size_per_device_for_experience=32",
                "worker.actor.optim.lr=3e-4",
                "worker.rollout.n=8",
                "worker.rollout.max_num_batched_tokens=256",
                "worker.rollout.kv_cache_memory_mb=32",
                "worker.rollout.enforce_eager=true",
                f"worker.reward.reward_function={tmp_path / 'rule.py'}:compute_score",
                "worker.reward.rule_weight=0.5",
                f"worker.reward.model.model_path={rm_dir}",
                "worker.reward.model.max_length=64",
                "algorithm.disable_kl=true",
                "trainer.device=cpu",
                "trainer.n_gpus_per_node=2",
                "trainer.max_steps=8",
                "trainer.val_before_train=false",
                "trainer.logger=[file]",
                f"trainer.save_checkpoint_path={save}",
            ]
        )
    )
    with open(save / "experiment_log.jsonl") as f:
        steps = [row for row in map(json.loads, f) if "reward/rm_score" in row]
    assert len(steps) == 8 and steps[0]["reward_model/truncated_ratio"] == 0.0
    for row in steps:  # the combination, averaged over the batch
        expected = 0.5 * row["reward/rule_overall"] + row["reward/rm_score"]
        assert row["reward/overall"] == pytest.approx(expected, abs=1e-5)
    first, last = (
        np.mean([r["reward/rm_score"] for r in steps[:2]]),
        np.mean([r["reward/rm_score"] for r in steps[-2:]]),
    )
    print("rm_score per step:", [round(r["reward/rm_score"], 3) for r in steps])
    assert last > first, [round(r["reward/rm_score"], 3) for r in steps]


OTHER_TEMPLATE = "{% for m in messages %}### {{ m['role'] }}\n{{ m['content'] }}\n{% endfor %}"
"""The reward model's own chat template, unlike the policy's (the tiny models' ChatML-like one)."""


@pytest.fixture(scope="module")
def judged_run(local_ray, tmp_path_factory) -> dict[str, Any]:
    """One 1-step run that the two tests below read (each used to start a run of its own): a rule function, an LLM
    judge (the untrained tiny policy, weight 2) and a reward model in a group of its own (1 process beside the
    actor's 2, with its own chat template), a final validation in batches of 3 and 1, the rollouts dumped."""
    import shutil

    from transformers import AutoTokenizer

    from verl.trainer import runner
    from verl.trainer.config import load_config

    tmp_path = tmp_path_factory.mktemp("judged_run")
    root = str(tmp_path / "models")
    policy = get_or_build_tiny_model("qwen2", root)
    rm_dir = tmp_path / "rm"
    shutil.copytree(get_or_build_tiny_model("qwen2_rm", root, hidden_size=64, num_layers=2), rm_dir)
    (rm_dir / "chat_template.jinja").write_text(OTHER_TEMPLATE)
    _write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": PROMPT, "answer": "3"} for _ in range(4)])
    (tmp_path / "rule.py").write_text(RULE)
    created = []
    original = runner.create_worker_groups
    save, dump = tmp_path / "run", tmp_path / "rollouts"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(runner, "create_worker_groups", lambda *a: created.append(original(*a)) or created[-1])
        runner.run_ppo(
            load_config(
                [
                    f"data.train_files={tmp_path / 'prompts.jsonl'}",
                    "data.max_prompt_length=48",
                    "data.max_response_length=6",
                    "data.rollout_batch_size=4",
                    "data.dataloader_num_workers=0",
                    f"worker.actor.model.model_path={policy}",
                    "worker.actor.model.enable_gradient_checkpointing=false",
                    "worker.actor.global_batch_size=4",
                    "worker.rollout.n=2",
                    "worker.rollout.max_num_batched_tokens=256",
                    "worker.rollout.kv_cache_memory_mb=32",
                    "worker.rollout.enforce_eager=true",
                    f"worker.reward.reward_function={tmp_path / 'rule.py'}:compute_score",
                    f"worker.reward.model.model_path={rm_dir}",
                    "worker.reward.model.n_gpus_per_node=1",
                    f"worker.reward.judge.model_path={policy}",
                    "worker.reward.judge.max_tokens=4",
                    "worker.reward.judge.kv_cache_memory_mb=32",
                    "worker.reward.judge.max_model_len=512",
                    "worker.reward.judge.weight=2.0",
                    f"data.val_files={tmp_path / 'prompts.jsonl'}",
                    "data.val_batch_size=3",  # batches of 3 and 1: the metrics weigh each by its rows
                    "algorithm.disable_kl=true",
                    "trainer.device=cpu",
                    "trainer.n_gpus_per_node=2",
                    "trainer.max_steps=1",
                    "trainer.val_before_train=false",
                    "trainer.logger=[file]",
                    f"trainer.rollout_data_dir={dump}",
                    f"trainer.save_checkpoint_path={save}",
                ]
            )
        )
    rows = [json.loads(line) for line in (save / "experiment_log.jsonl").read_text().splitlines()]
    return {
        "rows": rows,
        "created": created,
        "records": [json.loads(line) for line in (dump / "step_1.jsonl").read_text().splitlines()],
        "rm_dir": rm_dir,
        "rm_tokenizer": AutoTokenizer.from_pretrained(rm_dir),
        "policy_tokenizer": AutoTokenizer.from_pretrained(policy),
    }


@pytest.mark.slow
def test_a_run_with_a_judge_starts_it_scores_with_it_and_stops_it(judged_run) -> None:
    """The runner's judge path: its actor and engine start beside the workers and every step carries its columns (an
    untrained judge writes no valid grade: parse errors, score 0, so the judge adds nothing to overall: the rule's
    and the reward model's)."""
    (step,) = [row for row in judged_run["rows"] if "reward/judge_parse_error" in row]
    assert step["reward/judge_parse_error"] == 1.0 and step["reward/judge_score"] == 0.0
    assert 0.0 <= step["reward/judge_cut"] <= 1.0  # the share of answers max_tokens=4 cut
    assert step["reward/overall"] == pytest.approx(step["reward/rule_overall"] + step["reward/rm_score"])
    assert "reward/judge_grade" not in step  # no parsed grade: the NaN column has nothing to average


@pytest.mark.slow
def test_a_reward_model_in_its_own_pool_scores_with_its_own_template(judged_run) -> None:
    """worker.reward.model.n_gpus_per_node=1: the reward model runs in a group of its own (1 process beside the
    actor's 2) and scores each dumped sample exactly as a plain HF forward of the RM's own chat template does; the
    validation logs its reward-model metrics."""
    from transformers import AutoModelForSequenceClassification

    rm_tokenizer, policy_tokenizer = judged_run["rm_tokenizer"], judged_run["policy_tokenizer"]
    assert rm_tokenizer.chat_template == OTHER_TEMPLATE != policy_tokenizer.chat_template
    (groups,) = judged_run["created"]
    assert groups.reward_model.world_size == 1 and groups.actor.world_size == 2 and len(groups.owned) == 2
    (last,) = judged_run["rows"]
    assert last["val/reward_model/truncated_ratio"] == 0.0  # the final validation's reward-model metrics
    assert last["val/reward_model/score_mean"] == pytest.approx(last["val/rm_score_reward"], abs=1e-5)
    records = judged_run["records"]
    assert len(records) == 8
    model = AutoModelForSequenceClassification.from_pretrained(judged_run["rm_dir"], dtype=torch.float32).eval()

    def score(tokenizer: Any, response: str) -> float:
        messages = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": response}]
        ids = rm_tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False)
        with torch.no_grad():
            return model(input_ids=torch.tensor([ids["input_ids"]])).logits[0, 0].item()

    got = [record["scores"]["rm_score"] for record in records]
    assert got == pytest.approx([score(rm_tokenizer, r["response"]) for r in records], abs=1e-5)
    # the policy's template would have given other scores: the RM's own template is what was used
    assert got != pytest.approx([score(policy_tokenizer, r["response"]) for r in records], abs=1e-3)
