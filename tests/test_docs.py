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


# ----------------------------------------------------------------------------- the site

NAV_ENTRY = re.compile(r"^\s*-\s*(?:[^:\n]+:\s*)?([\w/.-]+\.md)\s*$", re.M)
DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.M)


def _nav_pages() -> list[str]:
    return NAV_ENTRY.findall((ROOT / "mkdocs.yml").read_text())


def test_every_docs_page_is_in_the_site_nav() -> None:
    """A page left out of mkdocs.yml's nav is built but unreachable from the site."""
    nav = _nav_pages()
    pages = sorted(
        p.relative_to(ROOT / "docs").as_posix()
        for p in (ROOT / "docs").rglob("*.md")
        if not any(part.startswith("_") for part in p.relative_to(ROOT / "docs").parts)
    )
    assert "index.md" in nav and "api/pytreemod.md" in nav
    assert [p for p in pages if p not in nav] == []
    assert [p for p in nav if not (ROOT / "docs" / p).is_file()] == []
    assert len(nav) == len(set(nav)), "a page is listed twice in the nav"


PM_NAME = re.compile(r"(?<![\w.])pm\.((?:nn\.(?:functional\.|initializers\.)?)?[A-Za-z_]\w*)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_pm_name_a_page_mentions_exists(page: pathlib.Path) -> None:
    """``pm.name`` / ``pm.nn.name`` in the prose and tables (not only in code) is real."""
    import functools

    import pytreemod

    missing = []
    for name in sorted(set(PM_NAME.findall(page.read_text()))):
        try:
            functools.reduce(getattr, name.split("."), pytreemod)
        except AttributeError:
            missing.append(f"pm.{name}")
    assert missing == []


def test_api_pages_name_importable_modules() -> None:
    """Each ``::: module`` directive of docs/api/ names a module that imports."""
    import importlib

    names = [
        name
        for page in sorted((ROOT / "docs" / "api").glob("*.md"))
        for name in DIRECTIVE.findall(page.read_text())
    ]
    assert {"pytreemod", "pytreemod.nn", "adapters.core", "adapters.linen"} <= set(names)
    for name in names:
        importlib.import_module(name)


def test_doctest_examples_are_fenced_for_the_site() -> None:
    """The docs build's griffe extension turns bare ``>>>`` examples into code blocks."""
    pytest.importorskip("griffe")
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "doctest_fences", ROOT / "docs" / "_ext" / "doctest_fences.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "Summary.\n\n- item:\n\n  >>> f([1, 2])\n  [2, 3]\n\nAfter.\n```python\n>>> x\n```"
    assert module.fence_doctests(text) == (
        "Summary.\n\n- item:\n\n  ```pycon\n  >>> f([1, 2])\n  [2, 3]\n  ```\n\nAfter.\n"
        "```python\n>>> x\n```"
    )


def test_readme_links_point_at_files() -> None:
    """README.md is read on the repository, not the site: its relative links must exist."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert "docs/index.md" in local
    assert [link for link in local if not (ROOT / link).exists()] == []
