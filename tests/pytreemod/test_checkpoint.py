"""pm.save / pm.load: round trips, checking against `like`, filters, atomic writes."""

import json
import os
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
from safetensors import safe_open

import pytreemod as pm
from pytreemod import _checkpoint_file
from tests.helpers import write_signed


class Block(pm.Module):
    kernel: pm.Param
    mean: pm.BatchStat
    bias: jax.Array
    act: Callable[[jax.Array], jax.Array] = pm.field(static=True, default=jax.nn.relu)


class Net(pm.Module):
    blocks: list[Block]
    embed: pm.Param
    head: pm.Param
    key: pm.Variable
    extra: dict[str, Any]


class Rng(pm.Variable, collection="rngs"):
    pass


def make_net(width: int = 3, seed: int = 0) -> Net:
    k = jax.random.key(seed)
    blocks = [
        Block(
            pm.Param(pm.Partitioned(jax.random.normal(k, (width, 2)), ("embed", "mlp"))),
            pm.BatchStat(jnp.full((2,), float(i), jnp.bfloat16)),
            jnp.arange(2, dtype=jnp.int32) + i,
        )
        for i in range(3)
    ]
    tied = pm.Param(jnp.linspace(0, 1, width * 4, dtype=jnp.float32).reshape(width, 4))
    return Net(blocks, tied, tied, Rng(jax.random.split(k, 2)), {"empty": {}, "n": 7})


@jax.tree_util.register_pytree_with_keys_class
class Pair:
    """A node whose two children have the keys 3 and "3"."""

    def __init__(self, a: Any, b: Any):
        self.a, self.b = a, b

    def tree_flatten_with_keys(self) -> tuple[Any, None]:
        keys = jax.tree_util.DictKey
        return [(keys(3), self.a), (keys("3"), self.b)], None

    @classmethod
    def tree_unflatten(cls, aux: None, children: Any) -> "Pair":
        return cls(*children)


@pytest.fixture
def ckpt(tmp_path: pathlib.Path) -> str:
    return str(tmp_path / "model.safetensors")


