# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Every config key that README.md and docs/ name (`data.x`, `worker.actor.y`, ...) exists: in the RL config tree,
in the SFT one, or among the EasyR1 keys that the loader refuses with a reason."""

import dataclasses
import pathlib
import re
import types
import typing

from verl.sft.config import SFTConfig
from verl.trainer.config import PPOConfig
from verl.utils.config import EASYR1_ONLY_KEYS


REPO = pathlib.Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
KEY = re.compile(r"`((?:data|algorithm|worker|trainer)\.[A-Za-z_][\w.]*)")


def _resolves(schema: type, path: str) -> bool:
    """Whether `path` names a field of the dataclass tree `schema` (anything below a dict-typed field counts; nothing
    below a number or a string)."""
    node: typing.Any = schema
    for part in path.split("."):
        if node is dict:
            return True  # a free-form field: any key below it
        if not dataclasses.is_dataclass(node):
            return False  # below a plain value
        hints = typing.get_type_hints(node)
        if part not in hints:
            return False
        kind = hints[part]
        union = typing.get_origin(kind) in (typing.Union, types.UnionType)
        options = [arg for arg in typing.get_args(kind) if arg is not type(None)] if union else [kind]
        node = next((option for option in options if dataclasses.is_dataclass(option)), None)
        if node is None and any(typing.get_origin(option) is dict or option is dict for option in options):
            node = dict
    return True


def _named_keys() -> list[tuple[str, str]]:
    return sorted(
        {
            (doc.relative_to(REPO).as_posix(), m.group(1).rstrip("."))
            for doc in DOCS
            for m in KEY.finditer(doc.read_text())
        }
    )


def test_the_resolver_tells_a_key_from_a_typo():
    assert _resolves(PPOConfig, "worker.actor.optim.lr") and _resolves(
        PPOConfig, "worker.rollout.val_override_config.n"
    )
    assert not _resolves(PPOConfig, "worker.actor.optim.learning_rate") and not _resolves(
        PPOConfig, "trainer.balance_batch"
    )
    # nothing lies below a number or a string (a doc naming the sub-key of a section turned into a value)
    assert not _resolves(PPOConfig, "worker.actor.optim.lr.typo") and not _resolves(
        PPOConfig, "data.max_prompt_length.x"
    )


def test_every_key_the_docs_name_exists():
    keys = _named_keys()
    assert len(keys) > 100  # the pattern still finds them
    missing = [
        f"{doc}: {key}"
        for doc, key in keys
        if not (
            _resolves(PPOConfig, key) or _resolves(SFTConfig, key) or any(key.endswith(e) for e in EASYR1_ONLY_KEYS)
        )
    ]
    assert not missing, f"keys no config has: {missing}"
