# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Golden runs: six small training runs with fixed seeds, each compared bit for bit with the run recorded before the
generation path was rewritten (tests/trainer/golden_runs.json).

A run's fingerprint is every step's losses, scores and lengths (exact floats), a hash of every step's rollout dump
(prompts, responses, rewards; the random `uid` left out) and a hash of the actor weights saved after step 3. A change
that alters what any mode samples or trains on shows here, whichever module it touched. (The rollout pool's run is
compared up to the first step whose tokens switched policy versions elsewhere than in the recording: TIMING_KEYS.)

Floats are bitwise only on the CPU kind they were recorded on: the kernels differ by instruction set and CPU model
(two AVX512 machines gave grad norms one float32 step apart). The runs are recorded per kind (`cpu_kind`); a kind
without its own recording is compared with the one of its instruction set alone (the first recording, made before
kinds named the model), and skipped, saying so, without either. `VERL_RECORD_GOLDENS=1 pytest
tests/trainer/test_golden_runs.py` records this kind's runs, for a change that is meant to alter what a run samples
(say why in the commit), or on a new kind from a commit whose runs equal the recorded ones.
"""

import hashlib
import json
import os
import pathlib

import pytest
import torch
from families import FAMILIES

from tests.trainer.test_async_e2e import actor_weights, build_workspace, read_log, run_args
from tests.trainer.test_disaggregated_e2e import DISAGGREGATED, one_process
from tests.trainer.test_e2e import game_args, vl_data
from verl.trainer.config import load_config
from verl.trainer.runner import run_ppo


pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[2]
GOLDENS = pathlib.Path(__file__).with_name("golden_runs.json")
RECORD = os.environ.get("VERL_RECORD_GOLDENS") == "1"
STEP_KEYS = ("critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm")
TIMING_KEYS = ("async/staleness_mean", "async/resumed_share")
"""Which policy versions a step's tokens were sampled under. A rollout pool loads a broadcast between two engine steps
whenever it arrives, so under load (another test beside it) a later step's samples may switch versions at other
tokens than in the recording: its figures cannot equal the recording's, and the comparison stops there."""
GAME_REWARD = (
    "def compute_score(sample):\n"
    "    info = sample['extra_info']\n"
    "    return {'overall': info['env_solved'] + len(set(info['last_turn'])) / 8.0, 'solved': info['env_solved']}\n"
)


def cpu_kind() -> str:
    """torch's instruction-set level and, on Linux, the CPU's family and model."""
    kind = torch.backends.cpu.get_cpu_capability()
    try:
        lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return kind
    fields = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in lines)}
    family, model = fields.get("cpu family"), fields.get("model")
    return f"{kind} (family {family}, model {model})" if family and model else kind


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, local_ray):
    ws = build_workspace(tmp_path_factory.mktemp("golden"))
    (ws["root"] / "game_reward.py").write_text(GAME_REWARD)
    return ws


def vl_args(ws, name: str) -> list[str]:
    data_dir, model = vl_data(ws["root"], "vl_data")
    replaced = {
        "data.train_files": f"{data_dir}/train.jsonl",
        "worker.actor.model.model_path": model,
        "worker.reward.reward_function": f"{REPO}/examples/reward_function/count_shapes.py:compute_score",
    }
    args = [arg for arg in run_args(ws, name) if arg.split("=")[0] not in replaced]
    return (
        args
        + [f"{key}={value}" for key, value in replaced.items()]
        + [
            "data.prompt_key=problem",
            f"data.image_dir={data_dir}/images",
            f"data.min_pixels={FAMILIES['qwen2_5_vl'].pixels}",
            f"data.max_pixels={FAMILIES['qwen2_5_vl'].pixels}",
            "worker.rollout.limit_images=1",
        ]
    )


def env_args(ws, name: str, env: str) -> list[str]:
    reward = ws["root"] / "game_reward.py"
    game = [arg for arg in game_args(reward) if not arg.startswith("data.max_response_length")]
    return run_args(ws, name, f"worker.rollout.env={REPO}/examples/envs/{env}", *game)


