"""NNX's transform_metadata goes through pytreemod's one walk (``pm.add_axis``/
``pm.remove_axis``, with ``nnx.Variable`` registered): the same metadata, hooks and errors
as Flax's ``nnx.spmd.add_axis``/``remove_axis``, whichever of the two is called."""

from typing import Any

import jax.numpy as jnp
import pytest
from flax import nnx as fnnx

import pytreemod as pm
from adapters import nnx

META = {"partition_name": "layers", "nickname": "nick"}


def _variable(lib: Any, log: list[Any]) -> Any:
    return lib.Param(
        jnp.ones((2, 3)),
        eager_sharding=False,
        out_sharding=("din", "dout"),
        nickname=("in", "out"),
        on_add_axis=lambda v, i, name: log.append(("add", i, name)),
        on_remove_axis=lambda v, i, name: log.append(("remove", i, name)),
    )


def _trace(lib: Any, add: Any, remove: Any) -> list[Any]:
    log: list[Any] = []
    v = _variable(lib, log)
    tree = {"v": v, "n": 1}
    out = add(tree, 1, META)
    assert out["v"] is v and out["n"] == 1  # the same Variable, changed in place
    log.append((v.get_metadata("out_sharding"), v.get_metadata("nickname")))
    remove(tree, 1, META)
    log.append((v.get_metadata("out_sharding"), v.get_metadata("nickname")))
    return log


@pytest.mark.filterwarnings("ignore:Variable hooks are deprecated")
def test_nnx_spmd_and_pm_walk_match_flax() -> None:
    theirs = _trace(fnnx, fnnx.spmd.add_axis, fnnx.spmd.remove_axis)
    assert theirs[1] == (("din", "layers", "dout"), ("in", "nick", "out"))
    assert _trace(nnx, nnx.spmd.add_axis, nnx.spmd.remove_axis) == theirs
    assert _trace(nnx, pm.add_axis, pm.remove_axis) == theirs


def test_a_variable_type_overriding_add_axis_is_called_as_flax_calls_it() -> None:
    calls: list[Any] = []

    class Logged(nnx.Param):
        def add_axis(self, axis_index: Any, axis_name: Any) -> None:
            calls.append((axis_index, axis_name))

    pm.add_axis([Logged(jnp.ones(2))], 0, {pm.PARTITION_NAME: "layers"})
    assert calls == [(0, "layers")]


def test_boxes_and_variables_in_one_tree() -> None:
    v = nnx.Param(jnp.ones(3), eager_sharding=False, out_sharding=("a",))
    tree = {"v": v, "box": pm.Partitioned(jnp.ones(3), ("a",))}
    out = pm.add_axis(tree, 0, {pm.PARTITION_NAME: "layers"})
    assert v.get_metadata("out_sharding") == ("layers", "a")
    assert out["box"].names == ("layers", "a")


def test_the_partition_name_is_required_as_in_flax() -> None:
    v = nnx.Param(jnp.ones(3), eager_sharding=False)
    for walk in (pm.add_axis, pm.remove_axis, nnx.spmd.add_axis, nnx.spmd.remove_axis):
        with pytest.raises(ValueError, match='"partition_name" is not specified'):
            walk({"v": v}, 0, {"nickname": "nick"})
    with pytest.raises(ValueError, match='"partition_name" is not specified'):
        nnx.spmd.add_axis({}, 0, {})  # raised whatever the tree holds, as Flax does
