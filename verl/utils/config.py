# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Typed configuration loading: dataclass defaults < YAML file < command-line dotlist, with clear errors.

OmegaConf merges and converts; its errors become messages naming the full key, the closest valid key for a typo and
what to change. The `require_*` helpers check a section's own fields in its `validate(prefix)`: the field names are
checked against the dataclass (a renamed field cannot leave a stale check behind) and errors name `prefix + name`.
"""

import contextlib
import dataclasses
import difflib
import logging
import math
import os
import re
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.utils.hub import hub_folder


logger = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration key or value is wrong; the message names the key and what to change."""


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _unwrap_optional(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1 else tp


EASYR1_ONLY_KEYS: dict[str, str] = {
    "fsdp.use_orig_params": "an FSDP1 option of EasyR1's: FSDP2 always trains the original parameters",
    "rollout.disable_log_stats": "an EasyR1 option passed to vLLM: the rollout steps the engine itself and logs its "
    "own metrics",
    "ref.strategy": "an EasyR1 key: the reference model runs in the actor's processes, with worker.actor.strategy",
    "reward.reward_type": "an EasyR1 key: the reward file says how its function is called (REWARD_TYPE = 'batch' or "
    "'sequential' in the file; without it, a first parameter named reward_inputs means batch)",
}
"""EasyR1 keys (by the end of their path) with no counterpart here, and why: the unknown-key error says it, so a
migrated config is fixed by deleting them."""
OTHER_TRAINERS_NAMES: dict[str, str] = {
    "max_actor_ckpt_to_keep": "save_limit",  # verl's
    "max_critic_ckpt_to_keep": "save_limit",
    "save_total_limit": "save_limit",  # TRL's
    "max_checkpoints_to_keep": "save_limit",
    "test_freq": "val_freq",  # verl's
    "default_local_dir": "save_checkpoint_path",
    "resume_from_path": "load_checkpoint_path",
    "total_training_steps": "max_steps",
}
"""The names verl and TRL give settings that have another name here: the unknown-key error suggests ours (a spelling
match suggested an unrelated key: `max_checkpoints_to_keep`, `save_checkpoint_path`)."""


class CommandLine(dict):
    """The command line's overrides (`parse_dotlist`), with what a YAML parse of a value loses: `raw`, each
    argument's value as typed, by dotted key (a text setting gets it whole: `experiment_name=no` is "no", not
    "False"; `exp #2` keeps its "#2")."""

    def __init__(self, values: Mapping, raw: Mapping[str, str]) -> None:
        super().__init__(values)
        self.raw = dict(raw)


def _text_field(hint: Any) -> bool:
    """Whether a field holds text: `str` or `str | None`."""
    return _unwrap_optional(hint) is str


def _as_text(path: str, value: Any, raw: Mapping[str, str]) -> Any:
    """The value of text field `path`: as typed on the command line (unless quoted: then YAML's reading); a YAML
    file's boolean is refused (YAML 1.1 reads yes/no/on/off as booleans: a name "no" would become "False")."""
    typed = raw.get(path)
    if typed is not None and typed.strip() and typed.strip()[0] not in "'\"[{":
        return typed.strip()
    if isinstance(value, bool):
        raise ConfigError(
            f"Config key '{path}' is text, but its value was read as the boolean {value} (YAML reads yes, no, on, "
            f"off, true and false as booleans); quote it: {path}: '{str(value).lower()}' or the word you meant."
        )
    return value


def checked_mapping(schema: type, user: Mapping, prefix: str = "", raw: Mapping[str, str] | None = None) -> dict:
    """`user` with its keys checked against the dataclass tree `schema` (ConfigError for the first it lacks) and None
    turned into "" where the field is a plain `str`: `key=` on the command line (what a shell makes of `key=""`)
    parses as None, and a text setting such as data.val_files means "none" by an empty string. A text field takes
    the command line's value as typed (`raw`, `CommandLine`).

    Free-form fields (typed as dict) accept any key; their values are not checked here.
    """
    raw = raw or {}
    fields = {f.name for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema)
    result = dict(user)
    for key, value in user.items():
        path = f"{prefix}{key}"
        if key not in fields:
            retired = next((why for end, why in EASYR1_ONLY_KEYS.items() if path.endswith(end)), None)
            if retired is not None:
                raise ConfigError(f"Config key '{path}' is {retired}; delete it.")
            ours = OTHER_TRAINERS_NAMES.get(str(key))
            close = [ours] if ours in fields else difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.5)
            hint = f" Did you mean '{prefix}{close[0]}'?" if close else ""
            valid = ", ".join(sorted(fields))
            raise ConfigError(f"Unknown config key '{path}'.{hint} Valid keys under '{prefix or '<root>'}': {valid}.")
        field_type = _unwrap_optional(hints[key])
        if _text_field(hints[key]) and value is not None:
            result[key] = _as_text(path, value, raw)
        if value is None and hints[key] is str:
            result[key] = ""
        elif _is_dataclass_type(field_type):
            if isinstance(value, Mapping):
                result[key] = checked_mapping(field_type, value, prefix=f"{path}.", raw=raw)
            elif value is not None:
                raise ConfigError(
                    f"Config key '{path}' is a section; give it as a mapping of keys, not {value!r} "
                    f"(for example {path}.<key>=<value> on the command line)."
                )
    return result