def assert_same(a: Any, b: Any) -> None:
    """Same structure (static parts, Variable types, boxes) and bit-identical values."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        if pm.is_array(x):
            if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
                assert str(x.dtype) == str(y.dtype)
                x, y = jax.random.key_data(x), jax.random.key_data(y)
            assert np.asarray(x).dtype == np.asarray(y).dtype
            assert np.asarray(x).shape == np.asarray(y).shape
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
        else:
            assert x == y


def test_round_trip_keeps_everything(ckpt: str) -> None:
    net = make_net()
    pm.save(ckpt, net)
    back = pm.load(ckpt, net)
    assert_same(back, net)
    assert back.embed is back.head  # tied variables stay one object
    assert isinstance(back.blocks[0].kernel.value, pm.Partitioned)
    assert back.blocks[0].kernel.value.names == ("embed", "mlp")
    assert back.blocks[1].mean.value.dtype == jnp.bfloat16
    assert str(back.key.value.dtype) == "key<fry>"
    assert back.extra == {"empty": {}, "n": 7}
    assert back.blocks[0].act is jax.nn.relu


def test_file_is_plain_safetensors_keyed_by_path(ckpt: str) -> None:
    pm.save(ckpt, make_net())
    with safe_open(ckpt, framework="np") as f:
        assert sorted(f.keys()) == [
            "blocks.0.bias",
            "blocks.0.kernel",
            "blocks.0.mean",
            "blocks.1.bias",
            "blocks.1.kernel",
            "blocks.1.mean",
            "blocks.2.bias",
            "blocks.2.kernel",
            "blocks.2.mean",
            "embed",
            "key",
        ]
        meta = f.metadata()
    header = json.loads(meta["pytreemod"])
    kernel = header["entries"]["blocks.0.kernel"]
    assert kernel["collection"] == "params"
    assert kernel["variable"] == "Param"
    assert kernel["boxes"][0]["type"].endswith("Partitioned")
    assert header["entries"]["blocks.0.mean"]["collection"] == "batch_stats"
    assert header["entries"]["key"]["key_impl"] == "threefry2x32"
    assert header["entries"]["key"]["collection"] == "rngs"
    assert header["aliases"] == {"head": {"path": ["head"], "of": "embed"}}
    # Natively stored tensors are readable by any safetensors reader.
    raw = safetensors.numpy.load_file(ckpt)
    np.testing.assert_array_equal(raw["blocks.2.bias"], np.array([2, 3], np.int32))


def test_load_into_eval_shape_skeleton(ckpt: str) -> None:
    net = make_net(seed=5)
    pm.save(ckpt, net)
    skeleton = pm.eval_shape(lambda: make_net(seed=1))
    assert isinstance(skeleton.embed.value, jax.ShapeDtypeStruct)
    back = pm.load(ckpt, skeleton)
    assert_same(back, net)
    assert back.embed is back.head


def test_filter_loads_a_subset_and_keeps_the_rest(ckpt: str) -> None:
    trained = make_net(seed=3)
    pm.save(ckpt, trained)
    fresh = make_net(seed=4)
    back = pm.load(ckpt, fresh, filter="params")
    assert_same(back.embed, trained.embed)
    assert_same(back.blocks[1].kernel, trained.blocks[1].kernel)
    assert_same(back.blocks[1].bias, trained.blocks[1].bias)  # bare arrays are params
    assert back.blocks[1].mean.value is fresh.blocks[1].mean.value  # not selected: kept
    assert back.key.value is fresh.key.value


def test_filter_ignores_entries_it_does_not_select(ckpt: str) -> None:
    pm.save(ckpt, {"w": pm.Param(jnp.ones(2)), "stats": pm.BatchStat(jnp.zeros(3))})
    back = pm.load(ckpt, {"w": pm.Param(jnp.zeros(2))}, filter="params")
    assert back["w"].value.tolist() == [1.0, 1.0]
    with pytest.raises(pm.CheckpointMismatchError, match=r"entry 'stats' has no place"):
        pm.load(ckpt, {"w": pm.Param(jnp.zeros(2))})


def test_shape_mismatch_names_file_path_and_both_shapes(ckpt: str) -> None:
    pm.save(ckpt, {"head": {"kernel": pm.Param(jnp.zeros((5, 2)))}})
    like = {"head": {"kernel": pm.Param(jnp.zeros((4, 2)))}}
    with pytest.raises(
        pm.CheckpointMismatchError,
        match=r"model\.safetensors' does not fit the model: \.head\.kernel: the file "
        r"has float32\[5, 2\], the model has float32\[4, 2\]",
    ):
        pm.load(ckpt, like)


def test_dtype_mismatch(ckpt: str) -> None:
    pm.save(ckpt, {"w": jnp.zeros(3, jnp.bfloat16)})
    with pytest.raises(pm.CheckpointMismatchError, match=r"bfloat16\[3\], the model has float32"):
        pm.load(ckpt, {"w": jnp.zeros(3, jnp.float32)})
    with pytest.raises(pm.CheckpointMismatchError, match=r"is str in the model, not an array"):
        pm.load(ckpt, {"w": pm.Param("not an array")})


def test_key_impl_mismatch(ckpt: str) -> None:
    pm.save(ckpt, {"k": jax.random.key(0, impl="rbg")})
    back = pm.load(ckpt, {"k": jax.random.key(1, impl="rbg")})
    assert str(back["k"].dtype) == "key<rbg>"
    with pytest.raises(
        pm.CheckpointMismatchError, match=r"file has key<rbg>\[\], the model has key<fry>\[\]"
    ):
        pm.load(ckpt, {"k": jax.random.key(0)})


def test_missing_and_extra_entries(ckpt: str) -> None:
    pm.save(ckpt, {"a": jnp.ones(2), "b": jnp.ones(2)})
    with pytest.raises(pm.CheckpointMismatchError, match=r"\.c is missing in the file"):
        pm.load(ckpt, {"a": jnp.ones(2), "b": jnp.ones(2), "c": jnp.ones(2)})
    with pytest.raises(pm.CheckpointMismatchError, match=r"entry 'b' has no place in the model"):
        pm.load(ckpt, {"a": jnp.ones(2)})


def test_collection_mismatch(ckpt: str) -> None:
    pm.save(ckpt, {"a": pm.BatchStat(jnp.ones(2))})
    with pytest.raises(
        pm.CheckpointMismatchError, match=r"collection 'batch_stats' in the file but 'params'"
    ):
        pm.load(ckpt, {"a": pm.Param(jnp.ones(2))})


def test_ties_must_agree(ckpt: str) -> None:
    w = pm.Param(jnp.ones(2))
    pm.save(ckpt, {"a": w, "b": w})
    # A like with separate Variables (jax.eval_shape does not keep ties) is tied again.
    untied = {"a": pm.Param(jnp.zeros(2)), "b": pm.Param(jnp.zeros(2))}
    back = pm.load(ckpt, untied)
    assert back["a"] is back["b"] and back["a"].value.tolist() == [1.0, 1.0]
    skeleton = jax.eval_shape(lambda: {"a": w, "b": w})
    assert skeleton["a"] is not skeleton["b"]
    back = pm.load(ckpt, skeleton)
    assert back["a"] is back["b"]
    with pytest.raises(
        pm.CheckpointMismatchError,
        match=r"\.b shares the Variable of 'a' in the file, but the model has no Variable",
    ):
        pm.load(ckpt, {"a": jnp.ones(2), "b": jnp.ones(2)})
    with pytest.raises(
        pm.CheckpointMismatchError,
        match=r"\.b shares the Variable of \.a in the file, which filter= leaves out",
    ):
        pm.load(ckpt, untied, filter=pm.PathContains("b"))
    pm.save(ckpt, untied)
    with pytest.raises(
        pm.CheckpointMismatchError, match=r"\.b shares the Variable of \.a in the model"
    ):
        pm.load(ckpt, {"a": w, "b": w})


def test_bare_arrays_take_any_collection(ckpt: str) -> None:
    model = {"w": pm.Param(jnp.ones(2)), "s": pm.BatchStat(jnp.zeros(2))}
    pm.save(ckpt, model)
    state = pm.load(ckpt, pm.state(model))  # plain arrays: no collection to compare
    assert state["s"].tolist() == [0.0, 0.0]
    pm.save(ckpt, pm.state(model))
    assert isinstance(pm.load(ckpt, model)["s"], pm.BatchStat)


def test_mismatch_lists_every_problem_and_loads_nothing(ckpt: str) -> None:
    pm.save(ckpt, {str(i): jnp.ones(i + 1) for i in range(9)})
    like = {str(i): jnp.ones(i + 2) for i in range(9)}
    with pytest.raises(pm.CheckpointMismatchError, match=r"\(and 3 more\)"):
        pm.load(ckpt, like)


def test_boxes_come_back_as_saved(ckpt: str) -> None:
    boxed = {
        "p": pm.Partitioned(jnp.ones((2, 4)), ("data", None)),
        "lp": pm.LogicallyPartitioned(
            jnp.ones(4), ("embed",), rules=(("embed", "model"), ("mlp", None))
        ),
        "nested": pm.Param(pm.Partitioned(pm.Partitioned(jnp.ones(3), ("a",)), ("b",))),
    }
    pm.save(ckpt, boxed)
    back = pm.load(ckpt, boxed)
    assert_same(back, boxed)
    assert back["lp"].rules == (("embed", "model"), ("mlp", None))
    # Metadata comes from the file, also into a like without boxes.
    plain = pm.load(ckpt, pm.unbox(boxed))
    assert isinstance(plain["p"], pm.Partitioned) and plain["p"].names == ("data", None)
    assert plain["nested"].value.value.names == ("a",)


def test_unsaved_box_fields_come_from_like(ckpt: str) -> None:
    mesh = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
    tree = {"p": pm.Partitioned(jnp.ones((4,)), ("data",), mesh=mesh)}
    pm.save(ckpt, tree)
    back = pm.load(ckpt, tree)
    assert back["p"].mesh is mesh
    assert pm.load(ckpt, {"p": pm.Partitioned(jnp.ones(4), ("data",))})["p"].mesh is None


def test_unknown_box_class(ckpt: str) -> None:
    pm.save(ckpt, {"p": pm.Partitioned(jnp.ones(2), ("x",))})
    with safe_open(ckpt, framework="np") as f:
        meta, data = f.metadata(), f.get_tensor("p")
    header = json.loads(meta["pytreemod"])
    header["entries"]["p"]["boxes"][0]["type"] = "evil.module.Box"
    meta["pytreemod"] = json.dumps(header)
    write_signed({"p": data}, ckpt, meta)
    with pytest.raises(pm.CheckpointMismatchError, match=r"saved in a evil\.module\.Box box"):
        pm.load(ckpt, {"p": jnp.ones(2)})


class RankCheckedBox(pm.Partitioned):
    """A box that insists on one name per axis (plain ``Partitioned`` does not, as Flax)."""

    def __check_init__(self) -> None:
        if jnp.ndim(self.value) != len(self.names):
            raise ValueError("one name per axis")


def test_bad_box_metadata_is_a_format_error(ckpt: str) -> None:
    pm.save(ckpt, {"p": RankCheckedBox(jnp.ones(2), ("x",))})
    with safe_open(ckpt, framework="np") as f:
        meta, data = f.metadata(), f.get_tensor("p")
    meta["pytreemod"] = meta["pytreemod"].replace('["x"]', '["x", "y"]')
    write_signed({"p": data}, ckpt, meta)
    with pytest.raises(
        pm.CheckpointFormatError, match=r"saved RankCheckedBox metadata .* does not fit"
    ):
        pm.load(ckpt, {"p": jnp.ones(2)})


def test_box_with_array_field_cannot_be_saved(ckpt: str) -> None:
    class Scaled(pm.AxisMetadata):
        value: Any
        scale: jax.Array

        def unbox(self) -> Any:
            return self.value

        def add_axis(self, index: int, params: Any) -> "Scaled":
            return self

        def remove_axis(self, index: int, params: Any) -> "Scaled":
            return self

    with pytest.raises(pm.CheckpointError, match=r"Scaled box holds an array in field 'scale'"):
        pm.save(ckpt, {"s": pm.Param(Scaled(jnp.ones(2), jnp.ones(())))})


ALL_DTYPES = [
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "float16",
    "float32",
    "bfloat16",
    "complex64",
    "int4",
    "uint4",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e4m3b11fnuz",
]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_dtype_round_trips_bit_exactly(ckpt: str, dtype: str) -> None:
    raw = np.random.default_rng(0).integers(0, 256, size=(3, 4), dtype=np.uint8)
    np_dtype = np.dtype(jnp.dtype(dtype))
    if np_dtype.itemsize > 1:
        raw = np.random.default_rng(0).integers(0, 256, size=(3, 4 * np_dtype.itemsize))
        raw = raw.astype(np.uint8)
    value = jnp.asarray(raw.view(np_dtype) if dtype != "bool" else raw % 2 == 0)
    pm.save(ckpt, {"x": value, "scalar": value[0, 0]})
    back = pm.load(ckpt, {"x": value, "scalar": value[0, 0]})
    assert_same(back, {"x": value, "scalar": value[0, 0]})


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64, np.complex128])
def test_numpy_leaves_keep_64_bit_dtypes(ckpt: str, dtype: Any) -> None:
    value = np.arange(6).astype(dtype).reshape(2, 3)
    pm.save(ckpt, {"x": value})
    back = pm.load(ckpt, {"x": value})
    assert isinstance(back["x"], np.ndarray)
    assert_same(back, {"x": value})


def test_big_endian_and_strided_numpy_arrays(ckpt: str) -> None:
    tree = {
        "be": np.arange(4, dtype=">f8"),
        "bec": np.arange(3, dtype=">c16"),
        "strided": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],
    }
    pm.save(ckpt, tree)
    like = {k: np.zeros(v.shape, v.dtype.newbyteorder("=")) for k, v in tree.items()}
    back = pm.load(ckpt, like)
    for k, v in tree.items():
        np.testing.assert_array_equal(back[k], v)


def test_variables_holding_python_numbers(ckpt: str) -> None:
    tree = {
        "step": pm.BatchStat(7),
        "scale": pm.Param(0.25),
        "flag": pm.Cache(True),
        "z": pm.Param(1 + 2j),
    }
    pm.save(ckpt, tree)
    like = {
        "step": pm.BatchStat(0),
        "scale": pm.Param(1.0),
        "flag": pm.Cache(False),
        "z": pm.Param(0j),
    }
    back = pm.load(ckpt, like)
    assert {k: type(v.value) for k, v in back.items()} == {
        "step": int,
        "scale": float,
        "flag": bool,
        "z": complex,
    }
    assert back == tree
    with pytest.raises(
        pm.CheckpointMismatchError, match=r"the file has int64\[\], the model has int32\[\]"
    ):
        pm.load(ckpt, dict(like, step=pm.BatchStat(jnp.zeros((), jnp.int32))))
    with pytest.raises(pm.CheckpointError, match=r"does not fit in 64 bits"):
        pm.save(ckpt, {"n": pm.BatchStat(2**70)})
    with pytest.raises(
        pm.CheckpointError, match=r"the Variable holds a dict; a saved Variable holds one array"
    ):
        pm.save(ckpt, {"v": pm.Param({"a": jnp.ones(2)})})


def test_empty_trees_and_empty_arrays(ckpt: str) -> None:
    pm.save(ckpt, {})
    assert pm.load(ckpt, {}) == {}
    tree = {"e": jnp.zeros((0, 3)), "empty": {}, "none": None}
    pm.save(ckpt, tree)
    assert_same(pm.load(ckpt, tree), tree)


def test_loaded_arrays_take_like_sharding(ckpt: str) -> None:
    mesh = jax.make_mesh((4,), ("data",), devices=jax.devices()[:4])
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    pm.save(ckpt, {"w": jnp.arange(8.0)})
    like = {"w": jax.ShapeDtypeStruct((8,), jnp.float32, sharding=sharding)}
    back = pm.load(ckpt, like)
    assert back["w"].sharding == sharding
    np.testing.assert_array_equal(back["w"], np.arange(8.0))


def test_keys_with_dots_are_escaped(ckpt: str) -> None:
    tree = {"a.b": jnp.ones(1), "a": {"b": jnp.zeros(1)}, "c\\": jnp.ones(2)}
    pm.save(ckpt, tree)
    with safe_open(ckpt, framework="np") as f:
        assert sorted(f.keys()) == ["a.b", "a\\.b", "c\\\\"]
    assert_same(pm.load(ckpt, tree), tree)


def test_save_rejects_what_it_cannot_store(ckpt: str) -> None:
    with pytest.raises(pm.CheckpointError, match=r"not a concrete array \(an eval_shape"):
        pm.save(ckpt, pm.eval_shape(lambda: {"w": pm.Param(jnp.ones(2))}))
    with pytest.raises(pm.CheckpointError, match=r"key \(1, 2\) of type tuple"):
        pm.save(ckpt, {(1, 2): jnp.ones(2)})
    with pytest.raises(
        pm.CheckpointError, match=r"the paths .* and .* both map to the tensor name '3'"
    ):
        pm.save(ckpt, Pair(jnp.ones(2), jnp.ones(2)))
    with pytest.raises(pm.CheckpointError, match=r"not a concrete array"):
        jax.jit(lambda x: pm.save(ckpt, {"x": x}))(jnp.ones(2))
    assert not os.path.exists(ckpt)


def test_load_of_a_missing_file(tmp_path: pathlib.Path) -> None:
    with pytest.raises(pm.CheckpointError, match=r"nope\.safetensors'?: no such checkpoint file"):
        pm.load(tmp_path / "nope.safetensors", {})


def test_plain_safetensors_file_loads_by_pytreemod_names(ckpt: str) -> None:
    """A file from safetensors' own save_file loads, unverified, into like's boxes and ties."""
    like = make_net(seed=1)
    net = make_net()
    names = pm.checkpoint_keys(net)
    assert names[:3] == ["blocks.0.kernel", "blocks.0.mean", "blocks.0.bias"]  # field order
    assert "head" not in names and "embed" in names  # tied: stored once
    pm.save(ckpt, net)
    with safe_open(ckpt, framework="np") as f:
        assert sorted(f.keys()) == sorted(names)
        tensors = {k: f.get_tensor(k) for k in names if k != "key"}
    safetensors.numpy.save_file(tensors, ckpt, metadata={"format": "np"})
    back = pm.load(ckpt, like, filter=pm.Not("rngs"))
    assert back.embed is back.head
    assert back.blocks[1].kernel.value.names == ("embed", "mlp")  # like's box
    np.testing.assert_array_equal(
        back.blocks[2].kernel.value.value, net.blocks[2].kernel.value.value
    )
    assert back.blocks[1].mean.value.dtype == jnp.bfloat16
    assert back.key.value is like.key.value  # left out by filter=


def test_plain_safetensors_file_is_checked_against_like(ckpt: str) -> None:
    model = {"enc": {"w": pm.Param(jnp.ones((2, 3)))}, "b": pm.Param(jnp.ones(2))}
    safetensors.numpy.save_file({"enc.w": np.ones((3, 2), np.float32), "b": np.ones(2)}, ckpt)
    with pytest.raises(
        pm.CheckpointMismatchError,
        match=r"\.b: the file has float64\[2\], the model has float32\[2\]; \.enc\.w: the "
        r"file has float32\[3, 2\], the model has float32\[2, 3\]\. Load into a model "
        r"built with the saved configuration, or select a subset with filter=\.$",
    ):
        pm.load(ckpt, model)
    safetensors.numpy.save_file({"enc/w": np.ones((2, 3), np.float32), "b": np.ones(2)}, ckpt)
    with pytest.raises(
        pm.CheckpointMismatchError,
        match=r"enc.*w.* is missing in the file .*; the file's entry 'enc/w' has no place in "
        r"the model.*plain safetensors file \(no pytreemod header\): its tensors must have the "
        r"names pm\.save gives them \(such as 'b'; pm\.checkpoint_keys\(model\) lists them",
    ):
        pm.load(ckpt, model)
    f8 = {"w": np.zeros(2, jnp.float8_e4m3fn)}
    safetensors.numpy.save_file({"w": np.zeros(2, np.uint8)}, ckpt)
    with pytest.raises(pm.CheckpointMismatchError, match=r"file has uint8\[2\], the model has"):
        pm.load(ckpt, f8)


def test_plain_safetensors_file_with_a_tied_place_twice(ckpt: str) -> None:
    w = pm.Param(jnp.ones(2))
    safetensors.numpy.save_file({"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)}, ckpt)
    with pytest.raises(
        pm.CheckpointMismatchError,
        match=r"shares the Variable of .*a.* in the model, but the file has a tensor 'b' of its "
        r"own\. pytreemod stores a tied Variable once, under 'a'; remove the tensor 'b'",
    ):
        pm.load(ckpt, {"a": w, "b": w})
    assert pm.load(ckpt, {"a": w, "b": pm.Param(jnp.zeros(2))})["b"].value.tolist() == [1.0, 1.0]


def test_metadata_naming_pytreemod_is_never_taken_as_plain(ckpt: str) -> None:
    safetensors.numpy.save_file({"w": np.ones(2, np.float32)}, ckpt, metadata={"pytreemod": "{}"})
    with pytest.raises(
        pm.CheckpointFormatError,
        match=r"no pytreemod header \(the safetensors metadata has no 'format': 'pytreemod' "
        r"entry\), though it mentions pytreemod or a checksum: a damaged pytreemod\.save file",
    ):
        pm.load(ckpt, {"w": jnp.ones(2)})


@pytest.mark.parametrize("sync", [True, False])
def test_write_is_atomic(ckpt: str, monkeypatch: pytest.MonkeyPatch, sync: bool) -> None:
    pm.save(ckpt, {"w": jnp.ones(2)}, sync=sync)
    before = pathlib.Path(ckpt).read_bytes()

    def crash(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(_checkpoint_file, "write", crash)
    with pytest.raises(pm.CheckpointError, match=r"model\.safetensors': the operating system"):
        pm.save(ckpt, {"w": jnp.zeros(2)}, sync=sync)
    assert pathlib.Path(ckpt).read_bytes() == before
    assert os.listdir(os.path.dirname(ckpt)) == ["model.safetensors"]  # no temp file left


@pytest.mark.parametrize(("sync", "fsyncs"), [(True, 2), (False, 0)])
def test_sync_fsyncs_the_file_and_the_folder(
    ckpt: str, monkeypatch: pytest.MonkeyPatch, sync: bool, fsyncs: int
) -> None:
    calls: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd) or real_fsync(fd))
    net = make_net()
    pm.save(ckpt, net, sync=sync)
    assert len(calls) == fsyncs  # the temp file before the rename, the folder after it
    assert os.listdir(os.path.dirname(ckpt)) == ["model.safetensors"]
    assert_same(pm.load(ckpt, make_net(seed=1)), net)


def test_save_overwrites_and_accepts_pathlike(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.safetensors"
    pm.save(path, {"w": jnp.ones(2)})
    pm.save(path, {"w": jnp.full(2, 3.0)})
    assert pm.load(path, {"w": jnp.ones(2)})["w"].tolist() == [3.0, 3.0]


# ------------------------------------------------------------------------- checksums


def _tensor_bytes(path: str, name: str) -> tuple[int, int]:
    """Where tensor ``name``'s bytes lie in the file (start, end)."""
    raw = pathlib.Path(path).read_bytes()
    size = int.from_bytes(raw[:8], "little")
    begin, end = json.loads(raw[8 : 8 + size])[name]["data_offsets"]
    return 8 + size + begin, 8 + size + end


