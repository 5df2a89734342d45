# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""USE_MODELSCOPE_HUB=1: model and dataset ids come from ModelScope (its real client; offline, the hub's address is a
closed local port, so what is tested is the way to the cache and the errors)."""

import contextlib
import json
import logging
import os
import re
import socket
import subprocess
import sys

import pytest

from tests.repo_files import load_repo_file
from verl.data.sources import load_source
from verl.models.tiny_models import build_tiny_model
from verl.sft.config import load_sft_config
from verl.trainer.config import load_config
from verl.utils.config import ConfigError


REWARD = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "reward_function", "math.py:compute_score")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A ModelScope cache with the model Org/Tiny and the dataset Org/Rows (split train); the hub cannot be reached."""
    cache = tmp_path / "modelscope"
    model = cache / "models" / "Org--Tiny" / "snapshots" / "master"
    build_tiny_model(str(model), "qwen2")
    rows = cache / "datasets" / "Org--Rows" / "snapshots" / "master"
    rows.mkdir(parents=True)
    (rows / "train.jsonl").write_text(
        "".join(json.dumps({"prompt": f"{i}+1?", "answer": i + 1}) + "\n" for i in range(3))
    )
    (tmp_path / "reward.py").write_text("def compute_score(sample):\n    return {'overall': 1.0}\n")
    monkeypatch.setenv("MODELSCOPE_CACHE", str(cache))
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("MODELSCOPE_REPO_TREE_PAGE_MAX_ATTEMPTS", "1")  # one try: the port is closed
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "1")
    # modelscope reads MODELSCOPE_CACHE and the endpoint once per process, into a default config: each test's own
    with contextlib.suppress(ImportError):
        from modelscope_hub import set_default_config

        set_default_config(None)
        monkeypatch.setattr("modelscope_hub.config._default_config", None)  # and again after the test
    return {"model": model, "rows": rows, "reward": tmp_path / "reward.py"}


def _args(hub, model_path: str = "Org/Tiny") -> list[str]:
    return [
        "data.train_files=Org/Rows@train",
        f"worker.actor.model.model_path={model_path}",
        f"worker.reward.reward_function={hub['reward']}:compute_score",
        "data.rollout_batch_size=2",
        "worker.actor.global_batch_size=2",
        "worker.rollout.n=2",
        "trainer.n_gpus_per_node=2",
    ]


def test_model_and_dataset_ids_load_from_the_modelscope_snapshot(hub, monkeypatch, caplog):
    """The hub is asked first; it cannot be reached here, so the cached copy is used, with a warning."""
    with caplog.at_level(logging.WARNING, logger="verl.utils.hub"):
        config = load_config([*_args(hub), "worker.reward.judge.model_path=Org/Tiny"])
    assert caplog.text.count("ModelScope cannot be reached") == 1  # the model, tokenizer and judge paths: one id
    assert "worker.actor.model.model_path: ModelScope cannot be reached" in caplog.text
    assert config.worker.actor.model.model_path == str(hub["model"])
    assert config.worker.reward.judge.model_path == str(hub["model"])
    source = load_source(config.data.train_files)
    assert [source.row(i)["answer"] for i in range(len(source))] == [1, 2, 3]
    sft = load_sft_config(["data.train_files=Org/Rows@train", "worker.model.model_path=Org/Tiny"])
    assert sft.worker.model.model_path == sft.worker.model.tokenizer_path == str(hub["model"])
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "0")  # off: an id is a Hugging Face id, left for the workers
    assert load_config(_args(hub)).worker.actor.model.model_path == "Org/Tiny"


def test_an_id_that_is_not_cached_and_cannot_be_fetched_is_named(hub, tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"model_path: 'Org/Missing' could not be fetched .* not in its cache"):
        load_config(_args(hub, "Org/Missing"))
    with pytest.raises(ValueError, match=r"Dataset 'Org/Gone@train': 'Org/Gone' could not be fetched"):
        load_source("Org/Gone@train")
    script = load_repo_file("scripts/train_reward_model.py", "train_reward_model_for_hub")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n")
    assert script.main(["--model", "Org/Gone", "--train", str(pairs), "--output", str(tmp_path / "rm")]) == 2
    assert "train_reward_model: --model: 'Org/Gone' could not be fetched from ModelScope" in capsys.readouterr().err


def test_the_switch_and_the_package_are_checked(hub, monkeypatch):
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "maybe")
    with pytest.raises(ConfigError, match="USE_MODELSCOPE_HUB='maybe' is not a switch"):
        load_config(_args(hub))
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "true")
    monkeypatch.setitem(sys.modules, "modelscope", None)  # as if it were not installed
    with pytest.raises(ConfigError, match=r"needs the modelscope package \(pip install modelscope\)"):
        load_config(_args(hub))


# ---------------------------------------------------------------------------- the Hugging Face hub unreachable


