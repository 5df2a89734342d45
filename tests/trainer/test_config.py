# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
import copy
import dataclasses
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import typing

import pytest
import torch
import yaml
from safetensors.torch import save_file

from tests.model_folders import config_only_model, no_tensors
from verl.trainer.config import PPOConfig, load_config
from verl.trainer.main import main
from verl.utils.config import ConfigError, describe_fields
from verl.utils.device import is_cuda_available


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def base_args(d) -> list[str]:
    return [
        f"data.train_files={d / 'train.jsonl'}",
        f"worker.actor.model.model_path={d / 'model'}",
        f"worker.reward.reward_function={d / 'reward.py'}:compute_score",
        "data.rollout_batch_size=8",
        "worker.actor.global_batch_size=4",
        "worker.rollout.n=2",
        "trainer.n_gpus_per_node=2",
    ]


def write_yaml(path, data) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    ("typed", "name"),
    [("no", "no"), ("0755", "0755"), ("12:30:00", "12:30:00"), ("1e3", "1e3"), ("exp #2", "exp #2"), ("'on'", "on")],
)
def test_a_text_setting_is_what_was_typed(files, typed, name):
    """YAML read `experiment_name=no` as False (the run was named "False"), 0755 as 493, and cut "exp #2" at the #."""
    assert load_config([*base_args(files), f"trainer.experiment_name={typed}"]).trainer.experiment_name == name


def test_yaml_traps_in_a_config_file_are_refused_or_read_as_meant(files):
    cfg_file = files / "c.yaml"
    cfg_file.write_text("trainer:\n  experiment_name: no\n")
    with pytest.raises(ConfigError, match=r"'trainer.experiment_name' is text, but its value was read as the boolean"):
        load_config([f"config={cfg_file}", *base_args(files)])
    cfg_file.write_text("data:\n  seed: 1\n  seed: 2\n")
    with pytest.raises(ConfigError, match=r"the key 'seed' is given twice in one mapping"):
        load_config([f"config={cfg_file}", *base_args(files)])
    cfg_file.write_text("trainer:\n  experiment_name: ${trainer.project_name}_x\n  project_name: p\n")
    assert load_config([f"config={cfg_file}", *base_args(files)]).trainer.experiment_name == "p_x"
    assert (
        load_config(
            [*base_args(files), "trainer.project_name=q", "trainer.experiment_name=${trainer.project_name}_y"]
        ).trainer.experiment_name
        == "q_y"
    )  # noqa: E501


def test_an_adaptive_kl_without_the_penalty_names_the_setting_that_turned_it_off(files):
    """With disable_kl=true the advice was use_kl_loss=false, which was false already."""
    args = [*base_args(files), "algorithm.kl_type=adaptive", "algorithm.use_kl_loss=false"]
    with pytest.raises(
        ConfigError, match=r"trains without a KL term; set algorithm.kl_type=fixed, or algorithm.disabl"
    ):
        load_config([*args, "algorithm.disable_kl=true"])
    assert load_config([*args, "algorithm.disable_kl=false"]).algorithm.kl_type == "adaptive"  # the advice works


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("worker.actor.model.lora.exclude_modules=[a-z]+_proj", r"cannot be parsed .*quote it for YAML"),
        ("trainer.experiment_name=*x", r"cannot be parsed .*quote it for YAML"),
        ("data.chat_template_kwargs=[1]", r"'data.chat_template_kwargs' expects dict\[str, Any\], got \[1\]"),
        ("worker.actor.optim.betas={a: 1}", r"'worker.actor.optim.betas' expects .*list.*, got \{'a': 1\}"),
        ("config=", r"config= is empty"),
        ("algorithm.kl_coef=.inf", r"'algorithm.kl_coef' must be a finite number, got inf"),
        ("worker.actor.entropy_coeff=inf", r"'worker.actor.entropy_coeff' must be a finite number, got inf"),
        (
            "data.response_length_schedule.0=8",
            r"keys of 'data.response_length_schedule' are integers, and '0' is text",
        ),
        ("data.response_length_schedule={0: abc}", r"'data.response_length_schedule.0' expects int, got 'abc'"),
        ("worker.actor.optim.betas=[0.9,abc]", r"'worker.actor.optim.betas\[1\]' expects float, got 'abc'"),
        ("algorithm.kl_type=adaptive", r"kl_type=adaptive adapts the coefficient of the KL penalty in the rewards"),
    ],
)
def test_command_line_mistakes_are_one_line(files, arg, message):
    """Each was a Python traceback (yaml's ComposerError, OmegaConf's TypeError), an empty config= ran the defaults,
    and an adaptive KL controller with the KL in the loss was accepted and never used."""
    with pytest.raises(ConfigError, match=message):
        load_config([*base_args(files), "algorithm.use_kl_loss=true", arg])


def test_defaults_yaml_cli_precedence(files):
    cfg_file = write_yaml(
        files / "c.yaml",
        {"data": {"max_prompt_length": 100, "max_response_length": 50}, "worker": {"rollout": {"temperature": 0.5}}},
    )
    config = load_config([f"config={cfg_file}", *base_args(files), "data.max_prompt_length=200"])
    assert isinstance(config, PPOConfig)
    assert config.data.max_prompt_length == 200  # CLI beats YAML
    assert config.data.max_response_length == 50  # YAML beats default
    assert config.worker.rollout.temperature == 0.5
    assert config.data.prompt_key == "prompt"  # default kept
    assert config.worker.actor.model.trust_remote_code is False


def test_derived_keys_filled(files):
    config = load_config(
        [
            *base_args(files),
            "data.max_prompt_length=64",
            "algorithm.use_kl_loss=true",
            "algorithm.kl_coef=0.05",
            "worker.actor.padding_free=false",
            f"data.override_chat_template={files / 'fmt.jinja'}",
        ]
    )
    assert config.worker.rollout.prompt_length == 64
    assert config.worker.override_chat_template == str(files / "fmt.jinja")  # the workers' tokenizers carry it
    assert config.worker.rollout.max_model_len == 64 + config.data.max_response_length
    assert config.worker.actor.use_kl_loss is True and config.worker.actor.kl_coef == 0.05
    assert config.worker.ref.padding_free is False
    assert config.worker.actor.model.tokenizer_path == str(files / "model")
    assert config.trainer.save_checkpoint_path.endswith(os.path.join("checkpoints", "verl_compact", "demo"))


def test_derived_key_cannot_be_set(files):
    with pytest.raises(ConfigError, match=r"worker.rollout.prompt_length.*data.max_prompt_length"):
        load_config([*base_args(files), "worker.rollout.prompt_length=10"])


def test_cli_lists_and_dicts(files):
    config = load_config(
        [
            *base_args(files),
            "trainer.logger=[console,file]",
            'worker.rollout.val_override_config={"temperature": 0.6, "n": 1, "min_p": 0.05}',
            "worker.actor.optim.betas=[0.8,0.95]",
        ]
    )
    assert config.trainer.logger == ["console", "file"]
    assert config.worker.rollout.val_override_config == {"temperature": 0.6, "n": 1, "min_p": 0.05}
    assert list(config.worker.actor.optim.betas) == [0.8, 0.95]
    config = load_config([*base_args(files), "data.chat_template_kwargs={enable_thinking: false}"])
    assert config.data.chat_template_kwargs == {"enable_thinking": False}
    assert config.worker.rollout.chat_template_kwargs == {"enable_thinking": False}  # the environment turns'
    # YAML reads {a:b} as the key 'a:b' without a value: refused, showing the space it needs
    with pytest.raises(ConfigError, match=r"'data.chat_template_kwargs' has the key 'enable_thinking:false' with no "):
        load_config([*base_args(files), "data.chat_template_kwargs={enable_thinking:false}"])
    with pytest.raises(ConfigError, match=r"\{url: http://x:8000\} instead of \{url:http://x:8000\}"):
        load_config([*base_args(files), "worker.rollout.env_kwargs={url:http://x:8000}"])


def test_unknown_key_names_path_and_suggestion(files):
    with pytest.raises(ConfigError) as err:
        load_config([*base_args(files), "worker.actor.optim.learning_rate=1e-5"])
    assert "worker.actor.optim.learning_rate" in str(err.value)
    for theirs, ours in (("max_checkpoints_to_keep", "save_limit"), ("test_freq", "val_freq")):  # verl's, TRL's names
        with pytest.raises(ConfigError, match=rf"'trainer.{theirs}'. Did you mean 'trainer.{ours}'\?"):
            load_config([*base_args(files), f"trainer.{theirs}=2"])
    with pytest.raises(ConfigError, match=r"'data.max_prompt_lenght'.*Did you mean 'data.max_prompt_length'"):
        load_config([*base_args(files), "data.max_prompt_lenght=3"])
    easyr1 = {
        "worker.critic.fsdp.use_orig_params=false": "'worker.critic.fsdp.use_orig_params' is an FSDP1 option",
        "worker.rollout.disable_log_stats=true": "'worker.rollout.disable_log_stats' is an EasyR1 option passed to",
        "worker.ref.strategy=fsdp": "'worker.ref.strategy' is an EasyR1 key: the reference model runs in the actor's",
        "worker.reward.reward_type=batch": "'worker.reward.reward_type' is an EasyR1 key: the reward file says how",
    }
    for override, message in easyr1.items():
        with pytest.raises(ConfigError, match=re.escape(message) + r".*; delete it\."):
            load_config([*base_args(files), override])


def test_unknown_key_in_yaml_names_file(files):
    cfg_file = write_yaml(files / "bad.yaml", {"trainer": {"total_epoch": 3}})
    with pytest.raises(ConfigError, match=r"trainer.total_epoch.*trainer.total_epochs.*bad.yaml"):
        load_config([f"config={cfg_file}", *base_args(files)])


def test_wrong_type_names_key_type_value(files):
    with pytest.raises(ConfigError) as err:
        load_config([*base_args(files), "data.max_prompt_length=abc"])
    message = str(err.value)
    assert "data.max_prompt_length" in message and "int" in message and "abc" in message


