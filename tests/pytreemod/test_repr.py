"""Reprs: arrays as dtype and shape, never values; modules by field; line breaking."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm


class Inner(pm.Module):
    w: pm.Param
    n: int


class Outer(pm.Module):
    inner: Inner
    layers: list[Any]
    table: dict[str, Any]
    pair: tuple[Any, ...]
    activation: Callable[[jax.Array], jax.Array] = pm.field(static=True, default=jax.nn.relu)
    hidden: int = pm.field(repr=False, default=0)

    def encode(self, x: jax.Array) -> jax.Array:
        return x


def make() -> Outer:
    return Outer(
        Inner(pm.Param(jnp.ones((4, 32), dtype=jnp.float32)), 3),
        [jnp.zeros(1, dtype=jnp.int8), np.zeros(2, dtype=np.float32)],
        {"a": pm.BatchStat(jnp.zeros((), dtype=jnp.bfloat16))},
        (jnp.ones(3, dtype=jnp.bool_),),
    )


@pytest.mark.parametrize(
    ("dtype", "text"),
    [
        (jnp.float32, "f32"),
        (jnp.float16, "f16"),
        (jnp.bfloat16, "bf16"),
        (jnp.int8, "i8"),
        (jnp.int32, "i32"),
        (jnp.uint16, "u16"),
        (jnp.complex64, "c64"),
        (jnp.bool_, "bool"),
    ],
)
def test_array_dtype_and_shape(dtype: Any, text: str) -> None:
    assert repr(pm.Param(jnp.zeros((4, 32), dtype=dtype))) == f"Param({text}[4, 32])"
    assert pm.tree_pformat(jnp.zeros((), dtype=dtype)) == f"{text}[]"


def test_values_are_never_printed() -> None:
    v = pm.Cache(jnp.arange(1000, dtype=jnp.float32) + 123.0)
    text = repr(v)
    assert text == "Cache(f32[1000])"
    assert "123" not in text


def test_numpy_arrays_are_marked() -> None:
    assert repr(pm.Param(np.zeros((2, 3), dtype=np.float32))) == "Param(f32[2, 3](numpy))"


def test_key_arrays() -> None:
    assert pm.tree_pformat({"key": jax.random.key(0)}) == "{'key': key<fry>[]}"
    assert pm.tree_pformat(jax.random.split(jax.random.key(0), 3)) == "key<fry>[3]"


def test_shape_dtype_structs() -> None:
    assert pm.tree_pformat(jax.ShapeDtypeStruct((2, 3), jnp.float32)) == "f32[2, 3]"
    shapes = jax.eval_shape(make)
    assert repr(shapes).startswith("Outer(\n  inner=Inner(w=Param(f32[4, 32]), n=i32[]),")


def test_module_repr_multi_line() -> None:
    assert repr(make()) == (
        "Outer(\n"
        "  inner=Inner(w=Param(f32[4, 32]), n=3),\n"
        "  layers=[i8[1], f32[2](numpy)],\n"
        "  table={'a': BatchStat(bf16[])},\n"
        "  pair=(bool[3],),\n"
        "  activation=<function relu>,\n"
        ")"
    )


def test_module_repr_one_line_when_it_fits() -> None:
    assert repr(make().inner) == "Inner(w=Param(f32[4, 32]), n=3)"
    assert pm.tree_pformat(make(), width=200) == (
        "Outer(inner=Inner(w=Param(f32[4, 32]), n=3), layers=[i8[1], f32[2](numpy)], "
        "table={'a': BatchStat(bf16[])}, pair=(bool[3],), activation=<function relu>)"
    )


def test_narrow_width_nests() -> None:
    assert pm.tree_pformat(make(), width=20) == (
        "Outer(\n"
        "  inner=Inner(\n"
        "    w=Param(f32[4, 32]),\n"
        "    n=3,\n"
        "  ),\n"
        "  layers=[\n"
        "    i8[1],\n"
        "    f32[2](numpy),\n"
        "  ],\n"
        "  table={\n"
        "    'a': BatchStat(bf16[]),\n"
        "  },\n"
        "  pair=(bool[3],),\n"
        "  activation=<function relu>,\n"
        ")"
    )


@pytest.mark.parametrize("width", [30, 36, 40, 50, 60, 88])
def test_lines_fit_the_width(width: int) -> None:
    # Field names, brackets and commas count towards the width, not only the value.
    # (Atoms that cannot be broken, such as `<function relu>` lines, are shorter than 30.)
    for line in pm.tree_pformat(make(), width=width).splitlines():
        assert len(line) <= width, line


def test_repr_false_fields_are_hidden() -> None:
    assert "hidden" not in repr(make())
    assert "hidden" not in pm.tree_pformat(make(), width=1000)


def test_placeholders_and_python_values() -> None:
    nones = jax.tree.map(lambda _: None, make().inner)
    assert repr(nones) == "Inner(w=Param(None), n=None)"
    assert repr(pm.Param(1.5)) == "Param(1.5)"
    assert pm.tree_pformat({"s": "x", 1: [2, (3,)]}) == "{'s': 'x', 1: [2, (3,)]}"


def test_bound_method_repr() -> None:
    m = make()
    assert repr(m.encode) == "<bound method Outer.encode of Outer>"
    assert pm.tree_pformat([m.encode]) == "[<bound method Outer.encode of Outer>]"


def test_boxed_values() -> None:
    p = pm.Param(pm.Partitioned(jnp.ones((2, 3), dtype=jnp.float32), ("a", "b")))
    assert repr(p) == "Param(Partitioned(value=f32[2, 3], names=('a', 'b'), mesh=None))"
    narrow = pm.tree_pformat(p, width=30)
    assert narrow.startswith("Param(Partitioned(\n  value=f32[2, 3],\n")
    assert all(len(line) <= 30 for line in narrow.splitlines())
