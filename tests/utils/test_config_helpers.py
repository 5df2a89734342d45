# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The checks a config section runs on its own fields: they name the key as `prefix + field` and refuse a field
name the dataclass does not have."""

from dataclasses import dataclass, field

import pytest

from verl.utils.config import (
    ConfigError,
    describe_fields,
    require_choice,
    require_data_files,
    require_dataset_files,
    require_finite,
    require_non_negative,
    require_path,
    require_positive,
)


@dataclass
class Section:
    size: int | None = 1
    rate: float = 0.0
    mode: str = "a"
    names: list[str] = field(default_factory=lambda: ["a"])
    path: str | None = None
    """A path."""


@dataclass
class Child(Section):
    size: int | None = 2


def test_numbers_name_the_full_key():
    require_positive(Section(size=None), "x.y.", "size")  # unset passes
    with pytest.raises(ConfigError, match=r"^Config key 'x.y.size' must be positive, got 0\.$"):
        require_positive(Section(size=0), "x.y.", "size")
    with pytest.raises(ConfigError, match=r"'x.rate' must be zero or positive, got -1"):
        require_non_negative(Section(rate=-1.0), "x.", "size", "rate")
    with pytest.raises(ConfigError, match=r"'rate' must be a finite number, got nan"):
        require_finite(Section(rate=float("nan")), "", "rate")


def test_choices_check_every_item_of_a_list():
    require_choice(Section(), "s.", "names", ("a", "b"))
    with pytest.raises(ConfigError, match=r"'s.names' is 'c'; choose one of: a, b\."):
        require_choice(Section(names=["a", "c"]), "s.", "names", ("a", "b"))
    with pytest.raises(ConfigError, match=r"'s.mode' is 'z'"):
        require_choice(Section(mode="z"), "s.", "mode", ("a",))


def test_paths_and_datasets(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    require_path(Section(path=str(tmp_path / "f.txt")), "s.", "path", "file")
    require_path(Section(path="org/model"), "s.", "path", "directory", allow_hub=True)
    with pytest.raises(ConfigError, match=r"'s.path' points to .* which is not a directory"):
        require_path(Section(path=str(tmp_path / "f.txt")), "s.", "path", "directory")
    require_data_files(Section(path="org/dataset@train"), "s.", "path")
    with pytest.raises(ConfigError, match=r"'s.path' points to 'nope.jsonl', which does not exist"):
        require_data_files(Section(path="nope.jsonl"), "s.", "path")
    # examples/config.yaml's ./examples/... paths read from another folder: the message says from where
    with pytest.raises(
        ConfigError, match=r"'\./nope\.jinja', which does not exist \(relative to the working directory /"
    ):
        require_path(Section(path="./nope.jinja"), "s.", "path", "file")
    with pytest.raises(ConfigError, match=r"which does not exist; give an existing file"):
        require_path(Section(path=str(tmp_path / "nope.jinja")), "s.", "path", "file")


@dataclass
class DataSection:
    train_files: str = ""
    val_files: str | None = None
    image_dir: str | None = None


def test_a_data_section_needs_train_files_and_existing_paths(tmp_path):
    (tmp_path / "train.jsonl").write_text("{}")
    require_dataset_files(DataSection(str(tmp_path / "train.jsonl"), "org/dataset@test", str(tmp_path)), "data.")
    with pytest.raises(ConfigError, match=r"^data.train_files is empty; give a local file"):
        require_dataset_files(DataSection(), "data.")
    with pytest.raises(ConfigError, match=r"'data.val_files' points to 'nope.jsonl', which does not exist"):
        require_dataset_files(DataSection(str(tmp_path / "train.jsonl"), "nope.jsonl"), "data.")
    with pytest.raises(ConfigError, match=r"'data.image_dir' points to .* which is not a directory"):
        require_dataset_files(DataSection(str(tmp_path / "train.jsonl"), None, str(tmp_path / "train.jsonl")), "data.")


def test_a_name_that_is_not_a_field_is_a_programming_error():
    with pytest.raises(TypeError, match=r"Section has no field\(s\) \['sise'\]"):
        require_positive(Section(), "", "sise")


def test_a_subclass_keeps_the_docstrings_of_the_fields_it_redefaults():
    assert ("path", "str | None", "A path.") in describe_fields(Child)
