# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Train a reward model on preference pairs with the Bradley-Terry loss, -log sigmoid(r_chosen - r_rejected).

    python scripts/train_reward_model.py --model DIR_OR_ID --train pairs.jsonl [--val val.jsonl] --output OUT \\
        [--epochs 1 --batch-size 8 --lr 1e-5 --max-length 1024 --init-from-lm]
    torchrun --nproc-per-node 8 scripts/train_reward_model.py ...      (several processes, one per GPU)

The pairs are read as the trainer reads data files (.jsonl, .parquet, .json or .csv, a folder of them, or name@split)
in TRL's preference layouts: each row {"prompt": str, "chosen": str, "rejected": str}; or the prompt one user message
and the answers one assistant message each; or, without a prompt column, chosen and rejected as whole [user,
assistant] conversations (the implicit prompt). The conversations are laid out as the trainer's
reward-model worker lays them out (verl.rewards.model_worker: the RM's chat template over [user, assistant],
truncated from the left to --max-length, the score read at the last token), so what is trained here is what the
worker scores. The model is sharded with FSDP2 over torch.distributed, as the trainer's models are: a plain `python`
run makes a one-process gloo group itself (fp32 on the CPU); under torchrun each process takes its rank's device.

--init-from-lm starts from a causal LM: transformers puts a freshly initialised one-label score head on it. Without
it the model must already be a one-label sequence-classification model (e.g. one written by this script).

It prints the train loss and val accuracy (chosen scored strictly above rejected) of each epoch and, last, one JSON
line with the results; the trained model (full state dict, saved by rank 0) and the tokenizer go to --output, ready
for worker.reward.model.model_path.
"""

import argparse
import json
import math
import os
import random
import sys
import time
from typing import Any


PAIR_KEYS = ("prompt", "chosen", "rejected")
"""The columns of a pairs file (prompt may be left out: the implicit prompt)."""

SAVE_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
"""--save-dtype values and the torch dtype each names."""


class PairFileError(ValueError):
    """A pairs file that cannot be read; the message names the file, the row (from 0) and the key."""


def read_pairs(path: str) -> list[dict[str, str]]:
    """The (prompt, chosen, rejected) strings of every row of `path`, read as the trainer reads its data files, in
    TRL's preference layouts; checked before any model is loaded, so a bad row costs seconds, not a run."""
    from verl.data.sources import load_source

    try:
        source = load_source(path)
    except (OSError, TypeError, ValueError) as error:
        said = str(error).rstrip(".")  # names the file, and often what to give ("give a file with at least one row")
        advice = "" if "; give " in said else "; give a file of prompt/chosen/rejected rows"
        raise PairFileError(f"{said if path in said else f'{path}: {said}'}{advice}.") from None
    implicit = "prompt" not in source.columns  # TRL's implicit prompt: whole conversations in chosen and rejected
    for key in PAIR_KEYS[1:]:
        if key not in source.columns:
            raise PairFileError(f"{path}: no '{key}' column; rows need {', '.join(PAIR_KEYS)} (see --help).")
    return [_pair(source.row(index), implicit, source.where(index)) for index in range(len(source))]


def _pair(row: dict[str, Any], implicit: bool, where: str) -> dict[str, str]:
    if implicit:
        (user, chosen), (same_user, rejected) = (_conversation(row[key], where, key) for key in PAIR_KEYS[1:])
        if user != same_user:
            raise PairFileError(f"{where}: 'chosen' and 'rejected' start from different user messages.")
        return {"prompt": user, "chosen": chosen, "rejected": rejected}
    from verl.utils.numbers import plain_number

    pair = {}
    for key, role in zip(PAIR_KEYS, ("user", "assistant", "assistant")):
        value = row[key]
        if value is None:
            raise PairFileError(f"{where}, key '{key}': missing; every row needs {', '.join(PAIR_KEYS)}.")
        if isinstance(value, list):  # conversational: one message of its role
            value = _one_message(value, (role,), where, key)[0]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(plain_number(value))  # an answer "42": a CSV column of plain numbers is read as numbers
        if not isinstance(value, str):
            raise PairFileError(
                f"{where}, key '{key}': must be a string or one {role} message, got {type(value).__name__}."
            )
        pair[key] = value
    return pair


def _conversation(value: Any, where: str, key: str) -> tuple[str, str]:
    """(the user's text, the assistant's) of an implicit-prompt conversation."""
    if value is None:
        raise PairFileError(
            f"{where}, key '{key}': missing; without a prompt column, every row needs chosen, rejected."
        )
    user, answer = _one_message(value if isinstance(value, list) else [value], ("user", "assistant"), where, key)
    return user, answer


