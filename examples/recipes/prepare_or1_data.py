# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Turn verl-style RL data (Skywork-OR1-RL-Data and the like) into one mixed math + code jsonl for our trainer.

verl-style rows hold the prompt as chat messages, the answer under `reward_model.ground_truth` and the task kind in
`ability` or `data_source`. The output has one row per problem with `prompt` (the user message), `answer` (the
ground truth string: a math answer, or a JSON string of code test cases) and `data_source` set to `math` or `code`,
which `worker.reward.routes` uses to pick the reward function. Code test cases keep their form: stdin/stdout pairs
({"inputs", "outputs"}) and call-based tests ({"fn_name", "inputs", "outputs"}: argument lists and the JSON values
returned) are both forms examples/reward_function/code.py reads, and it compares a call's value with the JSON value
outside the program's process.

    python examples/recipes/prepare_or1_data.py --output data/or1            # Skywork/Skywork-OR1-RL-Data
    python examples/recipes/prepare_or1_data.py --source my.parquet --output data/mine
"""

import argparse
import json
import os
import sys
from collections.abc import Iterable
from typing import Any


def _kind(row: dict[str, Any], split: str | None) -> str:
    for value in (row.get("ability"), row.get("data_source"), split):
        text = str(value or "").lower()
        if "code" in text or "coder" in text:
            return "code"
        if "math" in text:
            return "math"
    raise ValueError(
        f"cannot tell whether the row is math or code (ability={row.get('ability')!r}, "
        f"data_source={row.get('data_source')!r}); pass --kind."
    )


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    users = [message["content"] for message in prompt if message.get("role") == "user"]
    if not users:
        raise ValueError("the prompt has no user message")
    return users[-1]


def code_tests(ground_truth: str) -> str:
    """The row's test cases as the JSON string code.py reads: they are already in one of its forms (an empty
    fn_name, as stdin/stdout rows may carry, is dropped: code.py reads a fn_name as the call-based form)."""
    tests = json.loads(ground_truth) if isinstance(ground_truth, str) else ground_truth
    if isinstance(tests, dict) and "fn_name" in tests and not tests["fn_name"]:
        tests = {key: value for key, value in tests.items() if key != "fn_name"}
    return json.dumps(tests)


def convert(
    rows: Iterable[dict[str, Any]],
    split: str | None = None,
    kind: str | None = None,
    skipped: list[str] | None = None,
) -> Iterable[dict]:
    """The rows for the trainer. A code row whose tests are in no form code.py runs (a LeetCode row's
    `test_code`/`entry_point`, say) is left out, its reason appended to `skipped`: the reward would stop the run at
    the first batch holding it."""
    from verl.rewards.sandbox.judge import parse_test_cases

    for index, row in enumerate(rows):
        where = f"row {index} of {split or 'the source'}"
        try:
            row_kind = kind or _kind(row, split)
            truth = (row.get("reward_model") or {}).get("ground_truth", row.get("answer"))
            if truth is None:
                raise ValueError("no reward_model.ground_truth or answer")
            answer = code_tests(truth) if row_kind == "code" else str(truth)
            prompt = _prompt_text(row["prompt"])
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{where}: {err}") from err
        if row_kind == "code":
            try:
                parse_test_cases(answer, where)
            except ValueError as err:
                if skipped is None:
                    raise
                skipped.append(str(err))
                continue
        yield {"prompt": prompt, "answer": answer, "data_source": row_kind}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", default="Skywork/Skywork-OR1-RL-Data", help="a hub dataset or a local file")
    parser.add_argument("--splits", default="math,code", help="hub splits to read (a local file has one)")
    parser.add_argument("--kind", choices=("math", "code"), default=None, help="force the kind of every row")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    import datasets

    try:
        if os.path.exists(args.source):
            extension = os.path.splitext(args.source)[1].lstrip(".").replace("jsonl", "json")
            parts = [(None, datasets.load_dataset(extension, data_files=args.source, split="train"))]
        else:
            parts = [(split, datasets.load_dataset(args.source, split=split)) for split in args.splits.split(",")]
    except Exception as err:  # a hub that cannot be reached, a file datasets cannot read: one line, not a traceback
        sys.exit(f"prepare_or1_data: cannot read {args.source}: {str(err).splitlines()[0] if str(err) else err!r}")
    os.makedirs(args.output, exist_ok=True)
    path = os.path.join(args.output, "train.jsonl")
    counts: dict[str, int] = {}
    skipped: list[str] = []
    # written aside and renamed at the end: a row that stops the conversion must not leave a train.jsonl of the rows
    # before it, which the recipe would train on as if it were the whole set
    partial = path + ".partial"
    try:
        with open(partial, "w", encoding="utf-8") as f:
            for split, dataset in parts:
                for row in convert(dataset, split, args.kind, skipped):
                    counts[row["data_source"]] = counts.get(row["data_source"], 0) + 1
                    f.write(json.dumps(row) + "\n")
    except ValueError as err:
        os.remove(partial)
        sys.exit(f"prepare_or1_data: {str(err).rstrip('.')}; nothing was written to {path}.")
    os.replace(partial, path)
    print(f"wrote {path}: {counts}")
    if skipped:
        print(f"left out {len(skipped)} code rows whose tests code.py cannot run, e.g. {skipped[0]}")


if __name__ == "__main__":
    main()
