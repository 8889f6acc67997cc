"""``adapters.errors`` has every ``flax.errors`` class, with Flax's arguments and texts."""

import inspect
from typing import Any

import flax.errors as flax_errors
import pytest

import adapters
import adapters.core.errors as core_errors
import adapters.errors as errors
import pytreemod as pm


def _flax_classes() -> list[str]:
    return sorted(
        name
        for name, obj in inspect.getmembers(flax_errors, inspect.isclass)
        if issubclass(obj, Exception) and obj.__module__ == flax_errors.__name__
    )


class _Path:
    def __init__(self, path: str):
        self._path = path


def _sample_args(cls: type) -> tuple[object, ...] | None:
    """Arguments for ``cls``' constructor (by parameter name), or None to skip."""
    sig = inspect.signature(cls.__init__)
    params = [p for p in sig.parameters.values() if p.name != "self"]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    values = {"cursor": _Path("a/b"), "cursor2": _Path("c"), "update_fn": None}
    return tuple(values.get(p.name, f"<{p.name}>") for p in params)


def test_same_names_in_both_modules_and_package() -> None:
    assert set(_flax_classes()) <= set(errors.__all__)
    assert set(errors.__all__) == set(core_errors.__all__)
    for name in errors.__all__:
        assert getattr(errors, name) is getattr(core_errors, name)
    assert adapters.errors is errors


@pytest.mark.parametrize("name", _flax_classes())
def test_same_signature_base_and_message(name: str) -> None:
    ours, theirs = getattr(errors, name), getattr(flax_errors, name)
    assert issubclass(ours, errors.FlaxError) and issubclass(ours, pm.PytreemodError)
    for base in theirs.__mro__:
        if base.__module__ == flax_errors.__name__ and base is not theirs:
            assert issubclass(ours, getattr(errors, base.__name__))
    flax_params = list(inspect.signature(theirs.__init__).parameters)
    our_params = list(inspect.signature(ours.__init__).parameters)
    assert our_params[: len(flax_params)] == flax_params
    sample = _sample_args(theirs)
    args: tuple[Any, ...] = ("some message",) if sample is None else sample
    assert str(ours(*args)) == str(theirs(*args))


def test_cursor_find_and_traverse_variants() -> None:
    for args in [(), (_Path("a"), _Path("b"))]:
        assert str(errors.CursorFindError(*args)) == str(flax_errors.CursorFindError(*args))
    for args in [(None, None), (len, len)]:
        assert str(errors.TraverseTreeError(*args)) == str(flax_errors.TraverseTreeError(*args))
    with_key = errors.MPARestoreTargetRequiredError("p", 3, key="k")
    assert str(with_key) == str(flax_errors.MPARestoreTargetRequiredError("p", 3, key="k"))


def test_link_added_once_and_copy_keeps_message() -> None:
    import copy

    e = errors.InvalidRngError("x needs PRNG")
    assert str(e).count("flax.errors.InvalidRngError") == 1
    again = errors.InvalidRngError(str(e))
    assert str(again) == str(e)
    assert str(copy.copy(e)) == str(e)


def test_our_refinements_have_no_foreign_link() -> None:
    e = errors.LiftError("lift.vmap: bad")
    assert str(e) == "lift.vmap: bad"
    assert isinstance(e, ValueError)
    in_use = errors.ScopeNameInUseError("a")
    assert isinstance(in_use, ValueError)
    with pytest.raises(errors.ScopeNameInUseError, match=r'^Duplicate use of scope name: "a"$'):
        raise in_use
    unlifted = errors.UnliftedCollectionError("stats", "n", "/", "vmap")
    assert isinstance(unlifted, errors.ScopeCollectionNotFound)
    assert str(unlifted).endswith("#flax.errors.ScopeCollectionNotFound)")
