# Copyright 2026 The verl-compact Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Parsers for structured model turns: XML-style fields such as <think>...</think><answer>...</answer>, e.g.
`XMLParser(("think", "answer")).parse(text)`. Tool calls have their own parser (verl.envs.tools.parse_tool_calls).
"""

import re
from collections.abc import Sequence


class XMLParser:
    """Reads `<field>content</field>` blocks of the given field names from a model turn."""

    def __init__(self, fields: Sequence[str], strict_order: bool = True) -> None:
        if not fields or any(not re.fullmatch(r"[A-Za-z_][\w-]*", name) for name in fields):
            raise ValueError(f"XMLParser fields must be tag names such as 'think' or 'answer', got {list(fields)}.")
        self.fields = tuple(fields)
        self.strict_order = strict_order
        self._patterns = {name: re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL) for name in self.fields}

    def parse(self, text: str) -> dict[str, str | None]:
        """Each field's content (stripped; the last block when a field appears several times), or None if absent."""
        found = {}
        for name, pattern in self._patterns.items():
            blocks = pattern.findall(text)
            found[name] = blocks[-1].strip() if blocks else None
        return found

    def format_score(self, text: str) -> float:
        """1.0 when every field appears exactly once (in the given order with `strict_order`) and nothing but
        whitespace lies outside the blocks; otherwise the share of fields that appear exactly once, halved."""
        spans = []
        for name, pattern in self._patterns.items():
            matches = list(pattern.finditer(text))
            if len(matches) == 1:
                spans.append((matches[0].start(), matches[0].end(), name))
        if len(spans) == len(self.fields):
            ordered = [name for _, _, name in sorted(spans)] == list(self.fields)
            outside = text
            for start, end, _ in sorted(spans, reverse=True):
                outside = outside[:start] + outside[end:]
            if (ordered or not self.strict_order) and not outside.strip():
                return 1.0
        return 0.5 * len(spans) / len(self.fields)
