#!/usr/bin/env bash
# Skywork-OR1-style math + code reasoning: one mixed dataset whose rows name their reward (math-verify for math,
# the sandboxed code runner for code, all tests or nothing), staged context 8k -> 16k -> 30k (Qwen2.5-7B's 32k
# positions less the prompt budget; Skywork-OR1 trains R1-Distill models to 32k), adaptive entropy control, no KL.
# Prepare the data first: python examples/recipes/prepare_or1_data.py --output data/or1
# Its prompts carry their own instructions (no math template); to validate, prepare a held-out file the same way and
# pass it as data.val_files (the base config's math12k names its columns otherwise).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m verl.trainer.main config=examples/config.yaml \
    data.train_files=data/or1/train.jsonl \
    data.val_files= \
    trainer.val_freq=-1 \
    data.format_prompt=null \
    data.prompt_key=prompt \
    data.answer_key=answer \
    data.max_prompt_length=2048 \
    data.max_response_length=30720 \
    'data.response_length_schedule={0: 8192, 300: 16384, 700: 30720}' \
    data.rollout_batch_size=256 \
    algorithm.disable_kl=true \
    algorithm.use_kl_loss=false \
    algorithm.entropy_control=true \
    algorithm.target_entropy=0.2 \
    algorithm.entropy_coeff_delta=0.005 \
    algorithm.entropy_coeff_max=0.05 \
    worker.actor.loss_avg_mode=token-mean \
    worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct \
    worker.rollout.n=16 \
    worker.rollout.max_num_batched_tokens=32768 \
    'worker.reward.routes={math: ./examples/reward_function/math_verify.py:compute_score, code: ./examples/reward_function/code.py:compute_score}' \
    'worker.reward.routes_kwargs={code: {max_workers: 8, wall_s: 10.0, memory_mb: 2048, all_or_nothing: true}}' \
    trainer.experiment_name=qwen2_5_7b_math_code_or1 \
    "$@"