@pytest.fixture
def no_hub_settings(monkeypatch):
    for variable in ("HF_HUB_OFFLINE", "USE_MODELSCOPE_HUB", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    return monkeypatch


def test_an_unreachable_hub_makes_the_run_offline_naming_the_ids(no_hub_settings, tmp_path, caplog):
    """huggingface_hub retries each file with back-off when the hub cannot be reached (52 s and 20 warnings for the
    example config offline, measured): the run goes offline at once instead, saying so."""

    from verl.utils.hub import offline_unless_reachable

    files = tmp_path / "train.jsonl"
    files.write_text('{"prompt": "p", "answer": "1"}\n')
    base = ["worker.rollout.n=2", f"worker.reward.reward_function={REWARD}"]
    model = build_tiny_model(tmp_path)
    load_config([*base, f"data.train_files={files}", f"worker.actor.model.model_path={model}"])
    assert "HF_HUB_OFFLINE" not in os.environ  # nothing from the hub: not even asked
    with caplog.at_level(logging.WARNING, logger="verl.utils.hub"):  # asked as the config loads, before validation
        hub_ids = load_config([*base, "data.train_files=Org/Rows@train", "worker.actor.model.model_path=Org/Model"])
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert "cannot be reached" in caplog.text and "Org/Model, Org/Rows load from the local cache only" in caplog.text
    no_hub_settings.setenv("HF_HUB_OFFLINE", "0")  # the user's choice stands
    offline_unless_reachable(hub_ids)
    assert os.environ["HF_HUB_OFFLINE"] == "0"
    no_hub_settings.delenv("HF_HUB_OFFLINE")
    no_hub_settings.setenv("HTTPS_PROXY", "http://proxy:3128")  # the hub may be reachable through it
    offline_unless_reachable(hub_ids)
    assert "HF_HUB_OFFLINE" not in os.environ
    no_hub_settings.delenv("HTTPS_PROXY")
    with socket.socket() as server:  # a hub that answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        no_hub_settings.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        offline_unless_reachable(hub_ids)
    assert "HF_HUB_OFFLINE" not in os.environ


def test_the_cli_fails_at_once_on_an_uncached_id_without_the_hub(no_hub_settings, tmp_path):
    """The run goes offline before the tokenizer is asked for, so the error comes without the client's retries."""

    files = tmp_path / "train.jsonl"
    files.write_text('{"prompt": "p", "answer": "1"}\n')
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main",
            f"data.train_files={files}",
            "worker.actor.model.model_path=Org/Model",
            "worker.rollout.n=2",
            f"worker.reward.reward_function={REWARD}",
            f"trainer.save_checkpoint_path={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode != 0
    assert (
        "The Hugging Face hub (http://127.0.0.1:" in proc.stderr
        and "Org/Model load from the local cache" in proc.stderr
    )
    assert "Retrying" not in proc.stderr, proc.stderr[-3000:]
    assert "Error: Could not load a tokenizer from 'Org/Model'" in proc.stderr, proc.stderr[-3000:]


def test_serve_names_an_uncached_id_without_the_hub(no_hub_settings, tmp_path):
    """`python -m verl.serve --model ORG/NAME` offline: one line instead of vLLM's retries and a traceback."""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run(
        [sys.executable, "-m", "verl.serve", "--model", "Org/Model"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "Retrying" not in proc.stderr, proc.stderr
    assert "error: --model 'Org/Model' is not in the local Hugging Face cache, and the hub is offline." in proc.stderr


def test_safetensors_files_of_a_folder_and_of_a_cached_hub_id(tmp_path, monkeypatch):
    """One lookup serves the checkpoint size estimate, the critic's score head, the engine's buffer check and the
    merger: a folder's files in name order, a Hub id's from the local cache (the same files), an error for an id
    that is not cached."""
    import torch
    from huggingface_hub import constants
    from safetensors.torch import save_file

    from verl.trainer.checkpointing import saved_parameters
    from verl.utils.hub import safetensors_files
    from verl.workers.rollout.vllm_compat import checkpoint_tensor_names

    snapshot = tmp_path / "hub" / "models--Org--Tiny" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    save_file({"b.weight": torch.zeros(3, 2)}, str(snapshot / "model-00002.safetensors"))
    save_file({"a.weight": torch.zeros(5)}, str(snapshot / "model-00001.safetensors"))
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))

    in_folder = safetensors_files(str(snapshot))
    assert [os.path.basename(path) for path in in_folder] == ["model-00001.safetensors", "model-00002.safetensors"]
    assert [os.path.realpath(p) for p in safetensors_files("Org/Tiny")] == [os.path.realpath(p) for p in in_folder]
    assert checkpoint_tensor_names("Org/Tiny") == ["a.weight", "b.weight"]  # was [] for any Hub id
    assert saved_parameters("Org/Tiny") == 11
    with pytest.raises(Exception, match="Org/Missing|cache"):
        safetensors_files("Org/Missing")
    assert checkpoint_tensor_names("Org/Missing") == [] and saved_parameters("Org/Missing") is None
    assert safetensors_files(str(tmp_path)) == []


def test_a_dataset_id_names_a_config_folder_of_the_modelscope_snapshot(hub):
    snapshot = hub["rows"].parent.parent.parent / "Org--Configs" / "snapshots" / "master"
    for config in ("main", "socratic"):
        (snapshot / config).mkdir(parents=True)
        (snapshot / config / "train.jsonl").write_text(json.dumps({"prompt": config, "answer": 1}) + "\n")
    source = load_source("Org/Configs/socratic@train")
    assert [source.row(i)["prompt"] for i in range(len(source))] == ["socratic"]
    with pytest.raises(
        ValueError, match=r"'Org/Configs' has no config 'other'; its folders are \['main', 'socratic'\]"
    ):
        load_source("Org/Configs/other@train")
    with pytest.raises(ValueError, match=re.escape("Name a config and a split, as 'Org/Configs/main@train'.")):
        load_source("Org/Configs@train")
