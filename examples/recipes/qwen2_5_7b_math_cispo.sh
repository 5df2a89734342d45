#!/usr/bin/env bash
# CISPO: clipped importance weights as stop-gradient coefficients of the log-prob, bounded above only (MiniMax-M1
# sets no lower bound: clip_ratio_low=1 leaves the weights unfloored).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    worker.actor.loss_type=cispo \
    worker.actor.clip_ratio_low=1.0 \
    worker.actor.clip_ratio_high=4.0 \
    algorithm.disable_kl=true \
    algorithm.use_kl_loss=false \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    trainer.experiment_name=qwen2_5_7b_math_cispo \
    "$@"
