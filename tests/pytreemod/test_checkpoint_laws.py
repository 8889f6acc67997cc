"""Laws of pm.save / pm.load over random models, and fuzzing with malformed files.

Round trip: for any model (nested modules, lists and dicts, every dtype, boxes, tied
variables, PRNG keys, empty containers), ``load(save(model), like)`` equals the model
bit for bit, with the same ties, whether ``like`` is the model itself or its
``eval_shape`` skeleton. Fuzzing: any damage to a valid file (a changed byte anywhere,
a cut) is a ``CheckpointFormatError`` naming the file, found by the checksums; crafted
headers with valid checksums end in a loaded model of the right structure or a
``CheckpointError`` naming the file, never another exception. A plain safetensors file
has no checksums: only damage to its header and length is fuzzed.
"""

import json
import os
import pathlib
import struct
import tempfile
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
from hypothesis import HealthCheck, given, settings
from safetensors import safe_open

import pytreemod as pm
from pytreemod import _checkpoint_file
from tests.helpers import write_signed
from tests.pytreemod.test_checkpoint import assert_same

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

DTYPES = [
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
]
NUMPY_ONLY = ["float64", "int64", "uint64", "complex128"]  # need x64 as jax arrays


class Node(pm.Module):
    children: dict[str, Any]
    leaf: Any
    tag: str = pm.field(static=True, default="node")


class Lora(pm.Param, collection="lora"):
    pass


VARIABLES = [pm.Param, pm.BatchStat, pm.Cache, pm.Intermediate, Lora]


@st.composite
def arrays(draw: st.DrawFn) -> Any:
    numpy_only = draw(st.booleans()) and draw(st.booleans())
    dtype = np.dtype(jnp.dtype(draw(st.sampled_from(NUMPY_ONLY if numpy_only else DTYPES))))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    raw = draw(st.binary(min_size=int(np.prod(shape)) * dtype.itemsize, max_size=4096))
    data = np.frombuffer(raw[: int(np.prod(shape)) * dtype.itemsize], dtype=np.uint8)
    if dtype == np.bool_:
        value = (data % 2 == 1).reshape(shape)
    else:
        value = data.view(dtype).reshape(shape)
    return value if numpy_only else jnp.asarray(value)


@st.composite
def leaves(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["array", "boxed", "key", "static", "number"]))
    if kind == "static":
        return draw(st.sampled_from([None, 3, "text", (1, 2)]))
    if kind == "number":  # a Variable holding a Python number is state, and is saved
        number = st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.booleans()
        return pm.BatchStat(draw(number))
    if kind == "key":
        impl = draw(st.sampled_from(["threefry2x32", "rbg"]))
        n = draw(st.integers(0, 2))
        return jax.random.split(jax.random.key(draw(st.integers(0, 99)), impl=impl), n)
    value = draw(arrays())
    if kind == "boxed":
        names = tuple(draw(st.sampled_from([None, "data", "model", "embed"])) for _ in value.shape)
        box = draw(st.sampled_from([pm.Partitioned, pm.LogicallyPartitioned]))
        value = box(value, names)
    return value


def _wrap(draw: st.DrawFn, value: Any, pool: list[pm.Variable]) -> Any:
    if pool and draw(st.integers(0, 5)) == 0:
        return draw(st.sampled_from(pool))  # a tie to an earlier Variable
    if not pm.is_array(value) and not pm.is_box(value):
        return value
    if draw(st.booleans()):
        var = draw(st.sampled_from(VARIABLES))(value)
        pool.append(var)
        return var
    return value


@st.composite
def models(draw: st.DrawFn) -> Any:
    pool: list[pm.Variable] = []

    def build(depth: int) -> Any:
        kind = draw(st.sampled_from(["leaf", "dict", "list", "node"] if depth < 3 else ["leaf"]))
        if kind == "leaf":
            return _wrap(draw, draw(leaves()), pool)
        n = draw(st.integers(0, 3))
        if kind == "list":
            return [build(depth + 1) for _ in range(n)]
        names = draw(st.lists(st.sampled_from("abcdef"), min_size=n, max_size=n, unique=True))
        children = {k: build(depth + 1) for k in names}
        if kind == "dict":
            return children
        return Node(children, _wrap(draw, draw(leaves()), pool))

    return {"model": build(0)}


