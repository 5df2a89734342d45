# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.utils.writable_dirs: which variable an error names, the private fallback folder, Ray's token.
As in test_writable_dirs.py, a path under a regular file stands for a folder that cannot be written (tests run as
root, for whom a chmod'ed folder stays writable)."""

import os
import stat
import tempfile

import pytest

from verl.utils import writable_dirs
from verl.utils.writable_dirs import UnwritableDirectoryError, use_writable_dirs


VARIABLES = (
    "HF_DATASETS_CACHE",
    "HF_HOME",
    "XDG_CACHE_HOME",
    "VLLM_CACHE_ROOT",
    "TRITON_CACHE_DIR",
    "RAY_TMPDIR",
    "RAY_AUTH_MODE",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home that cannot be written (a regular file), a writable TMPDIR, and none of the variables set."""
    home = tmp_path / "home"
    home.write_text("not a directory")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", None)
    for name in VARIABLES:  # set, then unset: monkeypatch restores (unsets) what the code sets
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return home


@pytest.mark.parametrize("chosen", ["HF_HOME", "XDG_CACHE_HOME"])
def test_an_unwritable_cache_home_the_user_chose_is_named(home, tmp_path, monkeypatch, chosen):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "writable_cache"))
    monkeypatch.setenv(chosen, str(home / "cache"))
    with pytest.raises(UnwritableDirectoryError, match=f"set by {chosen}"):
        use_writable_dirs(starts_ray=False)


def test_an_unwritable_folder_the_user_set_for_vllm_is_an_error_naming_it(home, monkeypatch):
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(home / "vllm"))
    with pytest.raises(UnwritableDirectoryError, match=r"vLLM needs to write to .* \(set by VLLM_CACHE_ROOT\)"):
        use_writable_dirs(starts_ray=False)


def test_the_fallback_folder_is_private_and_ray_keeps_its_token_across_runs(home, tmp_path):
    use_writable_dirs(starts_ray=True)
    root = tmp_path / "tmp" / f"verl-cache-{os.getuid()}"
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    token_path = os.environ["RAY_AUTH_TOKEN_PATH"]
    token = open(token_path).read()
    del os.environ["RAY_AUTH_TOKEN_PATH"]
    use_writable_dirs(starts_ray=True)  # the next run in the same temporary folder: the same token
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == token_path and open(token_path).read() == token


def test_a_token_path_the_user_set_is_kept_and_a_run_joining_a_cluster_leaves_ray_alone(home, tmp_path, monkeypatch):
    use_writable_dirs(starts_ray=False)
    assert "RAY_AUTH_TOKEN_PATH" not in os.environ and "RAY_TMPDIR" not in os.environ
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "mine"))
    use_writable_dirs(starts_ray=True)
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == str(tmp_path / "mine") and not (tmp_path / "mine").exists()


def test_a_saved_ray_token_is_used_where_it_is(tmp_path, monkeypatch):
    """~/.ray holds the token already: nothing moves, even where the folder could not take a new file."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("token")
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(writable_dirs, "unwritable_reason", lambda directory: "Read-only file system")
    writable_dirs._ray_token_path()
    assert "RAY_AUTH_TOKEN_PATH" not in os.environ
