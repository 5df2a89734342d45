# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What the runner hands Ray and prints before training, checked without starting Ray."""

import json
import logging
import os
import subprocess
import sys
import time

import psutil
import pytest
import ray
from ray._common.utils import load_class

from verl.trainer import ray_setup, runner
from verl.trainer.checkpointing import checkpoint_plan, log_checkpoint_plan
from verl.trainer.config import PPOConfig
from verl.utils import quiet, worker_setup


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_runner_gives_every_worker_the_setup_hook_and_environment(monkeypatch):
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(ray_setup, "start_reaper", lambda: None)
    monkeypatch.setattr(ray_setup, "watch_control_store", lambda: None)  # no Ray started: no store to watch
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.delenv(quiet.VERBOSE_ENV, raising=False)
    ray_setup.init_ray(PPOConfig(), "cpu")
    (kwargs,) = calls
    runtime_env = kwargs["runtime_env"]
    assert load_class(runtime_env["worker_process_setup_hook"]) is worker_setup.setup_worker_process
    assert runtime_env["env_vars"]["VLLM_LOGGING_LEVEL"] == "WARN"  # vLLM's INFO config dump stays out
    assert runtime_env["env_vars"]["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"


def test_a_worker_shows_this_projects_info_lines_and_no_one_elses():
    # A Ray worker starts with no logging configured: before the setup hook configured the `verl` loggers, their INFO
    # lines (the LoRA adapters' size, the CPU engine's dtype, a saved checkpoint) never reached the console.
    program = (
        "import logging\n"
        "from verl.utils.worker_setup import setup_worker_process\n"
        "setup_worker_process()\n"
        "logging.getLogger('verl.models.fsdp').info('LoRA rank %d: adapters train.', 8)\n"
        "logging.getLogger('verl.models.fsdp').debug('a debug line')\n"
        "logging.getLogger('transformers.modeling_utils').info('a library info line')\n"
        "logging.getLogger('transformers.modeling_utils').warning('a library warning')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=REPO, check=True
    )
    assert "INFO verl.models.fsdp: LoRA rank 8: adapters train." in result.stderr
    assert result.stderr.count("adapters train") == 1
    assert "a debug line" not in result.stderr and "a library info line" not in result.stderr
    assert "a library warning" in result.stderr  # Python's own fallback for the other loggers, as before


def test_the_checkpoint_plan_names_the_directory_what_and_when():
    config = PPOConfig()
    config.trainer.save_checkpoint_path = "/runs/exp"
    config.trainer.save_freq, config.trainer.save_model_only = 5, False
    assert checkpoint_plan(config.trainer) == (
        "Checkpoints go to /runs/exp (model, optimizer and data-loader state, every 5 steps and at the end)."
    )
    config.trainer.save_freq = -1
    assert checkpoint_plan(config.trainer, model_only=True) == (
        "Checkpoints go to /runs/exp (model weights only, at the end)."
    )
    assert checkpoint_plan(config.trainer, 3 * 2**29, model_only=True) == (
        "Checkpoints go to /runs/exp (model weights only, at the end; about 1.50 GiB each)."
    )


def test_a_run_whose_checkpoint_will_not_fit_is_warned_at_its_start(tmp_path, small_disk, caplog):
    from verl.models.tiny_models import count_parameters, get_or_build_tiny_model

    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    config = PPOConfig()
    config.worker.actor.model.model_path = config.worker.critic.model.model_path = model
    config.trainer.save_checkpoint_path = os.path.join(small_disk(4096).path, "run")  # 4 MiB free
    expected = 3 * 4 * count_parameters(model)["total"]  # fp32 weights and AdamW's two moments
    assert runner.checkpoint_size(config) == expected
    with caplog.at_level(logging.INFO, logger="verl.trainer.checkpointing"):
        log_checkpoint_plan(config.trainer, runner.checkpoint_size(config))
    assert f"about {expected / 2**30:.2f} GiB each" in caplog.text
    assert f"One checkpoint of this run takes {expected / 2**30:.2f} GiB, and 0.00 GiB are free at" in caplog.text
    config.algorithm.adv_estimator = "gae"  # the critic's checkpoint too
    assert runner.checkpoint_size(config) == 2 * expected
    config.worker.actor.model.lora.rank = 8  # adapters only: too small to matter, not estimated
    assert runner.checkpoint_size(config) is None


@pytest.mark.parametrize(("variable", "user_value"), [("TASK_EVENTS_ENV", "1000"), ("PRESTART_ENV", "1")])
def test_task_records_and_the_idle_worker_are_off_unless_the_user_set_them(monkeypatch, variable, user_value):
    name = getattr(ray_setup, variable)
    seen = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.append(os.environ.get(name)))
    monkeypatch.setattr(ray_setup, "start_reaper", lambda: None)
    monkeypatch.setattr(ray_setup, "watch_control_store", lambda: None)  # no Ray started: no store to watch
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(name, raising=False)
    ray_setup.init_ray(PPOConfig(), "cpu")
    monkeypatch.setenv(name, user_value)
    ray_setup.init_ray(PPOConfig(), "cpu")
    assert seen == ["0", user_value]


