# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of verl.utils.files: file modes after an export, the errors for a config key's text file, and earlier
runs' files set aside."""

import os

import pytest

from verl.utils import files
from verl.utils.files import PREVIOUS_RUNS, open_as_umask, read_text_file, set_aside, set_aside_folder


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_exported_files_get_the_umask_mode_and_a_symlink_target_is_left_alone(tmp_path, umask_027):
    folder, outside = tmp_path / "export", tmp_path / "outside.txt"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x")
    os.chmod(folder / "model.safetensors", 0o600)
    outside.write_text("secret")
    os.chmod(outside, 0o600)
    os.symlink(outside, folder / "link.txt")
    open_as_umask(str(folder))
    assert oct(os.stat(folder / "model.safetensors").st_mode & 0o777) == oct(0o640)  # 0666 & ~027
    assert oct(os.stat(outside).st_mode & 0o777) == oct(0o600)  # not reached through the link


def test_a_text_file_key_names_itself_and_the_file(tmp_path):
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(FileNotFoundError, match=r"^data\.system_prompt file '.*nope\.txt' does not exist"):
        read_text_file(missing, "data.system_prompt")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ValueError, match=r"^data\.system_prompt file '.*latin\.txt' is not UTF-8 text .*save it as"):
        read_text_file(str(latin), "data.system_prompt")


def test_set_aside_folders_of_one_second_are_all_distinct(tmp_path, monkeypatch):
    monkeypatch.setattr(files.time, "strftime", lambda fmt, when: "20260101-000000")
    folders = [set_aside_folder(str(tmp_path)) for _ in range(3)]
    base = os.path.join(str(tmp_path), PREVIOUS_RUNS, "20260101-000000")
    assert folders == [base, base + "-2", base + "-3"] and all(os.path.isdir(folder) for folder in folders)


def test_set_aside_keeps_the_paths_under_the_root_and_makes_nothing_for_nothing(tmp_path):
    assert set_aside([str(tmp_path / "missing.jsonl")], str(tmp_path)) is None
    assert not (tmp_path / PREVIOUS_RUNS).exists()
    (tmp_path / "images" / "step_3").mkdir(parents=True)
    (tmp_path / "images" / "step_3" / "a.png").write_bytes(b"png")
    (tmp_path / "step_3.jsonl").write_text("{}\n")
    folder = set_aside([str(tmp_path / "step_3.jsonl"), str(tmp_path / "images" / "step_3")], str(tmp_path))
    assert open(os.path.join(folder, "images", "step_3", "a.png"), "rb").read() == b"png"
    assert os.path.isfile(os.path.join(folder, "step_3.jsonl")) and not (tmp_path / "images" / "step_3").exists()
