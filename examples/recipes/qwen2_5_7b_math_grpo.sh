#!/usr/bin/env bash
# Text math recipe: GRPO on Qwen2.5-7B-Instruct with math12k (boxed answers graded by mathruler).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    trainer.experiment_name=qwen2_5_7b_math_grpo \
    "$@"
