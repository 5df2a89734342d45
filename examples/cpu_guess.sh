#!/usr/bin/env bash
# CPU multi-turn example (`make demo-guess`): build a tiny Qwen2 offline, generate guess-the-number games (1 to 7,
# 3 guesses, "higher" / "lower" after each), give the model a warm start on games played at random inside the
# allowed interval (an SFT run), then train it with GRPO in the GuessNumber environment on 2 CPU worker processes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-outputs/cpu_guess}
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
start=$(date +%s)
mkdir -p "$OUT"
"$PY" -m verl.models.tiny_models --kind qwen2 --output "$OUT/tiny-qwen2"
"$PY" examples/cpu_guess/make_data.py --output "$OUT/data"
rm -rf "$OUT/warm_start" "$OUT/run"
"$PY" -m verl.sft.main config=examples/cpu_guess/sft.yaml data.train_files="$OUT/data/train_sft.jsonl" \
    worker.model.model_path="$OUT/tiny-qwen2" trainer.save_checkpoint_path="$OUT/warm_start"
"$PY" -m verl.trainer.main config=examples/cpu_guess/config.yaml \
    data.train_files="$OUT/data/train.jsonl" data.val_files="$OUT/data/val.jsonl" \
    worker.actor.model.model_path="$OUT/warm_start/huggingface" trainer.save_checkpoint_path="$OUT/run" "$@"
summary=$("$PY" scripts/plot_metrics.py --log_dir "$OUT/run" --output "$OUT/guess.png" \
    --accuracy_key val/solved_reward)
echo "$summary; wall time $(( $(date +%s) - start )) s"
