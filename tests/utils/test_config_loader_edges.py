# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Edges of the typed config loader (verl/utils/config.py) that the other config tests leave open (found by a
mutation audit): the errors for a malformed source, the YAML forms a config file may take, and the helpers' bounds."""

from dataclasses import dataclass, field

import pytest

from verl.utils.config import (
    ConfigError,
    checked_mapping,
    load_yaml,
    masked,
    merge_config,
    parse_dotlist,
    require_finite,
    require_path,
    set_keys,
)


@dataclass
class Inner:
    size: int = 1
    name: str = "a"
    label: str | None = "x"


@dataclass
class Root:
    inner: Inner = field(default_factory=Inner)
    rate: float = 0.5


def test_an_unknown_key_lists_the_keys_of_its_own_section():
    with pytest.raises(ConfigError) as error:
        checked_mapping(Root, {"inner": {"sise": 2}})
    assert str(error.value) == (
        "Unknown config key 'inner.sise'. Did you mean 'inner.size'? Valid keys under 'inner.': label, name, size."
    )


def test_a_value_given_for_a_section_is_refused_naming_it():
    """OmegaConf's own error for it named no key the user could act on."""
    with pytest.raises(ConfigError) as error:
        merge_config(Root, [("config file 'c.yaml'", {"inner": 3})])
    assert str(error.value) == (
        "Config key 'inner' is a section; give it as a mapping of keys, not 3 (for example inner.<key>=<value> on "
        "the command line). (in config file 'c.yaml')"
    )


def test_a_command_line_argument_without_a_value_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"^Command-line argument 'inner.size' is not of the form key=value"):
        parse_dotlist(["inner.size"])


def test_null_on_the_command_line_unsets_an_optional_text_setting():
    config = merge_config(Root, [("command line", parse_dotlist(["inner.label=null", "inner.name=null"]))])
    assert config.inner.label is None  # unset, not the text 'null'
    assert config.inner.name == ""  # a plain text setting: empty


def test_an_interpolation_to_a_missing_key_names_the_key_that_holds_it():
    with pytest.raises(ConfigError, match=r"^Config key 'inner.name' is invalid: "):
        merge_config(Root, [("command line", parse_dotlist(["inner.name=${inner.nope}"]))])


def test_an_empty_config_file_gives_the_defaults(tmp_path):
    (tmp_path / "empty.yaml").write_text("# all defaults\n")
    assert load_yaml(str(tmp_path / "empty.yaml")) == {}
    config = merge_config(Root, [("config file", load_yaml(str(tmp_path / "empty.yaml")))])
    assert config == Root()


def test_a_config_file_that_is_not_a_mapping_is_refused_naming_it(tmp_path):
    (tmp_path / "list.yaml").write_text("- inner\n- rate\n")
    with pytest.raises(ConfigError, match=r"^Config file '.*list.yaml' must hold a mapping of sections at its top"):
        load_yaml(str(tmp_path / "list.yaml"))


def test_a_yaml_merge_key_may_be_overridden_in_its_mapping(tmp_path):
    """`<<: *anchor` then one of its keys again is how YAML shares a section with a change; it is not a key given
    twice."""
    (tmp_path / "anchors.yaml").write_text("base: &base\n  size: 2\n  name: b\ninner:\n  <<: *base\n  size: 3\n")
    assert load_yaml(str(tmp_path / "anchors.yaml"))["inner"] == {"size": 3, "name": "b"}


def test_a_derived_key_error_names_the_source_that_set_it():
    with pytest.raises(ConfigError) as error:
        set_keys({"inner": {"size": 2}}, {"inner.size": "rate"}, "config file 'c.yaml'")
    assert str(error.value) == (
        "Config key 'inner.size' is derived from rate; set rate instead (in config file 'c.yaml')."
    )


def test_minus_infinity_is_not_finite():
    @dataclass
    class Section:
        rate: float = 0.0

    with pytest.raises(ConfigError, match=r"^Config key 's.rate' must be a finite number, got -inf\.$"):
        require_finite(Section(rate=float("-inf")), "s.", "rate")


def test_a_home_relative_path_is_a_path_not_a_hub_id(tmp_path, monkeypatch):
    @dataclass
    class Section:
        path: str | None = None

    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match=r"'s.path' points to '~/no_such_model', which does not exist; give"):
        require_path(Section(path="~/no_such_model"), "s.", "path", "directory", allow_hub=True)
    with pytest.raises(ConfigError, match=r"'s.path' points to '.*', which is not a file\.$"):
        require_path(Section(path=str(tmp_path)), "s.", "path", "file")


def test_an_empty_secret_is_not_masked():
    """A dump's '***' is refused when it loads again: an unset secret must stay unset in it."""
    assert masked({"api_key": "", "hf_token": None, "auth_token": "t0k"}) == {
        "api_key": "",
        "hf_token": None,
        "auth_token": "***",
    }


def test_a_wrong_type_names_the_key_the_type_and_the_source():
    with pytest.raises(ConfigError) as error:
        merge_config(Root, [("command line", parse_dotlist(["rate=abc"]))])
    assert str(error.value) == "Config key 'rate' expects float, got 'abc' (in command line)."
