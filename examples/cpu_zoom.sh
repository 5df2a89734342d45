#!/usr/bin/env bash
# CPU zoom example (`make demo-zoom`): a tool that looks closer at the picture. Build a tiny Qwen2.5-VL offline,
# generate pictures with a small coloured dot in a named quarter, give the model a warm start on conversations that
# call the zoom tool and answer (an SFT run), train it with GRPO in the Zoom environment (examples/envs/zoom.py),
# then write the rollouts' turns, enlarged pictures included, as an HTML page (scripts/rollout_viewer.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-outputs/cpu_zoom}
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
start=$(date +%s)
mkdir -p "$OUT"
"$PY" -m verl.models.tiny_models --kind qwen2_5_vl --output "$OUT/tiny-vl" --min-pixels 3136 --max-pixels 3136
"$PY" examples/cpu_zoom/make_data.py --output "$OUT/data"
rm -rf "$OUT/warm_start" "$OUT/run"
"$PY" -m verl.sft.main config=examples/cpu_zoom/sft.yaml data.train_files="$OUT/data/train_sft.jsonl" \
    data.image_dir="$OUT/data/images" worker.model.model_path="$OUT/tiny-vl" trainer.save_checkpoint_path="$OUT/warm_start"
"$PY" -m verl.trainer.main config=examples/cpu_zoom/config.yaml \
    data.train_files="$OUT/data/train.jsonl" data.val_files="$OUT/data/val.jsonl" data.image_dir="$OUT/data/images" \
    worker.actor.model.model_path="$OUT/warm_start/huggingface" trainer.save_checkpoint_path="$OUT/run" \
    trainer.rollout_data_dir="$OUT/run/rollouts" "$@"
"$PY" scripts/rollout_viewer.py "$OUT/run/rollouts" --output "$OUT/rollouts.html"
echo "rollouts with their turns and pictures: $OUT/rollouts.html; wall time $(( $(date +%s) - start )) s"
