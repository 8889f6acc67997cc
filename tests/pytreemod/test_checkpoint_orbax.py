"""Sharded checkpoints: Orbax saves a model sharded over 8 devices and restores it straight
into the shardings its axis metadata asks for (pm.abstract); pm.load does the same for a
single file."""

import logging
import pathlib
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import pytreemod as pm


class Dense(pm.Module):
    kernel: pm.Param
    bias: pm.Param


class Net(pm.Module):
    layers: list[Dense]
    embed: pm.Param
    unembed: pm.Param
    step: pm.BatchStat
    rng: pm.Variable


def make_net(key: jax.Array) -> Net:
    keys = jax.random.split(key, 3)
    layers = [
        Dense(
            pm.Param(pm.Partitioned(jax.random.normal(k, (8, 16)), ("data", "model"))),
            pm.Param(pm.Partitioned(jnp.zeros(16), ("model",))),
        )
        for k in keys[:2]
    ]
    embed = pm.Param(pm.Partitioned(jax.random.normal(keys[2], (16, 8)), ("model", None)))
    return Net(layers, embed, embed, pm.BatchStat(jnp.zeros((), jnp.int32)), pm.Variable(key))


@pytest.fixture(params=[AxisType.Auto, AxisType.Explicit], ids=str)
def mesh(request: pytest.FixtureRequest) -> jax.sharding.Mesh:
    """A 2x4 mesh of either axis type: every restore lands in the type's shardings."""
    kind = request.param
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(kind, kind))


def sharded_net(mesh: jax.sharding.Mesh, seed: int = 0) -> Net:
    """The net placed on the mesh; placing its partitioned state keeps the tie."""
    structure, state = pm.partition(make_net(jax.random.key(seed)))
    return pm.combine(structure, pm.shard(state, mesh))


def assert_restored(restored: Net, net: Net) -> None:
    assert pm.structure_of(restored) == pm.structure_of(net)
    assert restored.embed is restored.unembed  # ties come back
    for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(net)):
        assert got.sharding == want.sharding
        assert jax.typeof(got) == jax.typeof(want)  # on an Explicit mesh, the sharding type
        if jnp.issubdtype(got.dtype, jax.dtypes.prng_key):
            got, want = jax.random.key_data(got), jax.random.key_data(want)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_abstract_takes_shardings_from_axis_metadata(mesh: jax.sharding.Mesh) -> None:
    skeleton = pm.eval_shape(make_net, jax.random.key(1))
    target = pm.abstract(skeleton, mesh)
    kernel = target.layers[0].kernel.value
    assert isinstance(kernel, pm.Partitioned) and kernel.names == ("data", "model")
    assert isinstance(kernel.value, jax.ShapeDtypeStruct)
    assert kernel.value.sharding == NamedSharding(mesh, P("data", "model"))
    assert target.step.value.sharding == NamedSharding(mesh, P())
    assert target.embed is target.unembed
    with pytest.raises(
        pm.ShardingError, match=r"\.w: axis 0 of shape \(3,\) .* cannot split evenly"
    ):
        pm.abstract({"w": pm.Partitioned(jnp.zeros(3), ("model",))}, mesh)


def test_orbax_round_trip_into_shardings(mesh: jax.sharding.Mesh, tmp_path: pathlib.Path) -> None:
    net = sharded_net(mesh)
    structure, state = pm.partition(net)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(tmp_path / "ckpt", state)
    checkpointer.wait_until_finished()
    skeleton = pm.eval_shape(make_net, jax.random.key(1))
    target = pm.abstract(pm.state(skeleton), mesh)
    restored = pm.combine(
        pm.structure_of(skeleton), checkpointer.restore(tmp_path / "ckpt", target)
    )
    assert_restored(restored, net)
    assert structure == pm.structure_of(restored)
    assert restored.layers[1].kernel.value.value.sharding.spec == P("data", "model")


def test_checkpoint_manager_keeps_the_latest_async(
    mesh: jax.sharding.Mesh, tmp_path: pathlib.Path
) -> None:
    options = ocp.CheckpointManagerOptions(max_to_keep=2, enable_async_checkpointing=True)
    nets: dict[int, Any] = {}
    with ocp.CheckpointManager(tmp_path, options=options) as manager:
        for step in range(4):
            nets[step] = sharded_net(mesh, seed=step)
            manager.save(step, args=ocp.args.StandardSave(pm.state(nets[step])))
        manager.wait_until_finished()
        assert manager.all_steps() == [2, 3]
        assert manager.latest_step() == 3
        skeleton = pm.eval_shape(make_net, jax.random.key(0))
        target = pm.abstract(pm.state(skeleton), mesh)
        state = manager.restore(3, args=ocp.args.StandardRestore(target))
    assert_restored(pm.combine(pm.structure_of(skeleton), state), nets[3])


def test_single_file_load_into_shardings(mesh: jax.sharding.Mesh, tmp_path: pathlib.Path) -> None:
    net = sharded_net(mesh)
    pm.save(tmp_path / "model.safetensors", net)
    like = pm.abstract(pm.eval_shape(make_net, jax.random.key(1)), mesh)
    assert_restored(pm.load(tmp_path / "model.safetensors", like), net)


# ------------------------------------------------- pm.load of an Orbax checkpoint directory


def _managed_checkpoint(folder: pathlib.Path, state: Any) -> pathlib.Path:
    """A CheckpointManager's step 1 holding ``state``; its directory."""
    with ocp.CheckpointManager(folder) as manager:
        manager.save(1, args=ocp.args.StandardSave(state))
        manager.wait_until_finished()
    return folder / "1"


def test_load_reads_an_orbax_checkpoint_into_shardings(
    mesh: jax.sharding.Mesh, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    net = sharded_net(mesh)
    step = _managed_checkpoint(tmp_path, pm.state(net))
    like = pm.abstract(pm.eval_shape(make_net, jax.random.key(1)), mesh)
    with caplog.at_level(logging.DEBUG):
        assert_restored(pm.load(step, like), net)
        assert_restored(pm.load(step / "default", like), net)  # the item folder itself
    assert not [r for r in caplog.records if r.name == "absl"]  # Orbax's INFO chatter...
    assert any(
        r.name == "pytreemod" and r.getMessage().startswith("Orbax: ") for r in caplog.records
    )


def test_load_of_a_bad_orbax_directory_names_it(tmp_path: pathlib.Path) -> None:
    model = {"w": pm.Param(jnp.arange(6.0)), "s": pm.BatchStat(jnp.ones(2))}
    step = _managed_checkpoint(tmp_path / "run", pm.state(model))
    with pytest.raises(
        pm.CheckpointMismatchError,
        match=r"run/1'?: Orbax cannot restore the checkpoint into the model \(ValueError",
    ):
        pm.load(step, {"w": pm.Param(jnp.arange(4.0))})
    with pytest.raises(pm.CheckpointFormatError, match=r"a directory, but not an Orbax checkpoint"):
        pm.load(tmp_path, model)
    (step / "default" / "_METADATA").write_text("{")
    with pytest.raises(
        pm.CheckpointFormatError,
        match=r"run/1'?: the Orbax checkpoint is damaged or incomplete \(JSONDecodeError",
    ):
        pm.load(step, model)


def test_load_of_an_orbax_directory_without_orbax(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "orbax.checkpoint", None)
    with pytest.raises(pm.CheckpointError, match=r"needs the orbax-checkpoint package"):
        pm.load(tmp_path, {})
