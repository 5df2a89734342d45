# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Games of the CPU guess-the-number example: find a number from 1 to 7, told "higher" or "lower" after each guess.

Every row is one game (the prompt and the secret number as its answer), each number equally often. Played by the
environment examples/envs/guess_number.py:GuessNumber within 3 turns, binary search (4, then 2 or 6, then the last
one left) always wins; guessing at random among the numbers still possible wins about two games in three.

The warm start's conversations (write_sft_split) play the game validly but mostly without a plan: each guess is the
middle of the numbers the feedback so far still allows one time in four, else drawn uniformly from them, until the
number is found or the 3 guesses are used. The tiny model learns the format and which numbers follow "higher" or
"lower", not to track the interval exactly; making the middle its only guess is left to RL.

    python examples/cpu_guess/make_data.py --output outputs/cpu_guess/data
"""

import argparse
import json
import os
import random


LOW, HIGH = 1, 7
MAX_TURNS = 3
"""Guesses per game (worker.rollout.max_turns in examples/cpu_guess/config.yaml)."""
PROMPT = f"Guess my number from {LOW} to {HIGH}."
MIDDLE_SHARE = 0.25
"""How often a warm-start guess is the middle of the allowed interval (binary search); the others are random in it."""


def write_split(output_dir: str, split: str, num_rows: int, seed: int) -> str:
    rng = random.Random(seed)
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, f"{split}.jsonl")
    targets = [LOW + i % (HIGH - LOW + 1) for i in range(num_rows)]  # balanced
    rng.shuffle(targets)
    with open(path, "w", encoding="utf-8") as f:
        for target in targets:
            f.write(json.dumps({"problem": PROMPT, "answer": str(target)}) + "\n")
    return path


def random_play(target: int, rng: random.Random) -> list[dict[str, str]]:
    """One game as chat messages: guesses inside the interval the feedback allows, until the hit or the last turn."""
    messages = [{"role": "user", "content": PROMPT}]
    low, high = LOW, HIGH
    for turn in range(1, MAX_TURNS + 1):
        guess = (low + high) // 2 if rng.random() < MIDDLE_SHARE else rng.randint(low, high)
        messages.append({"role": "assistant", "content": str(guess)})
        if guess == target or turn == MAX_TURNS:
            return messages
        if guess < target:
            low = guess + 1
        else:
            high = guess - 1
        messages.append({"role": "user", "content": "higher" if guess < target else "lower"})


def write_sft_split(output_dir: str, split: str = "train", plays_per_row: int = 4, seed: int = 0) -> str:
    """`plays_per_row` random plays of every game of `split`."""
    rng = random.Random(seed)
    with open(os.path.join(output_dir, f"{split}.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    path = os.path.join(output_dir, f"{split}_sft.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            for _ in range(plays_per_row):
                f.write(json.dumps({"messages": random_play(int(row["answer"]), rng)}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", required=True)
    parser.add_argument("--train-rows", type=int, default=512)
    parser.add_argument("--val-rows", type=int, default=448)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_split(args.output, "train", args.train_rows, args.seed)
    write_split(args.output, "val", args.val_rows, args.seed + 1)
    write_sft_split(args.output, "train", seed=args.seed)
    print(f"wrote {args.train_rows} train and {args.val_rows} val rows to {args.output}")


if __name__ == "__main__":
    main()
