# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The command-line prologue of the training entry points (`verl.trainer.main`, `verl.sft.main`).

Both take `config=path.yaml key=value ...` plus -h/--help, --help-config and --dry-run, and report a bad config
with exit code 2; `load_config_or_exit` does all of that once, so the two entry points only run what they train.
"""

import argparse
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from verl.utils.config import ConfigError, describe_fields, to_yaml


ConfigT = TypeVar("ConfigT")

RAY_LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Ray's switch for multi-machine support (on by default on Linux); off, a Ray started here binds every service to
127.0.0.1 (its own laptop setting), its metrics endpoints included, which otherwise answer on every interface."""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def load_config_or_exit(
    argv: Sequence[str] | None,
    usage: str,
    doc: str | None,
    schema: type,
    load: Callable[[list[str]], ConfigT],
) -> ConfigT | int:
    """The config to run, loaded by `load` from the command line `argv` (sys.argv[1:] when None), with logging set up
    at INFO; or the exit code when there is nothing to run: 0 after -h/--help (`usage` and `doc`), --help-config (every
    key of `schema` with its type and description; with words, the keys containing each word, in any case) or --dry-run
    (the resolved config as YAML), 2 after a ConfigError or a NotImplementedError from `load` (reported on stderr) and
    after --help-config words no key contains."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(usage)
        print(doc)
        return 0
    if "--help-config" in argv:
        unsupported = getattr(schema, "UNSUPPORTED_KEYS", ())  # prefixes of keys that validation refuses
        words = [arg for arg in argv if not arg.startswith("-") and "=" not in arg]
        keys = [
            f"{key} ({type_name}): {doc}"
            for key, type_name, doc in describe_fields(schema)
            if not key.startswith(unsupported) and all(word.lower() in key.lower() for word in words)
        ]
        if not keys:
            print(f"Config error: no config key contains {' and '.join(map(repr, words))}.", file=sys.stderr)
            return 2
        print("\n".join(keys))
        return 0
    dry_run = "--dry-run" in argv
    try:
        config = load([arg for arg in argv if arg != "--dry-run"])
    except (ConfigError, NotImplementedError) as err:
        kind = "Config error" if isinstance(err, ConfigError) else "Not implemented"
        print(f"{kind}: {err}", file=sys.stderr)
        if not any(arg.startswith("config=") for arg in argv):  # the built-in defaults alone are no whole run
            print(
                f"(No config=FILE was given: the run is the built-in defaults and the keys on the command line.)\n{usage}",
                file=sys.stderr,
            )
        return 2
    if dry_run:
        print(to_yaml(config), end="")
        return 0
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    return config


def positive(kind: type, zero: bool = False) -> Callable[[str], Any]:
    """An argparse type: a finite `kind` (int or float) above 0 (`zero`: or 0), else argparse's one-line error naming
    the option (nan and inf passed as floats above 0)."""
    word = "zero or positive" if zero else "positive"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {word} {kind.__name__}, got {text!r}") from None
        if not (value >= 0 if zero else value > 0) or not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be {word}, got {text}")
        return value

    return parse


def positive_ints(text: str) -> list[int]:
    """An argparse type: comma-separated positive integers (e.g. --concurrent 20,100)."""
    counts = [positive(int)(item) for item in text.split(",") if item.strip()]
    if not counts:
        raise argparse.ArgumentTypeError("needs at least one count")
    return counts


def cluster_address() -> str | None:
    """The Ray cluster the run joins (RAY_ADDRESS), or None where it starts a Ray of its own (unset, or "local")."""
    address = os.environ.get("RAY_ADDRESS")
    return address if address and address != "local" else None


def keep_local_ray_on_loopback(nodes: int) -> None:
    """For a run on one machine that starts its own Ray (no RAY_ADDRESS): every Ray service listens on loopback only.
    Ray reads the setting when it is imported, so this runs before anything imports ray; a user's own setting wins."""
    if nodes == 1 and cluster_address() is None and "ray" not in sys.modules:
        os.environ.setdefault(RAY_LOOPBACK_ENV, "0")


def use_writable_dirs_or_exit() -> int | None:
    """Move the caches of datasets, vLLM, Triton and Ray off a home that cannot be written (verl.utils.writable_dirs),
    before any of them is imported; 2 (the message printed) when a directory the user chose cannot be written."""
    from verl.utils.writable_dirs import UnwritableDirectoryError, use_writable_dirs

    try:
        use_writable_dirs(starts_ray=cluster_address() is None)
    except UnwritableDirectoryError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    return None
