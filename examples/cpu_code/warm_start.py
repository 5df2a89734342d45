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
"""Supervised warm start of the CPU code example's tiny Qwen2: teach the answer FORMAT, not which program is right.

A random-init model never writes a code block, so the sandbox would have nothing to run. Every prompt is trained
towards all four candidate programs at once (the loss is their mean), whatever operation it asks for, so the model
learns to answer with one of the four ```python blocks with probability ~1/4 each: it passes a task's tests about a
quarter of the time, and whatever it learns about reading the operation from the prompt afterwards comes from RL
and the code reward.

    python examples/cpu_code/warm_start.py --model outputs/cpu_code/tiny-qwen2 --data outputs/cpu_code/data/train.jsonl
"""

import argparse
import json
import random
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


PROGRAMS = (
    "a, b = map(int, input().split())\nprint(a + b)",
    "a, b = map(int, input().split())\nprint(a - b)",
    "a, b = map(int, input().split())\nprint(a * b)",
    "a, b = map(int, input().split())\nprint(max(a, b))",
)


def build_batch(tokenizer, problems: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every problem with every program: right-padded ids, attention mask, and the mask of response tokens."""
    rows, response_masks = [], []
    for problem in problems:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": problem}], add_generation_prompt=True, tokenize=False
        )
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        for program in PROGRAMS:
            response_ids = tokenizer.encode(f"```python\n{program}\n```<|im_end|>", add_special_tokens=False)
            rows.append(prompt_ids + response_ids)
            response_masks.append([0] * len(prompt_ids) + [1] * len(response_ids))
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    response = torch.zeros_like(ids)
    for i, (row, resp) in enumerate(zip(rows, response_masks)):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
        response[i, : len(row)] = torch.tensor(resp)
    return ids, mask, response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=4, help="prompts per step (each with all 4 programs)")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    with open(args.data, encoding="utf-8") as f:
        problems = [json.loads(line)["problem"] for line in f]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    start = time.time()
    model.train()
    for step in range(args.steps):
        ids, mask, response = build_batch(tokenizer, rng.sample(problems, args.batch_size))
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        token_loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        target = response[:, 1:].float()
        loss = (token_loss * target).sum() / target.sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 20 == 0 or step == args.steps - 1:
            print(f"warm start step {step}: loss {loss.item():.3f}")
    model.save_pretrained(args.model)
    print(f"warm start done in {time.time() - start:.1f}s")


if __name__ == "__main__":
    main()
