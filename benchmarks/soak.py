# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Soak test: a long CPU quickstart run, watching every process of the run for growth in memory, files and threads.

The trainer runs as a child process (its Ray head, raylet, workers and any reward actor are its descendants); every
`--interval` seconds the script records, per process, resident memory, open file descriptors and threads, next to
the training step read from the run's file log. After `--warmup` steps the figures should stay flat. Each
process's peak resident memory over `--window` steps after the warm-up is compared with its peak over the last
`--window` steps (single snapshots fall at random phases of a step, and memory moves with the phase): the target
is at most 5% growth per process and in total, and no growth in the open files and threads that stay open (the
fewest seen in each window: a file open for a moment is not a leak).

    OMP_NUM_THREADS=1 python benchmarks/soak.py --steps 300 --warmup 50

It builds the quickstart's tiny Qwen2.5-VL and square-counting data under `--workdir` if they are not there (no
warm start: the soak measures resources, not learning). The last line printed is one JSON object with the figures.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import psutil


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prepare(workdir: str) -> tuple[str, str]:
    """The tiny VL model and the data directory of the quickstart, built once under `workdir`."""
    model, data = os.path.join(workdir, "tiny-vl"), os.path.join(workdir, "data")
    python = sys.executable
    if not os.path.isfile(os.path.join(model, "config.json")):
        subprocess.run(
            [python, "-m", "verl.models.tiny_models", "--kind", "qwen2_5_vl", "--output", model]
            + ["--min-pixels", "3136", "--max-pixels", "3136"],
            check=True,
            cwd=REPO,
        )
    if not os.path.isfile(os.path.join(data, "train.jsonl")):
        script = os.path.join(REPO, "examples", "cpu_quickstart", "make_data.py")
        subprocess.run([python, script, "--output", data], check=True, cwd=REPO)
    return model, data


def snapshot(root: psutil.Process) -> dict[int, dict[str, float]]:
    """RSS (MiB), open descriptors and threads of `root` and all its descendants, by pid."""
    figures = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            with process.oneshot():
                figures[process.pid] = {
                    "name": " ".join(process.cmdline()[:3])[-80:] or process.name(),
                    "rss_mib": process.memory_info().rss / 2**20,
                    **_rss_split(process.pid),
                    "fds": process.num_fds(),
                    "threads": process.num_threads(),
                }
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return figures


def _rss_split(pid: int) -> dict[str, float]:
    """Resident memory split as the kernel counts it: private (anonymous) pages, file-backed pages, and shared
    memory (Ray's object store, which lives in /dev/shm and is mapped by the raylet and the workers)."""
    split = {"anon_mib": 0.0, "file_mib": 0.0, "shmem_mib": 0.0}
    keys = {"RssAnon:": "anon_mib", "RssFile:": "file_mib", "RssShmem:": "shmem_mib"}
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] in keys:
                    split[keys[fields[0]]] = int(fields[1]) / 1024
    except OSError:
        pass
    return split


def current_step(log_path: str) -> int:
    if not os.path.isfile(log_path):
        return 0
    with open(log_path, encoding="utf-8") as f:
        steps = [json.loads(line).get("step", 0) for line in f if '"actor/pg_loss"' in line]
    return max(steps, default=0)


def window_peak(snapshots: list[dict[int, dict]]) -> dict[int, dict]:
    """Per process over `snapshots`: the largest memory figures, the fewest open files and threads."""
    peak: dict[int, dict] = {}
    for figures in snapshots:
        for pid, values in figures.items():
            if pid not in peak:
                peak[pid] = dict(values)
                continue
            for key, value in values.items():
                if key == "name":
                    peak[pid][key] = value
                else:
                    peak[pid][key] = (min if key in ("fds", "threads") else max)(peak[pid][key], value)
    return peak