def test_missing_config_file(files):
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_config(["config=nope.yaml", *base_args(files)])
    # a folder, or a file that is not UTF-8 text, is one line naming it too (both were tracebacks)
    with pytest.raises(ConfigError, match=rf"Config file '{files}' cannot be read: Is a directory"):
        load_config([f"config={files}", *base_args(files)])
    latin1 = files / "latin1.yaml"
    latin1.write_bytes("data:\n  prompt_key: r\xe9ponse\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=rf"Config file '{latin1}' is not UTF-8 text \(invalid"):
        load_config([f"config={latin1}", *base_args(files)])


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        (["worker.actor.global_batch_size=3"], r"data.rollout_batch_size=8 must be a multiple of worker.actor"),
        (["trainer.n_gpus_per_node=3"], r"split evenly over.*3 devices"),
        (
            ["worker.actor.dynamic_batching=false", "worker.actor.micro_batch_size_per_device_for_update=3"],
            r"micro_batch_size_per_device_for_update=3 must divide",
        ),
        (["worker.rollout.n=1"], r"algorithm.adv_estimator=grpo.*worker.rollout.n > 1"),
        (["algorithm.adv_estimator=gae", "worker.rollout.n=1"], r"worker.critic.model.model_path"),
        (
            ["worker.rollout.max_num_batched_tokens=100", "worker.rollout.max_num_seqs=64"],
            r"max_num_batched_tokens=100 must be at least",
        ),
        (["algorithm.adv_estimator=ppo"], r"algorithm.adv_estimator.*choose one of.*grpo"),
        (["worker.actor.loss_avg_mode=tokens"], r"worker.actor.loss_avg_mode.*token-sum"),
        (["algorithm.adv_estimator=opo", "worker.rollout.n=1"], r"algorithm.adv_estimator=opo.*worker.rollout.n > 1"),
        (
            ["algorithm.adv_estimator=rloo", "algorithm.norm_adv_by_std_in_grpo=false"],
            r"norm_adv_by_std_in_grpo=False has no effect with algorithm.adv_estimator=rloo.*grpo, grpo_passk",
        ),
        (["algorithm.gamma=0.99"], r"algorithm.gamma=0.99 has no effect with algorithm.adv_estimator=grpo"),
        (
            ["algorithm.adv_estimator=rloo", "algorithm.grpo_std_scope=batch"],
            r"grpo_std_scope=batch has no effect with algorithm.adv_estimator=rloo.*\(grpo\)",
        ),
        (["algorithm.grpo_std_scope=prompt"], r"algorithm.grpo_std_scope.*'prompt'.*group, batch"),
        (
            ["algorithm.grpo_std_scope=batch", "algorithm.norm_adv_by_std_in_grpo=false"],
            r"grpo_std_scope=batch picks the std .*norm_adv_by_std_in_grpo=false divides by none",
        ),
        (
            ["algorithm.adv_estimator=reinforce_plus_plus", "algorithm.lam=0.95"],
            r"algorithm.lam=0.95 .*adv_estimator=reinforce_plus_plus.*\(gae\)\.$",
        ),
        (["trainer.logger=[console,neptune]"], r"trainer.logger.*neptune"),
        (["trainer.logger=[file,mlflow,file]"], r"'trainer.logger' lists file more than once"),
        (["data.rollout_batch_size=0"], r"data.rollout_batch_size.*positive"),
        (["worker.actor.max_grad_norm=-1"], r"worker.actor.max_grad_norm.*positive, got -1"),
        (["worker.actor.ppo_epochs=0"], r"worker.actor.ppo_epochs.*positive, got 0"),
        (["worker.actor.optim.lr=-1e-6"], r"worker.actor.optim.lr.*zero or positive"),
        (["worker.rollout.seed=-3"], r"worker.rollout.seed.* is a seed, which must lie in \[0, 2\*\*32\)"),
        (["worker.rollout.seed=4294967296"], r"worker.rollout.seed.* must lie in \[0, 2\*\*32\), got 4294967296"),
        (
            ['worker.rollout.val_override_config={"seed": -5}'],
            r"val_override_config.seed must be a non-negative integer",
        ),
        (['worker.rollout.val_override_config={"logprobs": 50}'], r"val_override_config.logprobs must be at most 20"),
        (
            ["data.seed=18446744073709551616"],
            r"data.seed.* is a seed, which must lie in \[0, 2\*\*63\), got 18446744073709551616",
        ),
        (["data.dataloader_num_workers=-1"], r"data.dataloader_num_workers.*zero or positive, got -1"),
        (["worker.rollout.kv_cache_memory_mb=-5"], r"worker.rollout.kv_cache_memory_mb.*positive"),
        (["trainer.rollout_data_freq=0"], r"trainer.rollout_data_freq.*positive, got 0"),
        (["data.val_batch_size=0"], r"data.val_batch_size.*-1 for the whole"),
        (
            ["worker.rollout.max_num_seqs=512", "worker.rollout.max_num_batched_tokens=300"],
            r"max_num_batched_tokens=300 is below worker.rollout.max_num_seqs=512",
        ),
        (
            ["worker.rollout.tensor_parallel_size=4", "trainer.n_gpus_per_node=2", "worker.actor.global_batch_size=8"],
            r"tensor_parallel_size=4 must divide",
        ),
        # training at temperature 0 (the actor divides its logits by the temperature: NaN log-probs), with any n;
        # vLLM 0.32 (SamplingParams._verify_greedy_sampling) refuses n > 1 at temperature 0, when the first request
        # is made; and any temperature above 2
        (["worker.rollout.temperature=0"], r"worker.rollout.temperature=0 .*undefined at 0.*val_override_config"),
        (
            ["worker.rollout.temperature=0", "worker.rollout.n=1", "algorithm.adv_estimator=remax"],
            r"worker.rollout.temperature=0 samples greedily, but the actor",
        ),
        (
            ['worker.rollout.val_override_config={"temperature": 0, "n": 4}'],
            r"worker.rollout.val_override_config.temperature=0.*worker.rollout.val_override_config.n=4 > 1",
        ),
        # the engine's dtypes are named: vLLM's "auto" (the checkpoint's dtype) is not one of them
        (
            ["trainer.device=cpu", "worker.rollout.enable_chunked_prefill=true"],
            r"enable_chunked_prefill=true: the CPU engine prefills",
        ),
        (["worker.rollout.dtype=auto"], r"'worker.rollout.dtype' is 'auto'; choose one of: bf16, fp16, fp32"),
        (["worker.rollout.temperature=2.5"], r"worker.rollout.temperature must lie in \[0, 2\], got 2.5"),
        # the validation overrides' keys against vLLM's SamplingParams (its source, not imported), and the training
        # settings' ranges, at load time rather than in a worker
        (
            ['worker.rollout.val_override_config={"top_pp": 0.9}'],
            r"Sampling overrides \['top_pp'\] \(worker.rollout.val_override_config\) are not vLLM SamplingParams",
        ),
        (
            ['worker.rollout.val_override_config={"max_tokens": 16}'],
            r"Sampling overrides \['max_tokens'\] \(worker.rollout.val_override_config\) cannot change per call",
        ),
        (
            ['worker.rollout.val_override_config={"temperature": 3}'],
            r"worker.rollout.val_override_config.temperature must lie in \[0, 2\], got 3",
        ),
        # the values vLLM refuses (a zero n used to fail after the models loaded, in the first validation)
        (['worker.rollout.val_override_config={"n": 0}'], r"val_override_config.n must be an integer of at least 1"),
        (
            ['worker.rollout.val_override_config={"min_p": 5}'],
            r"val_override_config.min_p must be a number in \[0, 1\]",
        ),
        (
            ['worker.rollout.val_override_config={"stop": ["\\n"]}'],
            r"val_override_config: \['stop'\] need the responses as text.*stop_token_ids",
        ),
        (
            ['worker.rollout.val_override_config={"min_tokens": 100}', "data.max_response_length=16"],
            r"val_override_config.min_tokens=100 is above the response length \(16",
        ),
        # the loss's own checks ran at the first update, inside a worker
        (["worker.actor.clip_ratio_low=-0.2"], r"worker.actor.clip_ratio_low must be in \[0, 1\).*got -0.2"),
        (["worker.actor.clip_ratio_low=1.0"], r"worker.actor.clip_ratio_low must be in \[0, 1\).*got 1.0"),
        (
            ["worker.actor.loss_type=cispo", "worker.actor.clip_ratio_low=-1"],
            r"clip_ratio_low must be in \[0, inf\) for cispo",
        ),
        (["worker.actor.clip_ratio_dual=1"], r"worker.actor.clip_ratio_dual must be greater than 1, got 1.0"),
        (["worker.actor.tau_negative=0"], r"'worker.actor.tau_negative' must be positive"),
        (["algorithm.ref_sync_alpha=0"], r"algorithm.ref_sync_alpha must lie in \(0, 1\], got 0"),
        (
            ["algorithm.ref_sync_reset_optimizer=true"],
            r"algorithm.ref_sync_reset_optimizer=true restarts the optimizer .* algorithm.ref_sync_steps=0 never syncs",
        ),
        (
            ["algorithm.ref_sync_steps=10", "algorithm.disable_kl=true"],
            r"algorithm.ref_sync_steps=10 syncs the reference model, but algorithm.disable_kl=true",
        ),
        (
            ["algorithm.ref_sync_steps=10", "worker.actor.model.lora.rank=8"],
            r"algorithm.ref_sync_steps=10 with LoRA .*not built",
        ),
        (["worker.actor.top_entropy_quantile=1.5"], r"worker.actor.top_entropy_quantile=1.5 must be in \[0, 1\]"),
        (["algorithm.kl_coef=-0.1"], r"'algorithm.kl_coef' must be zero or positive"),
        (["algorithm.kl_target=0"], r"'algorithm.kl_target' must be positive"),
        (["worker.actor.optim.betas=[0.9,1.5]"], r"worker.actor.optim.betas must be two numbers in \[0, 1\)"),
        (["worker.actor.optim.lr_warmup_ratio=2"], r"worker.actor.optim.lr_warmup_ratio is a fraction"),
        (["worker.actor.optim.min_lr_ratio=-1"], r"worker.actor.optim.min_lr_ratio is a fraction"),
        (["worker.actor.optim.lr_warmup_steps=-5"], r"'worker.actor.optim.lr_warmup_steps' must be zero or positive"),
        (
            ["worker.ref.fsdp.fsdp_size=0"],
            r"worker.ref.fsdp.fsdp_size must be -1 \(shard over all devices\) or positive",
        ),
        (
            ["trainer.n_gpus_per_node=4", "worker.actor.fsdp.fsdp_size=3"],
            r"worker.actor.fsdp.fsdp_size=3 must divide the 4 devices",
        ),
        (["worker.rollout.top_k=-2"], r"worker.rollout.top_k must be -1 or 0 \(no top-k\) or at least 1, got -2"),
        (["data.min_pixels=5000", "data.max_pixels=4000"], r"data.min_pixels=5000 is above data.max_pixels=4000"),
        (["data.video_fps=0"], r"'data.video_fps' must be positive"),
        (["trainer.critic_warmup=-1"], r"'trainer.critic_warmup' must be zero or positive"),
        (
            ["worker.ref.offload.offload_optimizer=true"],
            r"worker.ref.offload.offload_optimizer: the reference model is",
        ),
        (
            ["worker.rollout.max_turns=3", "worker.rollout.env_kwargs={a: 1}"],
            r"worker.rollout.env_kwargs, worker.rollout.max_turns set\(s\) the episodes of an environment",
        ),
        (
            ["worker.reward.judge.max_tokens=4", "worker.reward.judge.weight=2.0"],
            r"worker.reward.judge.weight, worker.reward.judge.max_tokens set\(s\) the LLM judge, and "
            r"worker.reward.judge.model_path is unset",
        ),
        (["worker.actor.model.freeze_vision_tower=true"], r"freeze_vision_tower is set, and .* is a text model"),
        (
            ["worker.actor.model.lora.rank=8", "worker.actor.model.lora.vision_tower=true"],
            r"worker.actor.model.lora.vision_tower is set, and .* is a text model",
        ),
        (
            ["worker.actor.model.lora.rank=8", "worker.actor.model.lora.target_modules=' , '"],
            r"target_modules is empty",
        ),
        (
            ["worker.actor.model.lora.rank=8", "worker.actor.model.lora.target_modules=q_proj,embed_tokens"],
            r"target_modules names embed_tokens: LoRA adapters on an embedding layer are not trained",
        ),
        (["trainer.critic_warmup=2"], r"trainer.critic_warmup=2 trains only the critic.*adv_estimator=grpo has none"),
        (
            [
                "algorithm.adv_estimator=gae",
                "worker.critic.model.model_path=m",
                "trainer.critic_warmup=3",
                "trainer.max_steps=3",
            ],
            r"trainer.critic_warmup=3 trains only the critic .* trainer.max_steps=3 .* the actor would never train",
        ),  # fmt: skip
        (["algorithm.gamma=1.5"], r"algorithm.gamma must lie in \[0, 1\], got 1.5"),
        (["algorithm.lam=-0.5"], r"algorithm.lam must lie in \[0, 1\], got -0.5"),
        (
            ["worker.actor.optim.training_steps=100"],
            r"'worker.actor.optim.training_steps' is derived from trainer.max_steps or trainer.total_epochs; set "
            r"trainer.max_steps or trainer.total_epochs instead",
        ),
    ],
)
def test_cross_field_checks(files, override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config([*base_args(files), *override])


def test_lora_on_an_lm_head_tied_to_the_embeddings_is_refused(files):
    """Accepted before: the engine never got the trained head (vLLM drops a tied lm_head), the merger failed after
    training and SFT's export tied the untrained embeddings back over it."""
    import json

    lora = ["worker.actor.model.lora.rank=8", "worker.actor.model.lora.target_modules=q_proj,lm_head"]
    (files / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2", "tie_word_embeddings": True}))
    with pytest.raises(ConfigError, match=r"names lm_head, which .* ties to its input embeddings"):
        load_config([*base_args(files), *lora])
    (files / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2", "tie_word_embeddings": False}))
    assert load_config([*base_args(files), *lora]).worker.actor.model.lora.target_modules == "q_proj,lm_head"


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        (["data.train_files=missing.jsonl"], r"data.train_files.*missing.jsonl.*does not exist"),
        (["data.val_files=/nowhere/val.parquet"], r"data.val_files"),
        (["data.image_dir=/nowhere"], r"data.image_dir"),
        (["data.format_prompt=./nope.jinja"], r"data.format_prompt.*nope.jinja"),
        (["data.override_chat_template=./nope.jinja"], r"data.override_chat_template"),
        (["worker.actor.model.model_path=./no_such_model"], r"worker.actor.model.model_path"),
        (["worker.reward.reward_function=./no_reward.py:fn"], r"reward_function='./no_reward.py:fn'.*does not exist"),
        (["trainer.load_checkpoint_path=/nowhere/global_step_3"], r"trainer.load_checkpoint_path"),
    ],
)
def test_missing_paths_are_errors(files, override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config([*base_args(files), *override])


def test_a_checkpoint_folder_named_otherwise_than_its_step_is_refused(files):
    """global_step_3_backup passed the check, then stopped the run with a traceback (RL before Ray, SFT after)."""
    (files / "ckpt" / "global_step_3_backup").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"global_step_3_backup' must be a global_step_N directory: its name gives"):
        load_config([*base_args(files), f"trainer.load_checkpoint_path={files / 'ckpt' / 'global_step_3_backup'}"])


def test_a_run_folder_or_a_steps_actor_as_the_checkpoint_names_what_to_give_instead(files):
    """The run's save directory, or a step's actor folder (EasyR1 users' habit), was refused with the advice for a
    renamed copy of a step ("put a copy such as global_step_3_backup in a folder of its own")."""
    run = files / "run"
    for step in (2, 3):
        (run / f"global_step_{step}" / "actor").mkdir(parents=True)
    (run / "global_step_2" / "trainer_state.json").write_text("{}")  # step 3's save was interrupted
    with pytest.raises(ConfigError) as caught:
        load_config([*base_args(files), f"trainer.load_checkpoint_path={run}"])
    assert f"that is a run's save directory; give one of its steps (the newest complete one is {run}" in str(
        caught.value
    )
    assert "global_step_2)" in str(caught.value) and "set trainer.save_checkpoint_path to it" in str(caught.value)
    with pytest.raises(ConfigError, match=r"that is a folder of the step .*global_step_2; give the step itself\.$"):
        load_config([*base_args(files), f"trainer.load_checkpoint_path={run / 'global_step_2' / 'actor'}"])


def test_output_folders_must_be_creatable_and_are_not_created_by_the_check(files, monkeypatch):
    (files / "notes.txt").write_text("")
    for key in ("trainer.save_checkpoint_path", "trainer.rollout_data_dir"):
        with pytest.raises(ConfigError, match=rf"'{key}' is '.*notes.txt', which is a file; give a writable"):
            load_config([*base_args(files), f"{key}={files / 'notes.txt'}"])
        with pytest.raises(ConfigError, match=rf"'{key}' is .*which cannot be created: '.*notes.txt' is a file"):
            load_config([*base_args(files), f"{key}={files / 'notes.txt' / 'deeper' / 'run'}"])
    with pytest.raises(ConfigError, match=r"'trainer.ray_timeline' is '.*', which is a directory; give a file path"):
        load_config([*base_args(files), f"trainer.ray_timeline={files}"])
    timeline = files / "notes.txt" / "timeline.json"
    with pytest.raises(ConfigError, match=r"ray_timeline' is .*whose folder is a file; give a file in a writable"):
        load_config([*base_args(files), f"trainer.ray_timeline={timeline}"])
    nested = files / "new" / "deeper"
    config = load_config(
        [
            *base_args(files),
            f"trainer.save_checkpoint_path={nested}",
            f"trainer.rollout_data_dir={nested}/rollouts",
            f"trainer.ray_timeline={nested}/timeline.json",
        ]
    )
    assert config.trainer.save_checkpoint_path == str(nested) and not (files / "new").exists()
    # `~` is the home folder: abspath alone made it <cwd>/~/..., which a run started elsewhere never found
    monkeypatch.setenv("HOME", str(files / "home"))
    tilde = [
        "trainer.save_checkpoint_path=~/ckpt",
        "trainer.rollout_data_dir=~/dumps",
        "trainer.ray_timeline=~/t.json",
    ]
    config = load_config([*base_args(files), *tilde])
    assert config.trainer.save_checkpoint_path == str(files / "home" / "ckpt")
    assert config.trainer.rollout_data_dir == str(files / "home" / "dumps")
    assert config.trainer.ray_timeline == str(files / "home" / "t.json")


def test_an_empty_value_on_the_command_line_empties_a_text_setting(files, caplog):
    """A shell makes `data.val_files=""` into `data.val_files=`, which parses as None: for a text setting it means the
    empty string (here: no validation set), and None where the setting may be unset."""
    config = load_config([*base_args(files), "data.val_files=", "data.image_dir=", "trainer.val_freq=-1"])
    assert config.data.val_files == "" and config.data.image_dir is None
    assert load_config([*base_args(files), "data.val_files=null"]).data.val_files == ""
    with pytest.raises(ConfigError, match=r"trainer.val_only=true validates on data.val_files, which is empty"):
        load_config([*base_args(files), "data.val_files=", "trainer.val_only=true"])
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        load_config([*base_args(files), "trainer.val_freq=5"])
    assert "trainer.val_freq=5, but data.val_files is empty: the run will not validate" in caplog.text


def test_a_training_checkpoint_as_the_model_says_how_to_export_it(files):
    step = files / "run" / "global_step_3"
    actor = step / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / ".metadata").write_bytes(b"")
    (actor / "huggingface" / "config.json").write_text("{}")  # the trainer keeps the config and tokenizer here
    export = f"export it with `python scripts/model_merger.py --local_dir {actor}`, then use {actor / 'huggingface'}"
    for path, what in (
        (actor, "a training checkpoint's sharded weights"),
        (step, "a training checkpoint"),
        (actor / "huggingface", "a training checkpoint's config and tokenizer, without its weights"),
    ):
        key = "worker.actor.model.model_path"
        with pytest.raises(
            ConfigError, match=re.escape(f"{key}: '{path}' is {what}, not a Hugging Face model")
        ) as err:
            load_config([*base_args(files), f"{key}={path}"])
        assert export in str(err.value)
    no_tensors(actor / "huggingface" / "model.safetensors")  # exported: a model now
    load_config([*base_args(files), f"worker.actor.model.model_path={actor / 'huggingface'}"])
    # the run's save folder (an SFT run's output): it said only "a folder without config.json or weights"
    key, run = "worker.actor.model.model_path", files / "run"
    with pytest.raises(ConfigError, match=re.escape(f"{key}: '{run}' is a training run's checkpoint folder")) as err:
        load_config([*base_args(files), f"{key}={run}"])
    assert f"export its newest step with `python scripts/model_merger.py --local_dir {actor}`" in str(err.value)
    (run / "huggingface").mkdir()  # SFT's export at the end of its run
    shutil.copy(files / "model" / "config.json", run / "huggingface" / "config.json")
    no_tensors(run / "huggingface" / "model.safetensors")
    with pytest.raises(ConfigError, match=re.escape(f"its model is exported to {run / 'huggingface'}")):
        load_config([*base_args(files), f"{key}={run}"])


def test_reward_function_must_be_defined(files):
    with pytest.raises(ConfigError, match=r"reward_function=.*has no function 'nope'"):
        load_config([*base_args(files), f"worker.reward.reward_function={files / 'reward.py'}:nope"])
    (files / "main_reward.py").write_text("def main(sample):\n    return {'overall': 0.0}\n")
    config = load_config([*base_args(files), f"worker.reward.reward_function={files / 'main_reward.py'}"])
    assert config.worker.reward.reward_function == f"{files / 'main_reward.py'}:main"


def test_hub_ids_are_not_local_paths(files):
    config = load_config(
        [
            *base_args(files),
            "data.val_files=hiyouga/geometry3k@test",
            "worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct",
        ]
    )
    assert config.data.val_files == "hiyouga/geometry3k@test"
    with pytest.raises(ConfigError, match=r"'worker.reward.judge.model_path' points to '.*missing', which does not"):
        load_config([*base_args(files), f"worker.reward.judge.model_path={files / 'missing'}"])


@pytest.mark.skipif(is_cuda_available(), reason="checks the error on machines without a GPU")
def test_a_judge_on_a_gpu_is_refused_without_one(files):
    """Ray would wait for the GPU forever (the step then stops at worker.reward.timeout_s, or never)."""
    judge = [f"worker.reward.judge.model_path={files / 'model'}", "worker.reward.judge.num_gpus=0.5"]
    with pytest.raises(ConfigError, match=r"judge.num_gpus=0.5 asks Ray for a GPU, and this machine has none"):
        load_config([*base_args(files), *judge])