def type_name(tp: Any) -> str:
    """`int`, `str | None`, `list[str]`: a type as a user writes it."""
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def _key_parts(full_key: str) -> list[str | int]:
    """`a.b[1].c` -> ["a", "b", 1, "c"]: OmegaConf's spelling of a key, list indices as ints."""
    parts: list[str | int] = []
    for part in full_key.split("."):
        name, *indices = re.split(r"\[(\d+)\]", part)
        parts += [name] if name else []
        parts += [int(index) for index in indices if index]
    return parts


def _expected_type_name(schema: type, full_key: str) -> str:
    hint: Any = schema
    for part in _key_parts(full_key):
        section = _unwrap_optional(hint)
        origin, args = typing.get_origin(section), typing.get_args(section)
        if origin in (list, tuple) and isinstance(part, int) and args:
            hint = args[0]
        elif origin is dict and len(args) == 2:
            if args[0] is int and not isinstance(part, int) and not str(part).lstrip("-").isdigit():
                return f"int keys ({type_name(section)})"
            hint = args[1]
        elif _is_dataclass_type(section) and part in typing.get_type_hints(section):
            hint = typing.get_type_hints(section)[part]
        else:
            return "a different type"
    return type_name(hint)


def merge_config(schema: type, sources: Sequence[tuple[str, Mapping]]) -> Any:
    """Merge user mappings over the dataclass defaults of `schema` and return a real dataclass instance.

    `sources` is an ordered list of (description, mapping); later sources win. Each is checked for unknown keys
    first, so a typo is reported against the source it came from.
    """
    merged = OmegaConf.structured(schema)
    for source_name, mapping in sources:
        raw = mapping.raw if isinstance(mapping, CommandLine) else {}
        try:
            checked = checked_mapping(schema, mapping, raw=raw)
        except ConfigError as err:
            raise ConfigError(f"{err} (in {source_name})") from None
        try:
            merged = OmegaConf.merge(merged, OmegaConf.create(checked))
        except (OmegaConfBaseException, TypeError) as err:  # TypeError: a list given for a mapping, or back
            full_key = getattr(err, "full_key", None) or _container_mismatch(schema, checked) or "?"
            parent, _, last = full_key.rpartition(".")
            given = _lookup(mapping, parent) if parent else None
            if (
                isinstance(given, Mapping)
                and last in given
                and _expected_type_name(schema, parent).startswith("dict[int")
            ):
                raise ConfigError(
                    f"Config key '{full_key}': the keys of '{parent}' are integers, and {last!r} is text (a dotted key "
                    f"on the command line is always text); give the mapping whole, e.g. {parent}='{{0: 8, 100: 16}}' "
                    f"(in {source_name})."
                ) from None
            expected = _expected_type_name(schema, full_key) if full_key != "?" else "another type"
            got = f"got {_lookup(mapping, full_key)!r}" if full_key != "?" else str(err).splitlines()[0]
            raise ConfigError(f"Config key '{full_key}' expects {expected}, {got} (in {source_name}).") from None
    try:
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        full_key = getattr(err, "full_key", None) or "?"
        raise ConfigError(f"Config key '{full_key}' is invalid: {str(err).splitlines()[0]}.") from None
    reject_unusable(config)
    return config


