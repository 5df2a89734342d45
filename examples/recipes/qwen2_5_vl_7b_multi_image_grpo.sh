#!/usr/bin/env bash
# Multi-image prompts: several <image> markers per prompt, up to 4 images each.
# Data: data/multi_image/{train,val}.jsonl, one row per prompt, e.g.
#   {"problem": "Which of <image> and <image> shows more apples?", "answer": "the first", "images": ["a.png", "b.png"]}
# image paths relative to data/multi_image (data.image_dir); one <image> marker per image, in order.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    data.train_files=./data/multi_image/train.jsonl \
    data.val_files=./data/multi_image/val.jsonl \
    data.image_dir=./data/multi_image \
    data.format_prompt=./examples/format_prompt/r1v.jinja \
    worker.actor.model.model_path=Qwen/Qwen2.5-VL-7B-Instruct \
    worker.rollout.limit_images=4 \
    worker.reward.reward_function=./examples/reward_function/r1v.py:compute_score \
    trainer.experiment_name=qwen2_5_vl_7b_multi_image_grpo \
    "$@"
