"""Rules every library source file keeps."""

import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("pytreemod/**/*.py"), *ROOT.glob("adapters/**/*.py")])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_postponed_annotations(path: pathlib.Path) -> None:
    # Postponed (string) annotations defeat jaxtyping/beartype's runtime checks and
    # dataclass field types read at class creation; forward references are quoted instead.
    assert "from __future__ import annotations" not in path.read_text(), path
