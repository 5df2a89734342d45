# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Supervised fine-tuning, the reward-model worker and the LLM judge on CUDA (world size 1, nccl): bf16 mixed
precision, batches in and results out on the CPU, the judge's engine on the GPU."""

import pytest
import torch

from verl.models.tiny_models import get_or_build_tiny_model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from verl.utils import device

    root = str(tmp_path_factory.mktemp("gpu_sft"))
    device.set_device_type("cuda")
    with device.one_process_group(timeout_seconds=120):
        yield {"text": get_or_build_tiny_model("qwen2", root), "rm": get_or_build_tiny_model("qwen2_rm", root)}


def conversations(count: int) -> list[dict]:
    return [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} + {i}?"},
                {"role": "assistant", "content": str(2 * i)},
            ]
        }
        for i in range(count)
    ]


def test_sft_worker_trains_and_exports_on_cuda(models, tmp_path):
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.data.sft_dataset import SFTDataset, collate_sft
    from verl.models.config import ModelConfig
    from verl.sft.config import SFTWorkerConfig
    from verl.sft.worker import SFTWorker
    from verl.utils.optim import OptimConfig

    config = SFTWorkerConfig(
        model=ModelConfig(model_path=models["text"], enable_gradient_checkpointing=True),
        optim=OptimConfig(lr=1e-3, weight_decay=0.0),
        micro_batch_size_per_device=4,
    )
    worker = SFTWorker(config, device="cuda")
    worker.init_model(8, seed=1)
    data = SimpleNamespace(
        prompt_key=None,
        response_key=None,
        messages_key="messages",
        tools_key=None,
        image_key="images",
        image_dir=None,
        min_pixels=None,
        max_pixels=None,
        max_length=48,
        truncation="error",
        chat_template_kwargs={},
    )
    dataset = SFTDataset(conversations(8), AutoTokenizer.from_pretrained(models["text"]), None, data)
    batch = collate_sft([dataset[i] for i in range(8)])
    losses = [worker.train_batch(batch)["train/loss"] for _ in range(4)]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0], losses
    evaluated = worker.eval_batch(batch)
    assert evaluated["tokens"] == float(batch.batch["response_mask"].sum())
    worker.export_hf_model(str(tmp_path / "hf"))
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    original = AutoModelForCausalLM.from_pretrained(models["text"]).state_dict()
    assert any(not torch.equal(param, original[name]) for name, param in exported.state_dict().items())


def test_reward_model_worker_scores_on_cuda(models):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from verl.protocol import DataProto
    from verl.rewards.model_worker import RewardModelWorker, render_conversation
    from verl.workers.config import RewardModelConfig

    worker = RewardModelWorker(RewardModelConfig(model_path=models["rm"], micro_batch_size=2), models["text"], "cuda")
    worker.init_model()
    tokenizer = AutoTokenizer.from_pretrained(models["text"])
    prompts, answers = ["What is 1 + 1?", "Name a colour."], ["2", "Blue, or perhaps green."]
    width = 16
    responses = torch.full((2, width), tokenizer.pad_token_id)
    response_mask = torch.zeros((2, width), dtype=torch.long)
    for row, answer in enumerate(answers):
        ids = tokenizer.encode(answer)
        responses[row, : len(ids)] = torch.tensor(ids)
        response_mask[row, : len(ids)] = 1
    prompt_ids = torch.full((2, 4), tokenizer.pad_token_id)
    batch = DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": responses,
            "response_mask": response_mask,
            "attention_mask": torch.cat([torch.zeros_like(prompt_ids), response_mask], dim=-1),
        },
        non_tensors={"prompt_content": prompts},
    )
    scores = worker.compute_rm_score(batch).batch["rm_scores"]
    assert scores.device.type == "cpu" and scores.shape == (2,)
    reference = AutoModelForSequenceClassification.from_pretrained(models["rm"], dtype=torch.float32)
    rm_tokenizer = AutoTokenizer.from_pretrained(models["rm"])
    for row in range(2):
        ids = rm_tokenizer(render_conversation(rm_tokenizer, prompts[row], answers[row]), return_tensors="pt")
        with torch.no_grad():
            expected = reference(**ids).logits[0, 0]
        assert abs(float(scores[row]) - float(expected)) < 0.05  # bf16 on the GPU against fp32


def test_judge_grades_on_the_gpu(models):
    pytest.importorskip("vllm", reason="needs vLLM's GPU build (pip install vllm)")
    from verl.rewards.llm_judge import JudgeActor, JudgeConfig

    judge = JudgeActor(JudgeConfig(model_path=models["text"], gpu_memory_utilization=0.2, max_tokens=8))
    try:
        graded = judge.grade(["What is 1 + 1?"] * 3, ["2", "3", "two"], ["2", "2", "2"])
    finally:
        judge.close()
    assert set(graded) == {"judge_score", "judge_grade", "judge_parse_error"}
    assert all(len(values) == 3 for values in graded.values())
    # a random tiny model rarely writes "Grade: N": whatever it wrote, every score lies in [0, 1]
    assert all(0.0 <= score <= 1.0 for score in graded["judge_score"])