def test_a_timeline_keeps_task_records_on_and_profiles(monkeypatch):
    names = (ray_setup.TASK_EVENTS_ENV, ray_setup.PROFILING_ENV)
    seen = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.append([os.environ.get(name) for name in names]))
    monkeypatch.setattr(ray_setup, "start_reaper", lambda: None)
    monkeypatch.setattr(ray_setup, "watch_control_store", lambda: None)  # no Ray started: no store to watch
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for name in names:
        monkeypatch.delenv(name, raising=False)
    config = PPOConfig()
    config.trainer.ray_timeline = "timeline.json"
    ray_setup.init_ray(config, "cpu")
    assert seen == [["1000", "1"]]


def test_a_timeline_that_cannot_be_had_is_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(ray_setup.TASK_EVENTS_ENV, "0")
    path = tmp_path / "new" / "timeline.json"
    monkeypatch.setattr(ray, "timeline", lambda: [])
    with caplog.at_level(logging.WARNING, logger="verl.trainer.ray_setup"):
        ray_setup.write_timeline(str(path))
    assert path.read_text() == "[]" and f"The Ray timeline in {path} is empty" in caplog.text

    def not_started():
        raise RuntimeError("Ray has not been started yet.")

    monkeypatch.setattr(ray, "timeline", not_started)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.ray_setup"):
        ray_setup.write_timeline(str(tmp_path / "other.json"))
    assert "Could not write trainer.ray_timeline=" in caplog.text and not (tmp_path / "other.json").exists()


def _private_mib(process: psutil.Process) -> float:
    with open(f"/proc/{process.pid}/status", encoding="utf-8") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("RssAnon:"))


