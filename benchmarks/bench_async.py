# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Synchronous against asynchronous GRPO (colocated and disaggregated) on a heavy-tailed workload (docs/async.md).

The workload is bench_grpo's (the tiny Qwen2, arithmetic prompts, 2 processes x 1 torch thread, no KL, one PPO
epoch) with heavy-tailed response lengths: each prompt's `max_response_tokens` column caps its responses at
`--short` tokens, or at `--long` for a `--long-share` of the prompts drawn at random; the random-init model never
ends a response by itself, so every response runs to its cap. A synchronous step waits for its longest group; an
asynchronous one trains as soon as its batch of groups is complete, and the long groups continue (under the
staleness bound) next to the new prompts.

Each run is `python -m verl.trainer.main` measured from outside as in bench_grpo: steady-state samples/s (steps after
the first 2), start-up, peak memory; from the file logger: trained tokens per second of step time (the fair figure:
an asynchronous run defers its long samples, so over a short run its batches are shorter and samples/s flatters
it), the trained responses' mean length, the step's phases, the share of the step spent generating, the mean and max
staleness (versions behind, async only) and the share of resumed samples.

    python benchmarks/bench_async.py [--prompts 16 --n 4 --short 32 --long 512 --long-share 0.1 --steps 10]
    python benchmarks/bench_async.py --modes sync,colocated:4,colocated:4:bypass  # mode[:max_staleness[:correction]]
    python benchmarks/bench_async.py --modes sync,disaggregated:1,disaggregated:2:bypass
    python benchmarks/bench_async.py --device cuda --model 0.5b --modes sync,colocated:2  # the same workload on a GPU

sync and colocated runs use 2 worker processes (CPU) or --gpus GPUs; a disaggregated run splits the same CPUs into one
trainer process and one engine process (on GPUs: --gpus for training, --rollout-gpus for the engines). The
engine-busy share is the share of each step spent generating (sync, colocated) or the engines' own busy share
(disaggregated, where generation overlaps training). The last line printed is one JSON object with the figures.
"""

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import sys
from typing import Any


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_grpo  # noqa: E402

from verl.utils.cli import positive  # noqa: E402


REPO = bench_grpo.REPO
MODES = ("sync", "colocated", "disaggregated")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=positive(int), default=16, help="prompts per step")
    parser.add_argument("--n", type=positive(int), default=4, help="samples per prompt")
    parser.add_argument("--short", type=int, default=32, help="response cap of most prompts")
    parser.add_argument("--long", type=int, default=512, help="response cap of the long prompts")
    parser.add_argument("--long-share", type=float, default=0.1, help="share of prompts capped at --long")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=positive(int), default=1, help="runs of each mode, alternating")
    parser.add_argument(
        "--modes",
        default="sync,colocated:2,colocated:2:bypass",
        help="comma-separated mode[:max_staleness[:correction]]",
    )
    parser.add_argument("--kv-cache-memory-mb", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before a run is killed")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="trainer.device (bench_grpo's)")
    parser.add_argument("--model", choices=("tiny", "0.5b", "1.5b"), default="tiny", help="random-init sizes")
    parser.add_argument("--gpus", type=int, default=1, help="cuda: trainer.n_gpus_per_node")
    parser.add_argument("--rollout-gpus", type=int, default=1, help="cuda, disaggregated: the engines' GPUs")
    parser.add_argument("--workdir", default=os.path.join(REPO, "outputs", "bench_async"))
    parser.add_argument("--ours-override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--learning",
        action="store_true",
        help="a learnable reward (the response holds a digit), lr 1e-3, validation every --val-freq steps on held-out "
        "prompts; plots validation accuracy against trained samples for each mode to --plot",
    )
    parser.add_argument(
        "--reward-delay-ms",
        type=float,
        default=0.0,
        help="each sample's score waits this long more (a sandbox or a remote check), to show what streamed rewards "
        "(worker.reward.stream) take off the step",
    )
    parser.add_argument("--val-freq", type=int, default=2)
    parser.add_argument("--plot", default=None, help="--learning: the PNG to write (default: WORKDIR/learning.png)")
    args = parser.parse_args(argv)
    args.modes = [parse_mode(item) for item in args.modes.split(",") if item.strip()]
    if not 0.0 <= args.long_share <= 1.0 or args.short < 1 or args.long < args.short:
        parser.error("--long-share must lie in [0, 1] and 1 <= --short <= --long.")
    if args.steps <= bench_grpo.SKIP_STEPS + 1:
        parser.error(f"--steps must be more than {bench_grpo.SKIP_STEPS + 1}.")
    args.workdir = os.path.abspath(args.workdir)
    return args


def parse_mode(item: str) -> tuple[str, int, str]:
    """mode[:max_staleness[:correction]], e.g. sync, colocated:4, colocated:4:bypass (correction default: auto)."""
    mode, staleness, correction = (item.strip().split(":") + ["", ""])[:3]
    if mode not in MODES:
        raise SystemExit(f"--modes: {mode!r} is not one of {', '.join(MODES)}.")
    if mode == "sync" and (staleness or correction):
        raise SystemExit("--modes: sync takes no max_staleness or correction.")
    if not (staleness or "0").isdigit():
        raise SystemExit(f"--modes: {item!r}: max_staleness must be a whole number, got {staleness!r}.")
    return mode, int(staleness or 0), correction or "auto"


def workload_rows(count: int, short: int, long: int, long_share: float, seed: int) -> list[dict[str, Any]]:
    """bench_grpo's arithmetic rows, each with its response cap; exactly round(long_share x count) are long."""
    rows = bench_grpo.arithmetic_rows(count, seed)
    rng = random.Random(seed + 1)
    long_rows = set(rng.sample(range(count), round(long_share * count)))
    return [{**row, "max_response_tokens": long if i in long_rows else short} for i, row in enumerate(rows)]


