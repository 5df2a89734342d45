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

A random-init model emits random tokens, so no response would ever earn a reward. A few dozen steps on the task's
prompts teach it to answer with one digit from 1 to 4 and stop: the target of the digit is the uniform distribution
over the four answers (a soft label, the same for every picture) and the target after it is <|im_end|>. The model
ends up answering each count with probability ~1/4 whatever the picture shows, so its accuracy is at chance (~25%)
and whatever it learns about counting afterwards comes from RL. (Hard random labels would leave a random bias
towards one answer, which GRPO then amplifies into a collapsed policy.)

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


ANSWERS = ("1", "2", "3", "4")


def build_batch(processor, rows, image_dir, rng):
    """Prompt + a random answer digit + <|im_end|>, right padded; returns the inputs and each row's digit position."""
    texts, images, targets = [], [], []
    for row in rows:
        messages = [
            {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": row["problem"].replace("<image>", "")}],
            }
        ]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        target = f"{rng.choice(ANSWERS)}<|im_end|>"
        texts.append(prompt + target)
        targets.append(target)
        images.append(Image.open(os.path.join(image_dir, row["images"][0])).convert("RGB"))
    inputs = processor(text=texts, images=images, return_tensors="pt", padding=True)
    last = inputs["attention_mask"].cumsum(-1).argmax(-1)  # right padding: <|im_end|> is the last real token
    return inputs, last - 1


def format_loss(logits, input_ids, digit_pos, answer_ids):
    """Soft cross-entropy of the digit against the uniform answer distribution + cross-entropy of <|im_end|>."""
    rows = torch.arange(len(input_ids))
    digit_logp = torch.log_softmax(logits[rows, digit_pos - 1].float(), dim=-1)  # the token before predicts it
    uniform = -digit_logp[:, answer_ids].mean(-1)
    end_logp = torch.log_softmax(logits[rows, digit_pos].float(), dim=-1)
    end = -end_logp[rows, input_ids[rows, digit_pos + 1]]
    return (uniform + end).mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-4)
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
    answer_ids = torch.tensor(processor.tokenizer.convert_tokens_to_ids(list(ANSWERS)))
    for step in range(args.steps):
        batch, digit_pos = build_batch(processor, rng.sample(rows, args.batch_size), image_dir, rng)
        loss = format_loss(model(**batch).logits, batch["input_ids"], digit_pos, answer_ids)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 10 == 0 or step == args.steps - 1:
            print(f"warm start step {step}: loss {loss.item():.3f}")
    model.save_pretrained(args.model)
    print(f"warm start done in {time.time() - start:.1f}s")


if __name__ == "__main__":
    main()
