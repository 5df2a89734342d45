# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Supervised warm start of the quickstart's tiny VLM: teach the answer FORMAT, not the answer.

A random-init model emits random tokens, so no response would ever earn a reward. A few hundred steps on the
task's prompts with a uniformly random count (1-4) as the target teach it to answer with one digit and stop,
while its accuracy stays at chance (~25%): whatever it learns about counting afterwards comes from RL.

    python examples/cpu_quickstart/warm_start.py --model outputs/cpu_quickstart/tiny-vl --data .../train.jsonl
"""

import argparse
import json
import os
import random
import time

import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor


def build_batch(processor, rows, image_dir, rng):
    texts, images, targets = [], [], []
    for row in rows:
        messages = [
            {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": row["problem"].replace("<image>", "")}],
            }
        ]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        target = f"{rng.randint(1, 4)}<|im_end|>"
        texts.append(prompt + target)
        targets.append(target)
        images.append(Image.open(os.path.join(image_dir, row["images"][0])).convert("RGB"))
    inputs = processor(text=texts, images=images, return_tensors="pt", padding=True)
    labels = torch.full_like(inputs["input_ids"], -100)
    for i, target in enumerate(targets):
        n = len(processor.tokenizer(target, add_special_tokens=False)["input_ids"])
        last = int(inputs["attention_mask"][i].nonzero().max())  # right padding: real tokens end here
        labels[i, last - n + 1 : last + 1] = inputs["input_ids"][i, last - n + 1 : last + 1]
    inputs["labels"] = labels
    return inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    processor = AutoProcessor.from_pretrained(args.model)
    processor.tokenizer.padding_side = "right"
    model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=torch.float32)
    with open(args.data, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    image_dir = os.path.join(os.path.dirname(args.data), "images")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    start = time.time()
    model.train()
    for step in range(args.steps):
        batch = build_batch(processor, rng.sample(rows, args.batch_size), image_dir, rng)
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 10 == 0 or step == args.steps - 1:
            print(f"warm start step {step}: loss {loss.item():.3f}")
    model.save_pretrained(args.model)
    print(f"warm start done in {time.time() - start:.1f}s")


if __name__ == "__main__":
    main()
