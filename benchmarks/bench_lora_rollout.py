# Copyright 2026 The verl-compact Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""LoRA rollout: generation with merged weights (what the trainer syncs) against vLLM's LoRA path (base weights plus
the adapter in a LoRARequest), on the same prompts, in one vLLM engine each.

A random-init LoRA (rank `--rank`, every linear layer, lora_B drawn at random so the adapter changes the model) is
put on the tiny Qwen2 (or, with `--model 0.5b` on a GPU, a Qwen2.5-0.5B-sized random model): the merged model and the
peft adapter are written under `--workdir`. Each side generates `--prompts` x `--max-tokens` tokens (greedy,
ignore_eos), after one warm-up call; the figure is generated tokens per second (median of `--repeats`). The greedy
outputs of both sides are compared too (equal tokens: the two paths compute the same model). The last line printed
is one JSON object.

    python benchmarks/bench_lora_rollout.py [--prompts 64 --max-tokens 64 --rank 16 --repeats 3]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


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
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kv-cache-mb", type=int, default=64)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "verl_bench_lora"))
    args = parser.parse_args(argv)
    import torch

    base, merged, adapter = build(args.workdir, args.rank, args.alpha)
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 2000, (24,), generator=generator).tolist() for _ in range(args.prompts)]
    result: dict = {"bench": "lora_rollout", "prompts": args.prompts, "max_tokens": args.max_tokens, "rank": args.rank}
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
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
