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
"""Export an actor checkpoint as a Hugging Face model directory (safetensors, config, generation config, tokenizer
or processor) that transformers and vLLM load directly.

    python scripts/model_merger.py --local_dir checkpoints/<project>/<experiment>/global_step_N/actor \
        [--target_dir DIR] [--dtype bfloat16|float16|float32]

The checkpoint may have been written by any number of ranks: torch.distributed.checkpoint reassembles the sharded
parameters in one process, without a process group. --target_dir defaults to <local_dir>/huggingface, next to the
config files the trainer saved there.
"""

import argparse
import os
import sys

import torch
import torch.distributed.checkpoint as dcp
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


HF_SUBDIR = "huggingface"


def model_class(config: AutoConfig) -> type:
    return (
        AutoModelForImageTextToText
        if config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
        else (AutoModelForCausalLM)
    )


def merge(local_dir: str, target_dir: str | None = None, dtype: str = "float32") -> str:
    local_dir = os.path.abspath(local_dir)
    hf_dir = os.path.join(local_dir, HF_SUBDIR)
    if not os.path.isfile(os.path.join(local_dir, ".metadata")):
        raise FileNotFoundError(
            f"'{local_dir}' is not a checkpoint directory (no .metadata); pass .../global_step_N/actor."
        )
    if not os.path.isfile(os.path.join(hf_dir, "config.json")):
        raise FileNotFoundError(f"'{hf_dir}/config.json' is missing; the checkpoint was not written by this trainer.")
    target_dir = os.path.abspath(target_dir or hf_dir)
    config = AutoConfig.from_pretrained(hf_dir)
    # built on the CPU, not the meta device: non-persistent buffers (rotary frequencies) are computed at
    # construction and are not in checkpoints. This needs host memory for one copy of the model in `dtype`.
    model = model_class(config).from_config(config, dtype=getattr(torch, dtype))
    saved = dcp.FileSystemReader(local_dir).read_metadata().state_dict_metadata
    model_keys = {key[len("model.") :] for key in saved if key.startswith("model.")}
    if "lm_head.weight" not in model_keys and any("value_head" in key or key == "score.weight" for key in model_keys):
        raise ValueError(f"'{local_dir}' holds a critic (value head); export the actor's checkpoint instead.")
    state = {"model": {key: torch.empty(0) for key in model_keys}}
    # the metadata knows every tensor's full shape: allocate full tensors, then let DCP fill them from all shards
    for key in model_keys:
        meta = saved[f"model.{key}"]
        state["model"][key] = torch.empty(meta.size, dtype=meta.properties.dtype)
    dcp.load(state, checkpoint_id=local_dir, no_dist=True)
    missing, unexpected = model.load_state_dict(state["model"], strict=False)
    tied = {"lm_head.weight"} if getattr(config.get_text_config(), "tie_word_embeddings", False) else set()
    missing = [key for key in missing if key not in tied]
    if missing or unexpected:
        raise ValueError(
            f"Checkpoint '{local_dir}' does not match {type(model).__name__}: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}."
        )
    model.tie_weights()
    model.save_pretrained(target_dir, safe_serialization=True)
    if target_dir != hf_dir:  # tokenizer, processor and generation config saved by the trainer
        for name in os.listdir(hf_dir):
            if name != "config.json" and not name.endswith(".safetensors"):
                with open(os.path.join(hf_dir, name), "rb") as src, open(os.path.join(target_dir, name), "wb") as dst:
                    dst.write(src.read())
    return target_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dir", required=True, help="the global_step_N/actor checkpoint directory")
    parser.add_argument("--target_dir", default=None, help="output directory (default: <local_dir>/huggingface)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    try:
        target = merge(args.local_dir, args.target_dir, args.dtype)
    except (FileNotFoundError, ValueError) as err:
        print(f"model_merger: {err}", file=sys.stderr)
        return 2
    print(f"Hugging Face model written to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
