# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What building one SFT example costs (`SFTDataset.encode`: the chat template, the token ids, the assistant mask) as
conversations grow, on the tiny Qwen2's tokenizer: long agent traces of many turns are where a per-turn cost
compounds.

    python benchmarks/bench_sft_data.py [--turns 10,40,80 --repeats 3]

The last line printed is one JSON object: per turn count, the example's tokens and the best seconds of the repeats.
"""

import argparse
import json
import os
import sys
import tempfile
import time


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl.utils.cli import positive, positive_ints  # noqa: E402


def conversation(turns: int) -> list[dict[str, str]]:
    """`turns` user observations and assistant actions of about 120 and 240 tokens each."""
    messages = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"step {turn} " + "observe the grid and report " * 20})
        messages.append({"role": "assistant", "content": f"action {turn}: " + "move left then up and check " * 40})
    return messages


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=positive_ints, default=[10, 40, 80])
    parser.add_argument("--repeats", type=positive(int), default=3)
    parser.add_argument("--model-root", default=os.path.join(tempfile.gettempdir(), "verl_bench_models"))
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from verl.data.sft_dataset import SFTDataset
    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.sft.config import SFTDataConfig

    tokenizer = AutoTokenizer.from_pretrained(get_or_build_tiny_model("qwen2", args.model_root))
    figures = {}
    for turns in args.turns:
        config = SFTDataConfig(train_files="unused", max_length=1_000_000)
        dataset = SFTDataset([{"messages": conversation(turns)}], tokenizer, None, config)
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            example = dataset.encode(0)
            times.append(time.perf_counter() - start)
        figures[str(turns)] = {"tokens": len(example["input_ids"]), "seconds": min(times)}
        print(f"{turns:4d} turns, {len(example['input_ids']):7,d} tokens: {min(times):.3f} s an example")
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