def _path() -> str:
    return os.path.join(tempfile.mkdtemp(), "model.safetensors")


def _skeleton(tree: Any) -> Any:
    """``tree`` with ShapeDtypeStructs for arrays; a tied Variable stays one object."""
    memo: dict[int, Any] = {}
    spec = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype) if pm.is_array(x) else x

    def one(x: Any) -> Any:
        if not isinstance(x, pm.Variable):
            return jax.tree.map(spec, x)
        if id(x) not in memo:
            memo[id(x)] = jax.tree.map(spec, x)
        return memo[id(x)]

    return jax.tree.map(one, tree, is_leaf=lambda x: isinstance(x, pm.Variable))


def _specs(tree: Any) -> list[tuple[Any, Any]]:
    return [(x.shape, x.dtype) for x in jax.tree.leaves(tree) if hasattr(x, "dtype")]


def _ties(tree: Any) -> list[list[int]]:
    seen: dict[int, list[int]] = {}
    for i, leaf in enumerate(jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, pm.Variable))):
        if isinstance(leaf, pm.Variable):
            seen.setdefault(id(leaf), []).append(i)
    return sorted(v for v in seen.values())


@SETTINGS
@given(models())
def test_round_trip_into_the_model_and_its_skeleton(model: Any) -> None:
    path = _path()
    pm.save(path, model)
    back = pm.load(path, model)
    assert_same(back, model)
    assert _ties(back) == _ties(model)
    from_skeleton = pm.load(path, _skeleton(model))
    assert_same(from_skeleton, model)
    assert _ties(from_skeleton) == _ties(model)
    # A skeleton that lost the ties (jax.tree.map rebuilds every place) gets them back.
    untied = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype) if pm.is_array(x) else x, model
    )
    retied = pm.load(path, untied)
    assert_same(retied, model)
    assert _ties(retied) == _ties(model)


@SETTINGS
@given(models(), st.sampled_from(["params", "batch_stats", pm.Param, pm.Not("params")]))
def test_filtered_load_takes_selected_values_and_keeps_the_rest(model: Any, filt: Any) -> None:
    path = _path()
    pm.save(path, model)
    fresh = _skeleton(model)
    back = pm.load(path, fresh, filter=filt)
    structure, chosen, rest = pm.partition(back, filt)
    _, want, _ = pm.partition(model, filt)
    assert_same(chosen, want)
    assert not any(pm.is_array(x) for x in jax.tree.leaves(rest))  # nothing read there
    assert _specs(rest) == _specs(pm.partition(model, filt)[2])
    assert structure == pm.structure_of(model)


# --------------------------------------------------------------------------- fuzzing


def _valid_file(tmp: pathlib.Path) -> tuple[str, Any]:
    w = pm.Param(pm.Partitioned(jnp.arange(6.0).reshape(2, 3), ("a", None)))
    model = {
        "w": w,
        "tied": w,
        "s": pm.BatchStat(jnp.ones(3, jnp.bfloat16)),
        "f8": jnp.zeros(2, jnp.float8_e4m3fn),
        "k": jax.random.key(0),
    }
    path = str(tmp / "model.safetensors")
    pm.save(path, model)
    return path, model


