"""NNX's iteration transforms: vmap, pmap, scan, while_loop, fori_loop, StateAxes, Carry."""

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx

from adapters import nnx


def _stack(n: int) -> tuple[Any, Any]:
    class Ours(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.arange(n * 6.0).reshape(n, 2, 3))
            self.count = nnx.BatchStat(jnp.array(0))

    class Theirs(fnnx.Module):
        def __init__(self) -> None:
            self.w = fnnx.Param(jnp.arange(n * 6.0).reshape(n, 2, 3))
            self.count = fnnx.BatchStat(jnp.array(0))

    return Ours(), Theirs()


class _Dense(nnx.Module):
    def __init__(self) -> None:
        self.kernel = nnx.Param(jnp.eye(2) * 2)

    def __call__(self, x):
        return x @ self.kernel[...]


def _forward(m, x):
    m.count[...] = m.count[...] + 1
    return x @ m.w[...]


@pytest.mark.parametrize("graph,graph_updates", [(True, True), (True, False), (False, False)])
def test_vmap_matches_flax_and_updates_the_callers_module(graph, graph_updates):
    ours, theirs = _stack(4)
    x = jnp.ones((2,))
    if graph_updates:
        axes: Any = (nnx.StateAxes({nnx.Param: 0, ...: None}), None)
        flax_axes: Any = (fnnx.StateAxes({fnnx.Param: 0, ...: None}), None)
    else:
        axes = flax_axes = (0, None)
        ours.count = nnx.BatchStat(jnp.zeros(4, jnp.int32))
        theirs.count = fnnx.BatchStat(jnp.zeros(4, jnp.int32))
    mode = {"graph": graph, "graph_updates": graph_updates}
    y = nnx.vmap(_forward, in_axes=axes, **mode)(ours, x)
    fy = fnnx.vmap(_forward, in_axes=flax_axes, **mode)(theirs, x)
    np.testing.assert_array_equal(y, fy)
    np.testing.assert_array_equal(ours.count[...], theirs.count[...])


def test_vmap_creates_a_stacked_module_and_maps_out_axes():
    class Block(nnx.Module):
        def __init__(self, seed):
            self.w = nnx.Param(jnp.ones((2, 3)) * seed)

    block = nnx.vmap(Block, in_axes=0, out_axes=1)(jnp.arange(5.0))
    assert isinstance(block, Block)
    assert block.w.shape == (2, 5, 3)


def test_vmap_init_adds_attributes_to_the_callers_object():
    class Ens(nnx.Module):
        @nnx.vmap(in_axes=(nnx.StateAxes({...: 0}), 0))
        def __init__(self, seed):
            self.w = nnx.Param(jnp.ones(3) * seed)

    ens = Ens(jnp.arange(4.0))
    assert ens.w.shape == (4, 3)


def test_vmap_returns_the_callers_objects():
    v = nnx.Param(jnp.arange(3.0))
    out = nnx.vmap(lambda v: v)(v)
    assert out is v


def test_vmap_kwargs_and_axis_size():
    out = nnx.vmap(lambda a, b: a + b, in_axes=(0, 0))(jnp.ones(3), b=jnp.ones(3))
    np.testing.assert_array_equal(out, 2 * jnp.ones(3))
    out = nnx.vmap(lambda: jnp.zeros(2), axis_size=4)()
    assert out.shape == (4, 2)


def test_pmap_over_one_device():
    v = nnx.Param(jnp.arange(2.0)[None])
    out = nnx.pmap(lambda v, x: v[...] * x, in_axes=(0, None))(v, 3.0)
    np.testing.assert_array_equal(out, jnp.array([[0.0, 3.0]]))


@pytest.mark.parametrize("graph,graph_updates", [(True, True), (False, False)])
def test_scan_matches_flax(graph, graph_updates):
    def step(c, m, x):
        m.count[...] = m.count[...] + 1
        return c + x @ m.w[...], c.sum()

    ours, theirs = _stack(3)
    ours.count = nnx.BatchStat(jnp.zeros(3, jnp.int32))
    theirs.count = fnnx.BatchStat(jnp.zeros(3, jnp.int32))
    x = jnp.ones((3, 2))
    mode = {"graph": graph, "graph_updates": graph_updates}
    c, ys = nnx.scan(step, in_axes=(nnx.Carry, 0, 0), **mode)(jnp.zeros(3), ours, x)
    fc, fys = fnnx.scan(step, in_axes=(fnnx.Carry, 0, 0), **mode)(jnp.zeros(3), theirs, x)
    np.testing.assert_array_equal(c, fc)
    np.testing.assert_array_equal(ys, fys)
    np.testing.assert_array_equal(ours.count[...], theirs.count[...])


