"""adapters.serialization: state dicts of every state type, and Flax's msgpack format both
ways (bytes compared with, and read by, the real flax.serialization)."""

import dataclasses
from collections import namedtuple
from typing import Any, cast

import flax.linen
import flax.serialization
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import msgpack
import numpy as np
import optax
import pytest
from hypothesis import given, settings

import pytreemod as pm
from adapters import serialization
from adapters.core import FrozenDict


def _packb(obj: Any, **options: Any) -> bytes:
    return cast(bytes, msgpack.packb(obj, **options))


class Block(pm.Module):
    kernel: pm.Param
    scale: float
    name: str = pm.field(static=True, default="block")


class Net(pm.Module):
    blocks: list[Block]
    head: pm.Param
    tied: pm.Param


def make_net(fill: float = 1.0) -> Net:
    shared = pm.Param(jnp.full((2,), fill))
    blocks = [
        Block(pm.Param(pm.Partitioned(jnp.full((2, 3), fill + i), ("embed", "mlp"))), 0.5)
        for i in range(2)
    ]
    return Net(blocks, shared, shared)


def test_module_state_dict_is_its_fields() -> None:
    state = serialization.to_state_dict(make_net())
    assert set(state) == {"blocks", "head", "tied"}
    assert set(state["blocks"]) == {"0", "1"}
    block = state["blocks"]["0"]
    assert set(block) == {"kernel", "scale"}  # static fields are not state
    assert set(block["kernel"]) == {"value"}  # a box is its value, as Flax's Partitioned
    assert block["scale"] == 0.5
    assert isinstance(state["head"], jax.Array)  # a Variable is its value


def test_module_round_trip_keeps_boxes_static_fields_and_ties() -> None:
    net = make_net(1.0)
    restored = serialization.from_bytes(make_net(5.0), serialization.to_bytes(net))
    assert restored.tied is restored.head
    assert isinstance(restored.blocks[1].kernel.value, pm.Partitioned)
    assert restored.blocks[1].kernel.value.names == ("embed", "mlp")
    np.testing.assert_array_equal(restored.blocks[1].kernel.value.value, np.full((2, 3), 2.0))
    np.testing.assert_array_equal(restored.head.value, np.ones(2))
    assert restored.blocks[0].name == "block"


def test_module_field_errors() -> None:
    net = make_net()
    state = serialization.to_state_dict(net)
    del state["blocks"]["0"]["scale"]
    with pytest.raises(
        ValueError,
        match=r"Missing field scale in state dict while restoring an "
        r"instance of Block, at path \./blocks/0",
    ):
        serialization.from_state_dict(net, state)
    state = serialization.to_state_dict(net)
    state["extra"] = 1
    with pytest.raises(
        ValueError,
        match=r'Unknown field\(s\) "extra" in state dict while '
        r"restoring an instance of Net at path \.",
    ):
        serialization.from_state_dict(net, state)


def test_container_errors_name_the_path() -> None:
    data = serialization.to_bytes({"a": {"b": [1, 2]}})
    with pytest.raises(
        ValueError,
        match=r"size of the list and the state dict do not match, "
        r"got 1 and 2 at path \./a/b",
    ):
        serialization.from_bytes({"a": {"b": [1]}}, data)
    with pytest.raises(
        ValueError,
        match=r"target dict contains keys \{'c'\} which are not "
        r"present in state dict at path \./a",
    ):
        serialization.from_bytes({"a": {"c": [1, 2]}}, data)
    with pytest.raises(ValueError, match=r"do not have a unique string representation"):
        serialization.to_state_dict({1: 0, "1": 0})


def test_namedtuple_partial_and_frozen_dict() -> None:
    Point = namedtuple("Point", ["x", "y"])
    Other = namedtuple("Other", ["x", "z"])
    assert serialization.to_state_dict(Point(1, 2)) == {"x": 1, "y": 2}
    assert serialization.from_state_dict(Point(0, 0), {"x": 3, "y": 4}) == Point(3, 4)
    legacy = {"name": "Point", "fields": {"0": "x", "1": "y"}, "values": {"0": 5, "1": 6}}
    assert serialization.from_state_dict(Point(0, 0), legacy) == Point(5, 6)
    with pytest.raises(ValueError, match=r"field names of the state dict and the named tuple"):
        serialization.from_state_dict(Other(0, 0), {"x": 1, "y": 2})
    add = jax.tree_util.Partial(lambda a, b: a + b, 1)
    restored = serialization.from_state_dict(add, {"args": {"0": 10}, "keywords": {}})
    assert restored(1) == 11
    frozen = FrozenDict({"a": 1, "b": {"c": 2}})
    back = serialization.from_bytes(frozen, serialization.to_bytes(frozen))
    assert isinstance(back, FrozenDict) and back == frozen


