"""docs/errors.md is generated from pytreemod/_errors.py and must be current."""

import pathlib

from pytreemod._errors import errors_markdown

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "errors.md"


def test_errors_page_is_current() -> None:
    assert DOC.read_text() == errors_markdown() + "\n", (
        "docs/errors.md is stale: regenerate it with `make errors-doc`"
    )
