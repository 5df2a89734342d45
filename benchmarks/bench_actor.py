# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Actor throughput: `DataParallelPPOActor` against a bare PyTorch loop on the same model and the same tokens.

Both sides get the same FSDP2 model (`create_fsdp_model` on a 1-rank group: bf16 mixed precision with fp32 master
weights on CUDA, fp32 on the CPU), the same gradient checkpointing, the same rollout batch (left-padded prompts,
right-padded responses) and the same micro-batch row counts, and both take one AdamW step per iteration.

- project: `update_policy` (one mini-batch = the whole batch, one epoch, PPO clip loss) and `compute_log_probs`,
  with `--mode packed` (padding_free and dynamic_batching, attention "auto": sequences packed into one row) or
  `--mode padded` (fixed micro-batches of padded rows, trimmed to the columns some row uses).
- bare: full-width padded rows through the plain Hugging Face forward with sdpa attention, logits of the response-
  predicting positions only (`logits_to_keep`, as any hand-written loop would: prompt logits are never used),
  fp32 log-softmax gather, loss -(log_prob x advantage) averaged over the batch's response tokens, backward,
  clip_grad_norm, AdamW step. Log-probs are the same forward under no_grad. It is the reference for what the
  hardware does with plain padded rows.

Workloads (`--lengths`): `full`, every row P prompt + R response tokens; `variable`, prompt lengths uniform in
[P/2, P] and response lengths uniform in [R/8, R] (fixed seed); `capped`, prompt lengths as in `variable` and every
response R tokens long (responses cut at the length limit, as early in RL training). Throughput counts valid tokens (the sum of the
attention mask, prompt and response) on both sides, so padding the bare loop computes earns it nothing. MFU (CUDA
only) is 6 x params x valid tokens (update) or 2 x params x valid tokens (log-probs) per second over
`--peak-tflops` (default: the device's measured bf16 matmul peak, as the trainer's `perf/mfu_actor` uses);
gradient checkpointing's extra forward and attention FLOPs are not counted.

GPU targets (issue 13): >= 0.95x the bare loop on full-length rows, and with varlen packing >= 1.3x the padded bare
loop on variable-length rows.

    OMP_NUM_THREADS=1 python benchmarks/bench_actor.py --quick [--mode packed|padded] [--lengths full|variable|capped]
    python benchmarks/bench_actor.py --model 0.5b --mode packed --lengths variable   # on a GPU

