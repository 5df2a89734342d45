#!/usr/bin/env bash
# Disaggregated asynchronous GRPO (docs/async.md): on one 8-GPU node, 6 GPUs train (FSDP2) and 2 run vLLM engines of
# their own that never stop generating; after each update the weights are broadcast to them over NCCL while they
# generate. Samples lag the trained policy by at most one version, corrected by token-level truncated IS.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    data.max_response_length=8192 \
    data.rollout_batch_size=384 \
    worker.actor.global_batch_size=96 \
    worker.actor.model.model_path=Qwen/Qwen3-4B \
    worker.rollout.n=8 \
    worker.rollout.mode=disaggregated \
    worker.rollout.max_staleness=1 \
    worker.rollout.nnodes=1 \
    worker.rollout.n_gpus_per_node=2 \
    worker.rollout.tensor_parallel_size=1 \
    worker.rollout.max_num_batched_tokens=16384 \
    algorithm.rollout_correction.mode=tis \
    trainer.n_gpus_per_node=6 \
    trainer.experiment_name=qwen3_4b_math_disaggregated_grpo \
    "$@"
