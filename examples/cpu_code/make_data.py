# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Synthetic coding tasks of the CPU code example: read two integers, print their sum, difference, product or max.

Each row asks for one of the four operations and carries three stdin/stdout test cases as its answer (a JSON
string in the format of examples/reward_function/code.py). The inputs are distinct integers from 2 to 30, so the
four programs disagree on every case: only the program for the asked operation passes.

    python examples/cpu_code/make_data.py --output outputs/cpu_code/data
"""

import argparse
import json
import os
import random


OPERATIONS = {
    "sum": lambda a, b: a + b,
    "difference": lambda a, b: a - b,
    "product": lambda a, b: a * b,
    "maximum": lambda a, b: max(a, b),
}
PROMPT = (
    "Write a Python program that reads two integers a and b from one line of standard input and prints their "
    "{operation}{detail}. Answer with one ```python code block."
)
DETAILS = {"difference": " (a - b)"}
PROGRAMS = (
    "a, b = map(int, input().split())\nprint(a + b)",
    "a, b = map(int, input().split())\nprint(a - b)",
    "a, b = map(int, input().split())\nprint(a * b)",
    "a, b = map(int, input().split())\nprint(max(a, b))",
)
"""The program of each operation, in the order of OPERATIONS."""


def make_row(operation: str, rng: random.Random) -> dict:
    inputs, outputs = [], []
    for _ in range(3):
        a, b = rng.sample(range(2, 31), 2)
        inputs.append(f"{a} {b}\n")
        outputs.append(f"{OPERATIONS[operation](a, b)}\n")
    prompt = PROMPT.format(operation=operation, detail=DETAILS.get(operation, ""))
    return {"problem": prompt, "answer": json.dumps({"inputs": inputs, "outputs": outputs}), "data_source": "code"}


def write_split(output_dir: str, split: str, num_rows: int, seed: int) -> str:
    rng = random.Random(seed)
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, f"{split}.jsonl")
    operations = [list(OPERATIONS)[i % len(OPERATIONS)] for i in range(num_rows)]  # balanced
    rng.shuffle(operations)
    with open(path, "w", encoding="utf-8") as f:
        for operation in operations:
            f.write(json.dumps(make_row(operation, rng)) + "\n")
    return path


def write_sft_split(output_dir: str, split: str = "train") -> str:
    """The warm start's conversations (examples/cpu_code/sft.yaml): every task of `split` with EACH of the four
    programs as the answer, four consecutive rows.

    A random-init model never writes a code block, so the sandbox would have nothing to run. Trained without
    shuffling in batches of whole groups, the loss of a group is the cross-entropy against the uniform distribution
    over the four programs: the model learns to answer with one ```python block, each program about equally likely
    whatever the operation asked, so it passes a task's tests about a quarter of the time and whatever it learns
    about reading the operation from the prompt comes from RL and the code reward.
    """
    with open(os.path.join(output_dir, f"{split}.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    path = os.path.join(output_dir, f"{split}_sft.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            for program in PROGRAMS:
                answer = f"```python\n{program}\n```"
                messages = [{"role": "user", "content": row["problem"]}, {"role": "assistant", "content": answer}]
                f.write(json.dumps({"messages": messages}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", required=True)
    parser.add_argument("--train-rows", type=int, default=512)
    parser.add_argument("--val-rows", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_split(args.output, "train", args.train_rows, args.seed)
    write_split(args.output, "val", args.val_rows, args.seed + 1)
    write_sft_split(args.output, "train")
    print(f"wrote {args.train_rows} train and {args.val_rows} val rows to {args.output}")


if __name__ == "__main__":
    main()
