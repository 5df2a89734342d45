# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The cost of a training episode: a `verifiers` taskset (client-style, verl.envs.verifiers_env) against the built-in
tool environment, on the rollout engine of the tiny Qwen2 in this process.

Each side is the CPU example's own setup (examples/cpu_verifiers: the SumTaskset with its MCP tool server;
examples/cpu_tools: the Multiplier ToolEnv), its data loader and its rollout config, with 2 samples per prompt and at
most 2 model turns of 16 tokens on both. A round is one `generate_sequences` call of the training rollout on one
batch; the figure is the wall time per episode (median over `--rounds`, after a warm-up round), with the model's
turns and tokens per episode beside it (the random tiny model seldom calls a tool, so most episodes end after one
turn on both sides: what differs is what each environment costs around the model).

    OMP_NUM_THREADS=1 python benchmarks/bench_episodes.py [--prompts 8 --rounds 3]

The last line printed is one JSON object with the figures.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from verl.utils.cli import positive


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDES = {
    "verifiers": ("examples/cpu_verifiers/config.yaml", "examples/envs/verifiers_sum.py:SumTaskset"),
    "builtin": ("examples/cpu_tools/config.yaml", "examples/envs/calculator.py:Multiplier"),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=positive(int), default=8, help="prompts per round (x2 samples)")
    parser.add_argument("--rounds", type=positive(int), default=3)
    parser.add_argument("--sides", default="builtin,verifiers")
    parser.add_argument("--workdir", default=os.path.join(REPO, "outputs", "bench_episodes"))
    args = parser.parse_args(argv)
    args.sides = [side.strip() for side in args.sides.split(",") if side.strip()]
    unknown = sorted(set(args.sides) - set(SIDES))
    if unknown:
        parser.error(f"--sides: {unknown} not among {sorted(SIDES)}")
    return args


def data_file(side: str, workdir: str) -> str:
    """The side's training rows, made as its CPU example makes them."""
    os.makedirs(workdir, exist_ok=True)
    if side == "verifiers":
        path = os.path.join(workdir, "sum.jsonl")
        command = ["-m", "verl.envs.verifiers_env", "export", "--env", SIDES[side][1], "--output", path]
    else:
        path = os.path.join(workdir, "tools", "train.jsonl")
        command = ["examples/cpu_tools/make_data.py", "--output", os.path.join(workdir, "tools")]
    if not os.path.isfile(path):
        subprocess.run([sys.executable, *command], cwd=REPO, check=True)
    return path


def measure(side: str, args: argparse.Namespace, model: str) -> dict[str, Any]:
    from verl.trainer.config import load_config
    from verl.trainer.ray_trainer import split_generation_inputs
    from verl.trainer.runner import _prepare_inputs
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    config_file, env = SIDES[side]
    config = load_config(
        [
            f"config={os.path.join(REPO, config_file)}",
            f"data.train_files={data_file(side, args.workdir)}",
            f"data.rollout_batch_size={args.prompts}",
            f"worker.actor.global_batch_size={args.prompts}",
            "worker.actor.micro_batch_size_per_device_for_update=1",
            f"worker.actor.model.model_path={model}",
            f"worker.rollout.env={os.path.join(REPO, env)}",
            "worker.rollout.max_turns=2",
            "worker.rollout.max_tokens_per_turn=16",
            "worker.rollout.n=2",
            "worker.rollout.tensor_parallel_size=1",
            "trainer.n_gpus_per_node=1",
            f"trainer.save_checkpoint_path={os.path.join(args.workdir, side, 'ckpt')}",
        ]
    )
    loader, _, tokenizer, processor, _ = _prepare_inputs(config)
    rollout = VLLMRollout(model, config.worker.rollout, tokenizer, processor)
    seconds, turns, tokens, episodes = [], [], [], 0
    batches = iter(())
    for round_index in range(args.rounds + 1):
        batch = next(batches, None)
        if batch is None:  # a small dataset: start it again
            batches = iter(loader)
            batch = next(batches)
        gen = split_generation_inputs(batch, all_columns=True)
        start = time.perf_counter()
        output = rollout.generate_sequences(gen)
        elapsed = time.perf_counter() - start
        if round_index == 0:
            continue  # warm-up: first calls of the engine and of the environment's machinery
        episodes = len(output)
        seconds.append(elapsed / episodes)
        turns.append(float(output.non_tensor_batch["env_turns"].mean()))
        tokens.append(float(output.batch["response_mask"].sum(-1).float().mean()))
    del rollout
    return {
        "s_per_episode": statistics.median(seconds),
        "episodes_per_round": episodes,
        "model_turns_per_episode": statistics.mean(turns),
        "model_tokens_per_episode": statistics.mean(tokens),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    from verl.models.tiny_models import get_or_build_tiny_model

    model = get_or_build_tiny_model("qwen2", os.path.join(args.workdir, "models"))
    report: dict[str, Any] = {"bench": "episodes", "prompts": args.prompts, "rounds": args.rounds, "error": None}
    for side in args.sides:
        print(f"[{side}] measuring", flush=True)
        report[side] = measure(side, args, model)
        print(f"[{side}] {report[side]['s_per_episode'] * 1000:.1f} ms per episode", flush=True)
    if "builtin" in report and "verifiers" in report:
        report["verifiers_vs_builtin"] = report["verifiers"]["s_per_episode"] / report["builtin"]["s_per_episode"]
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