Defaults: on the CPU the tiny model with B=16, P=64, R=128 (what --quick runs on any device, about 15 s here); on
CUDA the 0.5b model with B=64, P=512, R=1536; 4 rows per update micro-batch and 8 per log-prob micro-batch (the
packed mode's token budget is that many full rows), 1 warm-up and 3 timed iterations (the median is reported).
`--model 0.5b` / `1.5b` write a random-init Qwen2 model with Qwen2.5-0.5B / 1.5B sizes (and the tiny tokenizer)
under `--model-root` once. The sides run one after the other (project first), each measured alone: peak memory is
CUDA's max_memory_allocated over the timed iterations, or on the CPU the process's peak RSS over them (and its rise
above the RSS when timing starts; only indicative, since the allocator keeps memory the first side freed).
The last line printed is one JSON object with the figures.
"""

import argparse
import dataclasses
import functools
import gc
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: more threads than free cores only contend

import torch  # noqa: E402


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl.protocol import DataProto  # noqa: E402
from verl.utils import device as device_utils  # noqa: E402
from verl.utils.torch_functional import positions_from_mask  # noqa: E402


QWEN25_SIZES: dict[str, dict[str, int]] = {
    "0.5b": {
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
    },
    "1.5b": {
        "hidden_size": 1536,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "intermediate_size": 8960,
    },
}
"""Qwen2.5 sizes of the random-init models (vocab 151936, tied embeddings, as the released checkpoints)."""

DEFAULTS: dict[str, dict[str, Any]] = {
    "cpu": {"model": "tiny", "batch_size": 16, "prompt_length": 64, "response_length": 128, "iters": 3},
    "cuda": {"model": "0.5b", "batch_size": 64, "prompt_length": 512, "response_length": 1536, "iters": 3},
    "quick": {"model": "tiny", "batch_size": 16, "prompt_length": 64, "response_length": 128, "iters": 3},
}

PHASES: tuple[str, ...] = ("update", "log_probs")
SIDES: tuple[str, ...] = ("project", "bare")


# ---------------------------------------------------------------------------------------------- setup


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; sizes left unset get the defaults of the device (or of --quick)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("tiny", "0.5b", "1.5b"), default=None, help="tiny on CPU, 0.5b on GPU")
    parser.add_argument("--mode", choices=("packed", "padded"), default="packed")
    parser.add_argument("--lengths", choices=("full", "variable", "capped"), default="full")
    parser.add_argument("--batch-size", type=int, default=None, help="rows B (16 on CPU, 64 on GPU)")
    parser.add_argument("--prompt-length", type=int, default=None, help="P (64 on CPU, 512 on GPU)")
    parser.add_argument("--response-length", type=int, default=None, help="R (128 on CPU, 1536 on GPU)")
    parser.add_argument("--micro-batch-size", type=int, default=4, help="rows per update micro-batch")
    parser.add_argument("--micro-batch-size-log-probs", type=int, default=8, help="rows per log-prob micro-batch")
    parser.add_argument("--iters", type=int, default=None, help="timed iterations per phase (3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations per phase before timing")
    parser.add_argument("--attn", default="auto", help="the project's model.attn_implementation (default auto)")
    parser.add_argument(
        "--gather-once",
        choices=("auto", "on", "off"),
        default="auto",
        help="the project's fsdp.gather_once_per_pass (auto: the device's default, on for the CPU only)",
    )
    parser.add_argument("--no-gradient-checkpointing", action="store_true", help="off on both sides")
    parser.add_argument(
        "--zero-advantage-share",
        type=float,
        default=0.0,
        help="share of rows whose advantage is 0 everywhere (GRPO's groups that scored alike), spread over the batch",
    )
    parser.add_argument(
        "--keep-zero-advantage-rows",
        action="store_true",
        help="ours: worker.actor.skip_zero_advantage_rows=false (every row runs, as the bare loop's)",
    )
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="for MFU; default: this device's measured bf16 matmul peak, as the trainer's perf/mfu_actor uses",
    )
    parser.add_argument("--device", choices=device_utils.DEVICE_CHOICES, default="auto")
    parser.add_argument("--model-root", default=os.path.join(tempfile.gettempdir(), "verl_bench"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="the CPU sizes with the tiny model, on any device")
    args = parser.parse_args(argv)
    try:
        device_type = device_utils.resolve_device_type(args.device)
    except ValueError:  # cuda without a GPU: the trainer's message names its config key
        parser.error(
            f"--device {args.device}, and torch sees no CUDA device in this process; use --device cpu (or auto)."
        )
    for key, value in DEFAULTS["quick" if args.quick else device_type].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    positive = ("batch_size", "prompt_length", "response_length", "micro_batch_size", "micro_batch_size_log_probs")
    for key in (*positive, "iters"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be positive, got {getattr(args, key)}.")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}.")
    if not 0.0 <= args.zero_advantage_share <= 1.0:
        parser.error(f"--zero-advantage-share is a share of the rows, in [0, 1], got {args.zero_advantage_share}.")
    args.device_type = device_type
    return args


def build_sized_model(name: str, root: str, device: torch.device) -> str:
    """A random-init Qwen2 directory with Qwen2.5-`name` sizes and the tiny tokenizer, written once under `root`.

    The weights are saved in bf16 (half the disk) and loaded back in the project's parameter dtype. The tokenizer's
    vocabulary is far smaller than the embedding; the benchmark only draws token ids below it.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from verl.models.tiny_models import build_tokenizer

    target = os.path.join(root, f"qwen2.5-{name}-random")
    spec = {"name": name, "vocab_size": 151936, "version": 1, **QWEN25_SIZES[name]}
    spec_file = os.path.join(target, "bench_model_spec.json")
    if os.path.isfile(spec_file):
        with open(spec_file, encoding="utf-8") as f:
            if json.load(f) == spec:
                return target
    tokenizer = build_tokenizer()
    special = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    config = Qwen2Config(
        vocab_size=spec["vocab_size"],
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        bos_token_id=special[0],
        eos_token_id=special[1],
        pad_token_id=special[0],
        **QWEN25_SIZES[name],
    )
    torch.manual_seed(0)
    with torch.device(device):  # random init on the GPU takes seconds, on the CPU a minute for 1.5b
        model = Qwen2ForCausalLM(config)
    model.to("cpu", torch.bfloat16)
    os.makedirs(root, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".qwen2.5-{name}-", dir=root)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    with open(os.path.join(staging, "bench_model_spec.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f)
    del model
    os.chmod(staging, 0o755)  # mkdtemp makes it private
    if os.path.isdir(target):  # a stale build (other spec): replace it
        shutil.rmtree(target)
    os.rename(staging, target)
    return target


def model_directory(args: argparse.Namespace, device: torch.device) -> str:
    """The tiny model (cached by tiny_models) or a Qwen2.5-sized random-init model."""
    if args.model == "tiny":
        from verl.models.tiny_models import get_or_build_tiny_model

        return get_or_build_tiny_model("qwen2", args.model_root)
    return build_sized_model(args.model, args.model_root, device)


def make_batch(args: argparse.Namespace, pad_id: int, vocab: int) -> DataProto:
    """A rollout batch as the trainer hands it to the actor: left-padded prompts ++ right-padded responses.

    Token ids are uniform below `vocab` (the tokenizer's ordinary tokens); advantages are standard normal.
    """
    batch_size, prompt_len, response_len = args.batch_size, args.prompt_length, args.response_length
    generator = torch.Generator().manual_seed(args.seed)
    if args.lengths == "full":
        prompt_lens = torch.full((batch_size,), prompt_len)
        response_lens = torch.full((batch_size,), response_len)
    else:
        prompt_lens = torch.randint(max(prompt_len // 2, 1), prompt_len + 1, (batch_size,), generator=generator)
        response_lens = torch.randint(max(response_len // 8, 1), response_len + 1, (batch_size,), generator=generator)
        if args.lengths == "capped":
            response_lens = torch.full((batch_size,), response_len)
    input_ids = torch.randint(0, vocab, (batch_size, prompt_len + response_len), generator=generator)
    columns = torch.arange(prompt_len + response_len)
    prompt_valid = (columns < prompt_len) & (columns >= prompt_len - prompt_lens[:, None])
    response_valid = (columns >= prompt_len) & (columns < prompt_len + response_lens[:, None])
    attention_mask = (prompt_valid | response_valid).long()
    input_ids = torch.where(attention_mask.bool(), input_ids, pad_id)
    response_mask = attention_mask[:, prompt_len:].clone()
    tensors = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": positions_from_mask(attention_mask),
        "responses": input_ids[:, prompt_len:].clone(),
        "response_mask": response_mask,
        "advantages": torch.randn(response_mask.shape, generator=generator) * response_mask,
    }
    zero_rows = round(args.zero_advantage_share * batch_size)
    if zero_rows:  # spread over the batch, as a balanced batch mixes the groups
        tensors["advantages"][torch.linspace(0, batch_size - 1, zero_rows).round().long()] = 0.0
    return DataProto.from_dict(tensors=tensors)


def build_model_and_optimizer(
    args: argparse.Namespace, model_dir: str, attn: str, mesh: Any, device: torch.device
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The FSDP2 model exactly as the actor worker builds it (with attention `attn`) and its AdamW optimizer."""
    from verl.models.config import FSDPConfig, ModelConfig
    from verl.models.fsdp import create_fsdp_model
    from verl.utils.optim import OptimConfig, build_optimizer

    model_kwargs: dict[str, Any] = {
        "model_path": model_dir,
        "enable_gradient_checkpointing": not args.no_gradient_checkpointing,
    }
    if "attn_implementation" in {field.name for field in dataclasses.fields(ModelConfig)}:
        model_kwargs["attn_implementation"] = attn
        attn_override = None
    else:  # older ModelConfig: the attention goes straight to the builder
        attn_override = attn
    model = create_fsdp_model(
        ModelConfig(**model_kwargs), FSDPConfig(), mesh, device, attn_implementation=attn_override
    )
    return model, build_optimizer(model, OptimConfig(lr=args.lr, weight_decay=0.0))


# ---------------------------------------------------------------------------------------------- the two sides


class ProjectActor:
    """The project's actor, driven as the trainer drives it: `compute_log_probs`, then `update_policy`."""

    def __init__(self, args: argparse.Namespace, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        from verl.models.config import FSDPConfig
        from verl.workers.actor.config import ActorConfig
        from verl.workers.actor.dp_actor import DataParallelPPOActor

        fsdp = {}
        if args.gather_once != "auto":  # an older FSDPConfig has no such key: only the default can be measured there
            fsdp["fsdp"] = FSDPConfig(gather_once_per_pass=args.gather_once == "on")
        config = ActorConfig(
            global_batch_size=args.batch_size,
            micro_batch_size_per_device_for_update=args.micro_batch_size,
            micro_batch_size_per_device_for_experience=args.micro_batch_size_log_probs,
            padding_free=args.mode == "packed",
            dynamic_batching=args.mode == "packed",
            ppo_epochs=1,
            skip_zero_advantage_rows=not args.keep_zero_advantage_rows,
            **fsdp,
        )
        self.actor = DataParallelPPOActor(config, model, optimizer, rollout_n=1)
        self.temperature = args.temperature

    def log_probs(self, data: DataProto) -> torch.Tensor:
        return self.actor.compute_log_probs(data, self.temperature)

    def update(self, data: DataProto) -> None:
        self.actor.update_policy(data, self.temperature)


class BareLoop:
    """The reference: full-width padded micro-batches through the plain HF forward, fp32 log-softmax, AdamW."""

    def __init__(self, args: argparse.Namespace, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer
        self.micro_update, self.micro_log_probs = args.micro_batch_size, args.micro_batch_size_log_probs
        self.temperature = args.temperature
        self.max_grad_norm = 1.0

    def _response_log_probs(self, rows: dict[str, torch.Tensor]) -> torch.Tensor:
        response_len = rows["responses"].shape[-1]
        logits = self.model(
            input_ids=rows["input_ids"],
            attention_mask=rows["attention_mask"],
            position_ids=rows["position_ids"],
            use_cache=False,
            logits_to_keep=response_len + 1,  # the positions predicting responses, and the (unused) last one
        ).logits[:, :-1]
        log_probs = torch.log_softmax(logits.float() / self.temperature, dim=-1)
        picked = log_probs.gather(-1, rows["responses"].unsqueeze(-1)).squeeze(-1)
        return picked * rows["response_mask"]

    def _micro_batches(self, data: DataProto, rows: int) -> list[dict[str, torch.Tensor]]:
        keys = ("input_ids", "attention_mask", "position_ids", "responses", "response_mask", "advantages")
        return [{key: micro.batch[key] for key in keys} for micro in data.split(rows)]

    @torch.no_grad()
    def log_probs(self, data: DataProto) -> torch.Tensor:
        self.model.eval()
        return torch.cat([self._response_log_probs(rows) for rows in self._micro_batches(data, self.micro_log_probs)])

    def update(self, data: DataProto) -> None:
        self.model.train()
        tokens = data.batch["response_mask"].sum().clamp(min=1)
        for rows in self._micro_batches(data, self.micro_update):
            loss = -(self._response_log_probs(rows) * rows["advantages"]).sum() / tokens
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


# ---------------------------------------------------------------------------------------------- measuring


def _proc_status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class PeakMemory:
    """Peak memory of a block in MiB: CUDA max_memory_allocated, or the process's peak RSS on the CPU.

    On Linux the kernel's peak-RSS mark (VmHWM) is reset on entry (/proc/self/clear_refs), so the peak belongs to the
    block alone, and `rise_mib` is how far it rose above the RSS at entry (what the block itself needed beyond memory
    the process already held). Elsewhere the CPU figure is ru_maxrss, the process's peak so far.
    """

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.kind = "cuda_max_memory_allocated"
        self.peak_mib = 0.0
        self.rise_mib: float | None = None
        self._start_kib = 0

    def __enter__(self) -> "PeakMemory":
        if self.device_type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            return self
        gc.collect()
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
                f.write("5")  # resets VmHWM to the current RSS
            self.kind = "cpu_peak_rss (VmHWM reset at the start; rise = peak - RSS at the start)"
            self._start_kib = _proc_status_kib("VmRSS") or 0
        except OSError:
            self.kind = "cpu_ru_maxrss (process peak so far)"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device_type == "cuda":
            torch.cuda.synchronize()
            self.peak_mib = torch.cuda.max_memory_allocated() / 2**20
            return
        peak_kib = _proc_status_kib("VmHWM") if self.kind.startswith("cpu_peak_rss") else None
        if peak_kib is None:
            self.peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        else:
            self.peak_mib = peak_kib / 1024
            self.rise_mib = max(peak_kib - self._start_kib, 0) / 1024


def time_phase(fn: Callable[[], Any], warmup: int, iters: int, device_type: str) -> dict[str, Any]:
    """Warm up, then time `iters` calls (device synchronised around each); peak memory over the timed calls."""
    for _ in range(warmup):
        fn()
    times = []
    with PeakMemory(device_type) as memory:
        for _ in range(iters):
            device_utils.synchronize()
            start = time.perf_counter()
            fn()
            device_utils.synchronize()
            times.append(time.perf_counter() - start)
    return {"times": times, "peak_mib": memory.peak_mib, "rise_mib": memory.rise_mib, "memory_kind": memory.kind}


def run_side(
    side: str, args: argparse.Namespace, model_dir: str, mesh: Any, device: torch.device, data: DataProto
) -> dict[str, Any]:
    """Build one side, take its log-probs of the untouched model (for the equality check), then time both phases.

    The project's first log-probs also become the batch's old_log_probs, so its PPO ratio starts at 1 and the
    steps really move the weights (the bare loss does not use them).
    """
    attn = args.attn if side == "project" else "sdpa"
    model, optimizer = build_model_and_optimizer(args, model_dir, attn, mesh, device)
    runner = ProjectActor(args, model, optimizer) if side == "project" else BareLoop(args, model, optimizer)
    result: dict[str, Any] = {"params": sum(param.numel() for param in model.parameters())}
    if side == "project":
        result["packed"] = runner.actor.padding_free
        passes = getattr(runner.actor, "passes", runner.actor)  # older commits keep the setting on the actor itself
        result["gather_once"] = getattr(passes, "gather_once", False)
        result["attn"] = getattr(model.config, "_attn_implementation", attn)
    result["first_log_probs"] = runner.log_probs(data).float().cpu()
    if side == "project":
        data.batch["old_log_probs"] = result["first_log_probs"].to(device)
    for phase, step in (("log_probs", runner.log_probs), ("update", runner.update)):  # updates last: they move weights
        result[phase] = time_phase(functools.partial(step, data), args.warmup, args.iters, args.device_type)
    del runner, model, optimizer
    gc.collect()
    device_utils.empty_cache()
    return result


def summarize(args: argparse.Namespace, data: DataProto, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The flat figures of the JSON line: per phase and side s/iter (median), tokens/s, peak memory, MFU; ratios."""
    valid_tokens = int(data.batch["attention_mask"].sum())
    params = results["project"]["params"]
    figures: dict[str, Any] = {
        "device": args.device_type,
        "device_name": torch.cuda.get_device_name() if args.device_type == "cuda" else platform.processor() or "cpu",
        "model": args.model,
        "params": params,
        "mode": args.mode,
        "lengths": args.lengths,
        "attn": results["project"]["attn"],
        "packed": results["project"]["packed"],
        "B": args.batch_size,
        "P": args.prompt_length,
        "R": args.response_length,
        "micro_batch_size": args.micro_batch_size,
        "micro_batch_size_log_probs": args.micro_batch_size_log_probs,
        "gather_once": results["project"]["gather_once"],
        "iters": args.iters,
        "warmup": args.warmup,
        "valid_tokens": valid_tokens,
        "padded_tokens": data.batch["attention_mask"].numel(),
        "tokens_counted": "valid tokens: sum of attention_mask (prompt + response)",
        "memory_kind": results["project"]["update"]["memory_kind"],
    }
    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    if args.device_type == "cuda" and peak is None:
        from verl.utils.device import measure_peak_flops

        peak = measure_peak_flops()
        figures["peak_tflops_measured"] = peak / 1e12
    for phase in PHASES:
        flops_per_token = (6 if phase == "update" else 2) * params
        for side in SIDES:
            measured = results[side][phase]
            seconds = statistics.median(measured["times"])
            prefix = f"{phase}_{side}"
            figures[f"{prefix}_s"] = seconds
            figures[f"{prefix}_tokens_per_s"] = valid_tokens / seconds
            figures[f"{prefix}_peak_mib"] = measured["peak_mib"]
            if measured["rise_mib"] is not None:
                figures[f"{prefix}_peak_rise_mib"] = measured["rise_mib"]
            if args.device_type == "cuda":
                figures[f"{prefix}_mfu"] = flops_per_token * valid_tokens / seconds / peak
        figures[f"{phase}_ratio"] = figures[f"{phase}_project_tokens_per_s"] / figures[f"{phase}_bare_tokens_per_s"]
    diff = (results["project"]["first_log_probs"] - results["bare"]["first_log_probs"]).abs().max()
    figures["log_probs_max_abs_diff"] = float(diff)
    figures["target_ratio"] = 0.95 if args.lengths == "full" else (1.3 if args.mode == "packed" else None)
    return figures


def print_table(figures: dict[str, Any]) -> None:
    """The figures as a small table, for people; the JSON line after it is for scripts."""
    print(
        f"actor benchmark on {figures['device']} ({figures['device_name']}): model {figures['model']} "
        f"({figures['params'] / 1e6:.1f}M params), mode {figures['mode']} (attn {figures['attn']}, packed "
        f"{figures['packed']}), lengths {figures['lengths']}, B={figures['B']} P={figures['P']} R={figures['R']}"
    )
    print(
        f"{figures['valid_tokens']:,} valid tokens per batch (attention_mask sum) of {figures['padded_tokens']:,} "
        f"padded; median of {figures['iters']} timed iterations after {figures['warmup']} warm-up"
    )
    has_mfu, has_rise = "update_project_mfu" in figures, "update_project_peak_rise_mib" in figures
    header = f"{'phase':<10} {'side':<8} {'s/iter':>9} {'tokens/s':>11} {'peak MiB':>10}"
    print(header + (f" {'rise MiB':>9}" * has_rise) + (f" {'MFU':>6}" * has_mfu))
    for phase in PHASES:
        for side in SIDES:
            prefix = f"{phase}_{side}"
            rise = f" {figures[f'{prefix}_peak_rise_mib']:>9,.1f}" if has_rise else ""
            mfu = f" {figures[f'{prefix}_mfu']:>6.1%}" if has_mfu else ""
            print(
                f"{phase:<10} {side:<8} {figures[f'{prefix}_s']:>9.4f} {figures[f'{prefix}_tokens_per_s']:>11,.0f} "
                f"{figures[f'{prefix}_peak_mib']:>10,.1f}{rise}{mfu}"
            )
    target = figures["target_ratio"]
    print(
        f"throughput project/bare (>1: project faster): update {figures['update_ratio']:.3f}x, log_probs "
        f"{figures['log_probs_ratio']:.3f}x" + (f" (GPU target >= {target}x)" if target else "")
    )
    print(f"peak memory: {figures['memory_kind']}")
    print(f"log-probs of the untouched model, max |project - bare| = {figures['log_probs_max_abs_diff']:.3g}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; prints the table and, last, one JSON line with the figures, which it also returns."""
    args = parse_args(argv)
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    from verl.models.fsdp import build_device_mesh

    hf_logging.disable_progress_bar()  # one "Loading weights" bar per model build
    device_utils.set_device_type(args.device_type)
    with device_utils.one_process_group(timeout_seconds=300):  # gloo, plus nccl for CUDA tensors
        device = device_utils.get_local_device()
        mesh = build_device_mesh(1, -1, args.device_type)
        model_dir = model_directory(args, device)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        data = make_batch(args, tokenizer.pad_token_id, vocab=tokenizer.pad_token_id).to(device)
        results = {side: run_side(side, args, model_dir, mesh, device, data) for side in SIDES}
        figures = summarize(args, data, results)
    print_table(figures)
    rounded = {key: float(f"{value:.6g}") if isinstance(value, float) else value for key, value in figures.items()}
    print(json.dumps(rounded))
    return figures


if __name__ == "__main__":
    main()
