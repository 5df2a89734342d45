# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ModelScope as the hub (EasyR1's `USE_MODELSCOPE_HUB=1`): a model or dataset id that is not a local path is fetched
from ModelScope instead of Hugging Face, when the config is loaded, and the run goes on from the local folder.

As with the Hugging Face hub, the hub is asked first (files already in the cache are kept; an interrupted download
is completed); where it cannot be reached, the cached copy is used, with a warning. `offline_unless_reachable` does
the same for the Hugging Face hub, whose client would otherwise retry every file for about a minute."""

import dataclasses
import hashlib
import logging
import os
import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

from verl.utils.network import PROXY_VARIABLES, unreachable


HUB_ENV = "USE_MODELSCOPE_HUB"

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""owner/name, as the hubs write model and dataset ids."""


logger = logging.getLogger(__name__)


def use_modelscope() -> bool:
    """Whether USE_MODELSCOPE_HUB asks for ModelScope (1/true/y/yes; unset, 0/false/n/no do not)."""
    value = os.environ.get(HUB_ENV, "").strip().lower()
    if value in ("", "0", "false", "n", "no"):
        return False
    if value in ("1", "true", "y", "yes"):
        return True
    raise ValueError(f"{HUB_ENV}={os.environ[HUB_ENV]!r} is not a switch; give 1 (fetch from ModelScope) or 0.")


def hub_folder(path: str, what: str, repo_type: str = "model") -> str:
    """`path` itself where it exists locally or USE_MODELSCOPE_HUB is off, else the local folder of ModelScope
    repository `path` (`modelscope_folder`)."""
    if os.path.exists(os.path.expanduser(path)) or not use_modelscope():
        return path
    return modelscope_folder(path, what, repo_type)


_FETCHED: dict[tuple[str, str, str], str] = {}
"""(repo id, repo type, MODELSCOPE_CACHE) -> the folder this process had for it: the model and tokenizer paths, the
actor and the critic, name one id several times."""


def modelscope_folder(repo_id: str, what: str, repo_type: str = "model") -> str:
    """The local folder of ModelScope repository `repo_id` (a "model" or "dataset"), downloaded into the cache
    (MODELSCOPE_CACHE), or the cached copy where the hub cannot be reached; asked once per process. ValueError naming
    `what` (the config key) without the modelscope package, or when the repository cannot be had either way."""
    key = (repo_id, repo_type, os.environ.get("MODELSCOPE_CACHE", ""))
    if key not in _FETCHED:
        _FETCHED[key] = _fetch(repo_id, what, repo_type)
    return _FETCHED[key]


def _fetch(repo_id: str, what: str, repo_type: str) -> str:
    try:
        from modelscope import snapshot_download
        from modelscope.hub.errors import CacheNotFound, NetworkError, ServerError
    except ImportError:
        raise ValueError(
            f"{what}: {HUB_ENV}=1 fetches '{repo_id}' from ModelScope, which needs the modelscope package "
            "(pip install modelscope)."
        ) from None
    try:
        return snapshot_download(repo_id, repo_type=repo_type)
    except (NetworkError, ServerError) as error:
        try:
            folder = snapshot_download(repo_id, repo_type=repo_type, local_files_only=True)
        except CacheNotFound:
            raise ValueError(
                f"{what}: '{repo_id}' could not be fetched from ModelScope ({HUB_ENV}=1), which cannot be reached "
                f"({error}), and is not in its cache; connect, or give a local folder."
            ) from None
        logger.warning("%s: ModelScope cannot be reached (%s); using the cached copy %s.", what, error, folder)
        return folder
    except Exception as error:  # the hub's answers (unknown repository, no permission) come as several kinds
        raise ValueError(
            f"{what}: '{repo_id}' could not be fetched from ModelScope ({HUB_ENV}=1): {error}. Check the id at "
            "modelscope.cn, or give a local folder."
        ) from None


