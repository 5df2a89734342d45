#!/usr/bin/env bash
# GSPO: sequence-level importance ratio with tight clipping and sequence-mean loss.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    worker.actor.loss_type=gspo \
    worker.actor.clip_ratio_low=3e-4 \
    worker.actor.clip_ratio_high=4e-4 \
    worker.actor.loss_avg_mode=seq-mean-token-mean \
    algorithm.disable_kl=true \
    algorithm.use_kl_loss=false \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    trainer.experiment_name=qwen2_5_7b_math_gspo \
    "$@"