def test_not_implemented_knobs_are_refused(files):
    for key in ("rank=8", "alpha=32", "target_modules=q_proj", "vision_tower=true"):  # only rank was refused
        with pytest.raises(NotImplementedError, match=r"lora\.\w+=.*LoRA is implemented for the actor only"):
            load_config([*base_args(files), f"worker.critic.model.lora.{key}"])
    with pytest.raises(ConfigError, match="hybrid_engine=false: the engines' placement is worker.rollout.mode"):
        load_config([*base_args(files), "worker.hybrid_engine=false"])


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        (
            ["worker.actor.fsdp.enable_cpu_offload=true", "worker.actor.offload.offload_params=true"],
            r"worker.actor.fsdp.enable_cpu_offload and worker.actor.offload.offload_params",
        ),
        (
            ["worker.ref.fsdp.enable_cpu_offload=true", "worker.ref.offload.offload_params=true"],
            r"worker.ref.fsdp.enable_cpu_offload",
        ),
        (["worker.actor.model.attn_implementation=flash"], r"worker.actor.model.attn_implementation.*varlen"),
        # the Adam states: enable_cpu_offload keeps them on the host, offload_optimizer would move them to the device
        # beside host parameters
        (
            ["worker.actor.fsdp.enable_cpu_offload=true", "worker.actor.offload.offload_optimizer=true"],
            r"worker.actor.fsdp.enable_cpu_offload and worker.actor.offload.offload_optimizer both offload",
        ),
        # pure low precision training: bf16 weights need the compensated optimizer, fp16 a loss scaler (not built)
        (["worker.actor.fsdp.torch_dtype=bf16"], r"torch_dtype=bf16 with worker.actor.optim.strategy=adamw"),
        (["worker.critic.fsdp.torch_dtype=fp16"], r"worker.critic.fsdp.torch_dtype=fp16 trains in pure fp16"),
        (["worker.actor.fsdp.mp_param_dtype=bogus"], r"'worker.actor.fsdp.mp_param_dtype' is 'bogus'; choose one of"),
        (["worker.ref.fsdp.mp_buffer_dtype=int8"], r"'worker.ref.fsdp.mp_buffer_dtype' is 'int8'; choose one of"),
        (
            ["worker.actor.model.freeze_vision_tower=true"]
            + ["worker.actor.model.lora.rank=8", "worker.actor.model.lora.vision_tower=true"],
            r"freeze_vision_tower freezes the vision tower, its LoRA adapters \(worker.actor.model.lora.vision_",
        ),
    ],
)
def test_gpu_settings_are_checked(files, override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config([*base_args(files), *override])
    config = load_config([*base_args(files), "worker.actor.offload.offload_params=true"])
    assert config.worker.actor.offload.offload_params
    pure = ["worker.actor.fsdp.torch_dtype=bf16", "worker.actor.optim.strategy=adamw_bf16"]
    assert load_config([*base_args(files), *pure]).worker.actor.fsdp.torch_dtype == "bf16"


def test_an_unchecked_mixture_of_experts_actor_is_refused_before_ray(files):
    """The supported MoE types' weight sync is checked (tests/workers/rollout/test_moe_engine_sync.py); others are
    refused, naming the type."""
    import json

    moe = {"model_type": "glm4_moe_lite", "n_routed_experts": 64, "num_experts_per_tok": 4}  # GLM-4.7-Flash: MLA
    (files / "model" / "config.json").write_text(json.dumps(moe))
    with pytest.raises(
        NotImplementedError,
        match=r"model_path=.*'glm4_moe_lite', n_routed_experts=64.*the nearest supported one is 'glm4_moe'",
    ):
        load_config(base_args(files))
    gpt_oss = {"model_type": "gpt_oss", "num_local_experts": 32}
    (files / "model" / "config.json").write_text(json.dumps(gpt_oss))
    with pytest.raises(NotImplementedError, match=r"'gpt_oss', num_local_experts=32"):
        load_config(base_args(files))
    for supported in (
        {"model_type": "qwen3_next", "num_experts": 512},
        {"model_type": "mixtral", "num_local_experts": 8},
        {"model_type": "glm4_moe", "n_routed_experts": 128},
    ):
        (files / "model" / "config.json").write_text(json.dumps(supported))
        assert load_config(base_args(files)).worker.actor.model.model_path == str(files / "model")
    qwen3_moe = {"model_type": "qwen3_moe", "num_experts": 128, "num_experts_per_tok": 8}
    (files / "model" / "config.json").write_text(json.dumps(qwen3_moe))
    assert load_config(base_args(files)).worker.actor.model.model_path == str(files / "model")
    lora = [*base_args(files), "worker.actor.model.lora.rank=8"]
    with pytest.raises(NotImplementedError, match=r"'qwen3_moe', num_experts=128\) and the run gives every linear"):
        load_config(lora)
    with pytest.raises(NotImplementedError, match="gives down_proj, gate_proj, up_proj LoRA adapters"):
        load_config(
            [*lora, "worker.actor.model.lora.target_modules=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"]
        )
    attention = load_config([*lora, "worker.actor.model.lora.target_modules=q_proj,k_proj,v_proj,o_proj"])
    assert attention.worker.actor.model.lora.rank == 8  # adapters outside the experts: merged as for a dense model
    with pytest.raises(
        NotImplementedError, match="lora_sync=adapters with .* a mixture of experts \\(num_experts=128"
    ):
        load_config([*lora, "worker.actor.model.lora.target_modules=q_proj", "worker.rollout.lora_sync=adapters"])
    (files / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_experts": 0}))
    assert load_config(base_args(files)).worker.actor.model.model_path == str(files / "model")


def test_a_hub_ids_cached_config_is_checked_before_ray(files, tmp_path, monkeypatch):
    """A Hub id downloaded before (its config.json in the Hugging Face cache) gets the checks a local folder gets;
    one not downloaded yet is checked by the worker that loads it."""
    import json

    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--Org--Moe"
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    (repo / "snapshots" / ("0" * 40) / "config.json").write_text(
        json.dumps({"model_type": "gpt_oss", "num_local_experts": 32})
    )
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(NotImplementedError, match=r"model_path='Org/Moe' is a mixture-of-experts model \('gpt_oss'"):
        load_config([*base_args(files), "worker.actor.model.model_path=Org/Moe"])
    assert (
        load_config([*base_args(files), "worker.actor.model.model_path=Org/Other"]).worker.actor.model.model_path
        == "Org/Other"
    )


def test_unsupported_vision_language_models_are_refused_by_name(files):
    import json

    (files / "model" / "config.json").write_text(json.dumps({"model_type": "llava", "vision_config": {}}))
    with pytest.raises(NotImplementedError, match=r"'llava' vision-language model.*qwen2_5_vl, qwen3_vl"):
        load_config(base_args(files))
    (files / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2_5_omni", "vision_config": {}}))
    with pytest.raises(NotImplementedError, match=r"'qwen2_5_omni'.*the nearest supported one is 'qwen2_5_vl'"):
        load_config(base_args(files))
    (files / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl", "vision_config": {}}))
    assert load_config(base_args(files)).worker.actor.model.model_path == str(files / "model")


def test_a_model_override_that_names_no_config_field_is_refused_before_ray(files):
    """transformers would keep the unknown name on the side, so the run would train the model unchanged."""
    import json

    (files / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    good = load_config([*base_args(files), "worker.actor.model.override_config={max_position_embeddings: 4096}"])
    assert good.worker.rollout.model_overrides == {"max_position_embeddings": 4096}  # the engine gets them too
    with pytest.raises(ConfigError, match=r"override_config.rope_theta: Qwen2Config has no field 'rope_theta' \(.*"):
        load_config([*base_args(files), "worker.actor.model.override_config={rope_theta: 5.0}"])
    with pytest.raises(ConfigError, match=r"has no field 'attn_implementation' \(the attention is the model section"):
        load_config([*base_args(files), "worker.actor.model.override_config={attn_implementation: sdpa}"])


def test_qwen3_5_dense_and_mixture_of_experts_are_accepted(files):
    """Qwen3.5 (Gated DeltaNet hybrid, images), dense and MoE, is supported; its MoE with LoRA adapters is refused,
    as every MoE actor's is."""
    import json

    text = {"layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    qwen3_5 = {"model_type": "qwen3_5", "vision_config": {}, "text_config": text}
    (files / "model" / "config.json").write_text(json.dumps(qwen3_5))
    assert load_config(base_args(files)).worker.actor.model.model_path == str(files / "model")
    moe = {"model_type": "qwen3_5_moe", "vision_config": {}, "text_config": {**text, "num_experts": 4}}
    (files / "model" / "config.json").write_text(json.dumps(moe))
    assert load_config(base_args(files)).worker.actor.model.model_path == str(files / "model")
    with pytest.raises(NotImplementedError, match="'qwen3_5_moe'.*LoRA adapters"):
        load_config([*base_args(files), "worker.actor.model.lora.rank=8"])


def test_gemma4_is_accepted_unless_its_attention_or_pad_token_differs_from_the_engine(files):
    """Gemma 4 with causal attention over images and pad token 0 is supported; bidirectional image attention and a
    pad token other than 0 with per-layer embeddings are refused, naming the key; Ulysses is refused (sliding
    windows)."""
    import json

    text = {"layer_types": ["sliding_attention", "full_attention"], "hidden_size_per_layer_input": 256}
    text["num_hidden_layers"] = 2  # (transformers reads the file to resolve override_config below)
    gemma4 = {"model_type": "gemma4", "vision_config": {}, "text_config": text}
    (files / "model" / "config.json").write_text(json.dumps(gemma4))
    assert load_config(base_args(files)).worker.actor.model.model_path == str(files / "model")
    with pytest.raises(ConfigError, match=r"ulysses_size=2: the model \('gemma4'\) has sliding-window layers"):
        load_config([*base_args(files), "worker.actor.ulysses_size=2"])
    for change, message in (
        ({"use_bidirectional_attention": "vision"}, "use_bidirectional_attention='vision'"),
        ({"pad_token_id": 3}, r"text_config.pad_token_id=3.*Set text_config.pad_token_id to 0"),
    ):
        config = {**gemma4, "text_config": {**text, **change}}
        (files / "model" / "config.json").write_text(json.dumps(config))
        with pytest.raises(NotImplementedError, match=message):
            load_config(base_args(files))
    # the advice through the config: the workers (and vLLM, hf_overrides) load the overridden pad token
    fixed = load_config([*base_args(files), "worker.actor.model.override_config={text_config: {pad_token_id: 0}}"])
    assert fixed.worker.actor.model.override_config == {"text_config": {"pad_token_id": 0}}


@pytest.mark.parametrize(
    ("config", "sliding"),
    [
        ({"model_type": "mistral"}, True),  # transformers' default window of 4096, the file leaves it out
        ({"model_type": "phi3", "sliding_window": 2047}, True),
        ({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False}, False),
        ({"model_type": "qwen2", "use_sliding_window": True, "max_window_layers": 0, "num_hidden_layers": 2}, True),
        ({"model_type": "mistral3", "vision_config": {}, "text_config": {"model_type": "mistral"}}, True),
        ({"model_type": "mistral", "sliding_window": None}, False),
    ],
    ids=["mistral-default", "phi3", "qwen2-off", "qwen2-on", "mistral3", "mistral-none"],
)
def test_ulysses_refuses_every_kind_of_sliding_window(files, config, sliding):
    """A window given only as `sliding_window` (no layer_types) made Ulysses attend across the packed row's
    sequences, with no error (the mask was built for each rank's slice)."""
    import json

    config = {"num_attention_heads": 4, "num_key_value_heads": 2, **config}
    (files / "model" / "config.json").write_text(json.dumps(config))
    args = [*base_args(files), "worker.actor.ulysses_size=2"]
    if sliding:
        with pytest.raises(ConfigError, match="ulysses_size=2: the model .* has sliding-window layers"):
            load_config(args)
    else:
        assert load_config(args).worker.actor.ulysses_size == 2


def test_supported_vision_language_types_match_the_rope_index():
    """Every type with a 3-D rope index is accepted; an accepted type without one has none in transformers either
    (1-D positions, Gemma 4)."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    from verl.models.config import VISION_LANGUAGE_MODEL_TYPES
    from verl.models.rope_index import MROPE_MODEL_CLASSES

    # every 3-D rope family is supported; the others take plain 1-D positions (no get_rope_index in transformers)
    assert set(MROPE_MODEL_CLASSES) <= set(VISION_LANGUAGE_MODEL_TYPES)
    one_d = {"gemma4", "internvl", "llava_onevision", "mistral3"}
    assert set(VISION_LANGUAGE_MODEL_TYPES) - set(MROPE_MODEL_CLASSES) == one_d
    for model_type in set(VISION_LANGUAGE_MODEL_TYPES) - set(MROPE_MODEL_CLASSES):
        assert not hasattr(getattr(transformers, MODEL_MAPPING_NAMES[model_type]), "get_rope_index"), model_type


def test_every_field_has_a_docstring():
    rows = describe_fields(PPOConfig)
    assert len(rows) > 100
    undocumented = [key for key, _, doc in rows if not doc]
    assert undocumented == []


def test_help_config_lists_the_keys_containing_each_word(capsys):
    assert main(["--help-config"]) == 0
    every_key = [line.split(" ")[0] for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]
    supported = [key for key, _, _ in describe_fields(PPOConfig) if not key.startswith(PPOConfig.UNSUPPORTED_KEYS)]
    assert every_key == supported and "worker.actor.model.lora.rank" in every_key
    assert not any(key.startswith("worker.critic.model.lora.") for key in every_key)  # refused (test above)
    assert main(["--help-config", "rollout", "temp"]) == 0
    listed = [line.split(" ")[0] for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]
    assert listed == [key for key in every_key if "rollout" in key and "temp" in key]
    assert "worker.rollout.temperature" in listed
    assert main(["--help-config", "Rollout", "TEMP"]) == 0  # in any case
    assert [line.split(" ")[0] for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")] == listed
    assert main(["--help-config", "temprature"]) == 2
    assert capsys.readouterr().err == "Config error: no config key contains 'temprature'.\n"


def test_dry_run_prints_resolved_yaml(files, capsys):
    assert main([*base_args(files), "data.seed=7", "--dry-run"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["data"]["seed"] == 7
    assert printed["worker"]["rollout"]["prompt_length"] == 512
    assert set(printed) == {f.name for f in dataclasses.fields(PPOConfig)}
    # the printed config loads again as the same config (it was refused for its derived keys)
    resolved = files / "resolved.yaml"
    resolved.write_text(yaml.safe_dump(printed))
    assert main([f"config={resolved}", "--dry-run"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == printed
    # keys the loader filled in from others follow those others when the command line changes them (they stayed the
    # dumped values: another experiment name resumed, and wrote over, the dumped experiment's checkpoints)
    for override, read, expected in (
        ("trainer.experiment_name=exp2", lambda c: c.trainer.save_checkpoint_path, "exp2"),
        (f"worker.actor.model.model_path={files / 'model2'}", lambda c: c.worker.actor.model.tokenizer_path, "model2"),
        ("algorithm.use_kl_loss=true", lambda c: c.algorithm.kl_penalty, "low_var_kl"),
        ("data.max_response_length=100", lambda c: c.worker.rollout.max_model_len, "612"),
        ("worker.actor.loss_type=gspo", lambda c: c.worker.actor.loss_avg_mode, "seq-mean-token-mean"),
    ):
        if override.startswith("worker.actor.model.model_path"):
            shutil.copytree(files / "model", files / "model2", dirs_exist_ok=True)
        direct = read(load_config([*base_args(files), override]))
        assert str(direct).endswith(expected) and read(load_config([f"config={resolved}", override])) == direct
    # ... and a value chosen in the dump stays
    printed["algorithm"]["kl_penalty"] = printed["worker"]["actor"]["kl_penalty"] = "mse"
    resolved.write_text(yaml.safe_dump(printed))
    assert load_config([f"config={resolved}", "algorithm.use_kl_loss=true"]).algorithm.kl_penalty == "mse"
    printed["worker"]["rollout"]["prompt_length"] = 100  # a derived key that disagrees with its source: refused
    resolved.write_text(yaml.safe_dump(printed))
    with pytest.raises(ConfigError, match="'worker.rollout.prompt_length' is derived from data.max_prompt_length"):
        load_config([f"config={resolved}"])


def test_secrets_are_masked_in_config_dumps(files, capsys):
    from verl.utils.config import config_to_dict

    (files / "judge.py").write_text(
        "def compute_score(sample, api_key, model, retries):\n    return {'overall': 0.0}\n"
    )
    kwargs = '{"api_key": "sk-live-123", "model": "judge-7b", "retries": {"auth_token": "t0k", "count": 2}}'
    args = [arg for arg in base_args(files) if not arg.startswith("worker.reward.reward_function=")]
    args += [
        f"worker.reward.reward_function={files / 'judge.py'}:compute_score",
        f"worker.reward.reward_function_kwargs={kwargs}",
    ]
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "sk-live-123" not in out and "t0k" not in out
    reward = yaml.safe_load(out)["worker"]["reward"]["reward_function_kwargs"]
    assert reward == {"api_key": "***", "model": "judge-7b", "retries": {"auth_token": "***", "count": 2}}
    config = load_config(args)
    assert config.worker.reward.reward_function_kwargs["api_key"] == "sk-live-123"  # the function still gets it
    assert config_to_dict(config)["worker"]["reward"]["reward_function_kwargs"]["api_key"] == "***"
    # the dump loaded again would give the function '***' for its key: refused, naming it, unless the key is given
    (files / "dumped.yaml").write_text(out)
    with pytest.raises(ConfigError, match=r"'worker.reward.reward_function_kwargs.api_key' is '\*\*\*', the mask"):
        load_config([f"config={files / 'dumped.yaml'}"])
    secrets = "worker.reward.reward_function_kwargs={api_key: sk-live-123, retries: {auth_token: t0k}}"
    reloaded = load_config([f"config={files / 'dumped.yaml'}", secrets])
    assert reloaded.worker.reward.reward_function_kwargs == config.worker.reward.reward_function_kwargs


def test_settings_named_like_tokens_are_not_masked(files, capsys):
    assert main([*base_args(files), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "***" not in out
    worker = yaml.safe_load(out)["worker"]
    assert isinstance(worker["rollout"]["max_num_batched_tokens"], int)
    assert worker["reward"]["skip_special_tokens"] in (True, False)


def test_secret_names_are_words_of_the_key():
    from verl.utils.config import MASK, masked

    secrets = ["api_key", "OPENAI_API_KEY", "hf_token", "auth_token", "token", "client_secret", "password", "auth"]
    secrets += ["openai_key", "judge.anthropic-key", "bearer", "bearer_token", "Authorization"]
    settings = ["max_tokens", "max_num_batched_tokens", "skip_special_tokens", "tokenizer_path", "author", "tokens"]
    settings += ["answer_key", "prompt_key", "filter_key", "route_key", "key"]
    dump = masked(dict.fromkeys(secrets + settings, "value"))
    assert [name for name in secrets if dump[name] != MASK] == []
    assert [name for name in settings if dump[name] == MASK] == []
    urls = masked({"base_url": "https://user:pa55@judge.example/v1", "mirror": "https://hub.example/org/model"})
    assert urls == {"base_url": f"https://{MASK}@judge.example/v1", "mirror": "https://hub.example/org/model"}


def test_a_signature_error_does_not_print_the_kwargs_secrets(files):
    (files / "judge.py").write_text("def compute_score(sample, model):\n    return {'overall': 0.0}\n")
    args = [arg for arg in base_args(files) if not arg.startswith("worker.reward.reward_function=")]
    args += [
        f"worker.reward.reward_function={files / 'judge.py'}:compute_score",
        'worker.reward.reward_function_kwargs={"api_key": "sk-live-123", "model": "judge-7b"}',
    ]
    with pytest.raises(ConfigError) as error:
        load_config(args)
    assert "reward_function_kwargs" in str(error.value) and "judge-7b" in str(error.value)
    assert "sk-live-123" not in str(error.value)


@pytest.mark.parametrize(
    "override, key",
    [
        ("worker.actor.max_grad_norm=nan", "worker.actor.max_grad_norm"),
        ("worker.actor.optim.lr=nan", "worker.actor.optim.lr"),
        ("worker.actor.optim.betas=[nan,0.999]", "worker.actor.optim.betas[0]"),
        ("algorithm.kl_coef=nan", "algorithm.kl_coef"),
    ],
)
def test_nan_is_refused_naming_the_key(files, override, key):
    with pytest.raises(ConfigError, match=rf"'{re.escape(key)}' is nan"):
        load_config([*base_args(files), override])


def test_an_infinite_learning_rate_is_refused(files):
    with pytest.raises(ConfigError, match=r"'worker.actor.optim.lr' must be a finite number"):
        load_config([*base_args(files), "worker.actor.optim.lr=inf"])


def test_main_reports_config_error_without_traceback(files, capsys):
    assert main([*base_args(files), "data.nope=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Config error: Unknown config key 'data.nope'") and "Traceback" not in err


def test_a_cluster_too_small_for_a_pool_is_one_line(files, monkeypatch, capsys):
    from verl.single_controller.ray.resource import InsufficientResourcesError, PlacementGroupTimeoutError
    from verl.trainer import runner

    for error in (InsufficientResourcesError("no single node has 2 CPU"), PlacementGroupTimeoutError("after 120 s")):

        def run_ppo(config, error=error):
            raise error

        monkeypatch.setattr(runner, "run_ppo", run_ppo)
        assert main([*base_args(files), "trainer.device=cpu"]) == 2
        err = capsys.readouterr().err
        assert err == f"Error: {error}\n", err


@pytest.mark.skipif(is_cuda_available(), reason="checks the error on machines without a GPU")
def test_cuda_without_a_gpu_is_one_line_before_anything_starts(files, capsys):
    assert main([*base_args(files), "trainer.device=cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: trainer.device=cuda but torch sees no CUDA device") and "Traceback" not in err


def test_data_errors_are_one_line_and_leave_no_ray_running(files, tmp_path, capsys):
    import ray

    from verl.models.tiny_models import get_or_build_tiny_model

    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    (files / "train.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n{"prompt": "2+2?", "answer": null}\n')
    args = [arg for arg in base_args(files) if not arg.startswith("worker.actor.model.model_path")]
    rc = main([*args, f"worker.actor.model.model_path={model}", "trainer.device=cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and not ray.is_initialized()
    last = err.strip().splitlines()[-1]  # (datasets' own progress bar may come first)
    assert last.startswith("Error: ") and "train.jsonl', row 1, key 'answer'" in last and "Traceback" not in err


def test_critic_warmup_over_the_whole_run_is_refused_with_total_epochs(files, tmp_path, capsys):
    """max_steps is refused when the config loads; the default total_epochs' count is known once the data is read:
    a run whose warmup covered every step trained only the critic and ended normally, saying nothing."""
    import ray

    from verl.models.tiny_models import get_or_build_tiny_model

    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    args = [arg for arg in base_args(files) if not arg.startswith("worker.actor.model.model_path")]
    args += [f"worker.actor.model.model_path={model}", f"worker.critic.model.model_path={model}"]
    args += ["algorithm.adv_estimator=gae", "trainer.critic_warmup=2", "trainer.total_epochs=2", "trainer.device=cpu"]
    rc = main(
        [*args, "data.rollout_batch_size=1", "worker.actor.global_batch_size=1", "worker.critic.global_batch_size=1"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and not ray.is_initialized() and "Traceback" not in err
    assert "trainer.critic_warmup=2 trains only the critic for that many steps, and the run has 2 steps" in err


def test_a_text_critic_beside_a_vision_language_actor_is_refused(files):
    """The critic reads the actor's images; Qwen2.5 beside Qwen2.5-VL shares the vocabulary, so the vocabulary check
    passed and the run failed at the first step's values."""
    config_only_model(files / "vl", {"model_type": "qwen2_5_vl", "vision_config": {}})
    args = [arg for arg in base_args(files) if not arg.startswith("worker.actor.model.model_path")]
    args += [f"worker.actor.model.model_path={files / 'vl'}", f"worker.critic.model.model_path={files / 'model'}"]
    with pytest.raises(ConfigError, match=r"worker.critic.model.model_path=.* is a text model, and the actor"):
        load_config([*args, "algorithm.adv_estimator=gae", "worker.critic.global_batch_size=8"])


def test_dry_run_in_subprocess_does_not_start_ray(files):
    code = (
        "import sys; from verl.trainer.main import main; rc = main(sys.argv[1:]); "
        "assert 'ray' not in sys.modules and 'vllm' not in sys.modules, 'dry run imported ray or vllm'; sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *base_args(files), "--dry-run"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["worker"]["rollout"]["n"] == 2


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


def test_easyr1_values_are_accepted_with_a_one_line_warning(files, caplog):
    args = ["worker.actor.loss_avg_mode=seq", "worker.critic.loss_avg_mode=token"]
    args += ["algorithm.disable_kl=true", "algorithm.use_kl_loss=true"]  # EasyR1 lets disable_kl win
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        config = load_config([*base_args(files), *args])
    assert config.worker.actor.loss_avg_mode == "seq-mean-token-mean"
    assert config.worker.critic.loss_avg_mode == "token-mean"
    assert config.algorithm.disable_kl
    warnings = warnings_of(caplog)
    assert any("worker.actor.loss_avg_mode=seq" in w and "using seq-mean-token-mean" in w for w in warnings)
    assert any("worker.critic.loss_avg_mode=token" in w and "using token-mean" in w for w in warnings)
    assert any("disable_kl=true wins over algorithm.use_kl_loss=true" in w for w in warnings)
    assert len(warnings) == 3 and all("\n" not in w for w in warnings)


def test_sapo_defaults_to_its_papers_aggregation_and_warns_on_another(files, caplog):
    assert load_config(base_args(files)).worker.actor.loss_avg_mode == "token-mean"
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        config = load_config([*base_args(files), "worker.actor.loss_type=sapo"])
    assert config.worker.actor.loss_avg_mode == "seq-mean-token-mean" and warnings_of(caplog) == []
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        config = load_config(
            [*base_args(files), "worker.actor.loss_type=sapo", "worker.actor.loss_avg_mode=token-mean"]
        )
    assert config.worker.actor.loss_avg_mode == "token-mean"
    assert any("loss_type=sapo is defined with loss_avg_mode=seq-mean-token-mean" in w for w in warnings_of(caplog))


def test_estimator_options_are_accepted_where_the_estimator_honours_them(files):
    args = ["algorithm.adv_estimator=grpo_passk", "algorithm.norm_adv_by_std_in_grpo=false"]
    assert not load_config([*base_args(files), *args]).algorithm.norm_adv_by_std_in_grpo
    args = ["algorithm.adv_estimator=reinforce_plus_plus", "algorithm.gamma=0.9"]
    assert load_config([*base_args(files), *args]).algorithm.gamma == 0.9


def test_validation_reads_the_registries(files, monkeypatch):
    """Registering an estimator, a policy loss, an aggregation or a KL estimator is all it takes to select it."""
    from verl.algorithms import advantages, kl, masked_ops, policy_losses

    for module, registry in [
        (advantages, "_ADV_ESTIMATORS"),
        (advantages, "_GROUPED_ADV_ESTIMATORS"),
        (policy_losses, "_POLICY_LOSSES"),
        (masked_ops, "_LOSS_AVG_MODES"),
        (kl, "_KL_PENALTIES"),
    ]:
        monkeypatch.setattr(module, registry, copy.copy(getattr(module, registry)))  # restored after the test

    @advantages.register_adv_estimator("sign_of_score", grouped=True)
    def sign_of_score(token_level_rewards, response_mask, index):  # noqa: ANN001, ANN202 - a test stub
        advantages = token_level_rewards.sum(-1).sign().unsqueeze(-1) * response_mask
        return advantages, advantages

    policy_losses.register_policy_loss("plain_pg")(
        lambda x: policy_losses.PolicyLossTerms(-x.advantages * x.log_probs)
    )
    masked_ops.register_loss_avg_mode("seq-sum")(lambda sums, lengths, tokens, seqs, max_len: sums.sum())
    kl.register_kl_penalty("k1_abs")(lambda log_probs, ref_log_probs: (log_probs - ref_log_probs).abs())

    args = ["algorithm.adv_estimator=sign_of_score", "worker.actor.loss_type=plain_pg"]
    args += ["worker.actor.loss_avg_mode=seq-sum", "algorithm.kl_penalty=k1_abs+"]
    config = load_config([*base_args(files), *args])
    assert (config.algorithm.adv_estimator, config.worker.actor.loss_type) == ("sign_of_score", "plain_pg")
    with pytest.raises(ConfigError, match=r"adv_estimator=sign_of_score.*worker.rollout.n > 1"):
        load_config([*base_args(files), *args, "worker.rollout.n=1"])
    with pytest.raises(
        ConfigError, match=r"algorithm.lam=0.5 has no effect with algorithm.adv_estimator=sign_of_score"
    ):
        load_config([*base_args(files), *args, "algorithm.lam=0.5"])


def test_reward_routes_are_checked_before_ray(files):
    args = [arg for arg in base_args(files) if not arg.startswith("worker.reward.reward_function=")]
    config = load_config([*args, f"worker.reward.routes={{math: {files / 'reward.py'}:compute_score}}"])
    assert config.worker.reward.routes == {"math": f"{files / 'reward.py'}:compute_score"}
    with pytest.raises(ConfigError, match=r"^worker.reward.routes.code=.*missing.py.*does not exist"):
        load_config([*args, f"worker.reward.routes={{code: {files / 'missing.py'}:score}}"])
    with pytest.raises(ConfigError, match=r"routes_kwargs has route\(s\) \['code'\] that are not in"):
        load_config(
            [
                *args,
                f"worker.reward.routes={{math: {files / 'reward.py'}:compute_score}}",
                "worker.reward.routes_kwargs={code: {timeout_s: 1}}",
            ]
        )


def test_lora_keys_as_easyr1_writes_them(files):
    """EasyR1's LoRA example scripts set rank, alpha, target_modules and a vision-tower exclusion."""
    lora = "worker.actor.model.lora"
    args = [f"{lora}.rank=64", f"{lora}.alpha=64", f"{lora}.target_modules=all-linear"]
    config = load_config([*base_args(files), *args, f"{lora}.exclude_modules=.*visual.*"])
    assert config.worker.actor.model.lora.rank == 64
    with pytest.raises(ConfigError, match=r"lora.exclude_modules='\(' is not a regular expression"):
        load_config([*base_args(files), *args, f"{lora}.exclude_modules=("])
    with pytest.raises(ConfigError, match="rank must be >= 0 and alpha > 0"):
        load_config([*base_args(files), f"{lora}.rank=8", f"{lora}.alpha=0"])


def test_a_temperature_vllm_raises_is_refused(files):
    """vLLM raises a temperature in (0, 0.01) to 0.01 (sampling_params._MAX_TEMP, a warning in each worker): it samples
    and reports log-probs at 0.01, and the actor computed the responses' log-probs at the configured temperature, so
    temperature=1e-6 (the way round the refusal of 0) trained on samples of another policy, in every mode."""
    for mode in ([], ["worker.rollout.mode=colocated"]):
        with pytest.raises(ConfigError, match=r"temperature=0.005 is below 0.01, which vLLM raises to 0.01"):
            load_config([*base_args(files), "worker.rollout.temperature=0.005", *mode])
    assert load_config([*base_args(files), "worker.rollout.temperature=0.01"]).worker.rollout.temperature == 0.01
    from vllm.sampling_params import _MAX_TEMP

    from verl.workers.rollout.config import MIN_TEMPERATURE

    assert MIN_TEMPERATURE == _MAX_TEMP  # vLLM's own bound


def test_lora_targets_peft_cannot_adapt_are_refused_when_the_config_loads(files, tmp_path):
    """A norm layer in target_modules (it has weights, so the name check passed), or exclude_modules that excluded
    every layer or every layer of a named target, passed the config check, and every worker failed with peft's error
    when it built the actor, after Ray had started (SFT's loader too)."""
    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.sft.config import load_sft_config

    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    args = [arg for arg in base_args(files) if not arg.startswith("worker.actor.model.model_path")]
    lora = "worker.actor.model.lora"
    args += [f"worker.actor.model.model_path={model}", "trainer.device=cpu", f"{lora}.rank=8"]
    with pytest.raises(ConfigError, match=r"^worker.actor.model.lora: Target module Qwen2RMSNorm.* is not supported"):
        load_config([*args, f"{lora}.target_modules=q_proj,input_layernorm"])
    with pytest.raises(ConfigError, match=r"^worker.actor.model.lora: All modules were excluded"):
        load_config([*args, f"{lora}.exclude_modules=.*"])
    with pytest.raises(ConfigError, match=r"^worker.actor.model.lora: No modules were targeted"):
        load_config([*args, f"{lora}.target_modules=q_proj", f"{lora}.exclude_modules=.*q_proj"])
    with pytest.raises(ConfigError, match=r"target_modules names v_proj, which no layer .* \(after exclude_modules"):
        load_config([*args, f"{lora}.target_modules=q_proj,v_proj", f"{lora}.exclude_modules=.*v_proj"])
    assert load_config([*args, f"{lora}.exclude_modules=.*mlp.*"]).worker.actor.model.lora.exclude_modules
    assert load_config([*args, f"{lora}.target_modules=q_proj,down_proj"]).worker.actor.model.lora.rank == 8
    sft = [f"data.train_files={files / 'train.jsonl'}", f"worker.model.model_path={model}", "trainer.device=cpu"]
    with pytest.raises(ConfigError, match=r"^worker.model.lora: All modules were excluded"):
        load_sft_config([*sft, "worker.model.lora.rank=8", "worker.model.lora.exclude_modules=.*"])


def test_lora_sync_adapters_needs_language_model_adapters(files):
    """rollout.lora_sync=adapters sends the actor's LoRA adapters: refused without them (naming the key), and for
    vision-tower adapters, which it does not carry."""
    lora = "worker.actor.model.lora"
    config = load_config([*base_args(files), f"{lora}.rank=64", "worker.rollout.lora_sync=adapters"])
    assert config.worker.rollout.lora_sync == "adapters"
    assert load_config(base_args(files)).worker.rollout.lora_sync == "merged"
    with pytest.raises(ConfigError, match=r"lora_sync=adapters .* actor has none \(worker.actor.model.lora.rank=0\)"):
        load_config([*base_args(files), "worker.rollout.lora_sync=adapters"])
    with pytest.raises(ConfigError, match=r"does not carry vision-tower adapters"):
        load_config(
            [*base_args(files), f"{lora}.rank=8", f"{lora}.vision_tower=true", "worker.rollout.lora_sync=adapters"]
        )
    with pytest.raises(ConfigError, match=r"'worker.rollout.lora_sync' is 'adapter'"):
        load_config([*base_args(files), f"{lora}.rank=8", "worker.rollout.lora_sync=adapter"])


def test_lora_sync_adapters_is_refused_above_the_largest_rank_vllm_serves(files):
    """vLLM's LoRA layers take max_lora_rank up to 512: a larger actor rank was accepted with lora_sync=adapters and
    every worker's engine refused it as it started, after Ray, the workers and their models had."""
    from vllm.config.lora import MaxLoRARanks

    top, adapters = max(typing.get_args(MaxLoRARanks)), "worker.rollout.lora_sync=adapters"
    rank = "worker.actor.model.lora.rank"
    assert load_config([*base_args(files), f"{rank}={top}", adapters]).worker.actor.model.lora.rank == top
    with pytest.raises(ConfigError, match=rf"lora.rank={top + 1}: vLLM serves LoRA adapters of rank {top} at most"):
        load_config([*base_args(files), f"{rank}={top + 1}", adapters])
    assert load_config([*base_args(files), f"{rank}={top + 1}"]).worker.rollout.lora_sync == "merged"  # merged: any
    from verl.workers.rollout.vllm_compat import SERVED_LORA_RANKS

    assert SERVED_LORA_RANKS == tuple(sorted(typing.get_args(MaxLoRARanks)))  # the check's copy, without vLLM


def test_lora_sync_adapters_is_refused_where_the_engines_model_takes_none(files):
    """LLaVA-OneVision's vLLM class implements no LoRA: the engine failed as it loaded ("does not support LoRA yet"),
    after Ray and the workers had started. The table names what vLLM says today; this fails when vLLM changes."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import supports_lora

    from verl.trainer.config import NO_ENGINE_ADAPTERS

    classes = {"llava_onevision": "LlavaOnevisionForConditionalGeneration"}
    assert set(classes) == set(NO_ENGINE_ADAPTERS)
    for model_type, architecture in classes.items():
        assert not supports_lora(ModelRegistry._try_load_model_cls(architecture)), architecture
        config_only_model(files / model_type, {"model_type": model_type, "vision_config": {}})
        args = [arg for arg in base_args(files) if not arg.startswith("worker.actor.model.model_path")]
        lora = [f"worker.actor.model.model_path={files / model_type}", "worker.actor.model.lora.rank=8"]
        with pytest.raises(ConfigError, match=rf"lora_sync=adapters .*{architecture} takes no LoRA adapters"):
            load_config([*args, *lora, "worker.rollout.lora_sync=adapters"])
    assert supports_lora(ModelRegistry._try_load_model_cls("InternVLForConditionalGeneration"))  # InternVL takes them


def test_weight_sync_direct_is_refused_where_it_is_not_built(files, monkeypatch):
    """rollout.weight_sync=direct copies into a CUDA engine's own parameters: refused on the CPU (the engine repacks
    its linear weights), with tensor-parallel engines, LoRA adapter syncs and the disaggregated pool; the key named."""
    direct = "worker.rollout.weight_sync=direct"
    assert load_config(base_args(files)).worker.rollout.weight_sync == "loader"
    with pytest.raises(ConfigError, match=r"weight_sync=direct: it needs CUDA: the CPU engine repacks"):
        load_config([*base_args(files), direct])
    with pytest.raises(ConfigError, match=r"'worker.rollout.weight_sync' is 'copy'"):
        load_config([*base_args(files), "worker.rollout.weight_sync=copy"])
    monkeypatch.setattr("verl.trainer.config.is_cuda_available", lambda: True)
    cuda = [*base_args(files), "trainer.device=cuda", "trainer.n_gpus_per_node=1", direct]
    config = load_config([*cuda, "worker.rollout.tensor_parallel_size=1"])
    assert config.worker.rollout.weight_sync == "direct"
    with pytest.raises(ConfigError, match=r"weight_sync=direct: tensor_parallel_size=2 shards"):
        load_config([*base_args(files), "trainer.device=cuda", "trainer.n_gpus_per_node=2", direct])
    lora = ["worker.actor.model.lora.rank=8", "worker.rollout.lora_sync=adapters"]
    with pytest.raises(ConfigError, match=r"weight_sync=direct: with lora_sync=adapters .* set worker.rollout.weigh"):
        load_config([*cuda, "worker.rollout.tensor_parallel_size=1", *lora])


def test_ulysses_sizes_are_checked_against_devices_heads_and_model_kind(files, caplog):
    import json

    (files / "model").mkdir(exist_ok=True)
    (files / "model" / "config.json").write_text(
        json.dumps({"model_type": "qwen2", "num_attention_heads": 6, "num_key_value_heads": 2})
    )
    config = load_config([*base_args(files), "worker.actor.ulysses_size=2"])
    assert config.worker.ref.ulysses_size == 2  # the reference follows the actor
    with pytest.raises(ConfigError, match=r"ulysses_size=4 must divide the 2 devices"):
        load_config([*base_args(files), "worker.actor.ulysses_size=4"])
    with pytest.raises(ConfigError, match=r"must divide the model's num_attention_heads=6"):
        load_config([*base_args(files), "worker.actor.ulysses_size=4", "trainer.n_gpus_per_node=4"])
    with pytest.raises(ConfigError, match=r"splits packed rows: set worker.actor.padding_free=true\.$"):
        load_config([*base_args(files), "worker.actor.ulysses_size=2", "worker.actor.padding_free=false"])
    with pytest.raises(ConfigError, match=r"set worker.actor.model.attn_implementation=auto \(it is 'sdpa'\)\.$"):
        load_config([*base_args(files), "worker.actor.ulysses_size=2", "worker.actor.model.attn_implementation=sdpa"])
    gae = ["algorithm.adv_estimator=gae", f"worker.critic.model.model_path={files / 'model'}"]
    with pytest.raises(ConfigError, match=r"worker.critic.ulysses_size=4 must divide the 2 devices"):
        load_config([*base_args(files), *gae, "worker.critic.ulysses_size=4"])
    with pytest.raises(ConfigError, match=r"worker.critic.ulysses_size=2 splits packed rows: set worker.critic.padd"):
        load_config([*base_args(files), *gae, "worker.critic.ulysses_size=2"])
    # GRPO trains no critic: its Ulysses settings (an EasyR1 config sets both roles') are unread, said so, not refused
    with caplog.at_level(logging.WARNING, logger="verl.utils.config"):
        load_config([*base_args(files), "worker.critic.ulysses_size=2"])
    assert "worker.critic.ulysses_size=2 has no effect in this run" in caplog.text
    vl_config = {"model_type": "qwen2_5_vl", "vision_config": {}, "text_config": {"num_attention_heads": 6}}
    (files / "model" / "config.json").write_text(json.dumps(vl_config))
    with pytest.raises(ConfigError, match=r"must divide the model's num_attention_heads=6"):  # the language model's
        load_config([*base_args(files), "worker.actor.ulysses_size=4", "trainer.n_gpus_per_node=4"])


def test_the_update_micro_batch_divides_a_sequence_parallel_groups_rows(files):
    """With Ulysses the ranks of a group run the same rows (MicroBatchPasses: global_batch_size x n / (devices /
    ulysses_size) a rank): 2 prompts x n=2 over 4 devices in groups of 2 are 2 rows a rank, and a micro-batch of 2 was
    refused as not dividing "the 1 samples each device gets"."""
    args = [
        *base_args(files),
        "trainer.n_gpus_per_node=4",
        "data.rollout_batch_size=4",
        "worker.actor.global_batch_size=2",
        "worker.actor.dynamic_batching=false",
        "worker.actor.ulysses_size=2",
    ]
    config = load_config([*args, "worker.actor.micro_batch_size_per_device_for_update=2"])
    assert config.worker.actor.micro_batch_size_per_device_for_update == 2
    with pytest.raises(ConfigError, match=r"=4 must divide the 2 samples each device gets per update \(worker.actor"):
        load_config([*args, "worker.actor.micro_batch_size_per_device_for_update=4"])
    gae = [
        "algorithm.adv_estimator=gae",
        f"worker.critic.model.model_path={files / 'model'}",
        "worker.critic.global_batch_size=2",
        "worker.critic.dynamic_batching=false",
        "worker.critic.padding_free=true",
        "worker.critic.ulysses_size=2",
    ]
    critic = load_config([*args, *gae, "worker.critic.micro_batch_size_per_device_for_update=2"]).worker.critic
    assert critic.micro_batch_size_per_device_for_update == 2


def test_a_tensor_parallel_engine_must_divide_the_gated_deltanet_heads(files):
    """vLLM checks the attention heads against the engine's size itself, not Qwen3.5's linear-attention heads: a tiny
    model with one key head failed in the engine's first forward with a reshape error."""
    import json

    (files / "model").mkdir(exist_ok=True)
    text = {"num_attention_heads": 4, "linear_num_key_heads": 1, "linear_num_value_heads": 2}
    (files / "model" / "config.json").write_text(json.dumps({"model_type": "qwen3_5", "text_config": text}))
    load_config([*base_args(files), "worker.rollout.tensor_parallel_size=1"])
    with pytest.raises(ConfigError, match=r"tensor_parallel_size=2 must divide the model's linear_num_key_heads=1"):
        load_config([*base_args(files), "worker.rollout.tensor_parallel_size=2"])


def test_ulysses_is_refused_for_hybrid_linear_attention_models(files):
    """Qwen3.5's Gated DeltaNet layers run along the whole row: a rank's slice of it cannot be computed alone."""
    import json

    (files / "model").mkdir(exist_ok=True)
    text = {"num_attention_heads": 4, "num_key_value_heads": 2, "layer_types": ["linear_attention", "full_attention"]}
    (files / "model" / "config.json").write_text(json.dumps({"model_type": "qwen3_5_text", **text}))
    with pytest.raises(ConfigError, match=r"ulysses_size=2: the model has linear_attention layers.*Gated DeltaNet"):
        load_config([*base_args(files), "worker.actor.ulysses_size=2"])
    assert load_config(base_args(files)).worker.actor.ulysses_size == 1


def test_ulysses_is_refused_for_mamba_hybrids_without_layer_types(files):
    """Falcon-H1 has a Mamba mixer beside the attention of every layer and no `layer_types`: the config check let
    ulysses_size=2 through, and each worker stopped as it built the actor, a traceback saying that the run "needs
    padding_free=true", which it had set."""
    import json

    (files / "model").mkdir(exist_ok=True)
    text = {"num_attention_heads": 4, "num_key_value_heads": 2}  # transformers fills in the mamba_* fields
    (files / "model" / "config.json").write_text(json.dumps({"model_type": "falcon_h1", **text}))
    padded = ["worker.actor.padding_free=true", "worker.critic.padding_free=true"]
    critic = [
        f"worker.critic.model.model_path={files / 'model'}",
        "algorithm.adv_estimator=gae",
        "worker.critic.global_batch_size=4",
    ]
    args = [*base_args(files), *critic, *padded]
    for key in ("worker.actor.ulysses_size", "worker.critic.ulysses_size"):
        with pytest.raises(ConfigError, match=rf"{key}=2: the model \('falcon_h1'\) has Mamba mixers"):
            load_config([*args, f"{key}=2"])
    assert load_config(args).worker.actor.ulysses_size == 1


def test_easyr1_ulysses_example_keys(files):
    """EasyR1's sequence-parallel example: 8 GPUs, ulysses_size 8, a hub model (checked by the workers)."""
    args = [*base_args(files), "trainer.n_gpus_per_node=8", "worker.actor.ulysses_size=8"]
    args = [a for a in args if not a.startswith("worker.actor.model.model_path")]
    config = load_config([*args, "worker.actor.model.model_path=Qwen/Qwen2.5-7B-Instruct"])
    assert config.worker.actor.ulysses_size == 8


def _write_model_config(path, **config) -> str:
    return str(config_only_model(path, {"model_type": "qwen2", **config}))


def test_a_model_folder_without_config_or_weights_is_refused_naming_the_key(files, tmp_path):
    """transformers (the actor, critic, reward model) and vLLM (a judge) found it out in a worker, after Ray started."""
    args = [arg for arg in base_args(files) if not arg.startswith("worker.actor.model.model_path")]
    empty, no_weights = tmp_path / "empty", tmp_path / "no_weights"
    empty.mkdir()
    no_weights.mkdir()
    (no_weights / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (no_weights / "tokenizer.json").write_text("{}")
    sharded = config_only_model(tmp_path / "sharded", {"model_type": "qwen2"})
    (sharded / "model.safetensors").unlink()
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    cases = {
        f"worker.actor.model.model_path={empty}": "worker.actor.model.model_path='{}' is a folder without config.json "
        "or weights (*.safetensors or *.bin); give a Hugging Face model folder",
        f"worker.actor.model.model_path={no_weights}": "worker.actor.model.model_path='{}' is a folder without weights",
        f"worker.actor.model.model_path={sharded} worker.critic.model.model_path={no_weights} algorithm.adv_estimator=gae worker.critic.global_batch_size=4": (
            "worker.critic.model.model_path='{}' is a folder without weights"
        ),
        f"worker.actor.model.model_path={sharded} worker.reward.model.model_path={empty} worker.reward.model.n_gpus_per_node=1": (
            "worker.reward.model.model_path='{}' is a folder without config.json"
        ),
        f"worker.actor.model.model_path={sharded} worker.reward.judge.model_path={no_weights}": (
            "worker.reward.judge.model_path='{}' is a folder without weights"
        ),
    }
    for overrides, message in cases.items():
        folder = next(
            value.split("=")[1] for value in overrides.split() if value.split("=")[1] in (str(empty), str(no_weights))
        )
        with pytest.raises(ConfigError, match=re.escape(message.format(folder))):
            load_config([*args, *overrides.split()])
    assert load_config([*args, f"worker.actor.model.model_path={sharded}"]).worker.actor.model.model_path == str(
        sharded
    )


def test_weights_cut_short_or_missing_shards_are_refused_naming_the_file(files, tmp_path):
    """A download or copy that stopped: the run got as far as the checkpoint-size estimate (a safetensors traceback),
    or a worker's load."""
    args = [arg for arg in base_args(files) if not arg.startswith("worker.actor.model.model_path")]
    cut = config_only_model(tmp_path / "cut", {"model_type": "qwen2"})
    save_file({"w": torch.zeros(64)}, str(cut / "model.safetensors"))
    os.truncate(cut / "model.safetensors", os.path.getsize(cut / "model.safetensors") - 10)
    garbage = config_only_model(tmp_path / "garbage", {"model_type": "qwen2"})
    (garbage / "model.safetensors").write_bytes(b"<html>Not Found</html>")
    sharded = config_only_model(tmp_path / "sharded", {"model_type": "qwen2"})
    (sharded / "model.safetensors").rename(sharded / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    bad_index = config_only_model(tmp_path / "bad_index", {"model_type": "qwen2"})
    (bad_index / "model.safetensors.index.json").write_text("[]")
    for folder, message in (
        (cut, "model.safetensors cannot be read (Error while deserializing header: incomplete metadata"),
        (garbage, "model.safetensors cannot be read (Error while deserializing header"),
        (
            sharded,
            "model.safetensors.index.json names 1 file(s) that are not there (model-00002-of-00002.safetensors)",
        ),
        (bad_index, "model.safetensors.index.json cannot be read (TypeError"),
    ):
        with pytest.raises(ConfigError) as error:
            load_config([*args, f"worker.actor.model.model_path={folder}"])
        assert str(error.value).startswith(f"worker.actor.model.model_path='{folder}': {message}"), error.value
        assert str(error.value).endswith("copy or download the model again.")
    (sharded / "model-00002-of-00002.safetensors").write_bytes(
        (sharded / "model-00001-of-00002.safetensors").read_bytes()
    )
    load_config([*args, f"worker.actor.model.model_path={sharded}"])  # whole again
    # a peft adapter's folder: "a folder without config.json" said nothing of what it is
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen2.5-7B", "r": 8}))
    no_tensors(adapter / "adapter_model.safetensors")
    with pytest.raises(
        ConfigError, match=r"holds a LoRA adapter of Qwen/Qwen2.5-7B \(adapter_config.json\), not a model: .*peft's"
    ):
        load_config([*args, f"worker.actor.model.model_path={adapter}"])
    # the adapter model_merger.py --adapter_only writes beside a LoRA run's checkpoint: the merger merges it too
    # (also in a run folder whose name a glob pattern would read otherwise: `lr[1e-6]`)
    for run in ("run", "lr[1e-6]"):
        actor = tmp_path / run / "global_step_3" / "actor"
        actor.mkdir(parents=True)
        (actor / "__0_0.distcp").write_bytes(b"")
        shutil.copytree(adapter, actor / "lora_adapter")
        merge = f"python scripts/model_merger.py --local_dir {actor} writes the merged model to {actor}/huggingface"
        with pytest.raises(ConfigError, match=re.escape(merge)):
            load_config([*args, f"worker.actor.model.model_path={actor / 'lora_adapter'}"])


def test_reward_model_keys_are_checked_before_anything_starts(files, tmp_path):
    rm = _write_model_config(tmp_path / "rm", architectures=["Qwen2ForSequenceClassification"], id2label={"0": "S"})
    lm = _write_model_config(tmp_path / "lm", architectures=["Qwen2ForCausalLM"])
    two = _write_model_config(tmp_path / "two", architectures=["Qwen2ForSequenceClassification"])
    vl = _write_model_config(tmp_path / "vl", architectures=["X"], vision_config={})
    config = load_config(
        [*base_args(files), f"worker.reward.model.model_path={rm}", "worker.reward.model.n_gpus_per_node=1"]
    )
    assert config.worker.reward.model.n_gpus_per_node == 1
    cases = {
        f"worker.reward.model.model_path={tmp_path / 'nope'}": "'worker.reward.model.model_path' points to",
        f"worker.reward.model.model_path={lm}": "is a Qwen2ForCausalLM, not a sequence-classification reward model",
        f"worker.reward.model.model_path={two}": "has 2 labels; a reward model gives one score",
        f"worker.reward.model.model_path={rm} worker.reward.model.weight=nan": "'worker.reward.model.weight' is nan",
        f"worker.reward.model.model_path={rm} worker.reward.model.micro_batch_size=0": "'worker.reward.model.micro_batch_size' must be positive",
        f"worker.reward.model.model_path={rm} worker.reward.model.max_length=0": "'worker.reward.model.max_length' must be positive",
        f"worker.reward.model.model_path={rm} worker.reward.model.max_length=1": "max_length=1 must be at least 2 tokens",
        f"worker.reward.model.model_path={rm} worker.reward.model.nnodes=0": "'worker.reward.model.nnodes' must be positive",
        "worker.reward.model.n_gpus_per_node=2": "worker.reward.model.model_path is unset (no reward model)",
        f"worker.reward.model.model_path={rm} worker.reward.model.n_gpus_per_node=4 worker.reward.model.fsdp.fsdp_size=3": (
            "worker.reward.model.fsdp.fsdp_size=3 must divide the 4 devices (worker.reward.model.nnodes x "
        ),
        f"worker.reward.model.model_path={rm} trainer.n_gpus_per_node=4 worker.reward.model.fsdp.fsdp_size=3": (
            "worker.reward.model.fsdp.fsdp_size=3 must divide the 4 devices (trainer.nnodes x "
        ),
        "worker.reward.rule_weight=inf": "'worker.reward.rule_weight' must be a finite",
    }
    for overrides, message in cases.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config([*base_args(files), *overrides.split()])
    with pytest.raises(NotImplementedError, match="reward models are text models"):
        load_config([*base_args(files), f"worker.reward.model.model_path={vl}"])
    # an encoder (OpenAssistant's DeBERTa reward models) was scored at whatever token came first, without [CLS]
    encoder = _write_model_config(
        tmp_path / "deberta",
        model_type="deberta-v2",
        architectures=["DebertaV2ForSequenceClassification"],
        num_labels=1,
    )
    with pytest.raises(NotImplementedError, match="is a deberta-v2 model, an encoder"):
        load_config([*base_args(files), f"worker.reward.model.model_path={encoder}"])
    # learned positions: a longer conversation failed in the worker with an IndexError
    gpt2 = _write_model_config(
        tmp_path / "gpt2",
        model_type="gpt2",
        architectures=["GPT2ForSequenceClassification"],
        num_labels=1,
        n_positions=64,
    )
    with pytest.raises(ConfigError, match=r"max_length=2048 is longer than the 64 positions .*max_length=64"):
        load_config([*base_args(files), f"worker.reward.model.model_path={gpt2}"])
    load_config([*base_args(files), f"worker.reward.model.model_path={gpt2}", "worker.reward.model.max_length=64"])


def test_a_reward_model_read_past_its_trained_context_is_warned_about(files, tmp_path, caplog):
    """A RoPE model runs past max_position_embeddings without an error; its scores there are extrapolation."""
    qwen = _write_model_config(
        tmp_path / "rm", architectures=["Qwen2ForSequenceClassification"], num_labels=1, max_position_embeddings=512
    )
    scaled = _write_model_config(
        tmp_path / "scaled",
        architectures=["Qwen2ForSequenceClassification"],
        num_labels=1,
        max_position_embeddings=512,
        rope_scaling={"rope_type": "linear", "factor": 4.0},  # 2,048 positions (a YaRN config's 512 are scaled)
    )
    logger = "verl.workers.config"
    with caplog.at_level(logging.WARNING, logger=logger):
        load_config([*base_args(files), f"worker.reward.model.model_path={qwen}"])
    assert "max_length=2048 is longer than the 512 positions" in caplog.text
    assert "worker.reward.model.max_length=512" in caplog.text
    for args in (["worker.reward.model.max_length=512"], [f"worker.reward.model.model_path={scaled}"]):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=logger):
            load_config([*base_args(files), f"worker.reward.model.model_path={qwen}", *args])
        assert "positions" not in caplog.text, args


def test_sections_check_their_own_fields_under_the_prefix_they_are_given():
    from verl.models.config import LoraConfig, ModelConfig
    from verl.utils.optim import OptimConfig
    from verl.workers.config import RewardConfig, RolloutConfig

    with pytest.raises(ConfigError, match=r"'worker.critic.optim.lr' must be zero or positive"):
        OptimConfig(lr=-1.0).validate("worker.critic.optim.")
    with pytest.raises(ConfigError, match=r"worker.model.lora: rank must be >= 0"):
        ModelConfig(lora=LoraConfig(rank=-1)).validate("worker.model.")
    with pytest.raises(ConfigError, match=r"worker.rollout.top_p must lie in \(0, 1\], got 0"):
        RolloutConfig(top_p=0.0).validate("worker.rollout.")
    with pytest.raises(ConfigError, match=r"'worker.reward.run_in' is 'process'"):
        RewardConfig(run_in="process").validate("worker.reward.")


def test_every_derived_key_is_copied_from_its_source(files):
    from verl.trainer.config import DERIVED_KEYS

    def get(config, dotted):
        for part in dotted.split("."):
            config = getattr(config, part)
        return config

    config_only_model(files / "model", {"model_type": "qwen2"})  # override_config is checked against its fields
    config = load_config(
        [
            *base_args(files),
            "data.max_prompt_length=64",
            "data.max_response_length=32",
            "worker.actor.model.trust_remote_code=true",
            "algorithm.use_kl_loss=true",
            "algorithm.kl_penalty=kl",
            "algorithm.kl_coef=0.05",
            "algorithm.disable_kl=true",
            "worker.actor.micro_batch_size_per_device_for_experience=3",
            "worker.actor.padding_free=false",
            "worker.actor.dynamic_batching=false",
            "worker.actor.micro_batch_size_per_device_for_update=2",
            f"data.override_chat_template={files / 'fmt.jinja'}",
            "data.chat_template_kwargs={enable_thinking: false}",
            "worker.actor.model.override_config={max_position_embeddings: 4096}",
            "data.answer_key=solution",
        ]
    )
    defaults = PPOConfig()
    for key, source in DERIVED_KEYS.items():
        assert get(config, key) == get(config, source), key
        if key != "worker.ref.ulysses_size":  # (needs a model config to set)
            assert get(config, key) != get(defaults, key), f"{key} keeps its default: the test sets no new value"


def test_sft_shares_the_trainer_keys_and_their_checks(tmp_path):
    from verl.sft.config import SFTConfig, SFTTrainerConfig, load_sft_config
    from verl.trainer.config import BaseTrainerConfig, TrainerConfig

    assert issubclass(TrainerConfig, BaseTrainerConfig) and issubclass(SFTTrainerConfig, BaseTrainerConfig)
    rl_docs = {key: doc for key, _, doc in describe_fields(PPOConfig)}
    sft_docs = {key: doc for key, _, doc in describe_fields(SFTConfig)}
    for f in dataclasses.fields(BaseTrainerConfig):
        assert sft_docs[f"trainer.{f.name}"] == rl_docs[f"trainer.{f.name}"] != ""
    assert SFTTrainerConfig().n_gpus_per_node == 1 and TrainerConfig().n_gpus_per_node == 8  # each keeps its defaults
    (tmp_path / "train.jsonl").write_text("{}\n")
    base = [f"data.train_files={tmp_path / 'train.jsonl'}", "worker.model.model_path=Qwen/Qwen2-0.5B"]
    with pytest.raises(ConfigError, match=r"'trainer.logger' is 'neptune'"):
        load_sft_config([*base, "trainer.logger=[neptune]"])
    with pytest.raises(ConfigError, match=r"'worker.optim.strategy' is 'sgd'"):
        load_sft_config([*base, "worker.optim.strategy=sgd"])
    (tmp_path / "a_file").write_text("")
    with pytest.raises(
        ConfigError, match=r"'trainer.save_checkpoint_path' is '.*a_file/run', which cannot be created"
    ):
        load_sft_config([*base, f"trainer.save_checkpoint_path={tmp_path / 'a_file' / 'run'}"])


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        (["worker.rollout.max_staleness=-1"], r"worker.rollout.max_staleness.*zero or positive, got -1"),
        (["worker.rollout.max_staleness=2"], r"max_staleness=2 only applies to asynchronous.*mode=colocated"),
        (["worker.rollout.mode=fast"], r"worker.rollout.mode.*sync, colocated, disaggregated"),
        (["worker.rollout.n_gpus_per_node=2"], r"n_gpus_per_node sizes the rollout pool of mode=disaggregated"),
        (["worker.rollout.mode=colocated", "worker.rollout.nnodes=1"], r"nnodes sizes the rollout pool"),
        (
            ["worker.rollout.mode=disaggregated", "worker.rollout.verify_weight_sync=true"],
            r"verify_weight_sync compares the engine with the actor in one process",
        ),
        (
            ["worker.rollout.mode=disaggregated", "worker.rollout.n_gpus_per_node=3"],
            r"data.rollout_batch_size=8 prompts per round, which must split evenly over the 3 engines",
        ),
        (
            ["worker.rollout.mode=disaggregated", "worker.rollout.weight_bucket_mb=0"],
            r"worker.rollout.weight_bucket_mb' must be positive",
        ),
        (
            ["worker.rollout.max_model_len=9000"],
            r"max_num_batched_tokens=8192 must be at least worker.rollout.max_model_len=9000 on the CPU",
        ),
        (  # an explicit zero is not "unset": it sizes no pool at all
            ["worker.rollout.mode=disaggregated", "worker.rollout.nnodes=0"],
            r"worker.rollout.nnodes' must be positive, got 0",
        ),
        (
            ["worker.rollout.mode=disaggregated", "worker.rollout.n_gpus_per_node=0"],
            r"worker.rollout.n_gpus_per_node' must be positive, got 0",
        ),
        (
            ["worker.reward.stream=true"],
            r"worker.reward.stream=true scores groups .*asynchronous modes .* only; with mode=sync",
        ),
        (
            ["worker.rollout.mode=colocated", "worker.reward.stream=true", "worker.reward.model.model_path=m"],
            r"cannot stream this reward: the reward model runs in the engines' own worker processes .*"
            r"worker.reward.model.n_gpus_per_node",
        ),
        (
            [
                "worker.rollout.mode=disaggregated",
                "worker.actor.model.lora.rank=8",
                "worker.rollout.lora_sync=adapters",
            ],
            r"lora_sync=adapters is built for engines in the trainer's processes",
        ),
        (  # a round's prompts are admitted and taken rank by rank
            ["worker.rollout.mode=colocated", "data.mini_rollout_batch_size=3"],
            r"admits data.mini_rollout_batch_size=3 prompts per round, which must split evenly over the 2 devices",
        ),
        (
            [
                "worker.rollout.mode=disaggregated",
                "worker.rollout.n_gpus_per_node=4",
                "data.mini_rollout_batch_size=2",
            ],
            r"data.mini_rollout_batch_size=2 prompts per round, which must split evenly over the 4 engines",
        ),
        (
            ["worker.rollout.mode=colocated", "data.rollout_batch_size=3", "worker.actor.global_batch_size=3"],
            r"admits data.rollout_batch_size=3 prompts per round, which must split evenly over the 2 devices",
        ),
        (
            [
                "worker.rollout.mode=colocated",
                "data.max_response_length=64",
                "data.response_length_schedule={0: 64, 5: 32}",
            ],
            r"response_length_schedule=.* shortens the responses at a later stage",
        ),
        (["algorithm.rollout_correction.mode=tis"], r"mode=tis compares.*worker.rollout.calculate_log_probs=true"),
        (["algorithm.rollout_correction.mode=clip"], r"algorithm.rollout_correction.mode"),
        (  # gpg has no ratio for bypass to correct through: stale samples trained as on-policy ones
            [
                "worker.rollout.mode=colocated",
                "worker.rollout.max_staleness=1",
                "algorithm.adv_estimator=gpg",
                "worker.actor.loss_type=gpg",
                "algorithm.rollout_correction.mode=bypass",
            ],
            r"mode=bypass corrects .*loss_type=gpg has no ratio",
        ),
        (
            ["algorithm.rollout_correction.is_cap=0", "worker.rollout.calculate_log_probs=true"],
            r"algorithm.rollout_correction.is_cap must be positive",
        ),
        (
            ["algorithm.rollout_correction.mask_low=6", "worker.rollout.calculate_log_probs=true"],
            r"algorithm.rollout_correction.mask_low",
        ),
    ],
)
def test_async_and_correction_checks(files, override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config([*base_args(files), *override])


def test_async_mode_records_rollout_log_probs_and_picks_a_correction(files):
    config = load_config([*base_args(files), "worker.rollout.mode=colocated", "worker.rollout.max_staleness=2"])
    assert config.worker.rollout.calculate_log_probs and config.algorithm.rollout_correction.mode == "tis"
    exact = load_config([*base_args(files), "worker.rollout.mode=colocated"])
    assert exact.algorithm.rollout_correction.mode == "none"  # staleness 0 trains exactly as mode=sync
    assert load_config(base_args(files)).algorithm.rollout_correction.mode == "none"
    chosen = load_config(
        [*base_args(files), "worker.rollout.mode=colocated", "algorithm.rollout_correction.mode=icepop"]
    )
    assert chosen.algorithm.rollout_correction.mode == "icepop"


def test_online_filtering_and_rounds_run_in_every_mode(files):
    """Online filtering and data.mini_rollout_batch_size are accepted in both asynchronous modes too."""
    filtering = ["algorithm.online_filtering=true", "data.mini_rollout_batch_size=4"]
    for mode in ("sync", "colocated", "disaggregated"):
        config = load_config([*base_args(files), *filtering, f"worker.rollout.mode={mode}"])
        assert config.algorithm.online_filtering and config.data.mini_rollout_batch_size == 4


def test_greedy_validation_with_one_response_is_accepted(files):
    config = load_config([*base_args(files), 'worker.rollout.val_override_config={"temperature": 0}'])
    assert config.worker.rollout.val_override_config == {"temperature": 0}  # validation's n is 1 unless set


def test_batch_reward_functions_stream_only_when_asked(files):
    """A batch function (e.g. the sandboxed code reward) may compare a whole batch: unset `stream` leaves it whole
    batches, `stream=true` gives it the groups as they complete."""
    from verl.trainer.config import reward_stream_obstacle

    (files / "batch.py").write_text(
        'REWARD_TYPE = "batch"\n\ndef compute_score(samples):\n    return [{"overall": 1.0} for _ in samples]\n'
    )
    args = [*base_args(files), f"worker.reward.reward_function={files / 'batch.py'}:compute_score"]
    disaggregated = ["worker.rollout.mode=disaggregated", "worker.rollout.tensor_parallel_size=1"]
    auto = load_config([*args, *disaggregated])
    assert "is a batch function" in reward_stream_obstacle(auto.worker.reward, "disaggregated")
    asked = load_config([*args, *disaggregated, "worker.reward.stream=true"])
    assert reward_stream_obstacle(asked.worker.reward, "disaggregated") is None
    sequential = load_config([*base_args(files), *disaggregated])
    assert reward_stream_obstacle(sequential.worker.reward, "disaggregated") is None


def test_reward_models_and_judges_stream_where_their_processes_are_free(files):
    """A judge is an actor of its own: it streams in both modes. A reward model streams on a pool of its own, or in
    the trainer's processes in mode=disaggregated; in mode=colocated those processes hold the busy engines."""
    from verl.trainer.config import reward_stream_obstacle

    def obstacle(mode: str, *keys: str) -> str | None:
        extra = ["worker.rollout.tensor_parallel_size=1"] if mode == "disaggregated" else []
        config = load_config([*base_args(files), f"worker.rollout.mode={mode}", *extra, *keys])
        return reward_stream_obstacle(config.worker.reward, mode)

    judge = "worker.reward.judge.model_path=judge"
    model, own_pool = "worker.reward.model.model_path=rm", "worker.reward.model.n_gpus_per_node=1"
    for mode in ("colocated", "disaggregated"):
        assert obstacle(mode, judge) is None
        assert obstacle(mode, model, own_pool) is None
    assert obstacle("disaggregated", model) is None
    assert "the engines' own worker processes" in obstacle("colocated", model)
    assert "the engines' own worker processes" in obstacle("colocated", model, judge)


def test_tool_calls_that_may_outlast_the_step_timeout_are_refused(files):
    """16 calls of up to 60 s each in one turn: a turn of slow calls stopped the run at env_step_timeout_s=600,
    where the model was to read the calls' timeouts."""
    args = [*base_args(files), "worker.rollout.env=examples/envs/calculator.py:Multiplier"]
    load_config(args)  # 16 x 30 s: within 600 s
    with pytest.raises(
        ConfigError, match=r"16 tool calls \(max_calls_per_turn\) of up to 60 s each .* 960 s, more than"
    ):
        load_config([*args, "worker.rollout.env_kwargs={tool_timeout_s: 60}"])
    load_config([*args, "worker.rollout.env_kwargs={tool_timeout_s: 60}", "worker.rollout.env_step_timeout_s=1200"])


def test_a_tool_environment_whose_python_tool_cannot_run_is_refused(files, monkeypatch):
    """Without bubblewrap every python_tool call came back to the model as an error text ("raised
    SandboxUnavailable"), and the run trained on: the model learned to stop calling the tool."""
    from verl.rewards.sandbox import runner

    monkeypatch.setenv("VERL_BWRAP", "/nonexistent/bwrap")
    monkeypatch.setattr(runner, "_ISOLATIONS", {})
    args = [*base_args(files), "worker.rollout.env=examples/envs/calculator.py:Calculator"]
    with pytest.raises(ConfigError, match=r"worker.rollout.env='.*calculator.py:Calculator': .*needs bubblewrap"):
        load_config(args)


def test_the_environment_the_config_check_builds_is_released(files):
    """Validation builds the environment class once (a missing file, a bad keyword): what its __init__ started (a
    server) is released at once, not left running for the whole run."""
    (files / "env.py").write_text(
        "from verl.envs import MultiTurnEnv\n"
        "class Served(MultiTurnEnv):\n"
        "    def __init__(self, log):\n"
        "        self.log = log\n"
        "        open(log, 'a').write('start\\n')\n"
        "    def release(self):\n"
        "        open(self.log, 'a').write('release\\n')\n"
    )
    log = files / "log.txt"
    load_config(
        [
            *base_args(files),
            f"worker.rollout.env={files / 'env.py'}:Served",
            f"worker.rollout.env_kwargs={{log: {log}}}",
        ]
    )
    assert log.read_text().split() == ["start", "release"]


def test_asynchronous_episodes_with_tensor_parallel_engines(files):
    """The group's first process runs the episodes and its peers repeat its engine calls (engine_mirror), in both
    asynchronous modes; a rollout pool's engine spans processes of one of its nodes."""
    args = [*base_args(files), "worker.rollout.env=examples/envs/guess_number.py:GuessNumber"]
    colocated = load_config([*args, "worker.rollout.mode=colocated", "worker.rollout.tensor_parallel_size=2"])
    assert colocated.worker.rollout.tensor_parallel_size == 2
    pool = [*args, "worker.rollout.mode=disaggregated", "worker.rollout.tensor_parallel_size=2"]
    pool += ["trainer.n_gpus_per_node=1"]
    with pytest.raises(ConfigError, match=r"tensor_parallel_size=2 must divide worker.rollout.n_gpus_per_node=1"):
        load_config(pool)
    assert load_config([*pool, "worker.rollout.n_gpus_per_node=2"]).worker.rollout.tensor_parallel_size == 2


def test_the_tensor_parallel_default_follows_the_device_and_the_mode(files, monkeypatch):
    """Unset: 1 on CPU (one engine per process) and for a disaggregated rollout pool; on GPUs 2 where the training
    world is even, episodes or not. An explicit size is kept on every device."""
    import verl.trainer.config as trainer_config

    def size(*extra: str) -> int:
        return load_config([*base_args(files), *extra]).worker.rollout.tensor_parallel_size

    assert size() == 1
    assert size("worker.rollout.tensor_parallel_size=2") == 2  # the CPU shards the engine as asked
    pool = ("worker.rollout.mode=disaggregated", "trainer.n_gpus_per_node=1")
    assert size(*pool, "worker.rollout.n_gpus_per_node=2", "worker.rollout.tensor_parallel_size=2") == 2
    monkeypatch.setattr(trainer_config, "is_cuda_available", lambda: True)  # what a GPU machine answers
    gpu = ("trainer.device=auto",)
    assert size(*gpu) == 2
    assert size(*gpu, "trainer.n_gpus_per_node=1") == 1
    # two single-GPU nodes: an even world, but an engine over both would all-reduce every layer over the network
    assert size(*gpu, "trainer.n_gpus_per_node=1", "trainer.nnodes=2", "data.rollout_batch_size=4") == 1
    assert size(*gpu, "worker.rollout.mode=colocated") == 2
    episodes = "worker.rollout.env=examples/envs/guess_number.py:GuessNumber"
    assert size(*gpu, "worker.rollout.mode=colocated", episodes) == 2
    assert size(*gpu, "worker.rollout.mode=colocated", episodes, "worker.rollout.tensor_parallel_size=1") == 1
    assert size(*gpu, *pool) == 1
    assert size(*gpu, *pool, "worker.rollout.n_gpus_per_node=2") == 1  # a pool: one engine per process unless set


def test_the_weight_sync_refuses_an_unchecked_mixture_of_experts_from_its_config():
    """A hub id is not read at validation: the weight sync refuses the loaded actor's config (a VLM's experts are in
    its text_config)."""
    from verl.models.config import expert_count, refuse_unchecked_experts

    vlm = {"model_type": "kimi_vl", "text_config": {"model_type": "deepseek_v3", "n_routed_experts": 64}}
    assert expert_count(vlm) == ("n_routed_experts", 64)
    with pytest.raises(NotImplementedError, match=r"The actor is a mixture-of-experts model \('kimi_vl'"):
        refuse_unchecked_experts("The actor", vlm)
    refuse_unchecked_experts("The actor", {"model_type": "qwen3_moe", "num_experts": 4})
    refuse_unchecked_experts("The actor", {"model_type": "qwen3_vl_moe", "text_config": {"num_local_experts": 4}})
    assert expert_count({"model_type": "qwen2", "num_experts": 0}) is None


def test_head_sizes_the_cpu_engine_cannot_run_are_refused(files, tmp_path):
    """vLLM's CPU attention runs some head sizes only and found another in the engine's first forward, in a worker."""
    args = [arg for arg in base_args(files) if not arg.startswith("worker.actor.model.model_path")]
    args += ["trainer.device=cpu"]
    narrow = _write_model_config(tmp_path / "narrow", hidden_size=64, num_attention_heads=4)
    gemma = _write_model_config(tmp_path / "gemma", text_config={"head_dim": 64, "global_head_dim": 24})
    cases = {
        f"worker.actor.model.model_path={narrow}": "narrow' has attention heads of 16 dimensions (head_dim); vLLM's",
        f"worker.actor.model.model_path={gemma}": "gemma' has attention heads of 24 dimensions (global_head_dim)",
    }
    for override, message in cases.items():
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config([*args, override])
    wide = _write_model_config(tmp_path / "wide", hidden_size=128, num_attention_heads=4)
    assert load_config([*args, f"worker.actor.model.model_path={wide}"]).worker.actor.model.model_path == wide
    with pytest.raises(ConfigError, match=r"worker.reward.judge.model_path='.*narrow' has attention heads of 16"):
        load_config([*args, f"worker.actor.model.model_path={wide}", f"worker.reward.judge.model_path={narrow}"])


def test_a_sequence_longer_than_the_models_positions_is_refused_where_vllm_would(files, monkeypatch):
    """prompt + response past max_position_embeddings: refused at load (vLLM refuses it in every worker as the engine
    starts), unless RoPE scaling or VLLM_ALLOW_LONG_MAX_MODEL_LEN lets vLLM take it."""
    lengths = ["data.max_prompt_length=400", "data.max_response_length=200"]
    for name, config in (
        ("short", {"max_position_embeddings": 512}),
        ("short_vl", {"text_config": {"max_position_embeddings": 512}}),
    ):
        model = config_only_model(files / name, config)
        args = [*base_args(files), f"worker.actor.model.model_path={model}", *lengths]
        with pytest.raises(
            ConfigError, match=r"data.max_prompt_length \+ data.max_response_length = 600 exceeds the 512 positions"
        ):
            load_config(args)
    with pytest.raises(ConfigError, match=r"worker.rollout.max_model_len=1100 exceeds the 512 positions"):
        load_config([*args[:-2], "worker.rollout.max_model_len=1100"])
    assert load_config([*args[:-2], "data.max_prompt_length=312", "data.max_response_length=200"])  # 512 fits
    scaled = config_only_model(
        files / "scaled", {"max_position_embeddings": 512, "rope_scaling": {"rope_type": "linear", "factor": 4.0}}
    )
    assert load_config([*base_args(files), f"worker.actor.model.model_path={scaled}", *lengths])
    # YaRN, Llama 3, LongRoPE: max_position_embeddings is the scaled length already, and vLLM applies no factor
    # (the check was skipped for any factor, and vLLM refused the length in every worker)
    for name, rope in (("yarn", {"rope_type": "yarn", "factor": 4.0}), ("llama3", {"type": "llama3", "factor": 8.0})):
        folder = config_only_model(files / name, {"max_position_embeddings": 512, "rope_scaling": rope})
        with pytest.raises(ConfigError, match=r"= 600 exceeds the 512 positions"):
            load_config([*base_args(files), f"worker.actor.model.model_path={folder}", *lengths])
    # override_config is what the workers and vLLM read: it was refused by the file's 512 positions, and a smaller
    # override accepted (vLLM then refused it in every worker)
    for name, config in (
        ("typed", {"model_type": "qwen2", "max_position_embeddings": 512}),
        ("typed_vl", {"model_type": "qwen2_5_vl", "text_config": {"max_position_embeddings": 512}}),
    ):
        model = [*base_args(files), f"worker.actor.model.model_path={config_only_model(files / name, config)}"]
        model += lengths
        assert load_config([*model, "worker.actor.model.override_config={max_position_embeddings: 4096}"])
        with pytest.raises(
            ConfigError, match=r"= 600 exceeds the 64 positions.*or worker.actor.model.override_config"
        ):
            load_config([*model[:-2], *lengths, "worker.actor.model.override_config={max_position_embeddings: 64}"])
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    assert load_config(args)


def test_a_kv_cache_too_small_for_one_sequence_is_refused_with_the_size_that_fits(files):
    """vLLM needs max_model_len tokens in whole blocks (128 on the CPU) plus its null block: 4,096 bytes a token for
    this model (2 x 4 layers x 2 key/value heads x 64 x fp32), so 1 MiB holds 128 tokens and not 129."""
    from verl.trainer.config import _check_kv_cache

    dense = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 256}
    model = config_only_model(files / "dense", dense)
    args = [*base_args(files), f"worker.actor.model.model_path={model}", "trainer.device=cpu"]
    small = ["worker.rollout.kv_cache_memory_mb=1", "data.max_prompt_length=64"]
    assert load_config([*args, *small, "data.max_response_length=64"])
    with pytest.raises(
        ConfigError,
        match=r"kv_cache_memory_mb=1 cannot hold one sequence of max_model_len=129 tokens .*4096 bytes.*at least 2, "
        r"or lower worker.rollout.max_model_len \(default: data.max_prompt_length \+ data.max_response_length\)",
    ):
        load_config([*args, *small, "data.max_response_length=65"])
    hybrid = config_only_model(files / "hybrid", {**dense, "layer_types": ["linear_attention", "full_attention"] * 2})
    assert load_config([*args, *small, "data.max_response_length=65", f"worker.actor.model.model_path={hybrid}"])
    sliding = config_only_model(files / "sliding", {**dense, "sliding_window": 64})  # a window caps its cache
    assert load_config([*args, *small, "data.max_response_length=65", f"worker.actor.model.model_path={sliding}"])
    # on a GPU with an explicit size: blocks of 16 tokens, in the rollout's dtype (bf16: 2,048 bytes a token)
    config = load_config([*args, *small, "data.max_response_length=64"])
    config.worker.rollout.max_model_len = 16 * 31  # 31 blocks and the null block: exactly 1 MiB
    _check_kv_cache(config, on_cpu=False, model_config=dense)
    config.worker.rollout.max_model_len += 1
    with pytest.raises(ConfigError, match=r"2048 bytes of keys and values per token\): raise it to at least 2"):
        _check_kv_cache(config, on_cpu=False, model_config=dense)
    # a CPU judge's cache, for its max_model_len or, unset, the model's whole context (it failed once Ray had started
    # the judge's engine); and its temperature in vLLM's range
    judge_model = config_only_model(files / "judge", {**dense, "max_position_embeddings": 4096})
    judge = [f"worker.reward.judge.model_path={judge_model}", "worker.reward.judge.num_gpus=0"]
    with pytest.raises(
        ConfigError,
        match=r"judge.kv_cache_memory_mb=1 cannot hold one sequence of 4096 tokens \(the model's whole context: "
        r"worker.reward.judge.max_model_len unset\) .* at least 17, or set worker.reward.judge.max_model_len",
    ):
        load_config([*args, *judge, "worker.reward.judge.kv_cache_memory_mb=1"])
    assert load_config([*args, *judge, "worker.reward.judge.kv_cache_memory_mb=17"])
    assert load_config(
        [*args, *judge, "worker.reward.judge.kv_cache_memory_mb=3", "worker.reward.judge.max_model_len=512"]
    )
    with pytest.raises(ConfigError, match=r"judge.temperature=3.0 must lie in \[0, 2\]"):
        load_config([*args, *judge, "worker.reward.judge.temperature=3"])


def test_flash_attention_is_refused_where_it_cannot_run(files):
    """flash-attn runs on CUDA only, and only where it is installed (one machine: the driver sees the workers'
    packages; a multi-node driver is not checked)."""
    import importlib.util

    from verl.trainer.config import _check_flash_attention

    flash = "worker.actor.model.attn_implementation=flash_attention_2"
    with pytest.raises(ConfigError, match=r"flash_attention_2 runs on CUDA only; on the CPU use auto"):
        load_config([*base_args(files), flash, "trainer.device=cpu"])
    config = load_config(base_args(files))
    config.worker.actor.model.attn_implementation = "flash_attention_2"
    if importlib.util.find_spec("flash_attn") is None:
        with pytest.raises(ConfigError, match=r"needs the flash-attn package, which is not installed"):
            _check_flash_attention(config, on_cpu=False)
    else:
        _check_flash_attention(config, on_cpu=False)
    config.worker.actor.model.attn_implementation = "flash_attention_3"  # FlashAttention 3's own package
    if importlib.util.find_spec("flash_attn_interface") is None:
        with pytest.raises(ConfigError, match=r"flash_attention_3 needs the flash-attn-3 package, which is not"):
            _check_flash_attention(config, on_cpu=False)
    config.trainer.nnodes = 2
    _check_flash_attention(config, on_cpu=False)


def test_chunked_prefill_on_a_gpu_follows_the_key(files, monkeypatch):
    """On a GPU vLLM chunks long prefills unless enable_chunked_prefill=false, which then needs a token budget of a
    whole prompt (max_num_batched_tokens >= max_model_len), as the CPU always does; true is a GPU setting only."""
    import verl.trainer.config as trainer_config

    monkeypatch.setattr(trainer_config, "is_cuda_available", lambda: True)  # what a GPU machine answers
    longer = [*base_args(files), "trainer.device=auto", "worker.rollout.max_model_len=9000"]
    assert load_config(longer).worker.rollout.enable_chunked_prefill is None
    assert load_config([*longer, "worker.rollout.enable_chunked_prefill=true"]).worker.rollout.enable_chunked_prefill
    with pytest.raises(ConfigError, match=r"max_model_len=9000 with worker.rollout.enable_chunked_prefill=false"):
        load_config([*longer, "worker.rollout.enable_chunked_prefill=false"])


def test_several_nodes_without_ray_address_say_the_run_stays_on_this_machine(monkeypatch, caplog):
    from verl.trainer import ray_setup

    started = []
    monkeypatch.setattr(ray_setup, "start_ray", lambda *args, **kwargs: started.append(args))  # no Ray here
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_setup.ray, "is_initialized", lambda: False)
    config = PPOConfig()
    config.trainer.nnodes = 2
    with caplog.at_level(logging.WARNING, logger=ray_setup.__name__):
        ray_setup.init_ray(config, "cpu")
    assert "asks for 2 nodes but RAY_ADDRESS is unset" in caplog.text and started
    caplog.clear()
    config.trainer.nnodes = 1
    ray_setup.init_ray(config, "cpu")
    assert "RAY_ADDRESS" not in caplog.text


def test_a_setting_of_a_feature_the_run_leaves_off_is_warned_about(files, caplog):
    """A critic's learning rate under GRPO, online filtering's bounds with it off, LoRA's alpha at rank 0: accepted
    and never read, with no word."""
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        load_config([*base_args(files), "worker.critic.optim.lr=1e-3", "algorithm.filter_low=0.2"])
        load_config([*base_args(files), "worker.actor.model.lora.alpha=16", "data.seed=3"])
    warnings = [record.getMessage() for record in caplog.records if "has no effect" in record.getMessage()]
    assert warnings == [
        "algorithm.adv_estimator=grpo trains no critic: worker.critic.optim.lr=0.001 has no effect in this run.",
        "algorithm.online_filtering=false: algorithm.filter_low=0.2 has no effect in this run.",
        "worker.actor.model.lora.rank=0 (LoRA off): worker.actor.model.lora.alpha=16 has no effect in this run.",
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):  # the defaults and a used setting: none
        load_config([*base_args(files), "algorithm.online_filtering=true", "algorithm.filter_low=0.2"])
        load_config([*base_args(files), "algorithm.filter_low=0.01"])
    assert "has no effect" not in caplog.text


def test_settings_the_device_the_schedule_or_the_reward_wiring_does_not_read_are_warned_about(files, caplog):
    """Accepted and never read, with no word: vLLM's GPU memory share and FSDP's mixed precision on the CPU, a
    constant schedule's floor, an unshuffled run's seed, the reward function's kwargs beside routes alone, a reward
    model's node count in the actor's processes."""
    routes = write_yaml(
        files / "routes.yaml",
        {
            "worker": {
                "reward": {"routes": {"a": f"{files / 'reward.py'}:compute_score"}, "reward_function_kwargs": {"x": 1}}
            }
        },
    )
    scorer = config_only_model(
        files / "scorer", {"num_labels": 1, "architectures": ["Qwen2ForSequenceClassification"]}
    )
    reward_model = [f"worker.reward.model.model_path={scorer}", "worker.reward.model.nnodes=2"]
    on_cpu = [
        "trainer.device=cpu",
        "worker.rollout.gpu_memory_utilization=0.3",
        "worker.actor.fsdp.mp_param_dtype=fp32",
    ]
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        load_config(
            [*base_args(files), *on_cpu, "worker.actor.optim.min_lr_ratio=0.1", "data.shuffle=false", "data.seed=3"]
        )
        load_config([f"config={routes}", *base_args(files)[:2], *base_args(files)[3:], *reward_model])
    warnings = [record.getMessage() for record in caplog.records if "has no effect" in record.getMessage()]
    assert warnings == [
        "data.shuffle=false (the seed orders the shuffle only): data.seed=3 has no effect in this run.",
        "worker.actor.optim.lr_scheduler_type=constant (no decay): worker.actor.optim.min_lr_ratio=0.1 has no effect "
        "in this run.",
        "on the CPU (FSDP computes and reduces in the weights' dtype): worker.actor.fsdp.mp_param_dtype=fp32 has no "
        "effect in this run.",
        "on the CPU (vLLM runs eagerly with a KV cache of kv_cache_memory_mb; the token head is not compiled): "
        "worker.rollout.gpu_memory_utilization=0.3 has no effect in this run.",
        "worker.reward.reward_function is unset (a route's function takes routes_kwargs, a rubric part its kwargs): "
        "worker.reward.reward_function_kwargs={'x': 1} has no effect in this run.",
        "worker.reward.model.n_gpus_per_node=0 (the reward model shares the actor's processes): "
        "worker.reward.model.nnodes=2 has no effect in this run.",
    ]


def test_offloading_on_the_cpu_and_the_timeout_of_a_reward_model_alone_are_warned_about(files, caplog):
    """Accepted and never read, with no word: offload.* on the CPU, where host and device are one memory, and
    worker.reward.timeout_s beside a reward model alone (it times the rule-based functions and the judge; the
    reward model scores in the workers)."""
    scorer = config_only_model(
        files / "scorer", {"num_labels": 1, "architectures": ["Qwen2ForSequenceClassification"]}
    )
    no_function = [*base_args(files)[:2], *base_args(files)[3:]]
    offload = [
        "trainer.device=cpu",
        "worker.actor.offload.offload_params=true",
        "worker.ref.offload.offload_params=true",
    ]
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        load_config([*base_args(files), *offload])
        load_config([*no_function, f"worker.reward.model.model_path={scorer}", "worker.reward.timeout_s=60"])
    warnings = [record.getMessage() for record in caplog.records if "has no effect" in record.getMessage()]
    assert warnings == [
        "on the CPU (host and device are the same memory: offloading moves nothing): "
        "worker.actor.offload.offload_params=True, worker.ref.offload.offload_params=True has no effect in this run.",
        "the reward is the reward model's alone (timeout_s times the rule-based functions and the judge): "
        "worker.reward.timeout_s=60.0 has no effect in this run.",
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):  # a rule function beside it is timed
        load_config([*base_args(files), f"worker.reward.model.model_path={scorer}", "worker.reward.timeout_s=60"])
    assert "has no effect" not in caplog.text


def test_a_truncated_sampler_beside_a_correction_is_warned_about(files, caplog):
    """top_p < 1: the engine's log-probs are the truncated distribution's, the trainer's the whole one's; a
    correction read the difference as drift, with no word."""
    correction = ["worker.rollout.calculate_log_probs=true", "algorithm.rollout_correction.mode=tis"]
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        load_config([*base_args(files), *correction, "worker.rollout.top_p=0.9"])
    assert "worker.rollout.top_p=0.9, top_k=-1: the engine samples from, and reports the log-probs of" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):  # no correction in mode=sync: the old
        load_config([*base_args(files), "worker.rollout.top_p=0.9"])  # log-probs are the trainer's own
        load_config([*base_args(files), *correction])
    assert "truncated" not in caplog.text


def test_a_correction_bound_or_kl_penalty_the_run_does_not_read_is_warned_about(files, caplog):
    """icepop's mask bounds under tis, the KL penalty's estimator without a KL term: accepted and never read."""
    correction = ["worker.rollout.calculate_log_probs=true", "algorithm.rollout_correction.mode=tis"]
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        load_config([*base_args(files), *correction, "algorithm.rollout_correction.mask_low=0.1"])
        load_config([*base_args(files), "algorithm.disable_kl=true", "algorithm.kl_penalty=mse"])
    warnings = [record.getMessage() for record in caplog.records if "has no effect" in record.getMessage()]
    assert warnings == [
        "algorithm.rollout_correction.mode=tis: algorithm.rollout_correction.mask_low=0.1 has no effect in this run.",
        "algorithm.disable_kl=true builds no reference model and no KL term: algorithm.kl_penalty=mse has no effect "
        "in this run.",
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):  # read by the mode: no word
        load_config([*base_args(files), *correction, "algorithm.rollout_correction.is_cap=3"])
        load_config([*base_args(files), "worker.rollout.calculate_log_probs=true", "algorithm.kl_penalty=mse"])
    assert "has no effect" not in caplog.text


def test_the_kl_estimator_follows_where_the_kl_goes(files, caplog):
    """auto: k3 as the actor's loss, k1 in the rewards (a penalty gets only the policy gradient's estimate, the KL's
    gradient for k1 alone). An explicit k3 in the rewards is warned about; it was the default there."""
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        in_loss = load_config([*base_args(files), "algorithm.use_kl_loss=true"])
        in_rewards = load_config([*base_args(files), "algorithm.use_kl_loss=false"])
    assert (in_loss.algorithm.kl_penalty, in_loss.worker.actor.kl_penalty) == ("low_var_kl", "low_var_kl")
    assert (in_rewards.algorithm.kl_penalty, in_rewards.worker.actor.kl_penalty) == ("kl", "kl")
    assert "subtracted from the rewards" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        load_config([*base_args(files), "algorithm.use_kl_loss=false", "algorithm.kl_penalty=k1+"])
        assert "subtracted from the rewards" not in caplog.text
        load_config([*base_args(files), "algorithm.use_kl_loss=false", "algorithm.kl_penalty=low_var_kl"])
    assert "algorithm.kl_penalty=low_var_kl is subtracted from the rewards (use_kl_loss=false)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):  # a reference pass for a term weighted 0
        load_config([*base_args(files), "algorithm.kl_coef=0"])
        assert "kl_coef=0 with the KL term on" in caplog.text
        caplog.clear()
        load_config([*base_args(files), "algorithm.kl_coef=0", "algorithm.kl_type=adaptive"])  # (was silent)
        assert "kl_type=adaptive multiplies the coefficient, so it never leaves 0" in caplog.text
        caplog.clear()
        load_config([*base_args(files), "algorithm.kl_coef=0", "algorithm.disable_kl=true"])
    assert "kl_coef=0 with the KL term on" not in caplog.text


def test_a_mode_a_recipe_switches_off_on_its_command_line_leaves_its_base_config_keys_unread_quietly(files, caplog):
    """A recipe's command line turning the KL off over a base config that sets its coefficient: the base's key is
    unread on purpose, said at INFO (it was a warning at every start of such a recipe); set in the same source, or
    later, it is still a warning."""
    base = write_yaml(files / "base.yaml", {"algorithm": {"kl_coef": 0.05, "disable_kl": False}})
    with caplog.at_level(logging.INFO, logger="verl.utils.config"):
        load_config([f"config={base}", *base_args(files), "algorithm.disable_kl=true"])
    (record,) = [r for r in caplog.records if "has no effect" in r.getMessage()]
    assert record.levelno == logging.INFO and "algorithm.kl_coef=0.05 has no effect" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="verl.utils.config"):
        load_config([f"config={base}", *base_args(files), "algorithm.disable_kl=true", "algorithm.kl_coef=0.1"])
    (record,) = [r for r in caplog.records if "has no effect" in r.getMessage()]
    assert record.levelno == logging.WARNING and "algorithm.kl_coef=0.1 has no effect" in record.getMessage()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["worker.actor.tau_positive=2"],
            r"loss_type=default does not read worker.actor.tau_positive=2.0 \(it reads ",
        ),
        (
            ["worker.actor.loss_type=sapo", "worker.actor.clip_ratio_high=0.28"],
            r"loss_type=sapo does not read worker.actor.clip_ratio_high=0.28 \(it reads tau_positive, tau_negative\)",
        ),
        (["worker.actor.loss_type=gspo", "worker.actor.clip_ratio_dual=10"], r"gspo does not read .*clip_ratio_dual"),
        (
            ["algorithm.mask_truncated_responses=true", "worker.rollout.ignore_eos=true"],
            r"every response then runs to the length budget and counts as cut",
        ),
        (["worker.reward.model.weight=2"], r"worker.reward.model.weight set\(s\) the reward model, and .*unset"),
        (["worker.reward.rule_weight=0.5"], r"rule_weight=0.5 weighs the rule-based functions against a reward model"),
    ],
)
def test_a_setting_that_would_be_dropped_silently_is_refused(files, args, message):
    """Each of these was accepted and did nothing (a loss option the loss does not read, a reward model's weight
    without a reward model), or left the actor nothing to learn from (every response counted as cut)."""
    with pytest.raises(ConfigError, match=message):
        load_config([*base_args(files), *args])