@pytest.mark.slow
def test_many_worker_calls_do_not_grow_the_gcs(monkeypatch):
    """Every worker call is a Ray task; with Ray's default task records the GCS grew ~70 MiB per 20k calls (and a
    long run makes millions). A Ray the runner starts keeps it flat."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(ray_setup.TASK_EVENTS_ENV, raising=False)
    config = PPOConfig()
    config.trainer.n_gpus_per_node = 1
    ray_setup.init_ray(config, "cpu")
    try:

        @ray.remote(num_cpus=0)
        class Echo:
            def echo(self, value: int) -> int:
                return value

        echo = Echo.remote()
        ray.get([echo.echo.remote(i) for i in range(500)])
        gcs = next(p for p in psutil.Process().children(recursive=True) if p.name() == "gcs_server")
        time.sleep(2)
        before = _private_mib(gcs)
        for _ in range(10):
            ray.get([echo.echo.remote(i) for i in range(1000)])
        time.sleep(3)  # task records are flushed to the GCS every second when they are on
        assert _private_mib(gcs) - before < 10, (before, _private_mib(gcs))
    finally:
        ray.shutdown()


def test_a_nearly_full_disk_under_ray_s_temp_folder_is_warned_about(small_disk, monkeypatch):
    disk = small_disk(4096)
    monkeypatch.setenv("RAY_TMPDIR", disk.path)
    assert ray_setup.ray_temp_disk_warning() is None  # empty
    with open(os.path.join(disk.path, "ballast"), "wb") as f:
        f.write(b"x" * (3900 * 1024))
    warning = ray_setup.ray_temp_disk_warning()
    assert warning.startswith(f"The disk of Ray's temp folder {disk.path} is 9") and "RAY_TMPDIR" in warning, warning


def one_row_run(tmp_path, row: dict, model: str, *overrides: str) -> PPOConfig:
    """The config of a run on `row` alone (train.jsonl under `tmp_path`) with the tiny `model`, checkpoints in run/."""
    from verl.trainer.config import load_config

    (tmp_path / "train.jsonl").write_text(json.dumps(row) + "\n")
    return load_config(
        [
            f"data.train_files={tmp_path / 'train.jsonl'}",
            "data.rollout_batch_size=1",
            "worker.actor.global_batch_size=1",
            "trainer.n_gpus_per_node=1",
            "worker.rollout.n=2",
            f"worker.actor.model.model_path={model}",
            f"worker.reward.reward_function={REPO}/examples/reward_function/math.py:compute_score",
            f"trainer.save_checkpoint_path={tmp_path / 'run'}",
            *overrides,
        ]
    )


def test_verls_agent_loop_fields_without_an_environment_are_named_at_the_start(tmp_path, caplog):
    """verl's multi-turn datasets name an agent loop and its tools' arguments per row; here episodes come from
    worker.rollout.env, so a run without one says the fields go unused instead of training single-turn silently."""
    from verl.models.tiny_models import get_or_build_tiny_model

    row = {
        "prompt": [{"role": "user", "content": "What is 2 + 3?"}],
        "reward_model": {"ground_truth": "5"},
        "agent_name": "tool_agent",
        "extra_info": {"index": 0, "tools_kwargs": {"calc": {"create_kwargs": {"ground_truth": "5"}}}},
    }
    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    config = one_row_run(tmp_path, row, model, "data.answer_key=reward_model.ground_truth")
    with caplog.at_level(logging.WARNING, logger="verl.trainer.runner"):
        runner._prepare_inputs(config)
    assert "data.train_files sets agent_name, extra_info.tools_kwargs, fields of verl's agent loop" in caplog.text
    caplog.clear()
    (tmp_path / "train.jsonl").write_text(json.dumps({**row, "agent_name": None, "extra_info": {"index": 0}}) + "\n")
    with caplog.at_level(logging.WARNING, logger="verl.trainer.runner"):
        runner._prepare_inputs(config)
    assert "agent loop" not in caplog.text


def test_the_drivers_prompts_expand_images_as_the_workers_and_vllm_do(tmp_path):
    """A small image upscaled to data.min_pixels (262144 by default) then rounded by a processor with other bounds
    than the model's gave 361 image tokens in the prompt and 324 in the workers' and the engine's inputs: the driver
    uses the model's own processor, as they do."""
    from PIL import Image

    from verl.data.multimodal import process_media
    from verl.data.tokenizer import get_processor
    from verl.models.tiny_models import get_or_build_tiny_model

    model = get_or_build_tiny_model("qwen2_5_vl", str(tmp_path / "models"), min_pixels=3136, max_pixels=12845056)
    Image.new("RGB", (100, 100), (200, 30, 30)).save(tmp_path / "red.png")
    row = {"prompt": "<image>What colour?", "answer": "red", "images": [str(tmp_path / "red.png")]}
    config = one_row_run(tmp_path, row, model, "data.max_prompt_length=1024")
    assert config.data.min_pixels == 262144  # the default, above the 100 x 100 image
    train, _, tokenizer, processor, _ = runner._prepare_inputs(config)
    batch = next(iter(train))
    prompt_tokens = int((batch.batch["input_ids"] == processor.image_token_id).sum())
    grid = process_media(batch.non_tensor_batch["multi_modal_data"][0], get_processor(model))["image_grid_thw"]
    assert prompt_tokens == int(grid.prod(-1).sum()) // processor.image_processor.merge_size**2 > 0


def test_a_resume_that_cannot_continue_the_saved_run_is_said_before_ray_starts(tmp_path, caplog):
    """A critic-trained estimator from a checkpoint without a critic failed in the workers (no critic/ directory);
    an asynchronous checkpoint resumed in mode=sync drops the prompts it had in flight: said."""
    import torch

    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.protocol import DataProto
    from verl.trainer.async_trainer import IN_FLIGHT_FILE

    step = tmp_path / "run" / "global_step_2"
    (step / "actor").mkdir(parents=True)
    (step / "trainer_state.json").write_text("{}")
    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    row = {"prompt": "1+1?", "answer": "2"}
    gae = [
        "algorithm.adv_estimator=gae",
        f"worker.critic.model.model_path={model}",
        "worker.critic.global_batch_size=1",
    ]
    with pytest.raises(ValueError, match=r"adv_estimator=gae trains a critic, and the checkpoint has none"):
        runner._prepare_inputs(one_row_run(tmp_path, row, model, *gae))
    torch.save(DataProto.from_dict(non_tensors={"uid": ["a", "b"]}), step / IN_FLIGHT_FILE)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.runner"):
        assert runner._prepare_inputs(one_row_run(tmp_path, row, model))[4] == str(step)
    assert "with 2 prompts in flight; worker.rollout.mode=sync does not regenerate them" in caplog.text
    colocated = ["worker.rollout.mode=colocated", "worker.rollout.max_staleness=0"]  # one round of 1 prompt
    with pytest.raises(ValueError, match=r"holds 2 prompts in flight, more than this run keeps in flight \(worker"):
        runner._prepare_inputs(one_row_run(tmp_path, row, model, *colocated))
    # 3 prompts in flight (saved on 1 device, rounds of 3) do not split over 2: dispatch padded them with a copy,
    # and that prompt was generated and trained twice under one uid
    torch.save(DataProto.from_dict(non_tensors={"uid": ["a", "b", "c"]}), step / IN_FLIGHT_FILE)
    two = ["trainer.n_gpus_per_node=2", "data.rollout_batch_size=2", "worker.actor.global_batch_size=2"]
    config = one_row_run(tmp_path, row, model, *two, "worker.rollout.mode=colocated", "worker.rollout.max_staleness=1")
    (tmp_path / "train.jsonl").write_text((json.dumps(row) + "\n") * 4)
    with pytest.raises(ValueError, match=r"its 3 prompts in flight do not split evenly over the 2 devices"):
        runner._prepare_inputs(config)