def _one_message(messages: list[Any], roles: tuple[str, ...], where: str, key: str) -> list[str]:
    """The texts of `messages`, which must be plain-text messages of exactly these roles: the reward model scores one
    user turn and its answer, as the trainer's reward-model worker lays them out."""
    got = [m.get("role") if isinstance(m, dict) else type(m).__name__ for m in messages]
    if got != list(roles) or not all(isinstance(m.get("content"), str) for m in messages):
        raise PairFileError(
            f"{where}, key '{key}': must be {' + '.join(roles)} messages with text content (the reward model scores "
            f"one user turn and its answer, as the trainer's worker does), got roles {got}."
        )
    return [m["content"] for m in messages]


def _accuracy(model: Any, chosen: list[list[int]], rejected: list[list[int]], pad_id: int, micro: int) -> float:
    """Share of pairs (over all ranks) whose chosen conversation scores strictly above the rejected one."""
    import torch
    import torch.distributed as dist

    from verl.rewards.model_worker import score_rows
    from verl.utils import device as device_utils

    rank, world = dist.get_rank(), dist.get_world_size()
    device = device_utils.get_local_device()
    mine = list(range(rank, len(chosen), world))
    model.eval()
    chosen_scores = score_rows(model, [chosen[i] for i in mine], pad_id, 2 * micro, device)
    rejected_scores = score_rows(model, [rejected[i] for i in mine], pad_id, 2 * micro, device)
    model.train()
    totals = torch.tensor([float((chosen_scores > rejected_scores).sum()), float(len(mine))], dtype=torch.float64)
    dist.all_reduce(totals)
    return totals[0].item() / max(totals[1].item(), 1.0)


def _log(*values: Any) -> None:
    import torch.distributed as dist

    if dist.get_rank() == 0:
        print(*values, flush=True)


