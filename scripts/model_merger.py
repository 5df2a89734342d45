# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Export an actor checkpoint as a Hugging Face model directory (safetensors, config, generation config, tokenizer
or processor) that transformers and vLLM load directly, and optionally upload it to the Hugging Face Hub.

    python scripts/model_merger.py --local_dir checkpoints/<project>/<experiment>/global_step_N/actor \\
        [--target_dir DIR] [--dtype bf16|fp16|fp32] [--hf_upload_path USER/REPO [--hf_private]]
        [--adapter_only] [--base_model PATH]

A LoRA run's checkpoint holds its adapters only (and `adapter_config.json`). By default they are merged
into the base model (W + alpha / rank x B @ A, in float32) and the result is written as a plain model; the base model
is read from `--base_model`, else from the adapter config's `base_model_name_or_path` (the run's model_path).
`--adapter_only` writes the adapters in peft's layout instead (`adapter_config.json`, `adapter_model.safetensors`),
for `peft.PeftModel.from_pretrained(base, DIR)` or vLLM's LoRA requests.

The checkpoint may have been written by any number of ranks: torch.distributed.checkpoint reassembles the sharded
parameters in one process, without a process group. --target_dir defaults to <local_dir>/huggingface, next to the
config files the trainer saved there (--adapter_only: <local_dir>/lora_adapter). The weights are written in bf16 unless
--dtype says otherwise (the checkpoint holds fp32 master weights unless the run set torch_dtype; --dtype fp32 exports
those bit for bit). --hf_upload_path creates the Hub repository if needed and uploads the merged directory; it needs a
token (`hf auth login` or HF_TOKEN).

A checkpoint is trusted input: torch.distributed.checkpoint stores its metadata as a pickle, so reading a crafted
checkpoint can run code. Merge only checkpoints that you (or someone you trust) wrote.
"""

import argparse
import contextlib
import functools
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from verl.models.config import WEIGHT_FILE_SUFFIXES
from verl.models.transformers_compat import save_model_folder
from verl.utils.files import open_as_umask
from verl.utils.hub import safetensors_files


HF_SUBDIR = "huggingface"
ADAPTER_SUBDIR = "lora_adapter"
"""--adapter_only's default folder in the checkpoint."""
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
"""--dtype values and the torch dtype each names; the torch names themselves are accepted too."""
DEFAULT_DTYPE = "bf16"


class UploadError(RuntimeError):
    """The merged model could not be uploaded to the Hugging Face Hub."""


def torch_dtype_name(dtype: str) -> str:
    """The torch dtype name of a --dtype value ("bf16" -> "bfloat16"); torch names pass through."""
    if dtype in DTYPES:
        return DTYPES[dtype]
    if dtype in DTYPES.values():
        return dtype
    raise ValueError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}; choose one of them.")