def growth(before: dict[int, dict], after: dict[int, dict]) -> dict[str, float]:
    """Growth between two snapshots over the processes alive in both: total and worst per-process RSS (%), and the
    change in open descriptors and threads."""
    common = sorted(set(before) & set(after))
    rss_before = sum(before[pid]["rss_mib"] for pid in common)
    rss_after = sum(after[pid]["rss_mib"] for pid in common)
    worst = max(
        (
            after[pid]["rss_mib"] / max(before[pid]["rss_mib"], 1e-9) - 1
            for pid in common
            if before[pid]["rss_mib"] > 50
        ),
        default=0.0,
    )
    return {
        "processes": len(common),
        "rss_before_mib": rss_before,
        "rss_after_mib": rss_after,
        "rss_growth_pct": 100 * (rss_after / max(rss_before, 1e-9) - 1),
        "worst_process_rss_growth_pct": 100 * worst,
        "fds_change": sum(after[pid]["fds"] - before[pid]["fds"] for pid in common),
        "threads_change": sum(after[pid]["threads"] - before[pid]["threads"] for pid in common),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50, help="step after which growth is measured")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between snapshots")
    parser.add_argument("--window", type=int, default=20, help="steps over which peaks are compared at both ends")
    parser.add_argument("--workdir", default=os.path.join(REPO, "outputs", "soak"))
    parser.add_argument(
        "--samples", help="write every snapshot here as JSON lines (step, seconds, per-process figures)"
    )
    args = parser.parse_args(argv)
    if not 0 < args.warmup < args.steps:
        parser.error(f"--warmup {args.warmup} must be above 0 and below --steps {args.steps}.")
    if args.interval <= 0:
        parser.error(f"--interval {args.interval} must be positive.")
    model, data = prepare(args.workdir)
    run_dir = os.path.join(args.workdir, "run")
    log_path = os.path.join(run_dir, "experiment_log.jsonl")
    if os.path.isdir(run_dir):
        import shutil

        shutil.rmtree(run_dir)
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main",
        "config=examples/cpu_quickstart/config.yaml",
        f"data.train_files={data}/train.jsonl",
        f"data.val_files={data}/val.jsonl",
        f"data.image_dir={data}/images",
        f"worker.actor.model.model_path={model}",
        f"trainer.save_checkpoint_path={run_dir}",
        f"trainer.max_steps={args.steps}",
        "trainer.val_freq=50",
        "trainer.logger=[file]",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.monotonic()
    # stderr to a file: a pipe read only at the end fills (64 KiB, ~200 steps of progress bar) and blocks the run
    errors = tempfile.TemporaryFile()
    # a SIGTERM to this script (`kill`, `timeout`, a scheduler) unwinds, and the run is stopped with it, not left going;
    # set before the run starts (set after, a SIGTERM in between ended this script at once and left the run going)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    # a session of its own: a signal to this script's group (Ctrl-C, `timeout`) reaches the trainer once, from below
    trainer = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=errors, start_new_session=True
    )
    samples: list[tuple[int, float, dict[int, dict]]] = []
    at_warmup: dict[int, dict] | None = None
    last: dict[int, dict] = {}
    try:
        root = psutil.Process(trainer.pid)
        while trainer.poll() is None:
            step = current_step(log_path)
            figures = snapshot(root)
            if figures:
                last = figures
                samples.append((step, time.monotonic() - start, figures))
                if at_warmup is None and step >= args.warmup:
                    at_warmup = figures
            time.sleep(args.interval)
    finally:
        if trainer.poll() is None:  # the trainer saves its step and ends its Ray on SIGTERM
            trainer.terminate()
            try:
                trainer.wait(60)
            except subprocess.TimeoutExpired:
                trainer.kill()
                trainer.wait()
    errors.seek(0)
    stderr = errors.read().decode(errors="replace")
    errors.close()
    if trainer.returncode != 0:
        print(stderr[-3000:], file=sys.stderr)
        print(json.dumps({"error": f"trainer exited with {trainer.returncode}"}))
        return 1
    # the last snapshot before the final step was logged: after it the run validates, saves and shuts down
    # A snapshot falls at a random phase of a step (generation, update, between steps), and a process's memory
    # moves with the phase, so single snapshots are compared poorly. Compare per-process peaks over a window of
    # steps right after the warm-up with those over the same number of steps at the end instead (the end window
    # stops before the final step, after which the run validates, saves and shuts down).
    window = max(1, min(args.window, (args.steps - args.warmup) // 2))
    first = [figures for step, _, figures in samples if args.warmup <= step < args.warmup + window]
    final = [figures for step, _, figures in samples if args.steps - window <= step < args.steps]
    at_warmup, end = (window_peak(first), window_peak(final)) if first and final else (at_warmup, last)
    if at_warmup is None:
        print(json.dumps({"error": "the run never reached the warm-up step"}))
        return 1
    result = {"steps": args.steps, "warmup_step": args.warmup, "wall_s": time.monotonic() - start}
    result.update(growth(at_warmup, end))
    if args.samples:
        with open(args.samples, "w", encoding="utf-8") as f:
            for step, seconds, figures in samples:
                f.write(json.dumps({"step": step, "s": round(seconds, 1), "processes": figures}) + "\n")
    header = (
        f"{'pid':>8} {'rss MiB':>15} {'private MiB':>15} {'shared mem MiB':>15} {'fds':>9} {'threads':>9}  process"
    )
    print(header + "  (each: at warm-up -> at end)")
    for pid in sorted(set(at_warmup) & set(end)):
        a, b = at_warmup[pid], end[pid]
        rss, anon = f"{a['rss_mib']:.0f}->{b['rss_mib']:.0f}", f"{a['anon_mib']:.0f}->{b['anon_mib']:.0f}"
        shm, fds, threads = (
            f"{a['shmem_mib']:.0f}->{b['shmem_mib']:.0f}",
            f"{a['fds']}->{b['fds']}",
            f"{a['threads']}->{b['threads']}",
        )
        print(f"{pid:>8} {rss:>15} {anon:>15} {shm:>15} {fds:>9} {threads:>9}  {b['name']}")
    result["target_rss_growth_pct"] = 5.0
    result["pass"] = (
        result["rss_growth_pct"] <= 5.0
        and result["worst_process_rss_growth_pct"] <= 5.0
        and result["fds_change"] <= 0
        and result["threads_change"] <= 0
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