def test_prompts_in_flight_from_data_with_other_columns_are_refused_before_ray_starts(tmp_path, caplog):
    """An asynchronous checkpoint's prompts in flight are admitted beside the resumed run's rows: from data with
    another column (a difficulty added between the runs) the first step failed in DataProto.concat ("Cannot concat:
    ... non-tensor keys"), after every worker had started. Refused naming both; the same data resumes, and mode=sync
    drops them. A changed prompt template is said: those prompts are regenerated with the saved run's text (the
    warning on changed settings said the run goes on with the new ones)."""
    import numpy as np
    import torch

    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.protocol import collate_fn
    from verl.trainer.async_trainer import IN_FLIGHT_FILE
    from verl.trainer.checkpointing import saved_settings

    model = get_or_build_tiny_model("qwen2", str(tmp_path / "models"))
    row = {"prompt": "1+1?", "answer": "2"}
    colocated = ["worker.rollout.mode=colocated", "worker.rollout.max_staleness=1"]
    saved_run = one_row_run(tmp_path, row, model, *colocated)
    loader = runner._prepare_inputs(saved_run)[0]  # no checkpoint yet
    rows = collate_fn([loader.dataset[0]])  # what the saved run admitted
    rows.non_tensor_batch["uid"] = np.array(["a"], dtype=object)
    step = tmp_path / "run" / "global_step_2"
    (step / "actor").mkdir(parents=True)
    (step / "trainer_state.json").write_text(json.dumps({"settings": saved_settings(saved_run)}))
    torch.save(rows, step / IN_FLIGHT_FILE)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.runner"):
        assert runner._prepare_inputs(one_row_run(tmp_path, row, model, *colocated))[4] == str(step)
    assert "prompts in flight" not in caplog.text
    template = tmp_path / "brief.jinja"
    template.write_text("{{ content }} Answer briefly.")
    with caplog.at_level(logging.WARNING, logger="verl.trainer.runner"):
        runner._prepare_inputs(one_row_run(tmp_path, row, model, *colocated, f"data.format_prompt={template}"))
    assert (
        f"data.format_prompt changed since {step} was saved: its 1 prompts in flight are regenerated from the rows the "
        "saved run made" in caplog.text
    )
    other = {**row, "difficulty": 2}
    with pytest.raises(
        ValueError, match=r"its 1 prompts in flight have the columns \['ground_truth', .*, and this run's "
    ):
        runner._prepare_inputs(one_row_run(tmp_path, other, model, *colocated))
    assert runner._prepare_inputs(one_row_run(tmp_path, other, model))[4] == str(step)  # mode=sync


def test_a_critic_of_another_vocabulary_is_refused_before_ray_starts(tmp_path):
    """The critic scores the actor's token ids: a critic model of another vocabulary trained on ids that mean other
    tokens to it, without an error. Refused; a critic with its own copy of the actor's tokenizer is accepted."""
    import shutil

    from verl.models.tiny_models import get_or_build_tiny_model

    models = str(tmp_path / "models")
    actor = get_or_build_tiny_model("qwen2", models)
    row = {"prompt": "1+1?", "answer": "2"}

    def with_critic(critic: str) -> PPOConfig:
        gae = ["algorithm.adv_estimator=gae", f"worker.critic.model.model_path={critic}"]
        return one_row_run(tmp_path, row, actor, *gae, "worker.critic.global_batch_size=1")

    other = get_or_build_tiny_model("qwen2", models, vocab_size=1024)
    with pytest.raises(ray_setup.SetupError, match=r"critic.model.tokenizer_path=.* does not share the actor's voc"):
        runner._prepare_inputs(with_critic(other))
    copy = shutil.copytree(actor, tmp_path / "critic")
    runner._prepare_inputs(with_critic(str(copy)))


