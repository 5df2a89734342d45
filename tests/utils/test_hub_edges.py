# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.utils.hub: the switch's words, a local path under ~, dataset ids with a split and local folders that
look like ids when the hub cannot be reached, and the safetensors files and fingerprint of a model folder."""

import logging
import os
import socket

import pytest

from verl.utils.hub import hub_folder, offline_unless_reachable, safetensors_files, use_modelscope, weights_fingerprint


@pytest.mark.parametrize(("value", "expected"), [("false", False), ("No", False), ("0", False), ("yes", True)])
def test_the_switch_takes_its_words(monkeypatch, value, expected):
    monkeypatch.setenv("USE_MODELSCOPE_HUB", value)
    assert use_modelscope() is expected


def test_a_local_folder_under_home_is_not_fetched(tmp_path, monkeypatch):
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "1")
    assert hub_folder("~/models/tiny", "worker.actor.model.model_path") == "~/models/tiny"


@pytest.fixture
def unreachable_hub(monkeypatch):
    for variable in ("HF_HUB_OFFLINE", "USE_MODELSCOPE_HUB", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "")
    monkeypatch.delenv("HF_HUB_OFFLINE")  # set then unset: what the check sets is undone after the test
    return monkeypatch


def test_a_dataset_id_with_its_split_is_named_when_the_hub_cannot_be_reached(unreachable_hub, caplog):
    with caplog.at_level(logging.WARNING, logger="verl.utils.hub"):
        offline_unless_reachable({"data": {"train_files": "Org/Rows@train"}})
    assert os.environ.get("HF_HUB_OFFLINE") == "1" and "Org/Rows load from the local cache only" in caplog.text


def test_a_local_folder_that_looks_like_an_id_asks_nothing(unreachable_hub, tmp_path):
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    unreachable_hub.chdir(tmp_path)
    offline_unless_reachable({"model_path": "models/tiny"})
    assert "HF_HUB_OFFLINE" not in os.environ


def test_the_safetensors_files_of_a_folder_are_its_weights_in_name_order(tmp_path):
    names = [
        "model-00003-of-00003.safetensors",
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
    ]
    for name in [*names, "model.safetensors.index.json", "adapter.safetensors.bak"]:
        (tmp_path / name).write_bytes(b"{}")
    assert safetensors_files(str(tmp_path)) == [str(tmp_path / name) for name in sorted(names)]


def test_the_fingerprint_of_a_small_model_and_of_models_differing_in_size(tmp_path):
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "model.safetensors").write_bytes(b"x" * 100)  # under the 256 KiB read at its end
    fingerprint = weights_fingerprint(str(tmp_path / "small"))
    assert fingerprint is not None and len(fingerprint) == 32
    for name, size in (("a", 1 << 20), ("b", (1 << 20) + 1)):  # the same bytes where they are read
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(bytes(size))
    assert weights_fingerprint(str(tmp_path / "a")) != weights_fingerprint(str(tmp_path / "b"))


def test_a_hub_that_answers_with_a_server_error_falls_back_to_the_cached_copy(tmp_path, monkeypatch, caplog):
    modelscope = pytest.importorskip("modelscope")
    from modelscope.hub.errors import ServerError

    from verl.utils import hub

    def download(repo_id, repo_type, local_files_only=False):
        if not local_files_only:
            raise ServerError("502 Bad Gateway")
        return str(tmp_path)

    monkeypatch.setattr(modelscope, "snapshot_download", download)
    with caplog.at_level(logging.WARNING, logger="verl.utils.hub"):
        assert hub._fetch("Org/Tiny", "worker.actor.model.model_path", "model") == str(tmp_path)
    assert "ModelScope cannot be reached (" in caplog.text and "502 Bad Gateway); using the cached copy" in caplog.text
