"""A griffe extension for the docs build: doctest examples render as code.

Our docstrings hold bare doctest examples (``>>> expr`` then its output), which Markdown
would read as prose (``[1, 2]`` as a link). This wraps each such example, from its first
``>>>`` line to the next blank line, in a ```` ```pycon ```` fence at its indentation.
Examples already inside a fence are left alone.
"""

import re
from typing import Any

import griffe

_FENCE = re.compile(r"^\s*(```|~~~)")
_PROMPT = re.compile(r"^(\s*)>>>( |$)")


def fence_doctests(text: str) -> str:
    """Wrap every doctest example of ``text`` that is outside a fence in a pycon fence."""
    out: list[str] = []
    lines = text.splitlines()
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            in_fence = not in_fence
        prompt = None if in_fence else _PROMPT.match(line)
        if prompt is None:
            out.append(line)
            i += 1
            continue
        indent = prompt.group(1)
        if out and out[-1].strip():
            out.append("")
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fence the doctest examples of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