def _load_outcome(path: str, model: Any) -> None:
    """Either loads a tree of the model's structure or raises a CheckpointError naming
    the file; anything else fails the test."""
    try:
        back = pm.load(path, model)
    except pm.CheckpointError as e:
        assert os.path.basename(path) in str(e)
        return
    assert pm.structure_of(back) == pm.structure_of(model)
    assert _specs(back) == _specs(model)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_any_changed_or_missing_byte_is_a_format_error(data: st.DataObject) -> None:
    """Checksums cover every byte of a file pm.save wrote, header and padding included:
    changed bytes anywhere, a cut at any offset, a wrong header length or bytes appended
    always raise CheckpointFormatError naming the file; no damage ever loads."""
    with tempfile.TemporaryDirectory() as d:
        path, model = _valid_file(pathlib.Path(d))
        raw = bytearray(pathlib.Path(path).read_bytes())
        action = data.draw(st.sampled_from(["truncate", "flip", "header_length", "append"]))
        if action == "truncate":
            raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
        elif action == "flip":
            for i in data.draw(st.sets(st.integers(0, len(raw) - 1), min_size=1, max_size=8)):
                raw[i] ^= data.draw(st.integers(1, 255))  # never a no-op
        elif action == "header_length":
            old = struct.unpack("<Q", raw[:8])[0]
            choices = [0, 1, 7, old - 8, old + 8, 2**31, 2**63 - 1, 2**64 - 1, len(raw)]
            raw[:8] = struct.pack("<Q", data.draw(st.sampled_from(choices)))
        else:
            raw += data.draw(st.binary(min_size=1, max_size=64))
        pathlib.Path(path).write_bytes(bytes(raw))
        with pytest.raises(pm.CheckpointFormatError, match=r"model\.safetensors"):
            pm.load(path, model)


def _raw_file(tmp: pathlib.Path) -> tuple[str, Any]:
    """A plain safetensors file (no pytreemod header, no checksums) and its model."""
    model = {
        "w": pm.Param(jnp.arange(6.0).reshape(2, 3)),
        "s": pm.BatchStat(jnp.full(3, 0.5, jnp.bfloat16)),
        "n": jnp.arange(5, dtype=jnp.int8),
    }
    path = str(tmp / "model.safetensors")
    arrays = {k: v.value if isinstance(v, pm.Variable) else v for k, v in model.items()}
    safetensors.numpy.save_file({k: np.asarray(v) for k, v in arrays.items()}, path)
    return path, model


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_damage_to_a_plain_safetensors_file(data: st.DataObject) -> None:
    """A raw file has no checksums, so a changed data byte loads other numbers (see
    docs/checkpoints.md). What is still found: a cut at any offset, a wrong header length
    or bytes appended are a CheckpointFormatError naming the file; a changed header byte
    raises a CheckpointError naming the file or loads the same values."""
    with tempfile.TemporaryDirectory() as d:
        path, model = _raw_file(pathlib.Path(d))
        raw = bytearray(pathlib.Path(path).read_bytes())
        size = struct.unpack("<Q", raw[:8])[0]
        action = data.draw(st.sampled_from(["truncate", "header_length", "append", "flip"]))
        if action == "truncate":
            raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
        elif action == "header_length":
            choices = [0, 1, 7, size - 8, size + 8, 2**31, 2**63 - 1, 2**64 - 1, len(raw)]
            raw[:8] = struct.pack("<Q", data.draw(st.sampled_from(choices)))
        elif action == "append":
            raw += data.draw(st.binary(min_size=1, max_size=64))
        else:
            raw[data.draw(st.integers(8, 8 + size - 1))] ^= data.draw(st.integers(1, 255))
        pathlib.Path(path).write_bytes(bytes(raw))
        if action != "flip":
            with pytest.raises(pm.CheckpointFormatError, match=r"model\.safetensors"):
                pm.load(path, model)
            return
        try:
            back = pm.load(path, model)
        except pm.CheckpointError as e:
            assert "model.safetensors" in str(e)
            return
        assert_same(back, model)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.sampled_from(["", "O", "object", "float8_e4m3fn", "key<evil>", "bytes", "native", "key"])
    | st.text(max_size=5),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4)
    ),
    max_leaves=12,
)


