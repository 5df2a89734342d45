# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Plot reward and validation accuracy over the steps of a run from its file log, and print a summary line.

python scripts/plot_metrics.py --log_dir checkpoints/<project>/<experiment> --output plot.png
"""

import argparse
import json
import os
import sys


def read_rows(log_dir: str) -> list[dict]:
    """The rows of the run's experiment_log.jsonl (`log_dir` is the run's folder, or that file). A line that is not
    a row (cut by a killed run, damaged) is left out, with a warning that counts them."""
    path = log_dir if os.path.isfile(log_dir) else os.path.join(log_dir, "experiment_log.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"'{path}' does not exist; train with trainer.logger including file.")
    rows, damaged = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                rows.append(row)
            else:
                damaged.append(number)
    if damaged:
        shown = ", ".join(map(str, damaged[:5])) + (", ..." if len(damaged) > 5 else "")
        print(
            f"plot_metrics: warning: '{path}': {len(damaged)} line(s) are not rows and are left out ({shown}).",
            file=sys.stderr,
        )
    if not rows:
        raise ValueError(f"'{path}' holds no rows yet; the run logs one per step.")
    return rows


def numbers_only(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """`rows` without the values of `keys` that are no numbers (a null, a string), which are left out with a
    warning naming the first (matplotlib's ConversionError traceback otherwise)."""
    skipped = []
    for row in rows:
        for key in keys:
            value = row.get(key)
            if key in row and (isinstance(value, bool) or not isinstance(value, (int, float))):
                skipped.append((row["step"], key, row.pop(key)))
    if skipped:
        step, key, value = skipped[0]
        print(
            f"plot_metrics: warning: {len(skipped)} value(s) are not numbers and are left out (the first: {key} at "
            f"step {step} is {json.dumps(value)[:60]}).",
            file=sys.stderr,
        )
    return rows


def by_step(rows: list[dict]) -> list[dict]:
    """One row per step, in step order, its metrics merged (a step's training and validation rows)."""
    merged: dict[int, dict] = {}
    for row in rows:
        merged.setdefault(row["step"], {}).update(row)
    return [merged[step] for step in sorted(merged)]


def run_title(log_dir: str) -> str:
    """project / experiment from the run's experiment_config.json, else the log directory's name."""
    folder = os.path.dirname(os.path.abspath(log_dir)) if os.path.isfile(log_dir) else log_dir
    try:
        with open(os.path.join(folder, "experiment_config.json"), encoding="utf-8") as f:
            trainer = json.load(f)["trainer"]
        return f"{trainer['project_name']} / {trainer['experiment_name']}"
    except (OSError, ValueError, KeyError, TypeError):
        return os.path.basename(os.path.normpath(folder))


def plot(rows: list[dict], output: str, accuracy_key: str, reward_key: str, title: str) -> list[str]:
    """Write the plot; returns the legend labels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(row["step"], row[reward_key]) for row in rows if reward_key in row]
    val = [(row["step"], row[accuracy_key]) for row in rows if accuracy_key in row]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train:
        ax.plot(*zip(*train), label=f"training reward ({reward_key})", color="tab:blue", alpha=0.7)
    if val:
        ax.plot(*zip(*val), label=f"validation ({accuracy_key})", color="tab:red", marker="o")
    ax.set_title(title)
    ax.set_xlabel("step")
    values = [value for _, value in train + val]
    if values and 0.0 <= min(values) and max(values) <= 1.0:  # rewards and accuracies in [0, 1]: the whole range
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return labels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--log_dir",
        required=True,
        help="the run's folder (trainer.save_checkpoint_path), or its experiment_log.jsonl (or val_only_log.jsonl)",
    )
    parser.add_argument("--output", required=True, help="the image to write (.png, .pdf, .svg, ...)")
    parser.add_argument(
        "--accuracy_key",
        help="the validation metric to plot (default: val/accuracy_reward, else val/reward_score where the reward "
        "has no accuracy key)",
    )
    parser.add_argument("--reward_key", help="the training metric to plot (default: critic/score/mean)")
    args = parser.parse_args(argv)
    try:
        rows = by_step(read_rows(args.log_dir))
    except (FileNotFoundError, ValueError) as err:
        print(f"plot_metrics: {err}", file=sys.stderr)
        return 2
    logged = sorted({key for row in rows for key in row})
    if args.accuracy_key is None:
        args.accuracy_key = "val/accuracy_reward" if "val/accuracy_reward" in logged else "val/reward_score"
    # a validation-only run's log (trainer.val_only=true, a row per checkpoint validated) has no training metric (a
    # validation row may hold the first weight sync's check)
    validation = ("step", "val", "rollout/weight_sync_")
    training = args.reward_key is not None or any(not name.startswith(validation) for name in logged)
    args.reward_key = args.reward_key or "critic/score/mean"
    for option, key, needed in (
        ("--reward_key", args.reward_key, training),
        ("--accuracy_key", args.accuracy_key, any(name.startswith("val/") for name in logged)),
    ):
        if key not in logged and needed:
            print(f"plot_metrics: {option} {key} is not in the log; its metrics: {', '.join(logged)}", file=sys.stderr)
            return 2
    if os.path.isdir(args.output):  # matplotlib wrote <output>.png beside it, and this said it wrote <output>
        print(f"plot_metrics: --output {args.output} is a folder; give the image's file name.", file=sys.stderr)
        return 2
    rows = numbers_only(rows, (args.reward_key, args.accuracy_key))
    if not any(args.reward_key in row or args.accuracy_key in row for row in rows):  # an empty plot, exit 0
        print(f"plot_metrics: no numbers of {args.reward_key} or {args.accuracy_key} to plot.", file=sys.stderr)
        return 2
    if not os.path.splitext(args.output)[1]:  # matplotlib writes <output>.png
        args.output += ".png"
    try:
        plot(rows, args.output, args.accuracy_key, args.reward_key, run_title(args.log_dir))
    except ValueError as err:  # matplotlib: an image format it does not write
        print(f"plot_metrics: --output {args.output}: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the plot cannot be written there
        print(
            f"plot_metrics: cannot write {args.output}: {err.strerror or err}; choose another --output.",
            file=sys.stderr,
        )
        return 1
    val = [row[args.accuracy_key] for row in rows if args.accuracy_key in row]
    if val:
        print(f"val accuracy: first {val[0]:.3f}, last {val[-1]:.3f} ({len(val)} validations); plot: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
