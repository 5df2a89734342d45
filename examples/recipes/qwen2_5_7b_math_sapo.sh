#!/usr/bin/env bash
# SAPO: soft sigmoid gates instead of hard clipping, separate temperatures for positive and negative advantages,
# no KL (as the SAPO and EasyR1 recipes).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    worker.actor.loss_type=sapo \
    algorithm.disable_kl=true \
    algorithm.use_kl_loss=false \
    worker.actor.tau_positive=1.0 \
    worker.actor.tau_negative=1.05 \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    trainer.experiment_name=qwen2_5_7b_math_sapo \
    "$@"
