#!/usr/bin/env bash
# REINFORCE++: discounted token returns whitened over the batch, KL in the reward.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    algorithm.adv_estimator=reinforce_plus_plus \
    algorithm.use_kl_loss=false \
    algorithm.kl_penalty=kl \
    algorithm.kl_coef=1.0e-3 \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    trainer.experiment_name=qwen2_5_7b_math_reinforce_pp \
    "$@"