@pytest.mark.parametrize("graph_updates,seen_after", [(True, 0), (False, 3)])
def test_scan_carry_module_broadcast_and_reverse(graph_updates, seen_after):
    class Acc(nnx.Module):
        def __init__(self) -> None:
            self.total = nnx.Variable(jnp.array(0.0))

    acc, seen = Acc(), nnx.Variable(jnp.array(0))

    def step(acc, seen, x):
        acc.total[...] = acc.total[...] * 2 + x
        seen[...] = seen[...] + 1
        return acc, acc.total[...]

    scan = nnx.scan(step, in_axes=(nnx.Carry, None, 0), reverse=True, graph_updates=graph_updates)
    out, ys = scan(acc, seen, jnp.arange(3.0))
    assert out is acc
    np.testing.assert_array_equal(ys, [10.0, 5.0, 2.0])
    assert acc.total[...] == 10.0 and seen[...] == seen_after


def test_scan_whole_carry_and_length():
    out = nnx.scan(lambda c: c + 1, in_axes=nnx.Carry, out_axes=nnx.Carry, length=4)(jnp.array(0))
    assert out == 4


def test_scan_traces_once_for_the_same_structure():
    traces = []

    @nnx.scan
    def f(c, x):
        traces.append(1)
        return c + x, x * 2

    f(jnp.array(0), jnp.arange(3))
    c, _ = f(jnp.array(1), jnp.arange(3))
    assert c == 4 and len(traces) == 1


def test_while_and_fori_loops_update_in_place():
    m = _Dense()
    out, y, n = nnx.while_loop(
        lambda s: s[2] > 0, lambda s: (s[0], s[0](s[1]), s[2] - 1), (m, jnp.ones(2), 3)
    )
    assert out is m and n == 0
    np.testing.assert_array_equal(y, [8.0, 8.0])
    acc = nnx.Variable(jnp.zeros(2))

    def body(i, acc):
        acc[...] = acc[...] + i
        return acc

    assert nnx.fori_loop(0, 4, body, acc) is acc
    np.testing.assert_array_equal(acc[...], [6.0, 6.0])


def test_state_axes_mapping_and_from_state():
    axes = nnx.StateAxes({nnx.Param: 0, ...: None})
    assert list(axes) == [nnx.Param, ...] and axes[nnx.Param] == 0 and len(axes) == 2
    assert axes == nnx.StateAxes([(nnx.Param, 0), (..., None)]) and hash(axes)
    assert "StateAxes" in repr(axes)
    m = _Dense()
    m.bias = nnx.Param(jnp.zeros(2))
    state = nnx.state(m)
    state["kernel"] = 0
    state["bias"] = 1
    from_state = nnx.StateAxes(state)
    assert from_state.map_prefix(("kernel",), None) == 0
    assert from_state.map_prefix(("bias",), None) == 1
    with pytest.raises(ValueError, match="No axis found for"):
        nnx.StateAxes({nnx.BatchStat: 0}).map_prefix(("kernel",), m.kernel)


def test_prefix_errors():
    with pytest.raises(ValueError, match="Variables prefixes are not supported"):
        nnx.vmap(lambda v: v, in_axes=(nnx.Variable(0),), graph=False)
    with pytest.raises(ValueError, match="cannot contain `StateAxes` objects"):
        nnx.vmap(lambda v: v, in_axes=nnx.StateAxes({...: 0}), graph_updates=False)
    with pytest.raises(ValueError, match="Graph nodes are not allowed as prefixes"):
        nnx.vmap(lambda v: v, in_axes=nnx.Dict(a=nnx.Param(1)))
    with pytest.raises(ValueError, match="`TreeState` objects are only"):
        prefix = nnx.prefix(_Dense(), {...: 0}, graph=True)
        nnx.vmap(lambda m: m, in_axes=(prefix,), graph_updates=True)
    with pytest.raises(ValueError, match="Cannot use StateAxes on non-graph nodes"):
        nnx.vmap(lambda x: x, in_axes=nnx.StateAxes({...: 0}))(jnp.ones(2))


