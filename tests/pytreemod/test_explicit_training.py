"""Transforms and training keep each array's sharding in its type on an Explicit mesh.

A ``pm.vmap``-built stack scanned with ``pm.scan`` (the ``layers`` axis from
``metadata_params``), ``pm.remat`` inside the scan, ``pm.value_and_grad``, an optax adam
update and ``pm.jit`` with donation: after train steps the parameters and optimizer state
have the shardings they started with, with no ``out_shardings`` given; the same on an
Auto mesh. ``pm.shard``, ``pm.get_sharding``, ``pm.abstract`` and
``with_logical_constraint`` agree on both axis types.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from pytreemod.nn import initializers as init

D, H, DEPTH = 16, 32, 2
LAYERS = {pm.PARTITION_NAME: "layers"}
RULES = (("batch", "data"), ("embed", "data"), ("mlp", "model"))
OPT = optax.adam(1e-2)
MESHES = pytest.mark.parametrize("kind", [AxisType.Explicit, AxisType.Auto], ids=str)


def lp(fn: Any, *names: str | None) -> Any:
    return pm.with_logical_partitioning(fn, names)


class Block(pm.Module):
    """FSDP x TP MLP block with a norm: kernels over both mesh axes."""

    norm: pm.nn.LayerNorm
    up: pm.nn.Linear
    down: pm.nn.Linear

    def __init__(self, *, key: jax.Array):
        k0, k1, k2 = jax.random.split(key, 3)
        self.norm = pm.nn.LayerNorm(D, scale_init=lp(init.ones, "embed"), key=k0)
        self.up = pm.nn.Linear(
            D, H, kernel_init=lp(init.lecun_normal(), "embed", "mlp"),
            bias_init=lp(init.zeros, "mlp"), key=k1,
        )  # fmt: skip
        self.down = pm.nn.Linear(H, D, kernel_init=lp(init.lecun_normal(), "mlp", "embed"), key=k2)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down(jax.nn.gelu(self.up(self.norm(x))))


class Stack(pm.Module):
    blocks: Block

    def __init__(self, *, key: jax.Array):
        make = pm.vmap(lambda k: Block(key=k), metadata_params=LAYERS)
        self.blocks = make(jax.random.split(key, DEPTH))

    def __call__(self, x: jax.Array) -> jax.Array:
        @pm.scan(in_axes=(pm.Carry, 0), out_axes=pm.Carry, metadata_params=LAYERS)
        @pm.remat
        def body(x: jax.Array, block: Block) -> jax.Array:
            return block(x)

        return body(x, self.blocks)


def _loss(model: Stack, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


def _step(model: Stack, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
    loss, grads = pm.value_and_grad(_loss)(model, x, y)
    updates, opt_state = OPT.update(grads, opt_state, model)
    return optax.apply_updates(model, updates), opt_state, loss


def _mesh(kind: AxisType) -> Mesh:
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(kind, kind))


def _shardings(tree: Any) -> list[Any]:
    """Each array's sharding; the full spec (one entry per dimension) for the
    comparisons, as Auto meshes drop trailing ``None``s."""
    return [
        jax.sharding.NamedSharding(
            x.sharding.mesh, P(*x.sharding.spec, *[None] * (x.ndim - len(x.sharding.spec)))
        )
        for x in jax.tree.leaves(tree)
    ]


@MESHES
def test_train_steps_keep_the_shardings_of_params_and_optimizer_state(kind: AxisType) -> None:
    model = Stack(key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (8, D))
    y = jax.random.normal(jax.random.key(2), (8, D))
    with jax.numpy_dtype_promotion("standard"):
        ref, ref_opt = model, OPT.init(model)
        ref_losses = []
        for _ in range(2):
            ref, ref_opt, loss = jax.jit(_step)(ref, ref_opt, x, y)
            ref_losses.append(loss)
        mesh = _mesh(kind)
        with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
            s_model = pm.shard(model, mesh)
            s_opt = pm.shard(OPT.init(model), mesh)
            before = (_shardings(s_model), _shardings(s_opt))
            sx = jax.device_put(x, pm.logical_to_mesh_sharding(("batch", None), mesh))
            sy = jax.device_put(y, pm.logical_to_mesh_sharding(("batch", None), mesh))
            step = pm.jit(_step, donate_argnums=(0, 1))
            losses = []
            for _ in range(2):
                s_model, s_opt, loss = step(s_model, s_opt, sx, sy)
                losses.append(loss)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(s_model), jax.tree.leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    after = (_shardings(s_model), _shardings(s_opt))
    for got, want in zip(jax.tree.leaves(after), jax.tree.leaves(before)):
        assert got.is_equivalent_to(want, len(want.spec)), (got, want)
    # The stacked kernel: the layers axis is replicated, the rest FSDP x TP.
    kernel = s_model.blocks.up.kernel.value
    assert kernel.names == ("layers", "embed", "mlp")
    assert tuple(kernel.value.sharding.spec)[:3] == (None, "data", "model")
    if kind == AxisType.Explicit:  # the sharding is in the type
        assert tuple(jax.typeof(kernel.value).sharding.spec)[:3] == (None, "data", "model")


@MESHES
def test_shard_get_sharding_and_abstract_agree(kind: AxisType) -> None:
    model = Stack(key=jax.random.key(0))
    mesh = _mesh(kind)
    with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
        shardings = pm.get_sharding(model, mesh)
        placed = pm.shard(model, mesh)
        shapes = pm.abstract(model, mesh)
    placed_leaves = jax.tree.leaves(placed)
    wanted = [s for s in jax.tree.leaves(shardings) if s is not None]
    abstract_leaves = jax.tree.leaves(shapes)
    assert len(placed_leaves) == len(wanted) == len(abstract_leaves) == 6
    for x, s, a in zip(placed_leaves, wanted, abstract_leaves):
        assert x.sharding.is_equivalent_to(s, x.ndim)
        assert a.sharding.is_equivalent_to(s, x.ndim) and a.shape == x.shape
    assert tuple(wanted[2].spec) == (None, "data", "model")  # blocks.up.kernel


@MESHES
def test_with_logical_constraint_reshards_on_explicit_and_constrains_on_auto(
    kind: AxisType,
) -> None:
    mesh = _mesh(kind)
    x = jnp.arange(64.0).reshape(8, 8)
    with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
        sx = jax.device_put(x, pm.logical_to_mesh_sharding(("batch", None), mesh))

        def f(x: jax.Array) -> Any:
            y = pm.with_logical_constraint(x * 2.0, (None, "mlp"))
            return y, jax.typeof(y).sharding.spec

        y, traced_spec = jax.jit(lambda x: f(x)[0])(sx), None
        if kind == AxisType.Explicit:
            traced_spec = jax.eval_shape(lambda x: f(x)[0], sx).sharding.spec
    np.testing.assert_allclose(y, x * 2.0)
    assert tuple(y.sharding.spec) == (None, "model")
    if kind == AxisType.Explicit:
        assert traced_spec is not None and tuple(traced_spec) == (None, "model")
