# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Synthetic task of the CPU zoom example: the colour of a small dot in a named quarter of a 56x56 picture.

The dot (6 px) is a sliver of one vision token at the picture's resolution; the zoom tool
(examples/envs/zoom.py) enlarges its quarter 2x, so the next turn sees it four times as large. The warm start's
conversations (`train_sft.jsonl`) call the tool on the named quarter, see the enlarged picture and answer each of
the three colours once, so the model learns the format and starts RL at chance on the colour.

    python examples/cpu_zoom/make_data.py --output outputs/cpu_zoom/data
"""

import argparse
import importlib.util
import json
import os
import random

from PIL import Image, ImageDraw


HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("zoom_env", os.path.join(HERE, "..", "envs", "zoom.py"))
zoom_env = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoom_env)

SIZE = 56
DOT = 6
RGB = {"red": (220, 30, 30), "green": (30, 160, 40), "blue": (40, 60, 220)}
PROMPT = "<image>What color is the dot in the {quadrant} quarter? Zoom in, then answer with one word."


def render(quadrant: str, colour: str, rng: random.Random) -> Image.Image:
    image = Image.new("RGB", (SIZE, SIZE), (255, 255, 255))
    column, row = zoom_env.QUADRANTS[quadrant]
    half = SIZE // 2
    x = column * half + rng.randint(3, half - DOT - 3)
    y = row * half + rng.randint(3, half - DOT - 3)
    ImageDraw.Draw(image).rectangle([x, y, x + DOT - 1, y + DOT - 1], fill=RGB[colour])
    return image


def write_split(output_dir: str, split: str, num_rows: int, seed: int) -> str:
    """`num_rows` pictures (colours and quarters balanced), their questions and answers; returns the file."""
    rng = random.Random(seed)
    image_dir = os.path.join(output_dir, "images")
    os.makedirs(image_dir, exist_ok=True)
    cases = [(quadrant, colour) for quadrant in zoom_env.QUADRANTS for colour in zoom_env.COLOURS]
    path = os.path.join(output_dir, f"{split}.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for i in range(num_rows):
            quadrant, colour = cases[i % len(cases)]
            name = f"{split}_{i:05d}.png"
            render(quadrant, colour, rng).save(os.path.join(image_dir, name))
            row = {"problem": PROMPT.format(quadrant=quadrant), "answer": colour, "images": [name]}
            f.write(json.dumps({**row, "quadrant": quadrant}) + "\n")
    return path


def write_sft_split(output_dir: str, split: str = "train") -> str:
    """Each picture three times: the zoom call on its quarter, the enlarged picture, then each colour once."""
    with open(os.path.join(output_dir, f"{split}.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    image_dir = os.path.join(output_dir, "images")
    path = os.path.join(output_dir, f"{split}_sft.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            picture = Image.open(os.path.join(image_dir, row["images"][0])).convert("RGB")
            zoomed = row["images"][0].replace(".png", "_zoom.png")
            zoom_env.zoom(picture, row["quadrant"]).save(os.path.join(image_dir, zoomed))
            call = json.dumps({"name": "zoom", "arguments": {"quadrant": row["quadrant"]}})
            for colour in zoom_env.COLOURS:
                messages = [
                    {"role": "user", "content": row["problem"]},
                    {"role": "assistant", "content": f"<tool_call>{call}</tool_call>"},
                    {"role": "tool", "content": "<image>"},
                    {"role": "assistant", "content": colour},
                ]
                record = {"messages": messages, "images": [row["images"][0], zoomed], "tools": [zoom_env.SCHEMA]}
                f.write(json.dumps(record) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", required=True)
    parser.add_argument("--train-rows", type=int, default=480)
    parser.add_argument("--val-rows", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_split(args.output, "train", args.train_rows, args.seed)
    write_split(args.output, "val", args.val_rows, args.seed + 1)
    write_sft_split(args.output, "train")
    print(f"wrote {args.train_rows} train and {args.val_rows} val rows to {args.output}")


if __name__ == "__main__":
    main()
