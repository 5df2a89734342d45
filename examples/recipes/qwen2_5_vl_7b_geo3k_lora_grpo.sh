#!/usr/bin/env bash
# LoRA recipe for a VLM: GRPO on Qwen2.5-VL-7B-Instruct with geometry3k (8 GPUs); the vision tower gets no adapters
# (worker.actor.model.lora.vision_tower=true gives it some).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    data.train_files=hiyouga/geometry3k@train \
    data.val_files=hiyouga/geometry3k@test \
    data.prompt_key=problem \
    data.format_prompt=./examples/format_prompt/r1v.jinja \
    worker.actor.model.model_path=Qwen/Qwen2.5-VL-7B-Instruct \
    worker.actor.model.lora.rank=64 \
    worker.actor.model.lora.alpha=64 \
    worker.actor.optim.lr=1e-5 \
    worker.rollout.limit_images=1 \
    worker.reward.reward_function=./examples/reward_function/r1v.py:compute_score \
    trainer.experiment_name=qwen2_5_vl_7b_geo3k_lora_grpo \
    "$@"