def grpo_args(args: argparse.Namespace, mode: str, staleness: int, correction: str) -> argparse.Namespace:
    """bench_grpo's settings for one run of ours on this workload."""
    overrides = [f"worker.rollout.mode={mode}", f"worker.rollout.max_staleness={staleness}"]
    if mode == "disaggregated":  # the same CPUs (or --gpus + --rollout-gpus GPUs) split into trainer and engines
        trainer_procs = args.gpus if args.device == "cuda" else 1
        engines = args.rollout_gpus if args.device == "cuda" else 1
        overrides += [
            f"trainer.n_gpus_per_node={trainer_procs}",
            f"worker.rollout.n_gpus_per_node={engines}",
            "worker.rollout.tensor_parallel_size=1",
        ]
    overrides += [*args.ours_override, f"algorithm.rollout_correction.mode={correction}"]
    run = bench_grpo.parse_args(
        [
            "--sides",
            "ours",
            "--prompts",
            str(args.prompts),
            "--n",
            str(args.n),
            "--response-length",
            str(args.long),
            "--steps",
            str(args.steps),
            "--kv-cache-memory-mb",
            str(args.kv_cache_memory_mb),
            "--max-num-batched-tokens",
            str(max(4096, 64 + args.long)),
            "--timeout",
            str(args.timeout),
            "--device",
            args.device,
            "--model",
            args.model,
            "--gpus",
            str(args.gpus),
            *[item for override in overrides for item in ("--ours-override", override)],
        ]
    )
    return run


LEARNING_REWARD = r'''"""Learnable by the random tiny model: 1 when the response holds a digit."""
REWARD_TYPE = "sequential"


def compute_score(sample):
    accuracy = float(any(character.isdigit() for character in sample["response"]))
    return {"overall": accuracy, "accuracy": accuracy}
'''


