# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Synthetic tasks of the CPU tool-use example: "What is a * b?" answered with the multiply tool.

Rows ask for the product of two one-digit integers (2 to 9); the answer is the product. The warm start's conversations
(write_sft_split) show the tool in use: the model calls multiply in the chat template's <tool_call> format, reads
the tool's result and answers with it. The prompts of RL and SFT describe the tool alike (the chat template's
`tools`, from examples/envs/calculator.py:Multiplier).

    python examples/cpu_tools/make_data.py --output outputs/cpu_tools/data
"""

import argparse
import json
import os
import random
import sys


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = os.path.join(REPO, "examples", "envs", "calculator.py") + ":Multiplier"
PROMPT = "What is {a} * {b}?"


def write_split(output_dir: str, split: str, num_rows: int, seed: int) -> str:
    rng = random.Random(seed)
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, f"{split}.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(num_rows):
            a, b = rng.randint(2, 9), rng.randint(2, 9)
            f.write(json.dumps({"problem": PROMPT.format(a=a, b=b), "answer": str(a * b), "a": a, "b": b}) + "\n")
    return path


def tool_schemas() -> list[dict]:
    sys.path.insert(0, REPO)
    from verl.envs import load_environment

    return load_environment(ENV).tool_schemas()


def write_sft_split(output_dir: str, split: str = "train") -> str:
    """Each task as a worked conversation: the tool call, the tool's result, the answer."""
    with open(os.path.join(output_dir, f"{split}.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    tools = tool_schemas()
    path = os.path.join(output_dir, f"{split}_sft.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            call = json.dumps({"name": "multiply", "arguments": {"a": row["a"], "b": row["b"]}})
            messages = [
                {"role": "user", "content": row["problem"]},
                {"role": "assistant", "content": f"<tool_call>{call}</tool_call>"},
                {"role": "tool", "content": row["answer"]},
                {"role": "assistant", "content": row["answer"]},
            ]
            f.write(json.dumps({"messages": messages, "tools": tools}) + "\n")
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
