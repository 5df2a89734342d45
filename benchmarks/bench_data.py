# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What loading a large RL prompt set costs at start: the trainer renders and tokenizes every row once (bad rows are
found and long prompts filtered before any worker starts), on the tiny Qwen2's tokenizer and synthetic math prompts
of ~60 words in a JSON Lines file. `--sft`: the SFT trainer's check of every conversation instead (rendered,
tokenized, masked), on one-turn conversations of a prompt and a ~130-word answer.

    python benchmarks/bench_data.py [--rows 200000 --workers 1,auto] [--sft]

Prints a line per worker count (`auto`: data.filter_overlong_prompts_workers unset; with --sft, which has no such
key, `1` runs the process on one core, which the check counts) and last one JSON object: per count, the seconds to
build the dataset and its rows per second.
"""

import argparse
import json
import os
import random
import sys
import tempfile
import time


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl.utils.cli import positive  # noqa: E402


WORDS = "the a train leaves station at speed of miles per hour how many minutes does it take to reach city".split()


def write_rows(path: str, rows: int, sft: bool) -> None:
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(rows):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 60)))
            a, b = rng.randint(1, 999), rng.randint(1, 999)
            row = {"prompt": f"{words} What is {a} + {b}?", "answer": str(a + b)}
            if sft:
                answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 200)))
                row = {
                    "messages": [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": answer}]
                }
            f.write(json.dumps(row) + "\n")


def worker_counts(text: str) -> list[int | None]:
    counts = []
    for part in text.split(","):
        if part.strip() == "auto":
            counts.append(None)
        else:
            counts.append(positive(int)(part))
    return counts


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=positive(int), default=200_000)
    parser.add_argument("--workers", type=worker_counts, default=[1, None], help="comma-separated counts or auto")
    parser.add_argument("--max-prompt-length", type=positive(int), default=200, help="some rows are longer")
    parser.add_argument("--sft", action="store_true", help="the SFT trainer's conversation check instead")
    parser.add_argument("--model-root", default=os.path.join(tempfile.gettempdir(), "verl_bench_models"))
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from verl.data.dataset import RLHFDataset
    from verl.data.row_scan import scan_workers
    from verl.data.sft_dataset import SFTDataset
    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.sft.config import SFTDataConfig

    tokenizer = AutoTokenizer.from_pretrained(get_or_build_tiny_model("qwen2", args.model_root))
    figures = {}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "prompts.jsonl")
        write_rows(path, args.rows, args.sft)
        cores = os.sched_getaffinity(0)
        for workers in args.workers:
            start = time.perf_counter()
            if args.sft:
                if workers is not None:
                    os.sched_setaffinity(0, sorted(cores)[:workers])
                processes = scan_workers(None, args.rows)  # as the check counts them, on the cores it may use
                dataset = SFTDataset(path, tokenizer, None, SFTDataConfig(train_files=path, max_length=4096))
                os.sched_setaffinity(0, cores)
            else:
                processes = scan_workers(workers, args.rows)
                dataset = RLHFDataset(
                    path, tokenizer, max_prompt_length=args.max_prompt_length, filter_overlong_prompts_workers=workers
                )
            seconds = time.perf_counter() - start
            name = "auto" if workers is None else str(workers)
            figures[name] = {"processes": processes, "seconds": seconds}
            figures[name]["rows_per_s"] = args.rows / seconds
            print(
                f"workers={name} ({figures[name]['processes']} processes): {seconds:.1f} s for {args.rows:,d} rows "
                f"({len(dataset):,d} kept), {args.rows / seconds:,.0f} rows/s"
            )
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