def test_aliasing_errors():
    v = nnx.Param(jnp.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"Inconsistent aliasing detected[\s\S]*<root>: 0"):
        nnx.vmap(lambda a, b: None, in_axes=(0, 1))(v, v)
    with pytest.raises(ValueError, match="Duplicate Param"):
        nnx.vmap(lambda a, b: None, in_axes=(0, 0), graph=False)(v, v)
    with pytest.raises(ValueError, match="does not support Variable aliasing"):
        nnx.vmap(lambda a: a, graph_updates=False)(v)
    with pytest.raises(ValueError, match="Inconsistent aliasing detected"):
        nnx.vmap(lambda a: a, in_axes=0, out_axes=1)(v)


def test_bound_method_and_kwargs_errors():
    m = _Dense()
    with pytest.raises(ValueError, match="does not support bound methods"):
        nnx.vmap(m.__call__)
    with pytest.raises(TypeError, match="could not be resolved to positions"):
        nnx.vmap(lambda **kw: 0)(a=jnp.ones(2))


def test_scan_axes_errors():
    with pytest.raises(ValueError, match="Cannot broadcast output state"):
        nnx.scan(lambda c, x: (c, x), out_axes=(nnx.Carry, None))
    with pytest.raises(ValueError, match=r"Cannot broadcast output state\. Got StateAxes"):
        nnx.scan(lambda c, x: (c, x), out_axes=(nnx.Carry, nnx.StateAxes({...: None})))
    with pytest.raises(ValueError, match="Cannot carry output state"):
        nnx.scan(lambda c, x: (c, x), out_axes=(nnx.Carry, nnx.StateAxes({...: nnx.Carry})))
    with pytest.raises(ValueError, match="Carry must be a top-level argument"):
        nnx.scan(lambda c: c, in_axes=({"a": nnx.Carry},), out_axes=nnx.Carry)
    with pytest.raises(ValueError, match="Found multiple Carry definitions"):
        nnx.scan(lambda a, b: a, in_axes=(nnx.Carry, nnx.Carry), out_axes=nnx.Carry)
    with pytest.raises(ValueError, match="If one of in_axes or out_axes has Carry"):
        nnx.scan(lambda c, x: (c, x), in_axes=(nnx.Carry, 0), out_axes=0)
    with pytest.raises(ValueError, match="must take exactly one argument"):
        nnx.scan(lambda c: c, in_axes=nnx.Carry, out_axes=nnx.Carry)(1, 2)
    with pytest.raises(ValueError, match="must return a tuple"):
        nnx.scan(lambda c, x: c)(jnp.array(0), jnp.arange(2))


@pytest.mark.parametrize(
    "graph_updates,match",
    [
        (True, "Carry references must be the same"),
        (False, "scan Variable identity must be preserved"),
    ],
)
def test_scan_carry_identity_errors(graph_updates, match):
    count = nnx.Variable(jnp.array(0))
    with pytest.raises(ValueError, match=match):
        nnx.scan(lambda c, x: (nnx.Variable(c[...] + 1), x), graph_updates=graph_updates)(
            count, jnp.arange(2)
        )


def test_loop_structure_errors():
    m = _Dense()

    def replace_kernel(s):
        s[0].kernel = nnx.Param(jnp.zeros((2, 2)))
        return s

    with pytest.raises(ValueError, match="while_loop Variable identity must be preserved"):
        nnx.while_loop(lambda s: s[1] > 0, replace_kernel, (m, 1), graph_updates=False)

    def add_variable(i, s):
        s.extra = nnx.Param(jnp.zeros(()))
        return s

    with pytest.raises(ValueError, match="same reference and pytree structure"):
        nnx.fori_loop(0, 1, add_variable, m)
    with pytest.raises(ValueError, match="same pytree structure"):
        nnx.fori_loop(0, 1, lambda i, s: (s,), m)


def test_transform_metadata_runs_and_updates():
    v = nnx.Param(jnp.ones((2, 3)))

    @nnx.transform_metadata(in_axes=0, out_axes=0, partition="data")
    def f(v):
        v[...] = v[...] * 2
        return v[...].sum()

    assert f(v) == 12.0
    np.testing.assert_array_equal(v[...], 2 * jnp.ones((2, 3)))
