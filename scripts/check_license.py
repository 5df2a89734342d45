# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Check (or, with --fix, add) the Apache-2.0 header at the top of every Python file."""

import argparse
import os
import sys


HEADER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "license_header.txt")


def python_files(roots: list[str]) -> list[str]:
    files = []
    for root in roots:
        if os.path.isfile(root) and root.endswith(".py"):
            files.append(root)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "__pycache__"]
            files.extend(os.path.join(dirpath, f) for f in filenames if f.endswith(".py"))
    return sorted(files)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--fix", action="store_true", help="prepend the header where it is missing")
    args = parser.parse_args()
    with open(HEADER_FILE, encoding="utf-8") as f:
        header = f.read()
    missing = []
    for path in python_files(args.paths):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        body = text[text.index("\n") + 1 :] if text.startswith("#!") else text
        if not body.startswith(header):
            missing.append(path)
            if args.fix:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(header + ("\n" if text.strip() else "") + text)
    for path in missing:
        print(f"{'fixed' if args.fix else 'missing license header'}: {path}")
    return 1 if missing and not args.fix else 0


if __name__ == "__main__":
    sys.exit(main())
