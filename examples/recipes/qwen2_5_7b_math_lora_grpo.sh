#!/usr/bin/env bash
# LoRA recipe: GRPO on Qwen2.5-7B-Instruct with math12k on 2 GPUs (rank-64 adapters on every linear layer; the
# frozen base is kept in bf16, the reference policy is the base with the adapters off, the engine gets merged weights).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    worker.actor.model.lora.rank=64 \
    worker.actor.model.lora.alpha=64 \
    worker.actor.model.lora.target_modules=all-linear \
    worker.actor.optim.lr=1e-5 \
    worker.actor.global_batch_size=64 \
    data.rollout_batch_size=128 \
    trainer.n_gpus_per_node=2 \
    trainer.experiment_name=qwen2_5_7b_math_lora_grpo \
    "$@"
