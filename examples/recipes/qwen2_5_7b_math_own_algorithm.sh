#!/usr/bin/env bash
# Your own algorithm from your own files: a leave-one-out advantage and an asymmetric clipped loss
# (examples/algorithms/; README.md, "Your own algorithm").
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    algorithm.adv_estimator=examples/algorithms/leave_one_out.py:leave_one_out \
    worker.actor.loss_type=examples/algorithms/asymmetric_clip.py:asymmetric_clip \
    worker.actor.clip_ratio_low=0.2 \
    worker.actor.clip_ratio_high=0.28 \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    trainer.experiment_name=qwen2_5_7b_math_own_algorithm \
    "$@"