def train(args: argparse.Namespace, train_pairs: list[dict[str, str]], val_pairs: list[dict[str, str]]) -> dict:
    """The Bradley-Terry training loop; returns the results printed as the final JSON line."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from transformers import AutoModelForSequenceClassification

    from verl.data.tokenizer import get_tokenizer
    from verl.models.config import FSDPConfig
    from verl.models.fsdp import clip_grad_norm, get_full_state_dict
    from verl.models.transformers_compat import save_model_folder
    from verl.rewards.model_worker import (
        build_fsdp_reward_model,
        last_token_scores,
        load_reward_model_config,
        pad_right,
        tokenize_conversations,
    )
    from verl.utils import device as device_utils
    from verl.utils.optim import OptimConfig, build_optimizer

    start = time.perf_counter()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = device_utils.get_local_device()
    tokenizer = get_tokenizer(args.tokenizer or args.model, trust_remote_code=args.trust_remote_code)
    pad_id = tokenizer.pad_token_id
    config = load_reward_model_config(
        args.model, args.trust_remote_code, from_lm=args.init_from_lm, pad_token_id=pad_id
    )
    positions = getattr(config, "n_positions", None)  # learned positions (GPT-2's family), as the worker's check
    if isinstance(positions, int) and args.max_length > positions:
        raise ValueError(
            f"--max-length {args.max_length} is longer than the {positions} positions --model '{args.model}' has "
            f"(n_positions, learned): its forward would fail on a longer conversation; give --max-length {positions} "
            "(conversations keep their last tokens)."
        )
    torch.manual_seed(args.seed)  # the score head that transformers initialises for --init-from-lm
    model = build_fsdp_reward_model(args.model, config, FSDPConfig(), device, torch.float32, args.trust_remote_code)
    model.train()
    optimizer = build_optimizer(model, OptimConfig(lr=args.lr, weight_decay=args.weight_decay))

    def tokenized(pairs: list[dict[str, str]]) -> tuple[list[list[int]], list[list[int]], int]:
        prompts = [pair["prompt"] for pair in pairs]
        chosen, cut_chosen = tokenize_conversations(tokenizer, prompts, [p["chosen"] for p in pairs], args.max_length)
        rejected, cut_rejected = tokenize_conversations(
            tokenizer, prompts, [p["rejected"] for p in pairs], args.max_length
        )
        return chosen, rejected, cut_chosen + cut_rejected

    train_chosen, train_rejected, train_cut = tokenized(train_pairs)
    val_chosen, val_rejected, val_cut = tokenized(val_pairs) if val_pairs else ([], [], 0)
    micro = args.micro_batch_size
    results: dict[str, Any] = {
        "train_pairs": len(train_pairs),
        "val_pairs": len(val_pairs),
        "truncated_ratio": train_cut / (2 * len(train_pairs)),
        "world_size": world,
        "device": device.type,
    }
    if val_pairs:
        results["val_truncated_ratio"] = val_cut / (2 * len(val_pairs))
    # the validation pairs are cut as the worker cuts what it scores; a tie after the cut is no win (val_accuracy)
    for what, cut, chosen_ids, rejected_ids, outcome in (
        ("training", train_cut, train_chosen, train_rejected, "with nothing to learn"),
        ("validation", val_cut, val_chosen, val_rejected, "which count as wrong in val_accuracy"),
    ):
        if cut:
            same = sum(chosen == rejected for chosen, rejected in zip(chosen_ids, rejected_ids))
            _log(
                f"warning: {cut} of {2 * len(chosen_ids)} {what} conversations were cut to --max-length "
                f"{args.max_length} (from the left)"
                + (f"; {same} pair(s) became identical, {outcome}: raise --max-length" if same else "")
            )
    if val_pairs:
        results["val_accuracy_initial"] = _accuracy(model, val_chosen, val_rejected, pad_id, micro)
        _log(f"before training: val_accuracy {results['val_accuracy_initial']:.3f}")
    order = list(range(len(train_pairs)))
    shuffler = random.Random(args.seed)  # the same order on every rank: each rank takes its share of every batch
    steps = 0
    epoch_stats: list[dict[str, float]] = []
    for epoch in range(1, args.epochs + 1):
        epoch_start = time.perf_counter()
        shuffler.shuffle(order)
        sums = torch.zeros(3, dtype=torch.float64)  # loss sum, correct pairs, pairs
        for batch_start in range(0, len(order), args.batch_size):
            batch = order[batch_start : batch_start + args.batch_size]
            mine = batch[rank::world]
            # Every rank runs as many forward/backward passes as the busiest one: FSDP's collectives must match.
            passes = math.ceil(math.ceil(len(batch) / world) / micro)
            optimizer.zero_grad(set_to_none=True)
            for step in range(passes):
                pairs = mine[step * micro : (step + 1) * micro]
                if pairs:
                    rows = [train_chosen[i] for i in pairs] + [train_rejected[i] for i in pairs]
                    scores = last_token_scores(model, **pad_right(rows, pad_id, device))
                    margin = scores[: len(pairs)] - scores[len(pairs) :]
                    loss_sum = -F.logsigmoid(margin).sum()
                    sums += torch.tensor([loss_sum.item(), float((margin > 0).sum()), float(len(pairs))])
                else:  # nothing left on this rank: a zero-loss pass keeps its collectives in step
                    loss_sum = last_token_scores(model, **pad_right([[pad_id]], pad_id, device)).sum() * 0.0
                # mean over the global batch; FSDP averages gradients over the ranks, hence x world
                (loss_sum * (world / len(batch))).backward()
            grad_norm = clip_grad_norm(model, args.max_grad_norm)
            if torch.isfinite(grad_norm):
                optimizer.step()
            else:
                _log(f"step {steps + 1}: gradient norm {grad_norm.item()} is not finite; step skipped")
            steps += 1
        dist.all_reduce(sums)
        stats = {
            "epoch": epoch,
            "train_loss": sums[0].item() / sums[2].item(),
            "train_accuracy": sums[1].item() / sums[2].item(),
        }
        line = f"epoch {epoch}/{args.epochs}: train_loss {stats['train_loss']:.4f}"
        line += f" train_accuracy {stats['train_accuracy']:.3f}"
        if val_pairs:
            stats["val_accuracy"] = _accuracy(model, val_chosen, val_rejected, pad_id, micro)
            line += f" val_accuracy {stats['val_accuracy']:.3f}"
        _log(f"{line} ({time.perf_counter() - epoch_start:.1f} s)")
        epoch_stats.append(stats)
    results.update({key: value for key, value in epoch_stats[-1].items() if key != "epoch"})
    results.update(steps=steps, epochs=epoch_stats)

    state = get_full_state_dict(model)  # a collective: every rank takes part, rank 0 receives the full tensors
    if rank == 0:
        save_dtype = getattr(torch, SAVE_DTYPES[args.save_dtype])
        plain = AutoModelForSequenceClassification.from_config(
            config, dtype=save_dtype, trust_remote_code=args.trust_remote_code
        )
        plain.load_state_dict({name: tensor.to(save_dtype) for name, tensor in state.items()}, strict=True)
        os.makedirs(args.output, exist_ok=True)
        save_model_folder(plain, args.output)
        tokenizer.save_pretrained(args.output)
    dist.barrier()
    results.update(output=os.path.abspath(args.output), seconds=round(time.perf_counter() - start, 2))
    return results


def main(argv: list[str] | None = None) -> int:
    from verl.utils.cli import positive

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="model directory or hub id to start from")
    parser.add_argument("--train", required=True, help="file of {prompt, chosen, rejected} rows (see above)")
    parser.add_argument("--val", default=None, help="validation pairs, as --train (accuracy after each epoch)")
    parser.add_argument("--output", required=True, help="directory for the trained model and its tokenizer")
    parser.add_argument("--tokenizer", default=None, help="tokenizer location (default: --model)")
    parser.add_argument("--init-from-lm", action="store_true", help="start from a causal LM: add a new score head")
    parser.add_argument("--epochs", type=positive(int), default=1, help="passes over the train pairs (default: 1)")
    parser.add_argument("--batch-size", type=positive(int), default=8, help="pairs per optimizer step, all ranks")
    parser.add_argument("--micro-batch-size", type=positive(int), default=4, help="pairs per forward per rank")
    parser.add_argument("--lr", type=positive(float), default=1e-5, help="AdamW learning rate (default: 1e-5)")
    parser.add_argument("--weight-decay", type=positive(float, zero=True), default=0.0, help="AdamW weight decay")
    parser.add_argument("--max-grad-norm", type=positive(float), default=1.0, help="gradient clipping (default: 1)")
    parser.add_argument("--max-length", type=int, default=1024, help="tokens per conversation, cut from the left")
    parser.add_argument("--seed", type=int, default=0, help="shuffling and score-head seed (default: 0)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="(default: auto)")
    parser.add_argument("--save-dtype", choices=tuple(SAVE_DTYPES), default="fp32", help="(default: fp32)")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow model code from the model repo")
    args = parser.parse_args(argv)
    if args.max_length < 2:
        parser.error(f"--max-length {args.max_length} must be at least 2.")
    from verl.models.config import model_folder_problem
    from verl.utils.hub import hub_folder, offline_unless_reachable

    offline_unless_reachable({"model": args.model, "tokenizer": args.tokenizer})  # before huggingface_hub's import
    from verl.utils.config import unwritable
    from verl.utils.writable_dirs import unwritable_reason

    problem = unwritable(args.output) if args.output else "which is empty; give a writable directory"
    if problem is None and (reason := unwritable_reason(args.output)):  # made now: root passes the access check (/sys)
        problem = f"which cannot be written ({reason}); give a writable directory"
    if problem is not None:  # now, not after the training (the trained weights were lost)
        print(f"train_reward_model: --output '{args.output}', {problem}.", file=sys.stderr)
        return 2

    try:
        train_pairs = read_pairs(args.train)
        val_pairs = read_pairs(args.val) if args.val else []
        args.model = hub_folder(args.model, "--model")  # a ModelScope id with USE_MODELSCOPE_HUB=1
        args.tokenizer = args.tokenizer and hub_folder(args.tokenizer, "--tokenizer")
    except ValueError as error:  # a PairFileError, or a ModelScope id that cannot be fetched
        print(f"train_reward_model: {error}", file=sys.stderr)
        return 2
    problem = model_folder_problem(args.model, "--model")
    if problem:
        print(f"train_reward_model: {problem}", file=sys.stderr)
        return 2

    import torch.distributed as dist

    from verl.utils import device as device_utils

    try:
        device_utils.set_device_type(args.device)
    except ValueError:  # cuda without a GPU
        print(
            f"train_reward_model: --device {args.device}, and torch sees no CUDA device in this process; use "
            "--device cpu (or auto).",
            file=sys.stderr,
        )
        return 2
    with device_utils.one_process_group():  # torchrun's group, or this process alone
        try:
            results = train(args, train_pairs, val_pairs)
        except (OSError, ValueError, NotImplementedError) as error:  # a causal LM without --init-from-lm, a folder
            # without a tokenizer, a vision-language model (no reward model of one yet)
            print(f"train_reward_model: {error}", file=sys.stderr)
            return 2
        if dist.get_rank() == 0:
            print(json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
