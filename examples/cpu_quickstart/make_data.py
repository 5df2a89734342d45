# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Synthetic visual task of the CPU quickstart: how many squares are in the picture?

Each image is 56x56 pixels (4 vision tokens for the tiny Qwen2.5-VL) with 1 to 4 filled squares of random colours
on a white background, on a 2x2 grid of cells, so the count is visible at the resolution of a vision token.

    python examples/cpu_quickstart/make_data.py --output outputs/cpu_quickstart/data
"""

import argparse
import json
import os
import random

from PIL import Image, ImageDraw


PROMPT = "<image>How many squares are in the picture? Answer with one number."
SIZE = 56
CELL = SIZE // 2
COLORS = [(220, 30, 30), (30, 160, 40), (40, 60, 220), (230, 160, 0), (140, 40, 180)]


def render(count: int, rng: random.Random) -> Image.Image:
    image = Image.new("RGB", (SIZE, SIZE), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for cell in rng.sample(range(4), count):
        x0, y0 = (cell % 2) * CELL, (cell // 2) * CELL
        side = rng.randint(14, 22)
        dx, dy = rng.randint(2, CELL - side - 2), rng.randint(2, CELL - side - 2)
        draw.rectangle([x0 + dx, y0 + dy, x0 + dx + side, y0 + dy + side], fill=rng.choice(COLORS))
    return image


def write_split(output_dir: str, split: str, num_rows: int, seed: int) -> str:
    rng = random.Random(seed)
    image_dir = os.path.join(output_dir, "images")
    os.makedirs(image_dir, exist_ok=True)
    path = os.path.join(output_dir, f"{split}.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        counts = [i % 4 + 1 for i in range(num_rows)]  # balanced: no answer is right more often than another
        rng.shuffle(counts)
        for i, count in enumerate(counts):
            name = f"{split}_{i:05d}.png"
            render(count, rng).save(os.path.join(image_dir, name))
            f.write(json.dumps({"problem": PROMPT, "answer": str(count), "images": [name]}) + "\n")
    return path


ANSWERS = ("1", "2", "3", "4")


def write_sft_split(output_dir: str, split: str = "train") -> str:
    """The warm start's conversations: every picture of `split` with EACH of the four answers, four consecutive rows.

    Trained without shuffling in batches of whole groups (examples/cpu_quickstart/sft.yaml), the loss of a group is
    the cross-entropy against the uniform distribution over the answers: the model learns the answer FORMAT (one
    digit from 1 to 4, then the end of the turn) with each digit about equally likely whatever the picture, so it
    starts RL at chance (~25%) and whatever it learns about counting comes from RL. (One random answer per picture
    would leave a random bias towards some answer, which GRPO then amplifies into a collapsed policy.)
    """
    with open(os.path.join(output_dir, f"{split}.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    path = os.path.join(output_dir, f"{split}_sft.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            for answer in ANSWERS:
                messages = [{"role": "user", "content": row["problem"]}, {"role": "assistant", "content": answer}]
                f.write(json.dumps({"messages": messages, "images": row["images"]}) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", required=True)
    parser.add_argument("--train-rows", type=int, default=1024)
    parser.add_argument("--val-rows", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_split(args.output, "train", args.train_rows, args.seed)
    write_split(args.output, "val", args.val_rows, args.seed + 1)
    write_sft_split(args.output, "train")
    print(f"wrote {args.train_rows} train and {args.val_rows} val rows to {args.output}")


if __name__ == "__main__":
    main()
