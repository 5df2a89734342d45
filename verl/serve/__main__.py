# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""`python -m verl.serve`: serve a model (verl.serve.server.main)."""

import sys

from verl.serve.server import main


if __name__ == "__main__":
    sys.exit(main())