def test_struct_dataclasses_are_states() -> None:
    """A frozen dataclass marked as a struct dataclass (what adapters.struct makes) is its
    pytree-node fields, as in Flax."""

    @dataclasses.dataclass(frozen=True)
    class Point:
        x: float
        y: Any
        meta: str = dataclasses.field(default="m", metadata={"pytree_node": False})
        _flax_dataclass = True

    p = Point(1.0, {"a": 2})
    assert serialization.to_state_dict(p) == {"x": 1.0, "y": {"a": 2}}
    restored = serialization.from_state_dict(p, {"x": 3.0, "y": {"a": 4}})
    assert restored == Point(3.0, {"a": 4})
    with pytest.raises(ValueError, match=r"Missing field y in state dict while restoring"):
        serialization.from_state_dict(p, {"x": 3.0})
    assert not serialization.to_state_dict(dataclasses.make_dataclass("Plain", ["x"])(1)) == {
        "x": 1
    }


def test_register_serialization_state() -> None:
    class Counter:
        def __init__(self, n: int):
            self.n = n

    serialization.register_serialization_state(
        Counter, lambda c: {"n": c.n}, lambda c, s: Counter(s["n"])
    )
    assert serialization.is_serializable(Counter(1)) and serialization.is_serializable(Counter)
    assert serialization.from_bytes(Counter(0), serialization.to_bytes(Counter(7))).n == 7
    with pytest.raises(ValueError, match=r'a serialization handler for "Counter" is already'):
        serialization.register_serialization_state(Counter, lambda c: c, lambda c, s: c)
    serialization.register_serialization_state(
        Counter, lambda c: c.n, lambda c, s: Counter(s), override=True
    )
    assert serialization.to_state_dict(Counter(3)) == 3


