"""Files and functions a reader can hold: no source file of ``pytreemod`` or ``adapters``
over 800 lines, no function (or method, nested ones included) over 100 lines.

A function's length runs from its ``def`` line to its last line, docstring and nested
functions included (decorators excluded). Split a long function into well-named steps,
a long file by concern (as ``_transforms_*.py`` and ``adapters/core/_lifted_*.py`` are).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("pytreemod/**/*.py"), *ROOT.glob("adapters/**/*.py")])
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 100


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _long_functions(source: str, limit: int) -> list[str]:
    """``name (line N): L lines`` for every function of ``source`` longer than ``limit``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found.append(f"{node.name} (line {node.lineno}): {length} lines")
    return found


def test_sources_are_found() -> None:
    names = {_rel(p) for p in SOURCES}
    assert "pytreemod/_tabulate.py" in names
    assert "adapters/linen/_module/_base.py" in names


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_file_and_function_lengths(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    lines = len(source.splitlines())
    assert lines <= MAX_FILE_LINES, (
        f"{_rel(path)} has {lines} lines (at most {MAX_FILE_LINES}); split it by concern."
    )
    long = _long_functions(source, MAX_FUNCTION_LINES)
    assert not long, (
        f"{_rel(path)}: functions over {MAX_FUNCTION_LINES} lines: {', '.join(long)}; "
        "split them into well-named steps."
    )


def test_the_limits_can_fail() -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = f"def outer():\n    def inner():\n{body}\n    return inner\n"
    found = _long_functions(source, MAX_FUNCTION_LINES)
    n = MAX_FUNCTION_LINES
    assert found == [f"outer (line 1): {n + 3} lines", f"inner (line 2): {n + 1} lines"]
    assert _long_functions("def f():\n    return 1\n", MAX_FUNCTION_LINES) == []
