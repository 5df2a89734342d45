# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Numbers written as people write them."""

from typing import Any


def plain_number(value: Any) -> Any:
    """An integral float as the int it holds (10.0 -> 10; a judge's "from 0 to 10", an answer "42" from an int column
    that pandas or Arrow stored as floats); any other value as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value
