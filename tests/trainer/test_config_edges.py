# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the RL config's loading and validation that tests/trainer/test_config.py leaves open (found by a mutation
audit of verl/utils/config.py and verl/trainer/config.py)."""

import logging
import re

import pytest

from tests.model_folders import config_only_model
from tests.trainer.test_config import base_args, write_yaml
from verl.trainer.config import PPOConfig, load_config, reward_stream_obstacle, worker_pools
from verl.utils.config import ConfigError
from verl.workers.config import RewardConfig


def gae(d) -> list[str]:
    """A critic from the actor's model folder, sized like the actor."""
    return [
        "algorithm.adv_estimator=gae",
        f"worker.critic.model.model_path={d / 'model'}",
        "worker.critic.global_batch_size=4",
    ]


DENSE = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 256}
"""4,096 bytes of fp32 keys and values a token (2 x 4 layers x 2 key/value heads x 64 x 4 bytes)."""


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        # a zero round size ended in a ZeroDivisionError (rollout_batch_size % 0) instead of naming the key
        (["data.mini_rollout_batch_size=0"], r"'data.mini_rollout_batch_size' must be positive, got 0"),
        (
            ["data.filter_overlong_prompts_workers=0"],
            r"'data.filter_overlong_prompts_workers' must be positive, got 0",
        ),
        (["data.video_max_frames=-1"], r"'data.video_max_frames' must be zero or positive, got -1"),
        (["data.video_fps=inf"], r"'data.video_fps' must be a finite number, got inf"),
        (["data.min_pixels=0"], r"'data.min_pixels' must be positive, got 0"),
        (["data.val_batch_size=-2"], r"'data.val_batch_size' is -2; use a positive number of prompts, or -1"),
        (["algorithm.kl_penalty=k9"], r"'algorithm.kl_penalty' is 'k9'; choose one of: "),
        (["algorithm.kl_type=pid"], r"'algorithm.kl_type' is 'pid'; choose one of: "),
        (["algorithm.ref_sync_steps=-1"], r"'algorithm.ref_sync_steps' must be zero or positive, got -1"),
        (["algorithm.kl_horizon=0"], r"'algorithm.kl_horizon' must be positive, got 0"),
        (["algorithm.lam=1.001"], r"algorithm.lam must lie in \[0, 1\], got 1.001"),
        (
            ["algorithm.ref_sync_steps=10", "algorithm.ref_sync_alpha=1.2"],
            r"algorithm.ref_sync_alpha must lie in \(0, 1\], got 1.2",
        ),
        (["algorithm.kl_penalty=full"], r"algorithm.kl_penalty=full needs whole vocabulary distributions"),
        (
            ["algorithm.entropy_control=true", "algorithm.entropy_coeff_delta=0"],
            r"algorithm.entropy_coeff_delta=0.0 must be positive under algorithm.entropy_control",
        ),
        (
            ["algorithm.entropy_control=true", "algorithm.entropy_coeff_min=-0.01"],
            r"entropy_coeff_min=-0.01 and entropy_coeff_max=0.05 must satisfy 0 <= min <= max",
        ),
        (
            ["algorithm.online_filtering=true", "algorithm.filter_low=0.5", "algorithm.filter_high=0.5"],
            r"algorithm.filter_low=0.5 must be below algorithm.filter_high=0.5",
        ),
        (["trainer.max_steps=0"], r"'trainer.max_steps' must be positive, got 0"),
        (["trainer.total_epochs=0"], r"'trainer.total_epochs' must be positive, got 0"),
        (["trainer.nnodes=0"], r"'trainer.nnodes' must be positive, got 0"),
        (["trainer.signal_grace_s=-1"], r"'trainer.signal_grace_s' must be zero or positive, got -1"),
        (["trainer.stall_report_s=-1"], r"'trainer.stall_report_s' must be zero or positive, got -1"),
        (["trainer.device=gpu"], r"'trainer.device' is 'gpu'; choose one of: auto, cpu, cuda"),
        (["trainer.val_generations_to_log=-1"], r"'trainer.val_generations_to_log' must be zero or positive"),
        (
            ["worker.critic.optim.training_steps=5"],
            r"'worker.critic.optim.training_steps' is derived from trainer.max_steps or trainer.total_epochs",
        ),
        (
            ["worker.rollout.max_model_len=1000"],
            r"worker.rollout.max_model_len=1000 must be at least data.max_prompt_length \+ "
            r"data.max_response_length = 1024",
        ),
        (
            ["worker.rollout.max_num_batched_tokens=1023"],
            r"worker.rollout.max_num_batched_tokens=1023 must be at least data.max_prompt_length \+ "
            r"data.max_response_length = 1024",
        ),
        (["algorithm.ref_sync_steps=1", "worker.actor.model.lora.rank=8"], r"algorithm.ref_sync_steps=1 with LoRA"),
        (
            ["trainer.n_gpus_per_node=4", "worker.ref.fsdp.fsdp_size=3"],
            r"worker.ref.fsdp.fsdp_size=3 must divide the 4 devices",
        ),
        (  # an HSDP group counts every node's devices
            ["trainer.nnodes=2", "worker.actor.fsdp.fsdp_size=3"],
            r"worker.actor.fsdp.fsdp_size=3 must divide the 4 devices",
        ),
        (  # mode=sync: a round's prompts x n are generated over the devices too
            ["trainer.n_gpus_per_node=4", "data.mini_rollout_batch_size=3"],
            r"data.mini_rollout_batch_size x worker.rollout.n = 6 must be divisible by the 4 devices",
        ),
        (
            [
                "worker.rollout.mode=disaggregated",
                "data.rollout_batch_size=12",
                "worker.rollout.n_gpus_per_node=3",
                "worker.rollout.tensor_parallel_size=2",
            ],
            r"tensor_parallel_size=2 must divide worker.rollout.n_gpus_per_node=3",
        ),
    ],
)
def test_values_no_run_can_use_are_refused_naming_the_key(files, override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config([*base_args(files), *override])


def test_a_critic_batch_that_does_not_divide_the_step_is_refused(files):
    with pytest.raises(
        ConfigError, match=r"data.rollout_batch_size=8 must be a multiple of worker.critic.global_batch"
    ):
        load_config([*base_args(files), *gae(files), "worker.critic.global_batch_size=3"])


def test_ulysses_needs_divisible_key_value_heads_and_takes_varlen(files):
    """Ulysses needs both head counts divisible (the key/value heads as well as the query heads), and takes the varlen
    kernel as well as auto."""
    config_only_model(files / "model", {"model_type": "qwen2", "num_attention_heads": 8, "num_key_value_heads": 2})
    args = [*base_args(files), "trainer.n_gpus_per_node=4"]
    with pytest.raises(ConfigError, match=r"ulysses_size=4 must divide the model's num_key_value_heads=2"):
        load_config([*args, "worker.actor.ulysses_size=4"])
    varlen = load_config([*args, "worker.actor.ulysses_size=2", "worker.actor.model.attn_implementation=varlen"])
    assert (varlen.worker.actor.ulysses_size, varlen.worker.actor.model.attn_implementation) == (2, "varlen")


def test_a_tensor_parallel_engine_must_divide_the_gated_deltanet_value_heads(files):
    text = {"num_attention_heads": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 1}
    config_only_model(files / "model", {"model_type": "qwen3_5", "text_config": text})
    with pytest.raises(ConfigError, match=r"tensor_parallel_size=2 must divide the model's linear_num_value_heads=1"):
        load_config([*base_args(files), "worker.rollout.tensor_parallel_size=2"])


def test_a_tensor_parallel_engine_and_the_key_value_heads_must_divide_one_another(files):
    """vLLM's QKVParallelLinear splits the key/value heads over the engine's processes, or copies one head to several
    where there are fewer heads than processes: 12 attention heads and 2 key/value heads with tensor_parallel_size=3
    passed the attention-head check, and every worker's engine failed an assertion ("3 is not divisible by 2") as it
    built the model."""
    heads = {"model_type": "qwen2", "num_attention_heads": 12, "num_key_value_heads": 2}
    config_only_model(files / "model", heads)
    args = [*base_args(files), "data.rollout_batch_size=12", "worker.actor.global_batch_size=6"]
    for size, world in ((1, 2), (2, 2), (4, 4), (6, 6)):  # a share of the heads, or a copy of one (4, 6)
        tp = [f"trainer.n_gpus_per_node={world}", f"worker.rollout.tensor_parallel_size={size}"]
        assert load_config([*args, *tp]).worker.rollout.tensor_parallel_size == size
    tp = ["trainer.n_gpus_per_node=3", "worker.rollout.tensor_parallel_size=3"]
    with pytest.raises(ConfigError, match=r"tensor_parallel_size=3 and the model's num_key_value_heads=2: each"):
        load_config([*args, *tp])
    # the MLP too (Qwen2.5-1.5B's 8960 over 6 processes: "8960 is not divisible by 6" as the engine built it)
    config_only_model(files / "model", {**heads, "intermediate_size": 8960})
    assert load_config([*args, "trainer.n_gpus_per_node=4", "worker.rollout.tensor_parallel_size=4"])
    tp = ["trainer.n_gpus_per_node=6", "worker.rollout.tensor_parallel_size=6"]
    with pytest.raises(ConfigError, match=r"tensor_parallel_size=6 must divide the model's intermediate_size=8960"):
        load_config([*args, *tp])


@pytest.mark.parametrize(
    ("override", "read", "expected"),
    [
        (["data.seed=0", "worker.rollout.seed=0"], lambda c: (c.data.seed, c.worker.rollout.seed), (0, 0)),
        (  # one image area: min_pixels may equal max_pixels
            ["data.min_pixels=65536", "data.max_pixels=65536"],
            lambda c: (c.worker.rollout.min_pixels, c.worker.rollout.max_pixels),
            (65536, 65536),
        ),
        (  # a constant entropy coefficient
            ["algorithm.entropy_control=true", "algorithm.entropy_coeff_min=0.01", "algorithm.entropy_coeff_max=0.01"],
            lambda c: (c.algorithm.entropy_coeff_min, c.algorithm.entropy_coeff_max),
            (0.01, 0.01),
        ),
        (["trainer.logger=[console,mlflow]"], lambda c: c.trainer.logger, ["console", "mlflow"]),
        # 4 prompts' groups x n=2 per update: 8 samples, one a device
        (["trainer.n_gpus_per_node=8"], lambda c: c.trainer.world_size(), 8),
        # rounds of 2 prompts x n=2 = 4 responses over 4 devices
        (["trainer.n_gpus_per_node=4", "data.mini_rollout_batch_size=2"], lambda c: c.data.mini_rollout_batch_size, 2),
        (  # 4 prompts x n=2 / 2 devices = 4 samples a device per update
            ["worker.actor.dynamic_batching=false", "worker.actor.micro_batch_size_per_device_for_update=4"],
            lambda c: c.worker.actor.micro_batch_size_per_device_for_update,
            4,
        ),
        (  # dynamic batching (the default) packs micro-batches by tokens: the count need not divide
            ["worker.actor.micro_batch_size_per_device_for_update=3"],
            lambda c: c.worker.actor.micro_batch_size_per_device_for_update,
            3,
        ),
        (  # a schedule given out of order: the stages are compared by step
            [
                "worker.rollout.mode=colocated",
                "data.max_response_length=64",
                "data.response_length_schedule={5: 64, 0: 32}",
            ],
            lambda c: c.data.response_length_schedule,
            {5: 64, 0: 32},
        ),
        (  # equal stages do not shrink
            [
                "worker.rollout.mode=colocated",
                "data.max_response_length=64",
                "data.response_length_schedule={0: 32, 5: 32}",
            ],
            lambda c: c.data.response_length_schedule,
            {0: 32, 5: 32},
        ),
        (  # at max_staleness=0 no sample comes from an older policy: gpg's missing ratio corrects nothing
            [
                "worker.rollout.mode=colocated",
                "algorithm.adv_estimator=gpg",
                "worker.actor.loss_type=gpg",
                "algorithm.rollout_correction.mode=bypass",
            ],
            lambda c: (c.worker.rollout.max_staleness, c.algorithm.rollout_correction.mode),
            (0, "bypass"),
        ),
        (  # a mode=disaggregated pool without its sizes: one node, one device
            ["worker.rollout.mode=disaggregated"],
            lambda c: (c.worker.rollout.nnodes, c.worker.rollout.n_gpus_per_node),
            (1, 1),
        ),
        (  # the bounds of online filtering are not read while it is off (warned about, not refused)
            ["algorithm.filter_low=0.9", "algorithm.filter_high=0.1"],
            lambda c: (c.algorithm.online_filtering, c.algorithm.filter_low, c.algorithm.filter_high),
            (False, 0.9, 0.1),
        ),
    ],
)
def test_valid_edges_are_accepted(files, override, read, expected):
    assert read(load_config([*base_args(files), *override])) == expected


def test_a_critics_gamma_and_lambda_of_zero_and_its_tokenizer_default(files):
    config = load_config([*base_args(files), *gae(files), "algorithm.gamma=0", "algorithm.lam=0"])
    assert (config.algorithm.gamma, config.algorithm.lam) == (0.0, 0.0)
    assert config.worker.critic.model.tokenizer_path == str(files / "model")  # the critic's own model_path


DERIVED = {
    "worker.rollout.prompt_length": "data.max_prompt_length",
    "worker.rollout.response_length": "data.max_response_length",
    "worker.rollout.trust_remote_code": "worker.actor.model.trust_remote_code",
    "worker.rollout.model_overrides": "worker.actor.model.override_config",
    "worker.actor.use_kl_loss": "algorithm.use_kl_loss",
    "worker.actor.kl_penalty": "algorithm.kl_penalty",
    "worker.actor.kl_coef": "algorithm.kl_coef",
    "worker.actor.disable_kl": "algorithm.disable_kl",
    "worker.ref.micro_batch_size_per_device_for_experience": "worker.actor.micro_batch_size_per_device_for_experience",
    "worker.ref.padding_free": "worker.actor.padding_free",
    "worker.ref.dynamic_batching": "worker.actor.dynamic_batching",
    "worker.ref.ulysses_size": "worker.actor.ulysses_size",
    "worker.override_chat_template": "data.override_chat_template",
    "worker.rollout.chat_template_kwargs": "data.chat_template_kwargs",
    "worker.rollout.min_pixels": "data.min_pixels",
    "worker.rollout.max_pixels": "data.max_pixels",
    "worker.reward.answer_key": "data.answer_key",
}


@pytest.mark.parametrize(("key", "source"), DERIVED.items(), ids=list(DERIVED))
def test_setting_a_derived_key_names_the_key_it_comes_from(files, key, source):
    with pytest.raises(ConfigError, match=rf"^Config key '{key}' is derived from {source}; set {source} instead"):
        load_config([*base_args(files), f"{key}=1"])


def test_the_derived_keys_carry_their_sources_values(files):
    """Each derived key holds the value given to its own source (a mix-up of two sources, e.g. the pixel bounds,
    kept every value equal to some source)."""
    config = load_config(
        [
            *base_args(files),
            "data.max_prompt_length=64",
            "data.max_response_length=32",
            "data.min_pixels=1000",
            "data.max_pixels=2000",
            "data.answer_key=solution",
            "worker.actor.model.trust_remote_code=true",
            "algorithm.use_kl_loss=true",
            "algorithm.kl_penalty=mse",
            "algorithm.kl_coef=0.05",
            "worker.actor.micro_batch_size_per_device_for_experience=3",
            "worker.actor.padding_free=false",
            "worker.actor.dynamic_batching=false",
            "worker.actor.micro_batch_size_per_device_for_update=2",
        ]
    )
    rollout, actor, ref = config.worker.rollout, config.worker.actor, config.worker.ref
    assert (rollout.prompt_length, rollout.response_length, rollout.max_model_len) == (64, 32, 96)
    assert (rollout.min_pixels, rollout.max_pixels) == (1000, 2000)
    assert config.worker.reward.answer_key == "solution" and rollout.trust_remote_code is True
    assert (actor.use_kl_loss, actor.kl_penalty, actor.kl_coef, actor.disable_kl) == (True, "mse", 0.05, False)
    assert (ref.micro_batch_size_per_device_for_experience, ref.padding_free, ref.dynamic_batching) == (
        3,
        False,
        False,
    )
    assert load_config([*base_args(files), "algorithm.disable_kl=true"]).worker.actor.disable_kl is True


def test_no_reference_answers_on_the_command_line(files):
    """data.answer_key=null (open-ended prompts): None, not the text 'null', reaches the reward."""
    config = load_config([*base_args(files), "data.answer_key=null"])
    assert config.data.answer_key is None and config.worker.reward.answer_key is None


def test_a_derived_key_is_refused_on_the_command_line_even_at_its_sources_value(files):
    """A resolved config file may repeat a derived key beside its source; the command line may not, not even both."""
    with pytest.raises(ConfigError, match=r"'worker.rollout.prompt_length' is derived .* \(in command line\)\.$"):
        load_config([*base_args(files), "data.max_prompt_length=64", "worker.rollout.prompt_length=64"])


def test_a_learning_rate_schedule_length_in_a_config_file_is_refused(files):
    """-1 is the placeholder a --dry-run dump holds (dropped on reload); another value would be overwritten."""
    cfg = write_yaml(files / "c.yaml", {"worker": {"actor": {"optim": {"training_steps": 100}}}})
    with pytest.raises(ConfigError, match=r"'worker.actor.optim.training_steps' is derived .*\(in config file '"):
        load_config([f"config={cfg}", *base_args(files)])
    cfg = write_yaml(files / "d.yaml", {"worker": {"actor": {"optim": {"training_steps": -1}}}})
    assert load_config([f"config={cfg}", *base_args(files)]).worker.actor.optim.training_steps == -1


@pytest.mark.parametrize("key", ["data.format_prompt", "data.override_chat_template"])
def test_a_template_key_naming_a_folder_is_refused(files, key):
    with pytest.raises(ConfigError, match=rf"'{key}' points to '{re.escape(str(files))}', which is not a file"):
        load_config([*base_args(files), f"{key}={files}"])


def test_the_context_limit_is_exact(files):
    model = config_only_model(files / "short", {"max_position_embeddings": 512})
    args = [*base_args(files), f"worker.actor.model.model_path={model}", "data.max_response_length=200"]
    assert load_config([*args, "data.max_prompt_length=312"]).worker.rollout.max_model_len == 512
    with pytest.raises(ConfigError, match=r"= 513 exceeds the 512 positions"):
        load_config([*args, "data.max_prompt_length=313"])


@pytest.mark.parametrize(
    ("model", "extra", "fits"),
    [
        (DENSE, ["worker.rollout.tensor_parallel_size=2"], True),  # each engine process holds 1 of the 2 kv heads
        ({**DENSE, "model_type": "qwen2", "sliding_window": 64, "use_sliding_window": False}, [], False),
        ({**DENSE, "head_dim": 128}, ["data.max_response_length=64"], False),  # 8,192 bytes a token, not 4,096
    ],
    ids=["tensor-parallel", "unused-window", "head-dim"],
)
def test_the_kv_cache_check_sizes_a_token_as_the_engine_does(files, model, extra, fits):
    """1 MiB on the CPU (blocks of 128) holds max_model_len=129 at 2,048 bytes a token, not at 4,096; a Qwen2 window
    that use_sliding_window turns off caps nothing; head_dim wins over hidden_size / heads."""
    folder = config_only_model(files / "kv", model)
    args = [*base_args(files), f"worker.actor.model.model_path={folder}", "trainer.device=cpu"]
    args += ["worker.rollout.kv_cache_memory_mb=1", "data.max_prompt_length=64", "data.max_response_length=65"]
    if fits:
        assert load_config([*args, *extra]).worker.rollout.kv_cache_memory_mb == 1
    else:
        with pytest.raises(ConfigError, match=r"kv_cache_memory_mb=1 cannot hold one sequence"):
            load_config([*args, *extra])


def test_gpu_only_refusals_under_the_default_device(files, monkeypatch):
    """trainer.device=auto on a GPU machine: a CPU judge is refused as with device=cuda; weight_sync=direct is
    refused for a disaggregated pool (it receives the weights by broadcast)."""
    from verl.trainer import config as trainer_config

    monkeypatch.setattr(trainer_config, "is_cuda_available", lambda: True)
    with pytest.raises(ConfigError, match=r"judge.num_gpus=0 runs the judge on the CPU, which the GPU build"):
        load_config([*base_args(files), f"worker.reward.judge.model_path={files / 'model'}"])
    pool = ["worker.rollout.mode=disaggregated", "worker.rollout.weight_sync=direct"]
    with pytest.raises(ConfigError, match=r"weight_sync=direct: with mode=disaggregated the rollout pool receives"):
        load_config([*base_args(files), *pool])


def test_the_gradient_reduction_dtype_of_a_frozen_model_is_warned_about_on_a_gpu(files, monkeypatch, caplog):
    """fsdp.mp_reduce_dtype sets the dtype gradients are reduced in, and the reference (and reward) model has none:
    accepted on a GPU with no word, while the actor's is read."""
    from verl.trainer import config as trainer_config

    monkeypatch.setattr(trainer_config, "is_cuda_available", lambda: True)
    with caplog.at_level(logging.WARNING, logger="verl"):
        load_config([*base_args(files), "worker.ref.fsdp.mp_reduce_dtype=bf16"])
    assert (
        "a frozen model has no gradients to reduce: worker.ref.fsdp.mp_reduce_dtype=bf16 has no effect" in caplog.text
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="verl"):
        load_config([*base_args(files), "worker.actor.fsdp.mp_reduce_dtype=bf16"])
    assert "has no effect" not in caplog.text


@pytest.mark.parametrize(
    ("override", "warning"),
    [
        (["algorithm.ref_sync_alpha=0.5"], "algorithm.ref_sync_steps=0: algorithm.ref_sync_alpha=0.5 has no effect"),
        (["trainer.rollout_data_freq=5"], "trainer.rollout_data_dir is unset: trainer.rollout_data_freq=5 has no"),
        (
            ['worker.rollout.val_override_config={"temperature": 0.5}'],
            "data.val_files is empty: worker.rollout.val_override_config={'temperature': 0.5} has no effect",
        ),
        (["worker.rollout.weight_bucket_mb=256"], "worker.rollout.mode=sync: worker.rollout.weight_bucket_mb=256 has"),
        (["algorithm.target_entropy=0.3"], "algorithm.entropy_control=false: algorithm.target_entropy=0.3 has no"),
        (["algorithm.kl_target=0.2"], "algorithm.kl_type=fixed: algorithm.kl_target=0.2 has no effect"),
        (["worker.rollout.mode=colocated", "worker.rollout.top_k=50"], "top_k=50: the engine samples from"),
        (["worker.rollout.mode=colocated", "worker.rollout.top_p=0.9"], "top_p=0.9, top_k=-1: the engine samples"),
        (["trainer.val_freq=1"], "trainer.val_freq=1, but data.val_files is empty: the run will not validate"),
        (["algorithm.kl_penalty=mse"], "algorithm.kl_penalty=mse is subtracted from the rewards (use_kl_loss=false)"),
    ],
)
def test_settings_the_run_ignores_or_misreads_are_warned_about(files, caplog, override, warning):
    with caplog.at_level(logging.WARNING, logger="verl"):
        load_config([*base_args(files), *override])
    assert warning in caplog.text


@pytest.mark.parametrize(
    "override",
    [
        ["algorithm.kl_penalty=k1"],  # k1 is kl: its penalty's gradient is the KL's
        ["algorithm.online_filtering=true", "data.mini_rollout_batch_size=3"],  # filtering draws rounds until full
    ],
)
def test_settings_that_are_right_as_given_are_not_warned_about(files, caplog, override):
    with caplog.at_level(logging.WARNING, logger="verl"):
        load_config([*base_args(files), *override])
    assert "subtracted from the rewards" not in caplog.text and "does not divide" not in caplog.text


def test_no_reward_at_all_cannot_stream():
    assert reward_stream_obstacle(RewardConfig(), "colocated") == "there is no reward to score"


def test_the_worker_pools_count_a_reward_model_only_on_a_pool_of_its_own():
    config = PPOConfig()
    config.trainer.n_gpus_per_node = 4
    config.worker.reward.model.model_path = "rm"
    trainer_pool = "the trainer's workers (trainer.nnodes x trainer.n_gpus_per_node)"
    assert worker_pools(config) == {trainer_pool: 4}  # n_gpus_per_node=0: in the actor's processes
    config.worker.reward.model.n_gpus_per_node = 2
    assert worker_pools(config) == {trainer_pool: 4, "the reward model's pool": 2}


def test_easyr1s_defaults_are_kept():
    """A config migrated from EasyR1 relies on the defaults it leaves out: these are EasyR1's (and the docstrings')."""
    config = PPOConfig()
    data, algorithm, trainer = config.data, config.algorithm, config.trainer
    assert (data.rollout_batch_size, data.val_batch_size, data.max_prompt_length, data.max_response_length) == (
        512,
        -1,
        512,
        512,
    )
    assert (data.shuffle, data.seed, data.filter_overlong_prompts) == (True, 1, True)
    assert (data.min_pixels, data.max_pixels, data.video_fps, data.video_max_frames) == (262144, 4194304, 2.0, 768)
    assert (algorithm.adv_estimator, algorithm.gamma, algorithm.lam, algorithm.kl_coef) == ("grpo", 1.0, 1.0, 1e-3)
    assert (algorithm.filter_low, algorithm.filter_high, algorithm.rollout_correction.mode) == (0.01, 0.99, "auto")
    assert (trainer.total_epochs, trainer.max_try_make_batch, trainer.val_before_train) == (15, 20, True)
    assert (trainer.save_freq, trainer.save_limit, trainer.val_freq, trainer.find_last_checkpoint) == (
        -1,
        -1,
        -1,
        True,
    )
    assert (trainer.project_name, trainer.experiment_name, trainer.logger) == ("verl_compact", "demo", ["console"])
    assert (trainer.signal_grace_s, trainer.stall_report_s) == (300.0, 1800.0)


def test_relative_paths_reach_the_workers_absolute(files, monkeypatch):
    """Ray workers may run in another directory: a route's function file, a judge's template and the checkpoint to
    resume from, given relative to the working directory, are made absolute when the config loads."""
    monkeypatch.chdir(files)
    (files / "judge.jinja").write_text("Grade: {{ response }}")
    (files / "ckpt" / "global_step_3").mkdir(parents=True)
    args = [arg for arg in base_args(files) if not arg.startswith("worker.reward.reward_function=")]
    config = load_config(
        [
            *args,
            "worker.reward.routes={math: reward.py:compute_score}",
            f"worker.reward.judge.model_path={files / 'model'}",
            "worker.reward.judge.template=judge.jinja",
            "trainer.load_checkpoint_path=ckpt/global_step_3",
        ]
    )
    assert config.worker.reward.routes == {"math": f"{files / 'reward.py'}:compute_score"}
    assert config.worker.reward.judge.template == str(files / "judge.jinja")
    assert config.trainer.load_checkpoint_path == str(files / "ckpt" / "global_step_3")


def test_a_rubric_parts_function_reaches_the_workers_absolute(files, monkeypatch):
    monkeypatch.chdir(files)
    args = [arg for arg in base_args(files) if not arg.startswith("worker.reward.reward_function=")]
    config = load_config([*args, "worker.reward.rubric={fmt: {function: reward.py:compute_score, weight: 1.0}}"])
    assert config.worker.reward.rubric == {"fmt": {"function": f"{files / 'reward.py'}:compute_score", "weight": 1.0}}


def _flat(values: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["worker.rollout.mode=colocated", "worker.rollout.max_staleness=1", "algorithm.use_kl_loss=true"],
        ["worker.rollout.mode=disaggregated", "worker.actor.loss_type=gspo", "algorithm.adv_estimator=gae"],
    ],
)
def test_filled_keys_name_every_key_the_loader_fills_in(files, overrides):
    """A --dry-run dump loaded again drops the keys FILLED_KEYS names where they hold what the loader filled in (so
    they follow the command line); a key the loader fills in that it does not name would stay the dumped value."""
    import copy

    from verl.trainer.config import DERIVED_KEYS, FILLED_KEYS, fill_derived
    from verl.utils.config import command_line_sources, config_to_dict, merge_config

    args = [*base_args(files), *overrides, *(gae(files) if "algorithm.adv_estimator=gae" in overrides else [])]
    before = merge_config(PPOConfig, command_line_sources(args))
    after = _flat(config_to_dict(fill_derived(copy.deepcopy(before))))
    changed = {key for key, value in _flat(config_to_dict(before)).items() if after[key] != value}
    assert changed - set(DERIVED_KEYS) <= set(FILLED_KEYS)
    assert changed & set(FILLED_KEYS)  # the loader did fill some in