def test_a_changed_tensor_byte_names_the_file_and_the_path(ckpt: str) -> None:
    model = {"enc": {"w": pm.Param(jnp.arange(4.0))}, "b": pm.Param(jnp.ones(2))}
    pm.save(ckpt, model)
    start, end = _tensor_bytes(ckpt, "enc.w")
    raw = bytearray(pathlib.Path(ckpt).read_bytes())
    raw[(start + end) // 2] ^= 0x01
    pathlib.Path(ckpt).write_bytes(bytes(raw))
    with pytest.raises(
        pm.CheckpointFormatError,
        match=r"model\.safetensors'?: the stored bytes of \.enc\[?'?\.?w.*'enc\.w'.*checksum",
    ):
        pm.load(ckpt, model)


def test_a_changed_header_byte_is_found_even_in_the_padding(ckpt: str) -> None:
    """A tab for a space of the header's padding is valid JSON still: only the header's
    checksum tells."""
    raw, size, model = bytearray(), 0, {}
    for name in ("w" * n for n in range(1, 9)):  # one of 8 lengths leaves some padding
        model = {name: pm.Param(jnp.ones(3))}
        pm.save(ckpt, model)
        raw = bytearray(pathlib.Path(ckpt).read_bytes())
        size = int.from_bytes(raw[:8], "little")
        if raw[8 + size - 1] == ord(" "):
            break
    raw[8 + size - 1] = ord("\t")
    pathlib.Path(ckpt).write_bytes(bytes(raw))
    with pytest.raises(pm.CheckpointFormatError, match=r"header's bytes do not match"):
        pm.load(ckpt, model)


def _rewritten(ckpt: str, meta_edit: Callable[[dict[str, str]], object]) -> None:
    """Read the file with safetensors and write it back with it, metadata edited."""
    with safe_open(ckpt, framework="np") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    meta_edit(meta)
    safetensors.numpy.save_file(tensors, ckpt, metadata=meta)


def test_a_file_rewritten_by_another_writer_is_not_taken_as_checked(ckpt: str) -> None:
    model = {"w": pm.Param(jnp.arange(3.0))}
    pm.save(ckpt, model)
    # the same header with the checksum entry moved behind the rest (written by hand, as
    # safetensors' own writer chooses its metadata order itself)
    raw = pathlib.Path(ckpt).read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    meta = header["__metadata__"]
    meta[_checkpoint_file.HEADER_KEY] = meta.pop(_checkpoint_file.HEADER_KEY)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    pathlib.Path(ckpt).write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + size :])
    with pytest.raises(pm.CheckpointFormatError, match=r"checksum is not where pytreemod\.save"):
        pm.load(ckpt, model)
    _rewritten(ckpt, lambda meta: meta.pop(_checkpoint_file.HEADER_KEY))
    with pytest.raises(pm.CheckpointFormatError, match=r"header: the header's checksum is missing"):
        pm.load(ckpt, model)