def _container_mismatch(schema: type, user: Mapping, prefix: str = "") -> str | None:
    """The first key of `user` that gives a list for a mapping field of `schema`, or a mapping for a list field."""
    hints = typing.get_type_hints(schema)
    for key, value in user.items():
        hint = _unwrap_optional(hints.get(key))
        origin = typing.get_origin(hint) or hint
        if _is_dataclass_type(hint) and isinstance(value, Mapping):
            found = _container_mismatch(hint, value, f"{prefix}{key}.")
            if found:
                return found
        elif (origin is dict and isinstance(value, list)) or (origin is list and isinstance(value, Mapping)):
            return f"{prefix}{key}"
    return None


def reject_unusable(value: Any, key: str = "") -> None:
    """No number anywhere in the config is nan (no setting means "not a number", and nan would pass every range
    check: each comparison with it is false), and no secret is the mask a dump writes for it (a `--dry-run` dump
    loaded again would give a reward function or tracker the string '***')."""
    if dataclasses.is_dataclass(value):
        for item in dataclasses.fields(value):
            reject_unusable(getattr(value, item.name), f"{key}.{item.name}" if key else item.name)
    elif isinstance(value, dict):
        for name, item in value.items():
            reject_unusable(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            reject_unusable(item, f"{key}[{index}]")
    elif isinstance(value, float) and math.isnan(value):
        raise ConfigError(f"Config key '{key}' is nan; give a number.")
    elif value == MASK and SECRET_KEY.search(key.rpartition(".")[2]):
        raise ConfigError(
            f"Config key '{key}' is '{MASK}', the mask a config dump writes in place of a secret; give the secret "
            f"itself ({key}=... on the command line, or in the config file)."
        )


def _lookup(mapping: Mapping, dotted: str) -> Any:
    node: Any = mapping
    for part in _key_parts(dotted):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, Mapping) and isinstance(part, str) and part.lstrip("-").isdigit() and int(part) in node:
            node = node[int(part)]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return "<unknown>"
    return node


def parse_dotlist(args: Sequence[str]) -> CommandLine:
    """Parse `a.b=c` command-line overrides (lists as [x,y], dicts as {k: v} or JSON) into a nested dict, with each
    value as typed (`CommandLine`)."""
    raw: dict[str, str] = {}
    for arg in args:
        if "=" not in arg:
            raise ConfigError(f"Command-line argument '{arg}' is not of the form key=value (e.g. data.seed=1).")
        key, value = arg.split("=", 1)
        raw[key.strip()] = value
        try:
            OmegaConf.from_dotlist([arg])
        except (OmegaConfBaseException, yaml.YAMLError, ValueError, TypeError) as err:
            raise ConfigError(
                f"Command-line argument '{arg}' cannot be parsed ({str(err).splitlines()[0]}); a value that starts "
                "with *, &, !, @, %, `, [ or {, or holds unbalanced brackets, is YAML syntax: quote it for YAML, e.g. "
                f"{key}=\"'{value}'\"."
            ) from None
    try:
        parsed = OmegaConf.to_container(OmegaConf.from_dotlist(list(args)), resolve=False)  # `${...}`: at the merge
    except (OmegaConfBaseException, yaml.YAMLError, ValueError, TypeError) as err:
        raise ConfigError(f"Cannot parse the command-line overrides: {str(err).splitlines()[0]}.") from None
    _refuse_glued_pairs(parsed, "")
    return CommandLine(parsed, raw)


