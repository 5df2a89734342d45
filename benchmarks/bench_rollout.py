# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rollout overhead and weight-sync cost, measured in one process on the same tiny model and prompts.

1. Generation: tokens/s through `VLLMRollout.generate_sequences` (per-request seeds, DataProto in and out, padding,
   masks, position ids) versus a bare `vllm.LLM.generate` on an engine built the plain way from the same model
   directory (only chunked prefill is off in both, which seeded requests need on CPU), without and with one seed
   per request. Runs alternate (ours, bare, ours, bare, ...) so a busy machine slows both alike; the best run of each
   is compared. Target: ratio >= 0.9 on the CPU, 0.95 on CUDA.
2. Weight sync: the colocated sync (vLLM's loader, then the cache reset) from an FSDP2-sharded actor (a world of one
   gloo rank, so the DTensor gather path runs) into the engine, versus a plain copy of the same state dict into
   preallocated tensors.
3. With `--step-scaling 1,4,16,64`: what one decode step of the engine costs with that many sequences running, as
   the asynchronous request loop asks for them (a seed each, the sampled token's log-prob). Asynchronous rollouts
   run new prompts beside the long tail of earlier ones; that is nearly free where the cost is flat in the count
   (a GPU's memory-bound decode) and buys little where it grows with it (docs/async.md).

    OMP_NUM_THREADS=1 python benchmarks/bench_rollout.py [--prompts 32 --n 8 --response-length 64 --repeats 3]
    OMP_NUM_THREADS=1 python benchmarks/bench_rollout.py --layers 24 --profile-sync sync.txt   # 0.5B's layer count
    OMP_NUM_THREADS=1 python benchmarks/bench_rollout.py --step-scaling 1,4,16,64,128 --repeats 2
    python benchmarks/bench_rollout.py --model 0.5b --prompts 64 --n 8 --response-length 512   # on a GPU

On CUDA both engines run in bf16 with the same `--gpu-memory-utilization` (and `--eager` for both, if given), the
actor is sharded over a one-rank cpu:gloo,cuda:nccl group, and the plain copy is device to device in the engine's
dtype (the bytes the sync moves). Target there: sync <= 3x the plain copy.

The last line printed is one JSON object with the figures.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch: more threads than free cores slow vLLM several-fold
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

import torch  # noqa: E402


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from verl.models.tiny_models import get_or_build_tiny_model  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.utils.cli import positive, positive_ints  # noqa: E402
from verl.workers.rollout.config import RolloutConfig  # noqa: E402


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _prompts(tokenizer: Any, num_prompts: int, prompt_length: int) -> DataProto:
    rows = []
    for i in range(num_prompts):
        messages = [{"role": "user", "content": f"What is {17 * i} + {i + 5}? Think step by step."}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        rows.append(tokenizer.encode(text, add_special_tokens=False))
    input_ids = torch.full((num_prompts, prompt_length), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    for i, row in enumerate(rows):
        input_ids[i, prompt_length - len(row) :] = torch.tensor(row)
        mask[i, prompt_length - len(row) :] = 1
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    return DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": mask, "position_ids": position_ids},
        non_tensors={"raw_prompt_ids": rows},
    )


def _time(fn: Callable[[], Any]) -> float:
    _synchronize()
    start = time.perf_counter()
    fn()
    _synchronize()
    return time.perf_counter() - start


def bench_generation(args: argparse.Namespace, model_dir: str, rollout: Any, prompts: DataProto) -> dict[str, float]:
    from vllm import LLM, SamplingParams

    config = rollout.config
    engine: dict[str, Any] = {
        "model": model_dir,
        "seed": 0,
        "max_model_len": config.prompt_length + config.response_length,
    }
    if torch.cuda.is_available():  # the same dtype, memory share and graph mode as ours
        engine.update(
            dtype="bfloat16", enforce_eager=config.enforce_eager, gpu_memory_utilization=config.gpu_memory_utilization
        )
    else:
        engine.update(
            dtype="float32",
            enforce_eager=True,
            kv_cache_memory_bytes=config.kv_cache_memory_mb * 2**20,
            enable_chunked_prefill=False,  # as the rollout on CPU: seeded requests crash vLLM 0.32 when chunked
        )
    bare = LLM(**engine)
    bare_prompts = [{"prompt_token_ids": ids} for ids in prompts.non_tensor_batch["raw_prompt_ids"]]
    bare_params = SamplingParams(
        n=args.n, temperature=1.0, max_tokens=args.response_length, ignore_eos=True, detokenize=False
    )
    tokens = len(prompts) * args.n * args.response_length  # ignore_eos: every sample is full length
    rollout.generate_sequences(prompts[:2])  # warm both paths once
    bare.generate(bare_prompts[:2], bare_params, use_tqdm=False)
    # Bare vLLM with one seed per request, as the rollout does for reproducibility: separates the cost of seeded
    # sampling (vLLM samples seeded requests one by one) from the rollout's own overhead.
    seeded_params = [bare_params.clone() for _ in bare_prompts]
    for i, params in enumerate(seeded_params):
        params.seed = 1000 + 64 * i
    ours, theirs, seeded = [], [], []
    for _ in range(args.repeats):
        ours.append(_time(lambda: rollout.generate_sequences(prompts)))
        theirs.append(_time(lambda: bare.generate(bare_prompts, bare_params, use_tqdm=False)))
        seeded.append(_time(lambda: bare.generate(bare_prompts, seeded_params, use_tqdm=False)))
    ours_tps, bare_tps, seeded_tps = tokens / min(ours), tokens / min(theirs), tokens / min(seeded)
    print(f"generation ({tokens} tokens per run): ours {ours_tps:,.0f} tok/s, bare vLLM {bare_tps:,.0f} tok/s,")
    print(f"  bare vLLM with per-request seeds {seeded_tps:,.0f} tok/s; runs (s): ours {[round(t, 2) for t in ours]},")
    print(f"  bare {[round(t, 2) for t in theirs]}, seeded {[round(t, 2) for t in seeded]}")
    return {
        "rollout_tokens_per_s": ours_tps,
        "bare_vllm_tokens_per_s": bare_tps,
        "bare_vllm_seeded_tokens_per_s": seeded_tps,
        "throughput_ratio": ours_tps / bare_tps,
        "throughput_ratio_vs_seeded": ours_tps / seeded_tps,
    }


def bench_step_scaling(args: argparse.Namespace, rollout: Any, counts: list[int]) -> dict[str, Any]:
    """Milliseconds per decode step with each count of sequences running: the time of `long` minus that of `short`
    tokens per sequence (which cancels the prefill and the call's overhead) over the steps between, best of
    --repeats."""
    from vllm import SamplingParams

    llm = rollout.inference_engine
    short, long = 8, 8 + args.response_length
    prompt = list(range(100, 100 + 32))

    def run(count: int, tokens: int) -> float:
        params = [
            SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=1.0, seed=i, logprobs=0, detokenize=False)
            for i in range(count)
        ]
        prompts = [{"prompt_token_ids": [1 + i % 50] + prompt} for i in range(count)]  # no shared prefix
        return _time(lambda: llm.generate(prompts, params, use_tqdm=False))

    run(max(counts), short)  # warm-up
    step_ms: dict[str, float] = {}
    for count in counts:
        best = min(run(count, long) - run(count, short) for _ in range(args.repeats))
        step_ms[str(count)] = 1000 * best / (long - short)
    base = step_ms[str(counts[0])]
    print("decode step (ms) by running sequences: " + ", ".join(f"{c}: {ms:.2f}" for c, ms in step_ms.items()))
    return {
        "step_ms_by_sequences": step_ms,
        "step_cost_vs_fewest": {count: ms / base for count, ms in step_ms.items()},
    }


def bench_sync(args: argparse.Namespace, model_dir: str, rollout: Any) -> dict[str, float]:
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    from verl.workers.rollout import vllm_compat
    from verl.workers.weight_sync import sync
    from verl.workers.weight_sync.gather import checkpoint_names, iter_full_weights
    from verl.workers.weight_sync.opt_in import LayoutError, engine_copy
    from verl.workers.weight_sync.sinks import EngineLoader

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    actor = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)  # fp32 master weights
    # the bytes the sync delivers: every tensor in the engine's dtype, on the engine's device
    state = {name: tensor.detach().to(rollout.torch_dtype, copy=True) for name, tensor in actor.state_dict().items()}
    for layer in actor.model.layers:
        fully_shard(layer)
    fully_shard(actor)
    names = checkpoint_names(actor)
    targets = {name: torch.empty_like(tensor) for name, tensor in state.items()}

    def plain_copy() -> None:
        for name, tensor in state.items():
            targets[name].copy_(tensor)

    llm = rollout.inference_engine
    loader = EngineLoader(llm)

    # the trainer's colocated sync: the cache reset only where the engine does not sleep (a slept engine's caches
    # were cleared; sync_weights_s would otherwise count a step the trainer skips on a GPU)
    with_reset = not rollout.sleep_mode

    def sync_weights(sink: Any = loader, reset: bool = with_reset) -> None:
        sync(sink, iter_full_weights, actor, rollout.torch_dtype, names)
        if reset:
            vllm_compat.reset_caches_after_weight_update(llm)

    sync_weights()  # warm-up
    plain_copy()
    sync_times = [_time(sync_weights)]
    copy_times = [_time(plain_copy)]
    for _ in range(args.repeats - 1):
        sync_times.append(_time(sync_weights))
        copy_times.append(_time(plain_copy))

    # the same sync without the cache reset (what a sleep-mode engine does), and the direct copy (weight_sync=direct)
    variants: dict[str, Any] = {"sync_no_reset_s": loader}
    try:
        variants["sync_direct_s"] = engine_copy(actor, llm, names)
    except (LayoutError, RuntimeError) as error:
        print(f"direct copy not available here: {error}")
    variant_s: dict[str, float] = {}
    for key, sink in variants.items():

        def sync_variant(sink: Any = sink) -> None:
            sync_weights(sink, reset=False)

        sync_variant()  # warm-up
        variant_s[key] = min(_time(sync_variant) for _ in range(args.repeats))
    if "sync_direct_s" in variants:  # leave the engine as vLLM's loader fills it, for the generation benchmark
        sync_weights()

    def gather_only() -> None:  # the actor side alone: every parameter gathered, cast and dropped
        stats = {"num_params": 0, "bytes": 0, "max_param_bytes": 0}
        for _ in iter_full_weights(actor, rollout.torch_dtype, names, stats):
            pass

    gather_s = min(_time(gather_only) for _ in range(args.repeats))
    if args.profile_sync:  # where one sync's time goes, function by function (both the actor's and vLLM's side)
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        profiler.runcall(sync_weights)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(40)
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
        with open(args.profile_sync, "w", encoding="utf-8") as f:
            f.write(text.getvalue())
        print(f"profile of one sync written to {args.profile_sync}")
    sync_s, copy_s = min(sync_times), min(copy_times)
    size_mb = sum(t.numel() * t.element_size() for t in state.values()) / 2**20
    reset = "with" if with_reset else "without (sleep mode)"
    print(
        f"weight sync, {reset} the cache reset: {sync_s * 1e3:.1f} ms (of which gathering {gather_s * 1e3:.1f} ms; "
        f"the rest is vLLM's reload and weight repacking) vs plain state-dict copy {copy_s * 1e3:.2f} ms "
        f"({size_mb:.1f} MiB)"
    )
    for key, seconds in variant_s.items():
        what = "direct copy, no cache reset" if key == "sync_direct_s" else "vLLM's loader, no cache reset"
        print(f"  {what}: {seconds * 1e3:.1f} ms = {seconds / copy_s:.1f}x the plain copy")
    figures = {
        "sync_weights_s": sync_s,
        "sync_gather_only_s": gather_s,
        "plain_copy_s": copy_s,
        "sync_vs_copy": sync_s / copy_s,
        "sync_resets_caches": with_reset,
        "weights_mib": size_mb,
        **variant_s,
    }
    if "sync_direct_s" in variant_s:
        figures["direct_vs_copy"] = variant_s["sync_direct_s"] / copy_s
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=positive(int), default=32)
    parser.add_argument("--n", type=positive(int), default=8)
    parser.add_argument("--response-length", type=positive(int), default=64)
    parser.add_argument("--repeats", type=positive(int), default=3)
    parser.add_argument("--model-dir", default=None, help="a Qwen2 model directory (default: --model)")
    parser.add_argument("--model", choices=("tiny", "0.5b", "1.5b"), default="tiny", help="random-init model size")
    parser.add_argument(
        "--layers", type=int, default=None, help="tiny model only: this many decoder layers (per-layer sync overhead)"
    )
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3, help="each engine's share (CUDA)")
    parser.add_argument("--eager", action="store_true", help="CUDA: no CUDA graphs in either engine")
    parser.add_argument("--profile-sync", default=None, metavar="PATH", help="write a cProfile of one sync to PATH")
    parser.add_argument(
        "--step-scaling",
        type=positive_ints,
        default=None,
        metavar="COUNTS",
        help="comma-separated sequence counts: time one decode step at each (skips the other measurements)",
    )
    args = parser.parse_args()

    from transformers import AutoTokenizer

    cuda = torch.cuda.is_available()
    root = os.path.join(tempfile.gettempdir(), "verl_bench")
    if args.model_dir:
        model_dir = args.model_dir
    elif args.model == "tiny":
        model_dir = get_or_build_tiny_model("qwen2", root, **({"num_layers": args.layers} if args.layers else {}))
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from bench_actor import build_sized_model

        model_dir = build_sized_model(args.model, root, torch.device("cuda" if cuda else "cpu"))
    from verl.utils import device as device_utils

    with device_utils.one_process_group(timeout_seconds=300):  # gloo on CPU, cpu:gloo,cuda:nccl on CUDA
        run(args, model_dir, AutoTokenizer.from_pretrained(model_dir))