def test_files_without_checksums_still_load(ckpt: str) -> None:
    """A version 1 file (pm.save before checksums) loads, unchecked."""
    model = {"w": pm.Param(jnp.arange(3.0)), "s": pm.BatchStat(jnp.ones(2, jnp.bfloat16))}
    pm.save(ckpt, model)

    def to_version_1(meta: dict[str, str]) -> None:
        doc = json.loads(meta.pop(_checkpoint_file.HEADER_KEY) and meta["pytreemod"])
        doc["version"] = 1
        for entry in doc["entries"].values():
            del entry["chunk_checksums"]
        meta["pytreemod"] = json.dumps(doc)

    _rewritten(ckpt, to_version_1)
    assert_same(pm.load(ckpt, model), model)


def test_files_of_version_2_load_checked(ckpt: str) -> None:
    """A version 2 file (one checksum of all a tensor's bytes, before chunk checksums)
    loads, its tensors verified."""
    model = {"w": pm.Param(jnp.arange(3.0)), "s": pm.BatchStat(jnp.ones(2))}
    pm.save(ckpt, model)
    with safe_open(ckpt, framework="np") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    doc = json.loads(meta["pytreemod"])
    doc["version"] = 2
    for key, entry in doc["entries"].items():
        del entry["chunk_checksums"]
        entry["checksum"] = _checkpoint_file.label(_checkpoint_file.digest(tensors[key]))
    meta["pytreemod"] = json.dumps(doc)
    write_signed(tensors, ckpt, meta)
    assert_same(pm.load(ckpt, model), model)
    tensors["w"] = tensors["w"] + 1  # the old checksum kept: a damaged tensor
    write_signed(tensors, ckpt, meta)
    with pytest.raises(
        pm.CheckpointFormatError, match=r"the stored bytes of \.w \(tensor 'w'\) do not match"
    ):
        pm.load(ckpt, model)