def offline_unless_reachable(config: Any) -> None:
    """Where the strings in `config` (a config dataclass, or a dict of a command's arguments) name hub ids that are
    not local paths and the Hugging Face hub (HF_ENDPOINT) cannot be reached, set HF_HUB_OFFLINE=1 for this process
    and the ones it starts, with a warning: the ids then load from the local cache at once, or fail saying they are
    not cached, where huggingface_hub would retry each file with back-off (52 s and 20 warnings for one model, measured). Nothing is checked when
    HF_HUB_OFFLINE is set either way (0 keeps the retries), with ModelScope, or behind a proxy (which this check
    would not go through). Call it before huggingface_hub is imported: it reads the setting once."""
    try:
        modelscope = use_modelscope()
    except ValueError:  # not a switch: the config's check says so, naming the key
        return
    if modelscope or "HF_HUB_OFFLINE" in os.environ or any(os.environ.get(v) for v in PROXY_VARIABLES):
        return
    values = _strings(dataclasses.asdict(config) if dataclasses.is_dataclass(config) else config)
    names = {value.rsplit("@", 1)[0] for value in values if not os.path.exists(os.path.expanduser(value))}
    ids = sorted(name for name in names if _HUB_ID.match(name))  # name@split: a dataset's
    if not ids:
        return
    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    if urllib.parse.urlsplit(endpoint).hostname is None:  # not a URL: huggingface_hub will say so itself
        return
    problem = unreachable(endpoint, timeout_s=3.0)
    if problem is not None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        logger.warning(
            "The Hugging Face hub (%s): %s; %s load from the local cache only (HF_HUB_OFFLINE=1 for this run; "
            "HF_HUB_OFFLINE=0 retries the hub instead).",
            endpoint,
            problem,
            ", ".join(ids),
        )


def safetensors_files(model_path: str) -> list[str]:
    """The safetensors files of a model folder, or of a Hub id already in the local Hugging Face cache (nothing is
    downloaded), in name order; [] for a folder without any. An error from huggingface_hub where `model_path` is neither
    a folder nor a cached id."""
    folder = model_path
    if not os.path.isdir(folder):
        from huggingface_hub import snapshot_download

        folder = snapshot_download(model_path, local_files_only=True, allow_patterns=["*.safetensors"])
    return [os.path.join(folder, name) for name in sorted(os.listdir(folder)) if name.endswith(".safetensors")]


def weights_fingerprint(model_path: str | None) -> str | None:
    """A digest that tells two models of the same shapes apart (a base model and its instruct version) without
    reading them whole: each safetensors file's name and size and 256 KiB at its start, middle and end. None where
    there are no such files (another format, an id not in the cache)."""
    try:
        files = safetensors_files(model_path) if model_path else []
    except Exception:
        return None
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        size = os.path.getsize(path)
        digest.update(f"{os.path.basename(path)}:{size}".encode())
        with open(path, "rb") as f:
            for offset in (0, size // 2, max(size - (1 << 18), 0)):
                f.seek(offset)
                digest.update(f.read(1 << 18))
    return digest.hexdigest()[:32]


def safetensors_shapes(model_path: str) -> dict[str, list[int]]:
    """Each tensor's shape in the safetensors files of `model_path` (a folder, or a Hub id in the local cache), read
    from the files' headers; {} for other formats or an id not in the cache."""
    from safetensors import safe_open

    try:
        files = safetensors_files(model_path)
    except Exception:  # not a Hub id, or not downloaded: the loader says which, its own way
        return {}
    shapes: dict[str, list[int]] = {}
    for path in files:
        with safe_open(path, framework="pt") as f:
            shapes.update((key, list(f.get_slice(key).get_shape())) for key in f.keys())
    return shapes


def _strings(value: Any) -> Iterable[str]:
    """Every string in a tree of dicts and lists."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (dict, list, tuple)):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _strings(item)
