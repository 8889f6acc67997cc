"""tree_at, tree_equal, array predicates and path formatting."""

from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

import pytreemod as pm
from tests.helpers import tree_allclose


def _f32(*shape: int, fill: float = 1.0) -> jax.Array:
    return jnp.full(shape, fill, dtype=jnp.float32)


class Inner(pm.Module):
    w: pm.Param
    n: int
    maybe: Any = None


class Outer(pm.Module):
    inner: Inner
    layers: list[Any]
    k: int = pm.field(static=True, default=2)


def make() -> Outer:
    return Outer(Inner(pm.Param(_f32(2)), 3), [_f32(1, fill=0.0), _f32(2, fill=0.0)])


# --- tree_at ----------------------------------------------------------------------------


def test_tree_at_single_node() -> None:
    m = make()
    new_w = pm.Param(_f32(2, fill=5.0))
    out = pm.tree_at(lambda t: t.inner.w, m, new_w)
    assert type(out) is Outer
    assert out.inner.w is new_w
    assert out.layers[0] is m.layers[0]  # untouched parts are shared
    assert out.k == 2
    assert tree_allclose(m.inner.w.value, _f32(2))  # input unchanged


def test_tree_at_leaf_inside_variable() -> None:
    m = make()
    out = pm.tree_at(lambda t: t.inner.w.value, m, _f32(5))
    assert type(out.inner.w) is pm.Param
    assert out.inner.w.shape == (5,)


def test_tree_at_tuple_of_nodes() -> None:
    m = make()
    out = pm.tree_at(lambda t: (t.inner.n, t.layers[1]), m, (7, _f32(3)))
    assert out.inner.n == 7
    assert out.layers[1].shape == (3,)
    assert out.layers[0] is m.layers[0]
    # A list from `where` is a sequence of nodes as well.
    out2 = pm.tree_at(lambda t: [t.inner.n, t.layers[0]], m, [8, "x"])
    assert (out2.inner.n, out2.layers[0]) == (8, "x")


def test_tree_at_replace_fn() -> None:
    m = make()
    out = pm.tree_at(lambda t: t.inner.n, m, replace_fn=lambda n: n * 10)
    assert out.inner.n == 30
    out2 = pm.tree_at(lambda t: (t.layers[0], t.layers[1]), m, replace_fn=lambda x: x + 1)
    assert tree_allclose(out2.layers, [_f32(1), _f32(2)])


def test_tree_at_nested_module_and_sequence_nodes() -> None:
    m = make()
    new_inner = Inner(pm.Param(_f32(1)), 0)
    out = pm.tree_at(lambda t: t.inner, m, new_inner)
    assert out.inner is new_inner
    out2 = pm.tree_at(lambda t: t.layers, m, [1, 2, 3])
    assert out2.layers == [1, 2, 3]
    assert pm.tree_at(lambda t: t, m, 5) == 5


def test_tree_at_python_int_leaves_with_equal_values() -> None:
    # Equal ints are still distinct positions.
    assert pm.tree_at(lambda t: t[1], (1, 1, 1), 9) == (1, 9, 1)
    assert pm.tree_at(lambda t: (t[0], t[2]), (1, 1, 1), (5, 6)) == (5, 1, 6)
    assert pm.tree_at(lambda t: t["a"]["b"], {"a": {"b": 1, "c": 1}}, 2) == {"a": {"b": 2, "c": 1}}


def test_tree_at_single_none_is_unique() -> None:
    m = make()
    out = pm.tree_at(lambda t: t.inner.maybe, m, 4)
    assert out.inner.maybe == 4


def test_tree_at_is_leaf() -> None:
    m = make()
    out = pm.tree_at(
        lambda t: t.inner.w,
        m,
        replace_fn=lambda v: pm.BatchStat(v.value * 2),
        is_leaf=lambda x: isinstance(x, pm.Variable),
    )
    assert type(out.inner.w) is pm.BatchStat
    assert tree_allclose(out.inner.w.value, _f32(2, fill=2.0))


def test_tree_at_under_jit() -> None:
    m = make()
    out = jax.jit(lambda m: pm.tree_at(lambda t: t.layers[0], m, replace_fn=lambda x: x - 1))(m)
    assert tree_allclose(out.layers[0], _f32(1, fill=-1.0))


def test_tree_at_needs_exactly_one_of_replace_and_replace_fn() -> None:
    m = make()
    with pytest.raises(pm.TreeAtError, match=r"exactly one of `replace` or `replace_fn`"):
        pm.tree_at(lambda t: t.inner.n, m)
    with pytest.raises(pm.TreeAtError, match=r"exactly one of `replace` or `replace_fn`"):
        pm.tree_at(lambda t: t.inner.n, m, 4, replace_fn=lambda x: x)


