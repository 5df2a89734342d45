# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The driver's own per-step work that does not scale with the model, at a real run's size, on synthetic tensors.

Between two worker calls the single controller joins the rollout to its prompts, computes advantages and decodes
texts for the rollout dump and validation; at 512 prompts x 8 samples of 1,024 + 4,096 tokens each of these took
seconds of the step while every device waited. This times them with the project's own functions, one thread:

    python benchmarks/bench_driver.py [--prompts 512 --n 8 --prompt-length 1024 --response-length 4096]

It prints one JSON line per function (seconds, the median of `--repeats`).
"""

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl.utils.cli import positive  # noqa: E402


def timed(function: Callable[[], Any], repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=positive(int), default=512)
    parser.add_argument("--n", type=positive(int), default=8)
    parser.add_argument("--prompt-length", type=positive(int), default=1024)
    parser.add_argument("--response-length", type=positive(int), default=4096)
    parser.add_argument("--repeats", type=positive(int), default=3)
    args = parser.parse_args(argv)

    import numpy as np
    import torch

    from verl.algorithms.advantages import _discounted_returns, compute_gae_advantage_return
    from verl.protocol import DataProto
    from verl.trainer.ray_trainer import join_rollout

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    rows, width = args.prompts * args.n, args.response_length
    prompt_ids = [
        torch.randint(0, 150_000, (args.prompt_length,), generator=generator).tolist() for _ in range(args.prompts)
    ]
    prompts = DataProto.from_dict(
        tensors={"input_ids": torch.zeros(args.prompts, args.prompt_length, dtype=torch.long)},
        non_tensors={"raw_prompt_ids": np.array(prompt_ids + [None], dtype=object)[:-1]},
    )
    echoed = np.array([list(ids) for ids in prompt_ids for _ in range(args.n)] + [None], dtype=object)[:-1]
    output = DataProto.from_dict(
        tensors={"responses": torch.zeros(rows, width, dtype=torch.long)}, non_tensors={"raw_prompt_ids": echoed}
    )
    rewards = torch.zeros(rows, width)
    rewards[:, -1] = torch.randn(rows, generator=generator)
    values = torch.randn(rows, width, generator=generator)
    mask = torch.ones(rows, width)
    figures = {
        "join_rollout": timed(lambda: join_rollout(prompts, output.select(), args.n), args.repeats),
        "gae": timed(lambda: compute_gae_advantage_return(rewards, values, mask, 1.0, 0.95), args.repeats),
        "discounted_returns": timed(lambda: _discounted_returns(rewards, mask, 1.0), args.repeats),
    }
    for name, seconds in figures.items():
        print(json.dumps({"function": name, "rows": rows, "response_length": width, "seconds": round(seconds, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