def test_a_tokenizer_with_ids_past_the_actors_embedding_is_refused_before_ray_starts(tmp_path):
    """Another model's tokenizer (ids past the model's vocab_size) ended the run in an IndexError from vLLM's
    embedding at the first generation."""
    from verl.models.tiny_models import get_or_build_tiny_model

    models = str(tmp_path / "models")
    small, large = get_or_build_tiny_model("qwen2", models, vocab_size=512), get_or_build_tiny_model("qwen2", models)
    row = {"prompt": "1+1?", "answer": "2"}
    config = one_row_run(tmp_path, row, small, f"worker.actor.model.tokenizer_path={large}")
    with pytest.raises(ray_setup.SetupError, match=r"tokenizer_path=.* does not fit worker.actor.model.model_path=.*"):
        runner._prepare_inputs(config)
    runner._prepare_inputs(one_row_run(tmp_path, row, large, f"worker.actor.model.tokenizer_path={small}"))  # fewer
    # a vision-language model's vocab_size is its text_config's; a config without one says nothing
    from verl.data.tokenizer import get_tokenizer
    from verl.models.config import tokenizer_beyond_model

    tokenizer = get_tokenizer(large, warn_no_pad=False)
    assert "and the model's embedding 100 rows" in tokenizer_beyond_model(
        tokenizer, {"text_config": {"vocab_size": 100}}
    )
    assert (
        tokenizer_beyond_model(tokenizer, {"vocab_size": 10**6}) is None
        and tokenizer_beyond_model(tokenizer, {}) is None
    )


def test_a_model_whose_weights_do_not_load_ends_the_cli_in_one_line(tmp_path, monkeypatch, capsys):
    """The worker's ModelLoadError (weights that do not fit config.json, tests/models/test_loading.py) reaches the
    driver inside Ray's task error: one line and exit 2, as a setup error, no traceback and no resume hint."""
    from verl.models.loading import ModelLoadError
    from verl.models.tiny_models import get_or_build_tiny_model
    from verl.trainer import main as trainer_main

    config = one_row_run(tmp_path, {"prompt": "1+1?", "answer": "2"}, get_or_build_tiny_model("qwen2", str(tmp_path)))

    def failing(config):
        raise ModelLoadError("Model 'm': its weights do not fit its config.json: w is [1] in the weights, [2] by it")

    monkeypatch.setattr(trainer_main, "load_config_or_exit", lambda *args: config)
    monkeypatch.setattr(trainer_main, "run", failing)
    assert trainer_main.main([]) == 2
    err = capsys.readouterr().err
    assert err == "Error: Model 'm': its weights do not fit its config.json: w is [1] in the weights, [2] by it\n"


def test_a_driver_without_a_gpu_on_a_gpu_cluster_does_not_train_on_the_cpus(monkeypatch):
    """trainer.device=auto is resolved in the driver's process: a driver on a CPU-only head (`ray job submit`, a
    KubeRay head) made the run a CPU run over the GPU cluster, saying nothing. The cluster's nodes are given as Ray
    would report them (this machine has no GPU node to join)."""
    from verl.single_controller.ray.resource import NodeResources
    from verl.trainer.ray_setup import SetupError

    config = PPOConfig()
    config.trainer.nnodes, config.trainer.n_gpus_per_node = 1, 2
    gpu_node = NodeResources(node_id="n1", ip="10.0.0.2", cpus=96.0, gpus=8.0)
    monkeypatch.setattr(runner, "cluster_nodes", lambda: [gpu_node])
    runner.check_run_fits(config, "cpu")  # a Ray of the run's own: a CPU-only torch on a GPU machine trains on CPUs
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")  # joining the cluster
    with pytest.raises(SetupError, match=r"trainer.device=auto chose the CPU, .* but the Ray cluster has 8 GPU"):
        runner.check_run_fits(config, "cpu")
    runner.check_run_fits(config, "cuda")  # fits
    config.trainer.device = "cpu"  # asked for: the CPUs of a GPU cluster train
    runner.check_run_fits(config, "cpu")
    monkeypatch.setattr(runner, "cluster_nodes", lambda: [NodeResources("n1", "10.0.0.2", 96.0, 0.0)])
    config.trainer.device = "auto"
    runner.check_run_fits(config, "cpu")  # a CPU cluster
