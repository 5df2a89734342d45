# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ModelScope as the hub (EasyR1's `USE_MODELSCOPE_HUB=1`): a model or dataset id that is not a local path is fetched
from ModelScope instead of Hugging Face, when the config is loaded, and the run goes on from the local folder.

As with the Hugging Face hub, the hub is asked first (files already in the cache are kept; an interrupted download
is completed); where it cannot be reached, the cached copy is used, with a warning."""

import logging
import os


HUB_ENV = "USE_MODELSCOPE_HUB"

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
