"""Checkpoints of a pm.nn model on JAX's default (Explicit) 2x4 mesh: ``pm.save``/``pm.load``
and Orbax restore straight into the shardings of an abstract skeleton, sharding types
included, and the restored model trains on as the saved one would."""

import pathlib
from typing import Any

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from pytreemod.nn import initializers as init

VOCAB, D, H = 16, 8, 32
RULES = (("batch", "data"), ("vocab", "model"), ("mlp", "model"), ("embed", "data"))


def lp(fn: Any, *names: str | None) -> Any:
    return pm.with_logical_partitioning(fn, names)


class TinyLM(pm.Module):
    """Vocabulary-sharded embedding and logits, a column-then-row MLP, FSDP over ``data``."""

    embed: pm.nn.Embedding
    up: pm.nn.Linear
    down: pm.nn.Linear

    def __init__(self, *, key: jax.Array) -> None:
        k1, k2, k3 = jax.random.split(key, 3)
        self.embed = pm.nn.Embedding(
            VOCAB, D, embedding_init=lp(init.normal(1.0), "vocab", "embed"), key=k1
        )
        kernel = lp(init.lecun_normal(), "embed", "mlp")
        self.up = pm.nn.Linear(D, H, kernel_init=kernel, bias_init=lp(init.zeros, "mlp"), key=k2)
        kernel = lp(init.lecun_normal(), "mlp", "embed")
        self.down = pm.nn.Linear(H, D, kernel_init=kernel, use_bias=False, key=k3)

    def __call__(self, ids: jax.Array) -> jax.Array:
        x = self.embed(ids)
        return self.embed.attend(x + self.down(jax.nn.gelu(self.up(x))))


OPT = optax.adam(1e-2)


def _step(model: TinyLM, opt_state: Any, ids: jax.Array) -> tuple[TinyLM, Any, jax.Array]:
    def loss_fn(model: TinyLM) -> jax.Array:
        logits = model(ids[:, :-1])
        return -(jax.nn.log_softmax(logits) * jax.nn.one_hot(ids[:, 1:], VOCAB)).sum(-1).mean()

    loss, grads = jax.value_and_grad(loss_fn)(model)
    with jax.numpy_dtype_promotion("standard"):  # optax's adam mixes Python floats and ints
        updates, opt_state = OPT.update(grads, opt_state, model)
    return optax.apply_updates(model, updates), opt_state, loss


@pytest.fixture
def mesh() -> jax.sharding.Mesh:
    mesh = jax.make_mesh((2, 4), ("data", "model"))  # JAX's default: Explicit axes
    assert mesh.axis_types == (AxisType.Explicit, AxisType.Explicit)
    return mesh


def _assert_same(got: Any, want: Any) -> None:
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for a, b in zip(got_leaves, want_leaves):
        assert jax.typeof(a) == jax.typeof(b)  # shape, dtype and sharding type
        assert a.sharding == b.sharding
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_save_and_orbax_restore_into_explicit_shardings(
    mesh: jax.sharding.Mesh, tmp_path: pathlib.Path
) -> None:
    ids = jax.random.randint(jax.random.key(1), (4, 7), 0, VOCAB)
    with pm.logical_axis_rules(RULES), jax.set_mesh(mesh):
        model = pm.shard(TinyLM(key=jax.random.key(0)), mesh)
        table = model.embed.embedding.value.value
        assert jax.typeof(table).sharding.spec == P("model", "data")
        ids = jax.device_put(ids, jax.sharding.NamedSharding(mesh, P("data")))
        step = jax.jit(_step)
        model, opt_state, _ = step(model, OPT.init(model), ids)

        pm.save(tmp_path / "lm.safetensors", model)
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(tmp_path / "orbax", pm.state(model))
        checkpointer.wait_until_finished()

        skeleton = pm.abstract(pm.eval_shape(TinyLM, key=jax.random.key(2)))  # the set mesh
        box: Any = skeleton.up.kernel.value  # a LogicallyPartitioned box
        leaf = box.value
        assert isinstance(leaf, jax.ShapeDtypeStruct)
        assert leaf.sharding.mesh.axis_types == mesh.axis_types
        from_file = pm.load(tmp_path / "lm.safetensors", skeleton)
        from_orbax = pm.load(tmp_path / "orbax", skeleton)
        from_state = pm.combine(
            pm.structure_of(skeleton),
            checkpointer.restore(tmp_path / "orbax", pm.state(skeleton)),
        )
        for restored in (from_file, from_orbax, from_state):
            _assert_same(restored, model)
            box = restored.up.kernel.value
            assert box.names == ("embed", "mlp")

        # The restored model trains on exactly as the saved one, keeping its shardings.
        want, _, want_loss = step(model, opt_state, ids)
        got, _, got_loss = step(from_file, opt_state, ids)
    assert float(got_loss) == float(want_loss)
    _assert_same(got, want)
