#!/usr/bin/env bash
# Colocated asynchronous GRPO (docs/async.md): long reasoning responses (8k), a step trains as soon as its batch of
# groups is complete; unfinished responses continue after the weight sync, at most 2 versions stale, with token-level
# truncated importance sampling (the default correction of this mode).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    data.max_response_length=8192 \
    worker.actor.model.model_path=Qwen/Qwen3-4B \
    worker.rollout.n=8 \
    worker.rollout.mode=colocated \
    worker.rollout.max_staleness=2 \
    worker.rollout.max_num_batched_tokens=16384 \
    algorithm.rollout_correction.mode=tis \
    algorithm.rollout_correction.is_cap=2.0 \
    trainer.experiment_name=qwen3_4b_math_async_grpo \
    "$@"
