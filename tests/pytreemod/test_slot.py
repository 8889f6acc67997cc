"""The variable slot's one home (``_meta``): a Variable holding boxes holding an array."""

import jax.numpy as jnp

import pytreemod as pm
from pytreemod._meta import peel, rebox, slot_value, unboxed


def test_peel_and_rebox_are_inverse() -> None:
    leaf = jnp.arange(6.0).reshape(2, 3)
    inner = pm.Partitioned(leaf, ("a", "b"))
    outer = pm.Partitioned(inner, ("c", "d"))
    boxes, got = peel(pm.Param(outer))
    assert got is leaf
    assert [b.names for b in boxes if isinstance(b, pm.Partitioned)] == [("c", "d"), ("a", "b")]
    rebuilt = rebox(boxes, leaf * 2)
    assert rebuilt.names == ("c", "d") and rebuilt.value.names == ("a", "b")
    assert jnp.array_equal(rebuilt.value.value, leaf * 2)


def test_bare_values_and_unboxed_boxes() -> None:
    x = jnp.ones(3)
    assert peel(x) == ((), x) and rebox((), x) is x
    assert slot_value(pm.Param(x)) is x and slot_value(x) is x
    assert unboxed(pm.Param(pm.Partitioned(x, ("a",)))) is x
    assert unboxed(None) is None
