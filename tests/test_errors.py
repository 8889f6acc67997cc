"""Every exception and warning class is documented, exported and raised in some test.

Adding an error class to ``pytreemod/_errors.py`` without a test that triggers it (with
``pytest.raises(pm.<Name>, match=...)`` or ``pytest.warns(pm.<Name>, match=...)``) fails
this file.
"""

import inspect
import re
from pathlib import Path

import pytest

import pytreemod as pm
from pytreemod import _errors

TESTS = Path(__file__).parent


def _classes() -> list[type]:
    return [
        obj
        for _, obj in inspect.getmembers(_errors, inspect.isclass)
        if obj.__module__ == _errors.__name__
    ]


CLASSES = _classes()
NAMES = [c.__name__ for c in CLASSES]


def test_the_known_classes_are_found() -> None:
    assert {
        "PytreemodError",
        "PytreemodWarning",
        "FrozenModuleError",
        "UndeclaredFieldError",
        "UninitializedFieldError",
        "InvalidFieldError",
        "InvalidFilterError",
        "StateMismatchError",
        "TreeAtError",
        "AxisMetadataError",
        "StaticArrayWarning",
    } <= set(NAMES)


@pytest.mark.parametrize("cls", CLASSES, ids=NAMES)
def test_documented(cls: type) -> None:
    doc = inspect.getdoc(cls)
    assert doc, f"{cls.__name__} has no docstring"
    if cls not in (pm.PytreemodError, pm.PytreemodWarning):
        # Cause and fix: more than a one-line summary.
        assert len(doc.splitlines()) > 2 or "Fix" in doc, f"{cls.__name__}: say how to fix it"


@pytest.mark.parametrize("cls", CLASSES, ids=NAMES)
def test_exported(cls: type) -> None:
    assert getattr(pm, cls.__name__, None) is cls


@pytest.mark.parametrize("cls", CLASSES, ids=NAMES)
def test_hierarchy(cls: type) -> None:
    if issubclass(cls, Warning):
        assert issubclass(cls, pm.PytreemodWarning)
    else:
        assert issubclass(cls, pm.PytreemodError)
        assert issubclass(cls, Exception)


def _test_sources() -> str:
    return "\n".join(
        p.read_text(encoding="utf-8")
        for p in sorted(TESTS.rglob("*.py"))
        if p.name != "conftest.py"
    )


@pytest.mark.parametrize("cls", CLASSES, ids=NAMES)
def test_raised_and_matched_somewhere_in_the_suite(cls: type) -> None:
    kind = "warns" if issubclass(cls, Warning) else "raises"
    pattern = re.compile(rf"pytest\.{kind}\(\s*pm\.{cls.__name__}\s*,\s*match=", re.MULTILINE)
    assert pattern.search(_test_sources()), (
        f"No test triggers pm.{cls.__name__} with `pytest.{kind}(pm.{cls.__name__}, "
        "match=...)`; add one that checks the message."
    )


def test_errors_markdown_lists_every_class() -> None:
    text = _errors.errors_markdown()
    assert text.startswith("# Errors and warnings")
    for cls in CLASSES:
        assert f"## `{cls.__name__}`" in text
        first_line = inspect.getdoc(cls).splitlines()[0]  # pyright: ignore[reportOptionalMemberAccess]
        assert first_line in text
