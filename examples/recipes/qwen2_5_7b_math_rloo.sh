#!/usr/bin/env bash
# RLOO: leave-one-out baseline within each group of n samples; the KL (k1) in the rewards at 1e-3, as the RLOO
# paper and verl's recipe.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    algorithm.adv_estimator=rloo \
    algorithm.use_kl_loss=false \
    algorithm.kl_penalty=kl \
    algorithm.kl_coef=1.0e-3 \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    trainer.experiment_name=qwen2_5_7b_math_rloo \
    "$@"
