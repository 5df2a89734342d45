#!/usr/bin/env bash
# GMPO: the geometric mean of the token ratios instead of their arithmetic mean, clipped in log space (e^-0.4, e^0.4),
# no KL (as verl's GMPO recipe).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    worker.actor.loss_type=geo_mean \
    algorithm.disable_kl=true \
    algorithm.use_kl_loss=false \
    worker.actor.clip_ratio_low=0.4 \
    worker.actor.clip_ratio_high=0.4 \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    trainer.experiment_name=qwen2_5_7b_math_gmpo \
    "$@"