def test_the_options_a_loss_reads_are_accepted(files):
    """Accepted and kept: each reaches the loaded config as given."""
    for args, read, expected in (
        (
            ["worker.actor.loss_type=gspo", "worker.actor.clip_ratio_low=3e-4", "worker.actor.clip_ratio_high=4e-4"],
            lambda c: (c.worker.actor.loss_type, c.worker.actor.clip_ratio_low, c.worker.actor.clip_ratio_high),
            ("gspo", 3e-4, 4e-4),
        ),
        (
            ["worker.actor.loss_type=sapo", "worker.actor.tau_positive=2", "worker.actor.tau_negative=3"],
            lambda c: (c.worker.actor.loss_type, c.worker.actor.tau_positive, c.worker.actor.tau_negative),
            ("sapo", 2.0, 3.0),
        ),
        (["worker.actor.clip_ratio_dual=4"], lambda c: c.worker.actor.clip_ratio_dual, 4.0),
        (["worker.rollout.ignore_eos=true"], lambda c: c.worker.rollout.ignore_eos, True),
    ):
        assert read(load_config([*base_args(files), *args])) == expected, args


def test_a_cpu_judge_on_a_cuda_machine_is_refused_at_validation(files, monkeypatch):
    """It was refused only once the data was read and Ray and the workers had started."""
    from verl.trainer import config as trainer_config

    monkeypatch.setattr(trainer_config, "is_cuda_available", lambda: True)
    judge = [f"worker.reward.judge.model_path={files / 'model'}", "trainer.device=cuda"]
    with pytest.raises(ConfigError, match=r"judge.num_gpus=0 runs the judge on the CPU, which the GPU build"):
        load_config([*base_args(files), *judge])