def test_tree_at_computed_value_raises() -> None:
    m = make()
    with pytest.raises(
        pm.TreeAtError, match=r"`where` returned ArrayImpl object that is not a node of the tree"
    ):
        pm.tree_at(lambda t: jnp.zeros(2, dtype=jnp.float32), m, 4)
    with pytest.raises(pm.TreeAtError, match=r"returned int object.*only index into"):
        pm.tree_at(lambda t: t.k, m, 5)  # static fields are not nodes


def test_tree_at_non_unique_none_raises() -> None:
    m = Outer(Inner(pm.Param(_f32(2)), 3), [None, _f32(2)])
    with pytest.raises(
        pm.TreeAtError,
        match=r"does not uniquely identify.*occurs at \.inner\.maybe, \.layers\[0\].*`None`",
    ):
        pm.tree_at(lambda t: t.inner.maybe, m, 4)


def test_tree_at_replace_length_mismatch_raises() -> None:
    m = make()
    with pytest.raises(
        pm.TreeAtError, match=r"`where` selected 2 nodes but `replace` has 1 values"
    ):
        pm.tree_at(lambda t: (t.inner.n, t.layers[1]), m, (7,))


# --- tree_equal -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ({"a": _f32(2)}, {"a": _f32(2)}, True),
        ({"a": _f32(2)}, {"a": _f32(2, fill=0.0)}, False),
        ({"a": _f32(2)}, {"a": _f32(3)}, False),
        ({"a": _f32(2)}, {"a": jnp.ones(2, dtype=jnp.int32)}, False),
        ({"a": _f32(2)}, {"b": _f32(2)}, False),
        ({"a": _f32(2)}, {"a": np.ones(2, dtype=np.float32)}, True),
        ({"a": _f32(1)}, {"a": 1.0}, False),
        ((1, "x"), (1, "x"), True),
        ((1, "x"), (1, "y"), False),
        ([_f32(1, fill=float("nan"))], [_f32(1, fill=float("nan"))], True),
        ([jax.random.key(0)], [jax.random.key(0)], True),
        ([jax.random.key(0)], [jax.random.key(1)], False),
    ],
)
def test_tree_equal(a: Any, b: Any, equal: bool) -> None:
    result = pm.tree_equal(a, b)
    assert result is equal
    assert pm.tree_equal(b, a) is equal


def test_tree_equal_with_tracers() -> None:
    def check(x: jax.Array) -> jax.Array:
        assert pm.tree_equal(x, x)  # identical tracer
        assert not pm.tree_equal(x, x + 0)  # values unknown
        return x

    jax.jit(check)(_f32(2))


# --- predicates and paths ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "array", "inexact"),
    [
        (_f32(2), True, True),
        (jnp.ones(2, dtype=jnp.int32), True, False),
        (np.ones(2, dtype=np.float32), True, True),
        (np.float32(1.0), True, True),
        (jnp.ones(2, dtype=jnp.complex64), True, True),
        (jax.random.key(0), True, False),
        (1.0, False, False),
        (1, False, False),
        ("x", False, False),
        (pm.Param(_f32(1)), False, False),
    ],
)
def test_is_array(x: Any, array: bool, inexact: bool) -> None:
    assert pm.is_array(x) is array
    assert bool(pm.is_inexact_array(x)) is inexact


def test_is_array_on_tracers() -> None:
    def check(x: jax.Array) -> jax.Array:
        assert pm.is_array(x)
        assert pm.is_inexact_array(x)
        return x

    jax.jit(check)(_f32(1))


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ((), "<root>"),
        (("blocks", 3, "mlp", "weight"), ".blocks[3].mlp.weight"),
        (("a b", 1.5, "x"), "['a b'][1.5].x"),
        (
            (jtu.GetAttrKey("layers"), jtu.SequenceKey(0), jtu.DictKey("w")),
            ".layers[0].w",
        ),
        ((jtu.DictKey(2), jtu.FlattenedIndexKey(1)), "[2][1]"),
    ],
)
def test_format_path(path: tuple[Any, ...], text: str) -> None:
    assert pm.format_path(path) == text


def test_tree_at_where_that_computes_is_a_tree_at_error() -> None:
    tree = {"n": jnp.ones(2), "m": 3}
    with pytest.raises(pm.TreeAtError, match=r"`where` computed with a leaf of the tree"):
        pm.tree_at(lambda t: t["m"] + 1, tree, 0)


def test_tree_at_selecting_a_node_twice_is_an_error() -> None:
    tree = {"n": jnp.ones(2)}
    with pytest.raises(pm.TreeAtError, match=r"selected \.n more than once|selected \['n'\] more"):
        pm.tree_at(lambda t: (t["n"], t["n"]), tree, (jnp.zeros(2), jnp.ones(2)))
