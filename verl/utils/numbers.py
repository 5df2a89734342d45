# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Numbers written as people write them."""

import math
from decimal import Decimal
from typing import Any


def plain_number(value: Any) -> Any:
    """An integral float as the int it holds (10.0 -> 10; a judge's "from 0 to 10", an answer "42" from an int column
    that pandas or Arrow stored as floats); any other value as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def number_text(value: Any) -> str:
    """The text of a number as people write it: an integral float as its int's ("42", not "42.0"), a float that Python
    writes in e notation positionally ("0.00001", not "1e-05", where a grader reads e as Euler's number); anything
    else as str() writes it."""
    value = plain_number(value)
    text = str(float(value)) if isinstance(value, float) else str(value)
    return format(Decimal(text), "f") if isinstance(value, float) and math.isfinite(value) and "e" in text else text