def _refuse_glued_pairs(value: Any, key: str) -> None:
    """`key={a:1}` parses (as YAML) to the key 'a:1' with no value: a ConfigError showing the space it needs."""
    if not isinstance(value, dict):
        return
    for name, item in value.items():
        if item is None and isinstance(name, str) and ":" in name:
            pair = name.replace(":", ": ", 1)
            raise ConfigError(
                f"'{key}' has the key '{name}' with no value: a mapping needs a space after each colon, "
                f"{{{pair}}} instead of {{{name}}}."
            )
        _refuse_glued_pairs(item, f"{key}.{name}" if key else str(name))


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml's safe loader, refusing a key given twice in one mapping (it would keep the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys may be given again, on purpose
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: str) -> dict[str, Any]:
    """Read a YAML config file; a missing file or a non-mapping top level is an error naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except FileNotFoundError:
        raise ConfigError(f"Config file '{path}' does not exist; pass config=path/to/config.yaml.") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"Config file '{path}' is not valid YAML: {err}.") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"Config file '{path}' is not UTF-8 text ({err.reason} at byte {err.start}).") from None
    except OSError as err:  # a folder, no permission
        raise ConfigError(f"Config file '{path}' cannot be read: {err.strerror or err}.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"Config file '{path}' must hold a mapping of sections at its top level.")
    return data


def command_line_sources(argv: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """The values of `config=FILE` (when given), then the other `key=value` arguments, each named for its errors."""
    overrides = parse_dotlist(argv)
    config_file = overrides.pop("config", None)
    if "config" in overrides.raw and not overrides.raw["config"].strip():
        raise ConfigError("config= is empty; give a YAML file (config=path/to/config.yaml), or leave config= out.")
    sources = [] if config_file is None else [(f"config file '{config_file}'", load_yaml(str(config_file)))]
    return [*sources, ("command line", overrides)]


def absolute_path(path: str | None) -> str | None:
    """An existing local path made absolute (Ray workers may run in another directory); anything else as it is."""
    return os.path.abspath(os.path.expanduser(path)) if path and os.path.exists(os.path.expanduser(path)) else path


@contextlib.contextmanager
def as_config_error(
    errors: type[Exception] | tuple[type[Exception], ...] = ValueError, prefix: str = ""
) -> Iterator[None]:
    """Re-raise `errors` from the block as a ConfigError with the same message, after `prefix`."""
    try:
        yield
    except errors as error:
        raise ConfigError(f"{prefix}{error}") from None


def set_keys(user: Mapping, derived: Mapping[str, str], source_name: str) -> None:
    """Reject user settings of derived keys, naming the key to set instead."""
    for key, source_key in derived.items():
        if _lookup(user, key) != "<unknown>":
            raise ConfigError(
                f"Config key '{key}' is derived from {source_key}; set {source_key} instead (in {source_name})."
            )


# ----------------------------------------------------------------------------------------------------------------
# checks a config section runs on its own fields


def _values(section: Any, names: Sequence[str]) -> list[tuple[str, Any]]:
    fields = {f.name for f in dataclasses.fields(section)}
    unknown = [name for name in names if name not in fields]
    if unknown:
        raise TypeError(f"{type(section).__name__} has no field(s) {unknown}.")
    return [(name, getattr(section, name)) for name in names]


def require_positive(section: Any, prefix: str, *names: str) -> None:
    """Each named field of `section` is unset (None) or > 0."""
    for name, value in _values(section, names):
        if value is not None and value <= 0:
            raise ConfigError(f"Config key '{prefix}{name}' must be positive, got {value}.")


def require_non_negative(section: Any, prefix: str, *names: str) -> None:
    """Each named field of `section` is unset (None) or >= 0."""
    for name, value in _values(section, names):
        if value is not None and value < 0:
            raise ConfigError(f"Config key '{prefix}{name}' must be zero or positive, got {value}.")


SEED_LIMIT = 2**63
"""Seeds lie in [0, 2**63): torch's generators take no larger one, and the rollout derives per-request seeds from it."""


def require_seed(section: Any, prefix: str, *names: str, bits: int = 63) -> None:
    """Each named field of `section` is a seed: 0 <= value < 2**bits (SEED_LIMIT; vLLM's engine takes 32 bits)."""
    for name, value in _values(section, names):
        if not 0 <= value < min(2**bits, SEED_LIMIT):
            raise ConfigError(f"Config key '{prefix}{name}' is a seed, which must lie in [0, 2**{bits}), got {value}.")


def require_pixel_range(section: Any, prefix: str) -> None:
    """`min_pixels` and `max_pixels` (an image's area bounds) are unset or positive, and min <= max."""
    require_positive(section, prefix, "min_pixels", "max_pixels")
    low, high = section.min_pixels, section.max_pixels
    if low is not None and high is not None and low > high:
        raise ConfigError(
            f"{prefix}min_pixels={low} is above {prefix}max_pixels={high}; images are resized into [min_pixels, "
            "max_pixels]."
        )


def require_finite(section: Any, prefix: str, *names: str) -> None:
    """Each named field of `section` is a finite number (not nan or inf)."""
    for name, value in _values(section, names):
        if not math.isfinite(value):
            raise ConfigError(f"Config key '{prefix}{name}' must be a finite number, got {value}.")