RUNS = {
    "text_sync": lambda ws: run_args(
        ws, "text_sync", f"data.val_files={ws['root'] / 'train.jsonl'}", "trainer.val_freq=3"
    ),
    "vl_sync": lambda ws: vl_args(ws, "vl_sync"),
    "step_env_sync": lambda ws: env_args(ws, "step_env_sync", "guess_number.py:GuessNumber"),
    "client_env_sync": lambda ws: (
        env_args(ws, "client_env_sync", "guess_number_client.py:GuessNumberChat")
        + ["worker.rollout.env_kwargs={max_guesses: 3}"]
    ),
    "colocated_staleness_2": lambda ws: run_args(
        ws, "colocated_staleness_2", "worker.rollout.mode=colocated", "worker.rollout.max_staleness=2"
    ),
    "pool_staleness_1": lambda ws: one_process(
        run_args(
            ws,
            "pool_staleness_1",
            *DISAGGREGATED,
            "worker.rollout.max_staleness=1",
            "algorithm.rollout_correction.mode=tis",
        )
    ),
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint(run_dir: pathlib.Path) -> dict:
    """The run's per-step figures, a hash of each step's rollout dump and of the actor weights saved at step 3."""
    log = read_log(run_dir)
    steps = {}
    for step in sorted(log):
        row = log[step]
        figures = {key: row[key] for key in STEP_KEYS if key in row}
        figures.update({key: value for key, value in row.items() if key.startswith("val/")})
        timing = {key: row[key] for key in TIMING_KEYS if key in row}
        records = [json.loads(line) for line in (run_dir / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]
        dump = json.dumps([{k: v for k, v in r.items() if k != "uid"} for r in records], sort_keys=True)
        steps[str(step)] = {"figures": figures, "rollouts": sha256(dump.encode()), "timing": timing}
    weights = actor_weights(run_dir / "global_step_3" / "actor")
    digest = hashlib.sha256()
    for name in sorted(weights):
        if isinstance(weights[name], torch.Tensor):
            digest.update(name.encode())
            digest.update(weights[name].contiguous().view(torch.uint8).numpy().tobytes())
    return {"steps": steps, "weights": digest.hexdigest()}


@pytest.mark.parametrize("name", list(RUNS))
def test_run_equals_its_golden_run(workspace, name):
    goldens = json.loads(GOLDENS.read_text()) if GOLDENS.exists() else {"by_cpu": {}}
    recorded = goldens["by_cpu"].get(cpu_kind()) or goldens["by_cpu"].get(torch.backends.cpu.get_cpu_capability())
    if not RECORD and recorded is None:
        pytest.skip(f"golden runs were recorded on {sorted(goldens['by_cpu'])} CPUs; this one is {cpu_kind()}")
    run_ppo(load_config(RUNS[name](workspace) + ["trainer.max_steps=3"]))
    got = fingerprint(workspace["root"] / name)
    assert sorted(got["steps"]) == ["1", "2", "3"]
    if RECORD:
        goldens["by_cpu"].setdefault(cpu_kind(), {})[name] = got
        GOLDENS.write_text(json.dumps(goldens, indent=1, sort_keys=True) + "\n")
        return
    expected = recorded[name]
    for step, want in expected["steps"].items():
        if "timing" in want and got["steps"][step]["timing"] != want["timing"]:
            assert step != "1", "the first step's samples were not all sampled under the first policy"
            pytest.skip(
                f"step {step}'s samples switched policy versions at other tokens than in the recording "
                f"({got['steps'][step]['timing']} against {want['timing']}): the steps before it matched bit for bit"
            )
        assert got["steps"][step]["figures"] == want["figures"], f"step {step}'s losses or scores changed"
        assert got["steps"][step]["rollouts"] == want["rollouts"], f"step {step}'s rollouts changed"
    assert got["weights"] == expected["weights"], "the actor weights after step 3 changed"
