"""Behaviours found by running Flax's guides and examples under ``adapters.nnx``: a
Variable holding an empty pytree inside vmap, where the aliasing error stops, and the
``nnx.graph``/``nnx.filterlib`` names programs annotate with."""

from typing import Any

import jax.numpy as jnp
import pytest

from adapters import nnx


class _Holder(nnx.Module):
    def __init__(self) -> None:
        self.empty = nnx.Variable({})  # no leaves yet (like a fresh capture buffer)
        self.w = nnx.Param(jnp.ones(4))


def test_vmap_maps_a_variable_with_no_leaves_next_to_a_broadcast_one() -> None:
    # The empty Variable is mapped (axis 0) but has no array: the size check must not
    # take the broadcast Param's length-4 array for it.
    _, empty, w = nnx.split(_Holder(), lambda path, _: path[0] == "empty", ...)
    out = nnx.vmap(lambda e, p, x: x * p["w"][...].sum(), in_axes=(0, None, 0))(
        empty, w, jnp.ones((3, 4))
    )
    assert out.shape == (3, 4)
    assert float(out[0, 0]) == 4.0


def test_vmap_size_error_still_names_the_mismatched_arguments() -> None:
    _, empty, w = nnx.split(_Holder(), lambda path, _: path[0] == "empty", ...)
    with pytest.raises(ValueError, match=r"one axis had size 4: axis 0 of argument p"):
        nnx.vmap(lambda e, p, x: x, in_axes=(0, 0, 0))(empty, w, jnp.ones((3, 4)))


class _Weights(nnx.Module):
    def __init__(self) -> None:
        self.param = nnx.Param(jnp.arange(6.0))


def test_aliasing_error_lists_the_places_up_to_the_first_conflict() -> None:
    # One Variable reached twice with axis 0, then three times with axis 1: the error is
    # raised at the first conflicting place, so it lists three places, not five.
    m = _Weights()
    arg1 = {"a": {"b": m}, "c": m}
    arg2 = [(m, m), m]
    expected = (
        "Inconsistent aliasing detected. The following nodes have different prefixes:\n"
        "Node: Param\n  param: 0\n  param: 0\n  param: 1"
    )
    with pytest.raises(ValueError) as info:
        nnx.vmap(lambda a, b: None, in_axes=(0, 1))(arg1, arg2)
    assert str(info.value) == expected


def test_aliasing_error_between_inputs_and_outputs_stops_at_the_first_output() -> None:
    m = _Weights()
    with pytest.raises(ValueError) as info:
        nnx.vmap(lambda a: a, in_axes=0, out_axes=1)({"a": m, "c": m})
    assert str(info.value).endswith("Node: Param\n  param: 0\n  param: 0\n  param: 1")


def test_graph_module_offers_flax_type_names_and_graph_pop() -> None:
    from adapters.nnx import filterlib, graph

    key_path: Any = tuple[graph.Key, ...]
    assert key_path is not None and graph.PathParts is not None
    assert graph.is_key_like("a") and graph.Index is int
    assert filterlib.HasTag is not None

    class Two(nnx.Module):
        def __init__(self) -> None:
            self.p = nnx.Param(jnp.zeros(2))
            self.s = nnx.BatchStat(jnp.ones(1))

    model = Two()
    (params,) = graph.graph_pop(model, (nnx.Param,))
    assert list(params.keys()) == ["p"]
    assert not hasattr(model, "p") and hasattr(model, "s")
    doubled = graph.map_state(lambda path, v: v.replace(v[...] * 2), nnx.state(model))
    assert float(doubled["s"][...][0]) == 2.0


def test_public_classes_print_under_their_public_module() -> None:
    # A GraphDef's repr shows an RNN's StateAxes({...: Carry}); programs print these.
    import pickle

    assert repr(nnx.Carry) == "<class 'adapters.nnx.transforms.iteration.Carry'>"
    assert type(nnx.StateAxes({...: 0})).__module__ == "adapters.nnx.transforms.iteration"
    graphdef = nnx.graphdef(nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
    assert type(graphdef).__module__ == "adapters.nnx.graphlib"
    assert pickle.loads(pickle.dumps(graphdef)) == graphdef
    assert pickle.loads(pickle.dumps(nnx.Carry)) is nnx.Carry