def require_choice(section: Any, prefix: str, name: str, choices: Sequence[Any]) -> None:
    """The named field of `section` is one of `choices` (each item of it, for a list field)."""
    ((_, value),) = _values(section, [name])
    for item in value if isinstance(value, list) else [value]:
        if item not in choices:
            raise ConfigError(
                f"Config key '{prefix}{name}' is '{item}'; choose one of: {', '.join(map(str, choices))}."
            )


def require_path(section: Any, prefix: str, name: str, kind: str = "path", allow_hub: bool = False) -> None:
    """The named path field of `section` is unset or exists (as a file or directory for those kinds), or is a hub id
    with `allow_hub`: with USE_MODELSCOPE_HUB=1 the id is fetched from ModelScope now and the field set to its
    local folder."""
    ((_, path),) = _values(section, [name])
    key = f"{prefix}{name}"
    if not path:
        return
    if allow_hub and not path.startswith((".", "/", "~")) and not os.path.exists(path):
        with as_config_error():
            setattr(section, name, hub_folder(path, key))
        return  # a Hugging Face id such as Qwen/Qwen2.5-7B-Instruct; resolved (or refused) when the model loads
    if not os.path.exists(os.path.expanduser(path)):
        where = (
            "" if os.path.isabs(os.path.expanduser(path)) else f" (relative to the working directory {os.getcwd()})"
        )
        raise ConfigError(
            f"Config key '{key}' points to '{path}', which does not exist{where}; give an existing {kind}."
        )
    is_kind = {"directory": os.path.isdir, "file": os.path.isfile}.get(kind)
    if is_kind is not None and not is_kind(path):
        raise ConfigError(f"Config key '{key}' points to '{path}', which is not a {kind}.")


def require_writable_dir(section: Any, prefix: str, name: str, *, file: bool = False) -> None:
    """The named output-folder field of `section` is unset, or a directory this process can create and write in
    (checked without creating anything: the nearest existing folder on its path must be a writable directory). With
    `file`, the field names an output file, not a directory, and its folder is checked."""
    ((_, path),) = _values(section, [name])
    problem = unwritable(path, file=file) if path else None
    if problem is not None:
        raise ConfigError(f"Config key '{prefix}{name}' is '{path}', {problem}.")


def unwritable(path: str, *, file: bool = False) -> str | None:
    """Why `path` (a directory, or with `file` an output file) cannot be written, as "which is a file; give a
    writable directory", or None; checked without creating anything (the nearest existing folder on its path must be
    a writable directory). For a command-line script's output, before its work."""
    full = os.path.abspath(os.path.expanduser(path))
    if file:
        if os.path.isdir(full):
            return "which is a directory; give a file path"
        full = os.path.dirname(full)
    existing = full
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        reason = "is a file" if existing == full else f"cannot be created: '{existing}' is a file"
    elif not os.access(existing, os.W_OK | os.X_OK):
        denied = "this user cannot write in"
        reason = denied if existing == full else f"cannot be created: {denied} '{existing}'"
    else:
        return None
    subject, wanted = ("whose folder", "a file in a writable directory") if file else ("which", "a writable directory")
    return f"{subject} {reason}; give {wanted}"


def require_data_files(section: Any, prefix: str, *names: str) -> None:
    """Each named dataset field is unset, an existing local file or directory, or a hub dataset as name@split."""
    for name, spec in _values(section, names):
        if spec and "@" not in spec and not os.path.exists(spec):  # name@split: a Hugging Face dataset
            raise ConfigError(
                f"Config key '{prefix}{name}' points to '{spec}', which does not exist; give a local "
                "file or directory, or a Hugging Face dataset as name@split."
            )


def require_dataset_files(section: Any, prefix: str) -> None:
    """The files of a data section (the RL trainer's and SFT's): train_files set, train_files and val_files as
    `require_data_files` takes them, image_dir unset or a directory."""
    if not section.train_files:
        raise ConfigError(f"{prefix}train_files is empty; give a local file or directory, or a dataset name@split.")
    require_data_files(section, prefix, "train_files", "val_files")
    require_path(section, prefix, "image_dir", "directory")