def model_class(config: Any) -> type:
    """The transformers auto class that builds the model of `config` (image-text-to-text for VLMs)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    if config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return AutoModelForImageTextToText
    return AutoModelForCausalLM


def _copy_side_files(hf_dir: str, target_dir: str, skip: tuple[str, ...]) -> None:
    """The tokenizer, processor and generation config the trainer saved beside the config (no weight file or weight
    index: an earlier sharded export's index, copied beside a single-file export, made vLLM refuse the folder)."""
    if os.path.abspath(target_dir) == os.path.abspath(hf_dir):
        return
    os.makedirs(target_dir, exist_ok=True)
    for name in os.listdir(hf_dir):
        if name not in skip and not name.endswith(WEIGHT_FILE_SUFFIXES) and os.path.isfile(os.path.join(hf_dir, name)):
            with open(os.path.join(hf_dir, name), "rb") as src, open(os.path.join(target_dir, name), "wb") as dst:
                dst.write(src.read())


def _load_checkpoint_tensors(local_dir: str) -> dict[str, Any]:
    """Every model tensor of the DCP checkpoint in `local_dir`, whole (reassembled from all ranks' shards)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    from verl.utils import quiet

    saved = _checkpoint_index(local_dir)
    model_keys = [key[len("model.") :] for key in saved if key.startswith("model.")]
    # the metadata knows every tensor's full shape: allocate full tensors, then let DCP fill them from all shards
    state = {
        "model": {
            key: torch.empty(saved[f"model.{key}"].size, dtype=saved[f"model.{key}"].properties.dtype)
            for key in model_keys
        }
    }
    try:
        with quiet.one_process_checkpoint_io():
            dcp.load(state, checkpoint_id=local_dir, no_dist=True)
    except (Exception, CheckpointException) as error:  # DCP's (a BaseException) wraps a truncated shard's zip error
        text = str(error).strip()
        reason = text.splitlines()[-1].split(". ")[0] if text else type(error).__name__  # the reader's first sentence
        raise ValueError(
            f"Checkpoint '{local_dir}' cannot be read ({reason[:200]}): a shard (*.distcp) is missing or truncated. "
            "Copy the step's folder whole (its integrity.json names every file's size), or export another step."
        ) from None
    return state["model"]


def merge_lora(
    local_dir: str,
    adapter_config: dict[str, Any],
    target_dir: str,
    dtype: str = DEFAULT_DTYPE,
    adapter_only: bool = False,
    base_model: str | None = None,
    trust_remote_code: bool = False,
) -> str:
    """Write a LoRA checkpoint's adapters in peft's layout, or merged into the base model; return the directory."""

    import torch
    from safetensors.torch import save_file

    from verl.models.lora import lora_merge_plan_from_names, lora_scaling, merge_weight, peft_adapter_state

    hf_dir = os.path.join(local_dir, HF_SUBDIR)
    base_path = base_model or adapter_config.get("base_model_name_or_path")
    if base_model and os.path.isdir(base_model):  # a local folder: the adapter config's path read from any folder
        base_path = os.path.abspath(base_model)
    if adapter_only:
        if base_path:  # the base the adapter config names: the adapters on other weights make a model nobody trained
            _check_trained_on(local_dir, base_path)
        state = _load_checkpoint_tensors(local_dir)
        torch_dtype = getattr(torch, torch_dtype_name(dtype))
        adapter = {name: tensor.to(torch_dtype).contiguous() for name, tensor in peft_adapter_state(state).items()}
        os.makedirs(target_dir, exist_ok=True)
        save_file(adapter, os.path.join(target_dir, "adapter_model.safetensors"), metadata={"format": "pt"})
        config = dict(adapter_config, base_model_name_or_path=base_path)
        with open(os.path.join(target_dir, "adapter_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2, sort_keys=True)
        _copy_side_files(hf_dir, target_dir, skip=("config.json", "adapter_config.json"))
        open_as_umask(target_dir)  # safetensors writes 0600
        return target_dir
    if not base_path:
        raise ValueError(
            f"'{local_dir}/adapter_config.json' names no base model; pass --base_model (the run's model_path)."
        )
    if os.path.isabs(base_path) and not os.path.isdir(base_path):
        raise FileNotFoundError(
            f"The base model '{base_path}' of this LoRA checkpoint does not exist; pass --base_model with its "
            "current location."
        )
    _check_trained_on(local_dir, base_path)
    state = _load_checkpoint_tensors(local_dir)
    scaling = lora_scaling(adapter_config)
    config = _auto_config(hf_dir, trust_remote_code)
    try:  # a missing folder or hub id, not a write error
        model, loading = model_class(config).from_pretrained(
            base_path,
            config=config,
            dtype=torch.float32,
            trust_remote_code=trust_remote_code,
            output_loading_info=True,
        )
    except OSError as error:
        raise FileNotFoundError(
            f"The base model '{base_path}' cannot be loaded ({error}); pass --base_model."
        ) from None
    except (RuntimeError, ValueError) as error:  # weights of other shapes: another model's
        raise ValueError(
            f"The base model '{base_path}' is not the model this checkpoint trained ({str(error).splitlines()[0]}); "
            "pass --base_model with the run's model_path."
        ) from None
    missing = [*loading.get("missing_keys", ()), *(key for key, *_ in loading.get("mismatched_keys", ()))]
    if missing:  # from_pretrained initialises them afresh: the export would hold random weights there
        raise ValueError(
            f"The base model '{base_path}' lacks weights this checkpoint's model has ({', '.join(sorted(missing)[:4])}"
            f"{' ...' if len(missing) > 4 else ''}): it is another model; pass --base_model with the run's model_path."
        )
    params = dict(model.named_parameters())
    plan = lora_merge_plan_from_names(state)
    if not plan:
        raise ValueError(f"'{local_dir}' holds no LoRA adapter tensors.")
    with torch.no_grad():
        for weight_name, (a_name, b_name) in plan.items():
            target = params.get(weight_name)
            if target is None:
                raise ValueError(f"The adapter of '{weight_name}' has no layer in the base model '{base_path}'.")
            target.copy_(merge_weight(target, state[a_name], state[b_name], scaling))
    model.to(getattr(torch, torch_dtype_name(dtype)))
    save_model_folder(model, target_dir, safe_serialization=True)  # Qwen3-VL-MoE's experts in checkpoint layout
    _copy_side_files(hf_dir, target_dir, skip=("config.json", "adapter_config.json"))
    return target_dir


EASYR1_SHARD = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
"""The per-rank model files of EasyR1's and verl's FSDP checkpoints."""


def _check_trained_on(local_dir: str, base_path: str) -> None:
    """ValueError where the step's trainer_state.json records other starting weights (`model_fingerprint`) than
    `base_path` holds: the adapters merged onto a model of the same shapes but other weights (a base model for its
    instruct version) make a model nobody trained."""
    from verl.trainer.checkpointing import started_from_other_weights

    if started_from_other_weights(os.path.dirname(local_dir), base_path):
        raise ValueError(
            f"The adapters of '{local_dir}' were trained on other weights than the base model '{base_path}' holds "
            "(the same shapes: another version or fine-tune?); pass --base_model with the run's model_path."
        )


def not_a_checkpoint(local_dir: str) -> str:
    """Why `local_dir` is no checkpoint of this trainer, and what to pass instead."""
    names = os.listdir(local_dir) if os.path.isdir(local_dir) else []
    shards = sorted(name for name in names if EASYR1_SHARD.match(name))
    if shards:
        return (
            f"'{local_dir}' is an EasyR1 (or verl) checkpoint: per-rank files such as {shards[0]}, not the "
            "torch.distributed.checkpoint directory this trainer writes. Merge it with EasyR1's own "
            "scripts/model_merger.py; this merger reads checkpoints of this trainer (.../global_step_N/actor)."
        )
    if "actor" in names:
        return f"'{local_dir}' is a step directory; pass its actor checkpoint: {os.path.join(local_dir, 'actor')}."
    from verl.trainer.checkpointing import STEP_DIR, saved_steps

    # a step's actor/ is renamed into place once whole: an interrupted save leaves actor.tmp, or nothing of it
    step = os.path.normpath(local_dir)
    if os.path.basename(step) == "actor" and not os.path.exists(step):  # (the actor such a step would have)
        step = os.path.dirname(step)
    if STEP_DIR.match(os.path.basename(step)) and os.path.isdir(step):
        why = "its save was interrupted: actor.tmp is left" if "actor.tmp" in os.listdir(step) else "no actor/ in it"
        newest = _newest_actor(os.path.dirname(step))
        other = f"export another step's, such as the newest: {newest}" if newest else "no step beside it has one"
        return f"'{step}' is a step directory without an actor checkpoint ({why}); {other}."
    steps = saved_steps(local_dir)
    if steps:
        saved = f"{len(steps)} step{'s' if len(steps) != 1 else ''} saved"
        newest = _newest_actor(local_dir)
        if newest is None:
            none = "none holds an actor checkpoint (interrupted saves?)"
            return f"'{local_dir}' is a run's save directory ({saved}), and {none}."
        return (
            f"'{local_dir}' is a run's save directory ({saved}); pass one step's actor checkpoint, such as the newest: "
            f"{newest}."
        )
    if not os.path.exists(local_dir):
        return f"'{local_dir}' does not exist; pass .../global_step_N/actor."
    return f"'{local_dir}' is not a checkpoint directory (no .metadata); pass .../global_step_N/actor."


def _newest_actor(run_dir: str) -> str | None:
    """The actor folder of the newest global_step_N in `run_dir` that has one (None where none has)."""
    from verl.trainer.checkpointing import saved_steps, step_dir

    actors = [os.path.join(step_dir(run_dir, step), "actor") for step in reversed(saved_steps(run_dir))]
    return next((actor for actor in actors if os.path.isdir(actor)), None)


def check_intact(local_dir: str) -> None:
    """Compare the role directory `local_dir` (global_step_N/actor) with the integrity record its step's save wrote;
    a missing, truncated or changed file is named (rather than failing inside torch.distributed.checkpoint)."""
    from verl.utils.checkpoint.integrity import damage

    step_path, role = os.path.split(os.path.normpath(local_dir))
    problem = damage(step_path, under=role)
    if problem is not None:
        raise ValueError(
            f"Checkpoint '{local_dir}' is damaged: {problem}. Restore it from a copy or merge an earlier step."
        )


def _checkpoint_index(local_dir: str) -> dict[str, Any]:
    """The tensors' metadata of the DCP checkpoint in `local_dir` (its `.metadata`), by key; read once per version
    of the file (the critic check, the shape check and the load each ask: a large model's index is megabytes)."""
    try:
        stat = os.stat(os.path.join(local_dir, ".metadata"))
    except OSError:
        stat = None
    return _read_checkpoint_index(local_dir, stat and (stat.st_mtime_ns, stat.st_size, stat.st_ino))


@functools.lru_cache(maxsize=4)
def _read_checkpoint_index(local_dir: str, version: tuple[int, int, int] | None) -> dict[str, Any]:
    import torch.distributed.checkpoint as dcp

    try:
        return dcp.FileSystemReader(local_dir).read_metadata().state_dict_metadata
    except Exception as error:  # an empty or foreign file: EOFError, UnpicklingError, ValueError...
        raise ValueError(
            f"Checkpoint '{local_dir}/.metadata' cannot be read ({type(error).__name__}: {error}): the checkpoint's "
            "index is missing or damaged; restore it from a copy or export another step."
        ) from None


def _auto_config(hf_dir: str, trust_remote_code: bool) -> Any:
    """The checkpoint's model config; a model type this transformers does not know is one line naming the file (it
    was transformers' paragraphs of advice, the file unnamed)."""
    import transformers
    from transformers import AutoConfig

    model_type = _config_json(hf_dir).get("model_type")
    if not trust_remote_code and isinstance(model_type, str) and model_type not in transformers.CONFIG_MAPPING:
        raise ValueError(
            f"'{hf_dir}/config.json' has model_type {model_type!r}, which transformers {transformers.__version__} "
            "does not know; install a version that does (or pass --trust_remote_code for a model of its own code)."
        )
    return AutoConfig.from_pretrained(hf_dir, trust_remote_code=trust_remote_code)


def _config_json(hf_dir: str) -> dict[str, Any]:
    path = os.path.join(hf_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"'{path}' is not valid JSON ({error}); the checkpoint's model config is damaged.") from None
    if not isinstance(config, dict):
        raise ValueError(f"'{path}' holds no JSON object; the checkpoint's model config is damaged.")
    return config


def check_not_a_critic(local_dir: str) -> None:
    """A critic's checkpoint (this project's value head: a one-row lm_head with a bias; or a value_head / score
    layer without lm_head) is refused: it is no language model to export."""
    saved = _checkpoint_index(local_dir)
    model_keys = {key[len("model.") :] for key in saved if key.startswith("model.")}
    head = saved.get("model.lm_head.weight")
    value_head = head is not None and head.size[0] == 1 and "lm_head.bias" in model_keys
    if value_head or (
        "lm_head.weight" not in model_keys and any(k in ("value_head", "score.weight") for k in model_keys)
    ):
        raise ValueError(f"'{local_dir}' holds a critic (value head); export the actor's checkpoint instead.")


def merge(
    local_dir: str,
    target_dir: str | None = None,
    dtype: str = DEFAULT_DTYPE,
    adapter_only: bool = False,
    base_model: str | None = None,
    trust_remote_code: bool = False,
) -> str:
    """Write the actor checkpoint in `local_dir` as a Hugging Face model directory with `dtype` weights (or, for a
    LoRA checkpoint with `adapter_only`, its adapters in peft's layout); return the directory."""
    import torch

    torch_dtype = getattr(torch, torch_dtype_name(dtype))
    # the folder itself, not a link to it (a `latest` symlink): the step whose record an export into it rewrites
    local_dir = os.path.realpath(local_dir)
    hf_dir = os.path.join(local_dir, HF_SUBDIR)
    if local_dir.endswith(".tmp"):  # a save's staging folder: its .metadata may be there before every rank's files
        raise FileNotFoundError(
            f"'{local_dir}' is the staging folder of a save that never finished (a whole one is renamed to "
            f"'{local_dir[: -len('.tmp')]}'); export a complete step's actor instead."
        )
    if not os.path.isfile(os.path.join(local_dir, ".metadata")):
        raise FileNotFoundError(not_a_checkpoint(local_dir))
    check_intact(local_dir)
    if not os.path.isfile(os.path.join(hf_dir, "config.json")):
        raise FileNotFoundError(f"'{hf_dir}/config.json' is missing; the checkpoint was not written by this trainer.")
    check_not_a_critic(local_dir)  # from the checkpoint's index, before a model of its size is built on the host
    auto_map = _config_json(hf_dir).get("auto_map")
    if auto_map and not trust_remote_code:  # else transformers asks y/N on a terminal, or fails elsewhere
        raise ValueError(
            f"'{hf_dir}/config.json' names the model's own code ({sorted(auto_map)} in auto_map, files beside it); "
            "pass --trust_remote_code to run it."
        )
    # the adapters beside the checkpoint's huggingface/ (EasyR1's folder name), which a merge may still write later
    default = os.path.join(local_dir, ADAPTER_SUBDIR) if adapter_only else hf_dir
    target_dir = os.path.abspath(target_dir or default)
    from verl.utils.config import unwritable

    problem = unwritable(target_dir)
    if problem is not None:  # now, not once the model is built and loaded (minutes and the model's size in memory)
        raise ValueError(f"--target_dir '{target_dir}', {problem}.")
    from verl.models.lora import ADAPTER_CONFIG_FILE, read_adapter_config

    adapter_config = read_adapter_config(local_dir)
    if adapter_config is not None:
        if target_dir == hf_dir and os.path.isfile(os.path.join(hf_dir, ADAPTER_CONFIG_FILE)):
            raise ValueError(
                f"'{local_dir}' keeps its adapter config in huggingface/ (a checkpoint written before it moved out), "
                "where a merged model would load as an adapter; pass --target_dir (another folder)."
            )
    if adapter_config is not None and not adapter_only:  # a hub id's base model: no minutes of retries offline
        from verl.utils.hub import offline_unless_reachable

        offline_unless_reachable({"base_model": base_model or adapter_config.get("base_model_name_or_path") or ""})
    if adapter_config is None:
        for given, flag in ((adapter_only, "--adapter_only"), (base_model, "--base_model")):
            if given:
                raise ValueError(f"'{local_dir}' is not a LoRA checkpoint (no adapter_config.json); drop {flag}.")
    own = target_dir == os.path.abspath(default)  # the checkpoint's huggingface/ or adapter folder
    with _staged(target_dir, own, replaced=_earlier_export(target_dir, own, hf_dir)) as out:
        if adapter_config is not None:
            merge_lora(local_dir, adapter_config, out, dtype, adapter_only, base_model, trust_remote_code)
        else:
            _merge_full(local_dir, hf_dir, out, torch_dtype, trust_remote_code)
    return _recorded(local_dir, target_dir)


def _in_target(error: Exception, target_dir: str | None) -> bool:
    """Whether `error` is a missing folder in --target_dir's path as it was written (a folder of /proc, which passes
    the access check as root, cannot be made: "No such file or directory"), not a checkpoint file that is missing."""
    if not (isinstance(error, FileNotFoundError) and error.filename and target_dir):
        return False
    target = os.path.abspath(target_dir)
    return os.path.commonpath([os.path.abspath(str(error.filename)), target]) == target


@contextlib.contextmanager
def _staged(target_dir: str, own: bool, replaced: list[str]) -> Iterator[str]:
    """The folder to export into: `target_dir`, or for the checkpoint's own huggingface/ or adapter folder (`own`) a
    hidden folder beside it whose files replace the folder's only once the export is whole, an earlier export's
    files (`replaced`) removed then. Written in place, a failed or interrupted export (a full disk, Ctrl-C) left the
    step's config rewritten and unrecorded: the step read as damaged, and the next run resumed from the step before
    it; and an earlier export removed first was lost with it."""
    if not own:
        yield target_dir
        return
    staging = tempfile.mkdtemp(prefix=".export-", dir=os.path.dirname(target_dir))
    try:
        yield staging
        os.makedirs(target_dir, exist_ok=True)
        for name in replaced:
            os.remove(os.path.join(target_dir, name))
        for name in os.listdir(staging):
            os.replace(os.path.join(staging, name), os.path.join(target_dir, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _merge_full(local_dir: str, hf_dir: str, target_dir: str, torch_dtype: Any, trust_remote_code: bool) -> None:
    """A full model's checkpoint as its Hugging Face class in `target_dir`, with the side files of `hf_dir`."""
    config = _auto_config(hf_dir, trust_remote_code)
    # built on the CPU, not the meta device: non-persistent buffers (rotary frequencies) are computed at
    # construction and are not in checkpoints. This needs host memory for one copy of the model in `dtype`.
    model = model_class(config).from_config(config, dtype=torch_dtype, trust_remote_code=trust_remote_code)
    saved = _checkpoint_index(local_dir)  # shapes first: load_state_dict's "size mismatch" was a traceback
    wrong = [
        (key, list(saved[f"model.{key}"].size), list(value.shape))
        for key, value in model.state_dict().items()
        if f"model.{key}" in saved and tuple(saved[f"model.{key}"].size) != tuple(value.shape)
    ]
    if wrong:
        key, there, here = wrong[0]
        raise ValueError(
            f"Checkpoint '{local_dir}' does not match its {HF_SUBDIR}/config.json ({len(wrong)} tensor(s); {key}: "
            f"checkpoint {there}, config {here}); the config was changed or belongs to another model."
        )
    missing, unexpected = model.load_state_dict(_load_checkpoint_tensors(local_dir), strict=False)
    tied = {"lm_head.weight"} if getattr(config.get_text_config(), "tie_word_embeddings", False) else set()
    missing = [key for key in missing if key not in tied]
    if missing or unexpected:
        raise ValueError(
            f"Checkpoint '{local_dir}' does not match {type(model).__name__}: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}."
        )
    model.tie_weights()
    if os.path.isfile(os.path.join(hf_dir, "generation_config.json")):  # else save_pretrained writes one from config
        from transformers import GenerationConfig

        model.generation_config = GenerationConfig.from_pretrained(hf_dir)
    save_model_folder(model, target_dir, safe_serialization=True)  # Qwen3-VL-MoE's experts in checkpoint layout
    _copy_side_files(hf_dir, target_dir, skip=("config.json",))


def _earlier_export(target_dir: str, own: bool, hf_dir: str) -> list[str]:
    """Weights or adapter files already in `target_dir` would stay beside the export's (other shards; an
    adapter_config.json that makes the folder load as an adapter): in the checkpoint's own folder (`own`, the default
    target) they are an earlier export of it, to replace (their names); in a folder the user named, ValueError, as
    for the files the export writes there (the config, the tokenizer's: they were overwritten)."""
    from verl.models.lora import ADAPTER_CONFIG_FILE

    if not os.path.isdir(target_dir):
        return []
    names = os.listdir(target_dir)
    found = sorted(name for name in names if name.endswith(WEIGHT_FILE_SUFFIXES) or name == ADAPTER_CONFIG_FILE)
    if not own:
        written = {"config.json", "generation_config.json", *os.listdir(hf_dir)}
        clashes = sorted({*found, *(name for name in names if name in written)})
        if clashes:
            raise ValueError(
                f"--target_dir '{target_dir}' already holds {', '.join(clashes[:4])}"
                f"{' ...' if len(clashes) > 4 else ''}, which the export would overwrite or leave beside its files; "
                "choose an empty or new folder, or delete them."
            )
    return found


def _recorded(local_dir: str, target_dir: str) -> str:
    """`target_dir`; where it is the checkpoint's own huggingface/ (the default), its files are recorded anew in the
    step's integrity record, so that the rewritten config files do not make the checkpoint read as damaged; the
    export's weights are left out (no part of the checkpoint: removed to free the space, they made the step read as
    damaged, and a run resumed from the step before it)."""
    from verl.utils.checkpoint.integrity import write_record

    if target_dir == os.path.join(local_dir, HF_SUBDIR):
        step_path, role = os.path.split(local_dir)
        write_record(step_path, under=os.path.join(role, HF_SUBDIR), leave_out=WEIGHT_FILE_SUFFIXES)
    return target_dir


def check_upload_target(repo_id: str) -> None:
    """Fail before the merge, not after it, when the repository name is invalid or no Hub token is configured."""
    from huggingface_hub import get_token
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise UploadError(
            f"--hf_upload_path {repo_id!r} is not a Hub repository name ({error}); write USER/REPO."
        ) from None
    if get_token() is None:
        raise UploadError(
            f"--hf_upload_path {repo_id!r} needs a Hugging Face token and none is configured; run `hf auth login` "
            "or set HF_TOKEN, then run the merger again."
        )


def upload(folder: str, repo_id: str, private: bool = False) -> str:
    """Create the Hub model repository `repo_id` if needed and upload `folder` to it; return the repository URL."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        url = api.create_repo(repo_id, repo_type="model", private=private or None, exist_ok=True)
        api.upload_folder(repo_id=repo_id, folder_path=folder, repo_type="model")
    except Exception as error:  # httpx, OSError and the hub's own errors: a network boundary, reported as one
        raise UploadError(
            f"Uploading {folder} to the Hugging Face Hub repository {repo_id!r} failed with "
            f"{type(error).__name__}: {error}. Check the network and that your token may write to {repo_id!r}; "
            f"the merged model stays in {folder}, so only the upload needs repeating."
        ) from error
    return str(url)


def engine_loading_note(target: str) -> str | None:
    """What a plain vLLM needs to load the merged model at `target`, where it cannot as written; None where it can.

    transformers 5 saves LLaVA-OneVision's SigLIP tower without SigLIP's `vision_model` level, and vLLM 0.32 maps only
    the published names (`vision_tower.vision_model.*`) to its modules."""

    from safetensors import safe_open

    config_file = os.path.join(target, "config.json")
    if not os.path.isfile(config_file):
        return None
    with open(config_file) as f:
        if json.load(f).get("model_type") != "llava_onevision":
            return None
    names = []
    for path in safetensors_files(target):
        with safe_open(path, "pt") as weights:
            names += [name for name in weights.keys() if ".vision_tower.encoder." in f".{name}"]
    if not names:
        return None
    return (
        f"its vision tower is saved as {names[0]!r} and {len(names) - 1} more names without SigLIP's 'vision_model' "
        "level, as transformers 5 writes it; vLLM 0.32 expects 'vision_tower.vision_model.*' and stops with 'There is "
        "no module or parameter named ...'. `python -m verl.serve` loads it; in Python, call verl.workers.rollout."
        "vllm_compat.load_transformers_tower_names() before building the vllm.LLM (the trainer does), or rename those "
        "keys."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local_dir", required=True, help="the global_step_N/actor checkpoint directory")
    parser.add_argument(
        "--target_dir",
        default=None,
        help=f"output directory, new or without weight files (default: <local_dir>/{HF_SUBDIR}, inside the "
        f"checkpoint, replacing an earlier export there; with --adapter_only <local_dir>/{ADAPTER_SUBDIR})",
    )
    parser.add_argument(
        "--dtype",
        default=DEFAULT_DTYPE,
        choices=[*DTYPES, *DTYPES.values()],
        help=f"dtype of the written weights (default: {DEFAULT_DTYPE})",
    )
    parser.add_argument("--hf_upload_path", default=None, help="Hub repository USER/REPO to upload the result to")
    parser.add_argument("--hf_private", action="store_true", help="create the Hub repository as private")
    parser.add_argument(
        "--adapter_only", action="store_true", help="LoRA checkpoints: write the adapters (peft layout), not merged"
    )
    parser.add_argument("--base_model", default=None, help="LoRA checkpoints: the base model (default: the run's)")
    parser.add_argument(
        "--trust_remote_code", action="store_true", help="run the model's own code (a config.json with auto_map)"
    )
    args = parser.parse_args(argv)
    if args.hf_private and args.hf_upload_path is None:
        parser.error("--hf_private needs --hf_upload_path.")
    try:
        if args.hf_upload_path is not None:
            check_upload_target(args.hf_upload_path)
        target = merge(
            args.local_dir, args.target_dir, args.dtype, args.adapter_only, args.base_model, args.trust_remote_code
        )
    except (FileNotFoundError, ValueError, UploadError) as err:
        if not _in_target(err, args.target_dir):
            print(f"model_merger: {err}", file=sys.stderr)
            return 2
        print(
            f"model_merger: cannot write {err.filename}: {err.strerror}; choose another --target_dir.", file=sys.stderr
        )
        return 1
    except OSError as err:  # the target cannot be written: a file on its path, no permission, a full disk
        where = err.filename or args.target_dir or "the target directory"
        print(
            f"model_merger: cannot write {where}: {err.strerror or err}; choose another --target_dir.", file=sys.stderr
        )
        return 1
    print(f"Hugging Face {'adapter' if args.adapter_only else 'model'} written to {target}")
    note = engine_loading_note(target)
    if note:
        print(f"model_merger: note: {note}", file=sys.stderr)
    if args.hf_upload_path is not None:
        try:
            url = upload(target, args.hf_upload_path, args.hf_private)
        except UploadError as err:
            print(f"model_merger: {err}", file=sys.stderr)
            return 1
        print(f"Uploaded to {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
