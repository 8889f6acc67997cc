"""Every docstring example in ``pytreemod.nn`` runs and prints what it shows.

Examples are user code, so they run with JAX's standard promotion rules (the suite's
strict ones are for the library's own math).
"""

import doctest
import importlib
import pkgutil

import jax
import pytest

import pytreemod.nn

MODULES = ["pytreemod.nn"] + [
    f"pytreemod.nn.{info.name}" for info in pkgutil.iter_modules(pytreemod.nn.__path__)
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE, report=True)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"


def test_every_public_layer_has_a_shape_annotated_example() -> None:
    for name in pytreemod.nn.__all__:
        obj = getattr(pytreemod.nn, name)
        if isinstance(obj, type) and issubclass(obj, pytreemod.Module):
            doc = obj.__doc__ or ""
            assert ">>>" in doc and ".shape" in doc, f"{name} needs a shape-annotated example"