SECRET_KEY = re.compile(
    r"(?:^|[_\-.])(api[_\-]?key|access[_\-]?key|private[_\-]?key|token|secret|password|passwd|credentials?|auth"
    r"|authorization|bearer"
    r"|(?:openai|anthropic|hf|wandb|swanlab|gemini|google|azure|cohere|mistral|groq|together|deepseek|dashscope)[_\-]?key)"
    r"(?:$|[_\-.])",
    re.IGNORECASE,
)
"""Dict keys whose values are never written to logs, config dumps or trackers: a word of the key (between `_`, `-`
or `.`) is a secret's name, e.g. api_key, hf_token, client_secret, openai_key, bearer; max_tokens, tokenizer_path
and answer_key are not secrets."""

MASK = "***"


URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]+@")
"""The user:password@ of a URL, masked wherever a config value holds one."""


def masked(value: Any) -> Any:
    """A copy of a (nested) dict/list structure with the values under secret-looking keys replaced by '***', and the
    credentials in URLs (`https://user:password@host`)."""
    if isinstance(value, str):
        return URL_CREDENTIALS.sub(MASK + "@", value)
    if isinstance(value, dict):
        return {
            key: MASK if isinstance(key, str) and SECRET_KEY.search(key) and item not in (None, "") else masked(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(masked(item) for item in value)
    return value


def config_to_dict(config: Any) -> dict[str, Any]:
    """The resolved config as a plain dict for loggers and dumps, secrets masked (see `masked`)."""
    return masked(dataclasses.asdict(config))


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict (`config_to_dict`) as dotted key -> value."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flat_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def to_yaml(config: Any) -> str:
    """The resolved config as YAML, in field order, secrets masked."""
    return yaml.safe_dump(config_to_dict(config), sort_keys=False, default_flow_style=False)


def describe_fields(schema: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, type, docstring) for every leaf field, read from the docstrings written under each field."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    # a subclass that only changes a shared field's default keeps its docstring
    for cls in filter(_is_dataclass_type, reversed(schema.__mro__)):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant):
                    docs[node.target.id] = str(nxt.value.value)
    rows: list[tuple[str, str, str]] = []
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        tp = _unwrap_optional(hints[f.name])
        if _is_dataclass_type(tp):
            rows.extend(describe_fields(tp, prefix=f"{prefix}{f.name}."))
        else:
            rows.append((f"{prefix}{f.name}", type_name(hints[f.name]), docs.get(f.name, "")))
    return rows


def _set_keys(mapping: Mapping, default: Any, prefix: str = "") -> Iterator[str]:
    """The dotted keys a source sets (a free-form mapping's own key, not its entries); `default`: the config root."""
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and dataclasses.is_dataclass(_node(default, path)):
            yield from _set_keys(value, default, f"{path}.")
        else:
            yield path


def _node(root: Any, path: str) -> Any:
    for part in path.split("."):
        root = getattr(root, part, None)
    return root


def warn_inactive_settings(
    config: Any, default: Any, sources: list[tuple[str, Mapping]], inactive: list[tuple[tuple[str, ...], str]]
) -> None:
    """A warning for each setting a source changes from its `default` that the run never reads (the critic's under a
    critic-free estimator, LoRA's at rank 0, ...): the user meant something by it. `inactive`: (keys or key prefixes
    ending in ".", why the run does not read them)."""
    last: dict[str, int] = {}  # the last source that sets each key
    for index, (_, values) in enumerate(sources):
        last.update(dict.fromkeys(_set_keys(values, default), index))
    for keys, why in inactive:
        unread = [
            key
            for key in last
            if any(key == k or (k.endswith(".") and key.startswith(k)) for k in keys)
            and _node(config, key) != _node(default, key)
        ]
        if not unread:
            continue
        # "algorithm.disable_kl=true builds ...": a later source (a recipe's command line over its base config) that
        # switched the mode off leaves the earlier ones' keys unread on purpose: said, but not as a warning
        deciding = why.split("=", 1)[0] if "=" in why.split(" ", 1)[0] else None
        switched = deciding in last and all(last[deciding] > last[key] for key in unread)
        level = logging.INFO if switched else logging.WARNING
        settings = ", ".join(f"{key}={_node(config, key)}" for key in unread)
        logger.log(level, "%s: %s has no effect in this run.", why, settings)