def slow_reward_override(args: argparse.Namespace) -> str:
    """--reward-delay-ms: bench_grpo's reward, each sample's score taking the delay more (a sleep: a remote check
    that costs no CPU here)."""
    path = os.path.join(args.workdir, "slow_reward.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(bench_grpo.REWARD_SOURCE)
        f.write(
            f"\n\n_score = compute_score\n\n\ndef compute_score(sample):\n    import time\n\n"
            f"    time.sleep({args.reward_delay_ms / 1000.0!r})\n    return _score(sample)\n"
        )
    return f"worker.reward.reward_function={path}:compute_score"


def learning_overrides(args: argparse.Namespace, paths: dict[str, str]) -> list[str]:
    """--learning: the reward above, validation on held-out prompts, a learning rate that moves the tiny model."""
    val_rows = workload_rows(64, args.short, args.long, args.long_share, args.seed + 100)
    val_path = os.path.join(args.workdir, "val.jsonl")
    with open(val_path, "w", encoding="utf-8") as f:
        for row in val_rows:
            f.write(json.dumps(row) + "\n")
    with open(paths["reward"], "w", encoding="utf-8") as f:
        f.write(LEARNING_REWARD)
    return [
        f"data.val_files={val_path}",
        f"trainer.val_freq={args.val_freq}",
        "trainer.val_before_train=true",
        "worker.actor.optim.lr=1e-3",
    ]


def plot_learning(runs: list[dict[str, Any]], samples_per_step: int, path: str) -> None:
    """Validation accuracy against trained samples, one line per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 3.6))
    for run in runs:
        curve = run.get("val_curve") or []
        if curve:
            axis.plot(
                [step * samples_per_step for step, _ in curve],
                [acc for _, acc in curve],
                marker="o",
                label=run["mode"],
            )
    axis.set_xlabel("trained samples")
    axis.set_ylabel("validation accuracy")
    axis.set_title("sync vs asynchronous modes (tiny Qwen2, CPU)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def trained_tokens_per_s(steps: list[dict[str, Any]], samples: int) -> float | None:
    """Response tokens trained per second of step time (validation and saves are timed outside it), over the logged
    `steps` of `samples` responses each (perf/total_num_tokens would count their prompts too)."""
    seconds = sum(row["timing_s/step"] for row in steps)
    tokens = sum(row["response_length/mean"] * samples for row in steps)
    return tokens / seconds if seconds > 0 else None


def run_figures(result: Any, rows: list[dict[str, Any]], samples: int) -> dict[str, Any]:
    figures = bench_grpo.run_figures("ours", result, samples)
    steady = [row for row in rows if "timing_s/step" in row and row["step"] > bench_grpo.SKIP_STEPS]
    if steady:
        # samples/s alone favours a mode that defers its long samples past the run's end: trained tokens per second
        # and the trained responses' length show it
        figures["tokens_per_s"] = trained_tokens_per_s(steady, samples)
        figures["response_length_trained"] = statistics.mean(row["response_length/mean"] for row in steady)
        curve = [(row["step"], row["val/accuracy_reward"]) for row in rows if "val/accuracy_reward" in row]
        if curve:
            figures["val_curve"] = curve
        phases = figures.get("phase_s", {})
        figures["gen_share"] = phases.get("gen", 0.0) / phases["step"] if phases.get("step") else None
        figures["engine_busy_share"] = figures["gen_share"]
        for key in ("async/staleness_mean", "async/staleness_max", "async/resumed_share", "async/engine_busy_share"):
            values = [row[key] for row in steady if key in row]
            if values:
                figures[key.removeprefix("async/")] = statistics.mean(values)
    return figures


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    # as bench_grpo's: `timeout` or a scheduler stopping the benchmark unwinds, so the run's own session (trainer,
    # Ray, engines), which no signal to this process's group reaches, is ended rather than left running
    signal.signal(signal.SIGTERM, bench_grpo._exit_on_sigterm)
    samples = args.prompts * args.n
    report: dict[str, Any] = {
        "bench": "async",
        "prompts": args.prompts,
        "n": args.n,
        "short": args.short,
        "long": args.long,
        "long_share": args.long_share,
        "steps": args.steps,
        "modes": [":".join(map(str, mode)) for mode in args.modes],
        "cpu_count": os.cpu_count(),
        "error": None,
    }
    if args.model == "tiny":
        from verl.models.tiny_models import get_or_build_tiny_model

        model = get_or_build_tiny_model("qwen2", os.path.join(args.workdir, "models"))
    else:  # Qwen2.5 sizes with the tiny tokenizer, as bench_grpo builds them
        import torch
        from bench_actor import build_sized_model

        model = build_sized_model(args.model, os.path.join(args.workdir, "models"), torch.device(args.device))
    ahead = max(staleness for _, staleness, _ in args.modes)  # batches admitted beyond the trained ones
    rows = workload_rows(args.prompts * (args.steps + ahead + 2), args.short, args.long, args.long_share, args.seed)
    paths = bench_grpo.write_workload(args.workdir, rows)
    if args.learning:
        args.ours_override = [*learning_overrides(args, paths), *args.ours_override]
    if args.reward_delay_ms > 0:
        args.ours_override = [slow_reward_override(args), *args.ours_override]
    runs: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        for mode, staleness, correction in args.modes:
            label = f"{mode}:{staleness}:{correction}"
            name = f"{mode}{staleness}{correction}_{repeat + 1}" if mode != "sync" else f"sync_{repeat + 1}"
            run_dir = os.path.join(args.workdir, "runs", name)
            shutil.rmtree(run_dir, ignore_errors=True)
            print(f"[{name}] running, logs in {run_dir}", flush=True)
            result = bench_grpo.run_ours(grpo_args(args, mode, staleness, correction), paths, model, run_dir)
            log = os.path.join(run_dir, "ckpt", "experiment_log.jsonl")
            log_rows = bench_grpo.read_jsonl(log) if os.path.isfile(log) else []
            figures = {"mode": label, **run_figures(result, log_rows, samples)}
            runs.append(figures)
            print(
                f"[{name}] samples/s {bench_grpo._fmt(figures.get('samples_per_s'), '.2f')}, trained tokens/s "
                f"{bench_grpo._fmt(figures.get('tokens_per_s'), '.0f')}, gen share "
                f"{bench_grpo._fmt(figures.get('gen_share'), '.2f')}, engine busy "
                f"{bench_grpo._fmt(figures.get('engine_busy_share'), '.2f')}, staleness "
                f"{bench_grpo._fmt(figures.get('staleness_mean'), '.2f')}",
                flush=True,
            )
    summary: dict[str, Any] = {}
    for mode in report["modes"]:
        good = [run for run in runs if run["mode"] == mode and "error" not in run]
        if good:
            summary[mode] = {
                key: statistics.median(run[key] for run in good)
                for key in (
                    "samples_per_s",
                    "tokens_per_s",
                    "response_length_trained",
                    "gen_share",
                    "engine_busy_share",
                    "staleness_mean",
                    "staleness_max",
                    "resumed_share",
                )
                if all(run.get(key) is not None for run in good)
            }
    base = summary.get("sync:0:auto", {})
    for figures in summary.values():
        for key in ("samples_per_s", "tokens_per_s"):
            if base.get(key) and figures.get(key):
                figures[f"{key}_vs_sync"] = figures[key] / base[key]
    failed = [f"{run['mode']}: {run['error'].splitlines()[0]}" for run in runs if "error" in run]
    report["error"] = "; ".join(failed) or None
    if args.learning:
        report["plot"] = args.plot or os.path.join(args.workdir, "learning.png")
        plot_learning(runs, samples, report["plot"])
        for mode in summary:
            curves = [run["val_curve"] for run in runs if run["mode"] == mode and run.get("val_curve")]
            if curves:
                summary[mode]["val_accuracy_last"] = statistics.median(curve[-1][1] for curve in curves)
    report.update(summary=summary, runs=runs)
    print(json.dumps(bench_grpo._rounded(report)))
    return report


if __name__ == "__main__":
    sys.exit(bench_grpo.exit_status(main()))