def test_settings_that_could_never_train_as_asked_are_refused(files, caplog):
    """Online filtering over groups of one response (each all equal: no step ever filled, also without a round
    limit); ignore_eos in episodes (a turn ends at the end-of-turn token). A generation round that does not divide
    the step is warned about (its surplus is dropped every step)."""
    with pytest.raises(ConfigError, match=r"online_filtering=true .* worker.rollout.n=1 .* no step could ever"):
        load_config(
            [*base_args(files), "algorithm.online_filtering=true", "worker.rollout.n=1"]
            + ["algorithm.adv_estimator=reinforce_plus_plus"]
        )
    env = f"worker.rollout.env={REPO}/examples/envs/guess_number.py:GuessNumber"
    with pytest.raises(ConfigError, match=r"ignore_eos=true with worker.rollout.env=.* every episode would be one"):
        load_config([*base_args(files), env, "worker.rollout.ignore_eos=true"])
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config"):
        load_config([*base_args(files), "data.mini_rollout_batch_size=2"])
        assert "does not divide" not in caplog.text
        load_config([*base_args(files), "data.mini_rollout_batch_size=3"])
    assert "data.mini_rollout_batch_size=3 does not divide data.rollout_batch_size=8" in caplog.text
    assert "makes 1 prompts' groups more than the step takes" in caplog.text
