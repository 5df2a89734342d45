# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A home directory that cannot be written: its caches are named or moved, never blamed on the dataset file.

The tests run as root in CI, where a chmod'ed directory stays writable: a home that is a regular file cannot hold
`~/.cache` either, and fails the same way (an OSError on mkdir)."""

import json
import os
import stat
import subprocess
import sys
import tempfile

import pytest

from verl.utils.writable_dirs import UnwritableDirectoryError, use_writable_dirs


MOVED_VARIABLES = ("HF_DATASETS_CACHE", "HF_HOME", "XDG_CACHE_HOME", "VLLM_CACHE_ROOT", "TRITON_CACHE_DIR")
RAY_VARIABLES = ("RAY_TMPDIR", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def _unset(monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]) -> None:
    """Unset `names` for the test, and unset again at its end whatever the test set (monkeypatch.delenv of an unset
    variable records nothing, so what `use_writable_dirs` sets, RAY_AUTH_TOKEN_PATH among them, reached later tests:
    a Ray started afterwards in the process failed with InvalidAuthToken)."""
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


@pytest.fixture
def unwritable_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.write_text("not a directory")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile caches the directory it chose: choose again
    (tmp_path / "tmp").mkdir()
    _unset(monkeypatch, MOVED_VARIABLES + RAY_VARIABLES)
    return home


def _env() -> dict[str, str]:
    return dict(os.environ)


def _load(data_file: str, move_first: bool) -> subprocess.CompletedProcess:
    code = (
        "import sys\n"
        "from verl.utils.writable_dirs import use_writable_dirs\n"
        "from verl.data.sources import load_source\n"
        f"if {move_first}: use_writable_dirs(starts_ray=False)\n"
        "try:\n"
        f"    print(len(load_source({data_file!r})))\n"
        "except ValueError as error:\n"
        "    print(error, file=sys.stderr); sys.exit(3)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)


def test_a_dataset_under_an_unwritable_home_names_the_cache_not_the_file(unwritable_home, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"prompt": "1+1", "answer": "2"}) + "\n")
    result = _load(str(data), move_first=False)
    assert result.returncode == 3, result.stderr
    assert f"{unwritable_home}/.cache/huggingface/datasets" in result.stderr
    assert "HF_DATASETS_CACHE" in result.stderr and "valid json" not in result.stderr
    moved = _load(str(data), move_first=True)  # what the entry points do before anything imports datasets
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.strip() == "1"
    assert "cannot write to" in moved.stderr and "Set HF_DATASETS_CACHE" in moved.stderr


def test_default_caches_move_under_the_temporary_directory(unwritable_home, tmp_path, caplog):
    use_writable_dirs(starts_ray=True)
    fallback = tmp_path / "tmp" / f"verl-cache-{os.getuid()}"
    assert os.environ["HF_DATASETS_CACHE"] == str(fallback / "datasets")
    assert os.environ["VLLM_CACHE_ROOT"] == str(fallback / "vllm")
    assert os.environ["TRITON_CACHE_DIR"] == str(fallback / "triton")
    assert "RAY_TMPDIR" not in os.environ  # TMPDIR is writable
    token = os.environ["RAY_AUTH_TOKEN_PATH"]
    assert open(token).read() and stat.S_IMODE(os.stat(token).st_mode) == 0o600  # authentication stays on
    warned = " ".join(record.getMessage() for record in caplog.records)
    assert "RAY_AUTH_TOKEN_PATH" in warned and "HF_DATASETS_CACHE" in warned and "VLLM_CACHE_ROOT" in warned


def test_a_directory_the_user_chose_that_cannot_be_written_is_an_error(unwritable_home, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(unwritable_home / "hf"))
    with pytest.raises(UnwritableDirectoryError, match="HF_HOME") as error:
        use_writable_dirs(starts_ray=False)
    assert str(unwritable_home / "hf" / "datasets") in str(error.value)
    assert "HF_DATASETS_CACHE" not in os.environ


def test_a_writable_home_changes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _unset(monkeypatch, MOVED_VARIABLES + RAY_VARIABLES)
    use_writable_dirs(starts_ray=True)
    assert not any(os.environ.get(name) for name in MOVED_VARIABLES + RAY_VARIABLES)
