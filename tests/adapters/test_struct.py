"""``adapters.struct``: pytree dataclasses as ``flax.struct``'s."""

import dataclasses
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm
from adapters import serialization, struct
from adapters.core import meta


@struct.dataclass
class Point:
    x: jax.Array
    y: jax.Array
    label: str = struct.field(pytree_node=False, default="p")


@flax.struct.dataclass
class FlaxPoint:
    x: jax.Array
    y: jax.Array
    label: str = flax.struct.field(pytree_node=False, default="p")


def test_pytree_with_keys_and_static_fields() -> None:
    p = Point(jnp.ones(2), jnp.zeros(2), label="a")
    paths = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(p)[0]]
    q = FlaxPoint(jnp.ones(2), jnp.zeros(2), label="a")
    flax_paths = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(q)[0]]
    assert paths == flax_paths == [".x", ".y"]
    doubled = jax.tree.map(lambda v: v * 2, p)
    assert doubled.label == "a" and float(doubled.x[0]) == 2.0
    # static fields are part of the structure
    relabeled = p.replace(label="b")  # pyright: ignore[reportAttributeAccessIssue]
    assert jax.tree.structure(p) != jax.tree.structure(relabeled)


def test_frozen_by_default_and_replace() -> None:
    p = Point(jnp.ones(1), jnp.ones(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = jnp.zeros(1)  # type: ignore[misc]
    r = p.replace(y=jnp.zeros(1))  # pyright: ignore[reportAttributeAccessIssue]
    assert float(r.y[0]) == 0.0 and float(p.y[0]) == 1.0


def test_decorator_arguments() -> None:
    @struct.dataclass(frozen=False, kw_only=True)
    class Mutable:
        a: int
        b: int = struct.field(pytree_node=False, default=1)

    m = Mutable(a=1)
    m.a = 2
    assert jax.tree.leaves(m) == [2]
    with pytest.raises(TypeError):
        Mutable(1)  # type: ignore[misc]
    assert struct.dataclass(Mutable) is Mutable  # applying twice is a no-op


def test_pytree_node_base() -> None:
    class Node(struct.PyTreeNode):
        w: jax.Array
        name: str = struct.field(pytree_node=False, default="n")

    n = Node(jnp.ones(3))
    grads = jax.grad(lambda t: jnp.sum(t.w**2))(n)
    assert isinstance(grads, Node) and grads.name == "n"
    assert jnp.allclose(grads.w, 2 * jnp.ones(3))
    assert n.replace(name="m").name == "m"

    class KwNode(struct.PyTreeNode, kw_only=True):
        v: int

    assert KwNode(v=3).v == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        KwNode(v=3).v = 4  # type: ignore[misc]


def test_jit_and_state_dict() -> None:
    p = Point(jnp.ones(2), jnp.zeros(2))
    out = jax.jit(lambda t: t.replace(x=t.x + t.y))(p)
    assert isinstance(out, Point) and jnp.allclose(out.x, 1.0)
    assert set(serialization.to_state_dict(p)) == {"x", "y"}
    restored = serialization.from_state_dict(p, {"x": jnp.full(2, 5.0), "y": jnp.zeros(2)})
    assert float(restored.x[0]) == 5.0 and restored.label == "p"


def test_pytree_node_that_is_also_an_axis_metadata_box() -> None:
    # A custom box (PyTreeNode + AxisMetadata, a pytreemod Module) is a frozen pytree whose
    # static fields (pytree_node=False) are part of the structure.
    class Box(struct.PyTreeNode, meta.AxisMetadata):  # pyright: ignore[reportIncompatibleMethodOverride]
        value: Any
        tag: str = struct.field(pytree_node=False, default="t")

        def unbox(self) -> Any:
            return self.value

        def add_axis(self, index: int, params: Any) -> "Box":
            return self.replace(value=jnp.mean(self.value, axis=index))

        def remove_axis(self, index: int, params: Any) -> "Box":
            return self

    b = Box(jnp.ones((2, 3)))
    assert jax.tree.leaves(b)[0].shape == (2, 3)
    assert jax.tree.map(lambda x: x * 2, b).tag == "t"
    assert meta.add_axis({"v": b}, 0, {})["v"].value.shape == (3,)
    with pytest.raises(pm.FrozenModuleError):
        b.value = jnp.zeros(())  # type: ignore[misc]