SAMPLES: list[Any] = [
    {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": [np.int8(3), 1.5, "text", None]},
    {"nested": {"x": np.ones((), np.float64), "c": complex(1, 2), "t": True}},
    {"bf16": jnp.ones((2, 2), jnp.bfloat16), "u": np.arange(4, dtype=np.uint16)},
    [np.zeros((0, 3)), b"raw bytes", {"i": 2**40}],
]


@pytest.mark.parametrize("tree", SAMPLES)
def test_bytes_are_flax_bytes(tree: Any) -> None:
    ours = serialization.msgpack_serialize(tree)
    theirs = flax.serialization.msgpack_serialize(tree)
    assert ours == theirs
    for restored in (
        serialization.msgpack_restore(theirs),
        flax.serialization.msgpack_restore(ours),
    ):
        la, lb = jax.tree.leaves(restored), jax.tree.leaves(tree)
        assert len(la) == len(lb)
        for x, y in zip(la, lb):
            assert type(x) is type(y) or isinstance(x, np.ndarray | np.generic)
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_chunked_arrays_match_flax(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = {"big": np.arange(100, dtype=np.float64).reshape(10, 10), "small": np.ones(3)}
    monkeypatch.setattr(serialization, "MAX_CHUNK_SIZE", 91 * 8)
    monkeypatch.setattr(flax.serialization, "MAX_CHUNK_SIZE", 91 * 8)
    ours = serialization.to_bytes(tree)
    assert ours == flax.serialization.to_bytes(tree)
    raw = msgpack.unpackb(ours, raw=False, strict_map_key=False)
    assert raw["big"]["__msgpack_chunked_array__"] is True
    assert len(raw["big"]["chunks"]) == 2
    np.testing.assert_array_equal(serialization.msgpack_restore(ours)["big"], tree["big"])
    np.testing.assert_array_equal(flax.serialization.msgpack_restore(ours)["big"], tree["big"])
    # Unchunked bytes (older writers) also load.
    legacy = _packb(tree["big"], default=serialization._msgpack_ext_pack, strict_types=True)
    np.testing.assert_array_equal(serialization.msgpack_restore(legacy), tree["big"])


def test_linen_variables_cross_both_ways() -> None:
    """Flax Dense params (with flax's Partitioned) written by flax load into the same
    variables made of pytreemod boxes, and our bytes are flax's."""
    dense = flax.linen.Dense(
        3, kernel_init=flax.linen.with_partitioning(flax.linen.initializers.ones, (None, "mlp"))
    )
    flax_vars: Any = dense.init(jax.random.key(0), jnp.ones((1, 2)))
    kernel = flax_vars["params"]["kernel"]
    ours = {
        "params": {
            "kernel": pm.Partitioned(kernel.value, (None, "mlp")),
            "bias": flax_vars["params"]["bias"],
        }
    }
    their_bytes = flax.serialization.to_bytes(flax_vars)
    assert serialization.to_bytes(ours) == their_bytes
    zeros = jax.tree.map(jnp.zeros_like, ours)
    back = serialization.from_bytes(zeros, their_bytes)
    assert isinstance(back["params"]["kernel"], pm.Partitioned)
    assert back["params"]["kernel"].names == (None, "mlp")
    np.testing.assert_array_equal(back["params"]["kernel"].value, np.ones((2, 3)))
    theirs = flax.serialization.from_bytes(flax_vars, serialization.to_bytes(back))
    np.testing.assert_array_equal(theirs["params"]["kernel"].value, np.ones((2, 3)))


def test_optimizer_state_round_trip() -> None:
    params = {"w": jnp.ones((2, 2))}
    tx = optax.sgd(0.1, momentum=0.9)
    state: Any = tx.init(params)
    state = tx.update(params, state, params)[1]
    data = serialization.to_bytes(state)
    assert data == flax.serialization.to_bytes(state)
    restored = serialization.from_bytes(tx.init(params), data)
    np.testing.assert_array_equal(restored[0].trace["w"], state[0].trace["w"])


def test_crafted_bytes_never_build_objects() -> None:
    crafted = _packb(msgpack.ExtType(1, _packb(((1,), "O", b"\x00" * 8), use_bin_type=True)))
    with pytest.raises(ValueError, match=r"unsupported dtype 'O'"):
        serialization.msgpack_restore(crafted)
    crafted = _packb(msgpack.ExtType(1, _packb(((1,), "evil", b"\x00" * 8), use_bin_type=True)))
    with pytest.raises(ValueError, match=r"unknown dtype 'evil'"):
        serialization.msgpack_restore(crafted)
    # Flax returns an unknown extension as a msgpack.ExtType leaf; only a changed byte
    # makes one in a checkpoint, so it is an error here
    with pytest.raises(
        serialization.MsgpackDecodeError, match=r"extension of unknown type code 42 .*corrupted"
    ):
        serialization.msgpack_restore(_packb({"w": msgpack.ExtType(42, b"x")}))


def test_damaged_bytes_say_what_is_wrong() -> None:
    data = serialization.to_bytes({"a": np.arange(4.0)})
    assert issubclass(serialization.MsgpackDecodeError, ValueError)
    with pytest.raises(serialization.MsgpackDecodeError, match=r"ends early: .*truncated"):
        serialization.msgpack_restore(data[:-3])
    with pytest.raises(serialization.MsgpackDecodeError, match=r"bytes follow the end"):
        serialization.msgpack_restore(data + b"\x00")
    with pytest.raises(
        serialization.MsgpackDecodeError, match=r"malformed: truncated, corrupted or not msgpack"
    ):
        serialization.from_bytes({"a": np.zeros(4)}, b"\xc1")
    complex_ext = _packb(msgpack.ExtType(2, b"\x01"))
    with pytest.raises(serialization.MsgpackDecodeError, match=r"malformed complex number"):
        serialization.msgpack_restore(complex_ext)
    array_ext = _packb(msgpack.ExtType(1, _packb(((3,), "float32", b"\x00"), use_bin_type=True)))
    with pytest.raises(serialization.MsgpackDecodeError, match=r"malformed array"):
        serialization.msgpack_restore(array_ext)


def test_adapters_linen_variables_are_flax_bytes() -> None:
    import adapters.linen as nn

    def dense(lib: Any) -> Any:
        init = lib.with_partitioning(lib.initializers.lecun_normal(), (None, "mlp"))
        return lib.Dense(4, kernel_init=init)

    x = jnp.ones((1, 3))
    ours = dense(nn).init(jax.random.key(0), x)
    theirs = dense(flax.linen).init(jax.random.key(0), x)
    assert serialization.to_bytes(ours) == flax.serialization.to_bytes(theirs)
    restored = serialization.from_bytes(ours, flax.serialization.to_bytes(theirs))
    assert restored["params"]["kernel"].names == (None, "mlp")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_bytes_raise_value_error(data: st.DataObject) -> None:
    tree = {"a": np.arange(6.0).reshape(2, 3), "b": [1, 2.5, "x", complex(1, 2)], "c": np.int8(3)}
    raw = bytearray(serialization.to_bytes(tree))
    action = data.draw(st.sampled_from(["truncate", "flip", "random"]))
    if action == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif action == "flip":
        for _ in range(data.draw(st.integers(1, 6))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    else:
        raw = bytearray(data.draw(st.binary(min_size=1, max_size=80)))
    try:
        restored = serialization.msgpack_restore(bytes(raw))
    except serialization.MsgpackDecodeError:  # a ValueError; never msgpack's own
        return
    assert not any(isinstance(x, np.ndarray) and x.dtype.hasobject for x in _walk(restored))


def _walk(x: Any) -> Any:
    """Every value in nested dicts and lists; damaged bytes can give keys of mixed types,
    which JAX's tree functions cannot sort."""
    yield x
    children = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else ()
    for child in children:
        yield from _walk(child)