def run(args: argparse.Namespace, model_dir: str, tokenizer: Any) -> None:
    """Build our engine on `model_dir` and measure what `args` asks for, printing the figures (one JSON line last)."""
    from verl.workers.rollout.vllm_rollout import VLLMRollout

    cuda = torch.cuda.is_available()
    prompt_length = 64
    device_settings: dict[str, Any] = (
        {"dtype": "bf16", "gpu_memory_utilization": args.gpu_memory_utilization, "enforce_eager": args.eager}
        if cuda
        else {"dtype": "fp32", "kv_cache_memory_mb": 128}
    )
    config = RolloutConfig(
        n=args.n,
        temperature=1.0,
        ignore_eos=True,
        tensor_parallel_size=1,
        prompt_length=prompt_length,
        response_length=args.response_length,
        **device_settings,
    )
    rss_before = _rss_mib()
    rollout = VLLMRollout(model_dir, config, tokenizer, None)  # imports vLLM too
    rss_engine = _rss_mib() - rss_before
    if rollout.sleep_mode:  # the engine starts asleep (the sharding manager wakes it); the benchmark keeps it awake
        rollout.inference_engine.wake_up()
    print(f"engine: +{rss_engine:.0f} MiB RSS (vLLM import + engine, {config.kv_cache_memory_mb} MiB KV cache)")
    prompts = _prompts(tokenizer, args.prompts, prompt_length)
    if args.step_scaling:
        counts = sorted(args.step_scaling)
        figures = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "decode_tokens": args.response_length}
        figures.update(bench_step_scaling(args, rollout, counts))
        print(json.dumps(figures))
        return
    figures: dict[str, Any] = {
        "workload": {"prompts": args.prompts, "n": args.n, "response_length": args.response_length},
        "model": os.path.basename(model_dir.rstrip("/")),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "engine_rss_mib": rss_engine,
        "kv_cache_mib": config.kv_cache_memory_mb,
    }
    figures.update(bench_sync(args, model_dir, rollout))  # also loads the real weights into our engine
    figures.update(bench_generation(args, model_dir, rollout, prompts))
    figures["throughput_target"] = 0.95 if cuda else 0.9
    if cuda:
        figures["sync_vs_copy_target"] = 3.0
    print(json.dumps({key: round(value, 4) if isinstance(value, float) else value for key, value in figures.items()}))


if __name__ == "__main__":
    main()
