#!/usr/bin/env bash
# RLOO: leave-one-out baseline within each group of n samples.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    algorithm.adv_estimator=rloo \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    trainer.experiment_name=qwen2_5_7b_math_rloo \
    "$@"