def _edit(doc: Any, data: st.DataObject) -> Any:
    """Replace one randomly chosen node of the JSON document with random JSON."""
    if isinstance(doc, (dict, list)) and doc and data.draw(st.integers(0, 3)) > 0:
        keys = list(doc.keys()) if isinstance(doc, dict) else list(range(len(doc)))
        k = data.draw(st.sampled_from(keys))
        if data.draw(st.integers(0, 5)) == 0:
            del doc[k]
        else:
            doc[k] = _edit(doc[k], data)
        return doc
    return data.draw(JSON)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_crafted_headers(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as d:
        path, model = _valid_file(pathlib.Path(d))
        with safe_open(path, framework="np") as f:
            meta = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        doc = _edit(json.loads(meta["pytreemod"]), data)
        meta["pytreemod"] = json.dumps(doc)
        change = data.draw(st.sampled_from(["none", "drop", "add", "reshape", "retype"]))
        name = data.draw(st.sampled_from(sorted(tensors)))
        if change == "drop":
            del tensors[name]
        elif change == "add":
            tensors["extra"] = np.zeros(3, np.float32)
        elif change == "reshape":
            tensors[name] = tensors[name].reshape(-1)[:1]
        elif change == "retype":
            tensors[name] = tensors[name].view(np.uint8)
        write_signed(tensors, path, meta)
        _load_outcome(path, model)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda e: e.update(dtype="object"), r"unknown dtype 'object'"),
        (lambda e: e.update(shape=[2**40, 2**40, 2**40]), r"more elements than any array"),
        (lambda e: e.update(shape=[-1, 3]), r"not a valid axis size"),
        (
            lambda e: e.update(shape=[2, 3, 1]),
            r"does not hold a native-encoded bfloat16\[2, 3, 1\]",
        ),
        (lambda e: e.update(encoding="pickle"), r"unknown encoding 'pickle'"),
        (lambda e: e.pop("collection"), r"missing field 'collection'"),
        (lambda e: e.update(path=["w", 1.5]), r"'path' must be a list of strings and integers"),
    ],
)
def test_crafted_entry_messages(tmp_path: pathlib.Path, edit: Any, message: str) -> None:
    path, model = _valid_file(tmp_path)
    with safe_open(path, framework="np") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    doc = json.loads(meta["pytreemod"])
    edit(doc["entries"]["s"])
    meta["pytreemod"] = json.dumps(doc)
    write_signed(tensors, path, meta)
    with pytest.raises(
        pm.CheckpointFormatError, match=rf"model\.safetensors: entry 's'.*{message}"
    ):
        pm.load(path, model)


def test_crafted_file_level_messages(tmp_path: pathlib.Path) -> None:
    path, model = _valid_file(tmp_path)
    pathlib.Path(path).write_bytes(b"\x00" * 3)
    with pytest.raises(pm.CheckpointFormatError, match=r"model\.safetensors'?: cannot be read"):
        pm.load(path, model)
    safetensors.numpy.save_file(
        {"w": np.zeros(1, np.float32)}, path, metadata={"format": "pytreemod", "pytreemod": "{"}
    )
    with pytest.raises(pm.CheckpointFormatError, match=r"header: not valid JSON"):
        pm.load(path, model)
    doc = {"version": 99, "entries": {}, "aliases": {}}
    safetensors.numpy.save_file(
        {}, path, metadata={"format": "pytreemod", "pytreemod": json.dumps(doc)}
    )
    with pytest.raises(pm.CheckpointFormatError, match=r"format version 99 is not supported"):
        pm.load(path, model)
    doc = {"version": 1, "entries": {}, "aliases": {}}
    safetensors.numpy.save_file(
        {"w": np.zeros(1, np.float32)},
        path,
        metadata={"format": "pytreemod", "pytreemod": json.dumps(doc)},
    )
    with pytest.raises(pm.CheckpointFormatError, match=r"tensor 'w': the header does not describe"):
        pm.load(path, model)


def test_bad_key_implementation(tmp_path: pathlib.Path) -> None:
    path, model = _valid_file(tmp_path)
    with safe_open(path, framework="np") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    doc = json.loads(meta["pytreemod"])
    doc["entries"]["k"]["key_impl"] = "evil"
    meta["pytreemod"] = json.dumps(doc)
    write_signed(tensors, path, meta)
    with pytest.raises(pm.CheckpointFormatError, match=r"PRNG key implementation 'evil'"):
        pm.load(path, model)
    doc["entries"]["k"]["key_impl"] = "rbg"
    tensors["k"] = np.zeros(4, np.uint32)
    doc["entries"]["k"]["chunk_checksums"] = _checkpoint_file.label_chunks(
        _checkpoint_file.digest(tensors["k"])
    )
    meta["pytreemod"] = json.dumps(doc)
    write_signed(tensors, path, meta)
    with pytest.raises(
        pm.CheckpointFormatError, match=r"gives key<rbg>, but the header says key<fry>"
    ):
        pm.load(path, model)
