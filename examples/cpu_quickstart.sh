#!/usr/bin/env bash
# CPU quickstart (`make demo`): build a tiny Qwen2.5-VL offline, generate the square-counting task, give the model a
# format-only warm start (a supervised fine-tuning run, python -m verl.sft.main), train it with GRPO on 2 CPU
# worker processes, then plot reward and accuracy.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-outputs/cpu_quickstart}
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
start=$(date +%s)
mkdir -p "$OUT"
"$PY" -m verl.models.tiny_models --kind qwen2_5_vl --output "$OUT/tiny-vl" --min-pixels 3136 --max-pixels 3136
"$PY" examples/cpu_quickstart/make_data.py --output "$OUT/data"
rm -rf "$OUT/warm_start" "$OUT/run"
"$PY" -m verl.sft.main config=examples/cpu_quickstart/sft.yaml data.train_files="$OUT/data/train_sft.jsonl" \
    data.image_dir="$OUT/data/images" worker.model.model_path="$OUT/tiny-vl" trainer.save_checkpoint_path="$OUT/warm_start"
"$PY" -m verl.trainer.main config=examples/cpu_quickstart/config.yaml \
    data.train_files="$OUT/data/train.jsonl" data.val_files="$OUT/data/val.jsonl" data.image_dir="$OUT/data/images" \
    worker.actor.model.model_path="$OUT/warm_start/huggingface" trainer.save_checkpoint_path="$OUT/run" "$@"
summary=$("$PY" scripts/plot_metrics.py --log_dir "$OUT/run" --output "$OUT/quickstart.png")
echo "$summary; wall time $(( $(date +%s) - start )) s"
