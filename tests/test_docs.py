"""Every ```python block in README.md and docs/*.md runs as written.

Blocks of one page run in order in one namespace. A line ``print(EXPR)  # TEXT`` is
checked: what ``print(EXPR)`` would print must equal ``TEXT``. Pages are user code, so
they run with JAX's standard promotion rules rather than the suite's strict ones.
"""

import pathlib
import re
from typing import Any

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PRINT = re.compile(r"^(\s*)print\((.*)\)\s+# (.*)$")
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _check(values: list[Any], expected: str, block: int) -> None:
    got = " ".join(map(str, values))
    assert got == expected, f"block {block}: printed {got!r}, the page says {expected!r}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_code_runs(page: pathlib.Path) -> None:
    blocks = BLOCK.findall(page.read_text())
    namespace: dict[str, Any] = {"__name__": "__docs__", "__check": _check}
    with jax.numpy_rank_promotion("allow"), jax.numpy_dtype_promotion("standard"):
        for i, block in enumerate(blocks):
            lines = []
            for line in block.splitlines():
                match = PRINT.match(line)
                if match:
                    indent, expr, expected = match.groups()
                    line = f"{indent}__check([{expr}], {expected!r}, {i})"
                lines.append(line)
            exec(compile("\n".join(lines), f"{page.name}[block {i}]", "exec"), namespace)
