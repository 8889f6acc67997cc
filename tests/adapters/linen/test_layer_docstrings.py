"""The examples in the docstrings of the Linen layer helpers run and print what they say."""

import doctest
import importlib

import jax
import pytest

MODULES = [
    "adapters.linen.dtypes",
    "adapters.linen.spmd",
    "adapters.linen.batch_apply",
    "adapters.jax_utils",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
