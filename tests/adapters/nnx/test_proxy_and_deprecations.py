"""adapters.nnx.proxy_caller (recorded lookup paths) and adapters.nnx.deprecations."""

import warnings

import jax
import pytest

from adapters import nnx
from adapters.nnx.deprecations import deprecated
from adapters.nnx.nn import recurrent
from adapters.nnx.proxy_caller import CallableProxy, DelayedAccessor, GetAttr, GetItem


class Box:
    def __init__(self, **kw):
        vars(self).update(kw)


def test_accessor_records_and_replays_a_path():
    path = DelayedAccessor().layers[1].scale
    assert path.actions == (GetAttr("layers"), GetItem(1), GetAttr("scale"))
    assert path(Box(layers=[None, Box(scale=7)])) == 7
    assert jax.tree.leaves(path) == []  # a static pytree: no leaves, part of the structure
    assert hash(path) == hash(DelayedAccessor().layers[1].scale)
    with pytest.raises(AttributeError):
        getattr(path, "__deepcopy_probe__")  # noqa: B009 (dunder lookups are not path steps)


def test_proxy_hands_the_path_and_arguments_to_its_function():
    calls = []
    proxy = CallableProxy(lambda path, obj, *, k=0: calls.append((path, k)) or path(obj) + k)
    assert proxy.a[0](Box(a=[10]), k=1) == 11
    assert calls[0][0] == DelayedAccessor((GetAttr("a"), GetItem(0)))


def test_deprecated_alias_warns_and_delegates():
    def new_name(x: int) -> int:
        """Doubles."""
        return 2 * x

    old = deprecated(new_name)
    with pytest.warns(DeprecationWarning, match="This function is deprecated. Use .*new_name"):
        assert old(4) == 8
    assert old.__name__ == "new_name" and "Doubles." in (old.__doc__ or "")
    assert (old.__doc__ or "").startswith(".. deprecated::")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert new_name(1) == 2  # the original stays silent


def test_bidirectional_is_exported_at_the_top_level():
    assert nnx.Bidirectional is recurrent.Bidirectional
