"""The checkpoint format seam: ``pm.load`` reads with the first format that detects a
path, pytreemod's own first, then the registered ones in the order they were added."""

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy

import pytreemod as pm

CF = pm.checkpoint_formats
BUILTIN = ["pytreemod-dir", "orbax", "pytreemod-file", "safetensors"]


class Toy(CF.CheckpointFormat):
    """A file starting with ``magic``, then JSON lists of numbers by top-level key."""

    def __init__(self, name: str, magic: bytes = b"TOY1") -> None:
        self.name = name
        self.magic = magic

    def detect(self, path: str) -> bool:
        try:
            with open(path, "rb") as f:
                return f.read(len(self.magic)) == self.magic
        except OSError:
            return False

    def read(self, path: str, like: Any, *, filter: pm.FilterLike = True) -> Any:
        with open(path, "rb") as f:
            doc = json.loads(f.read()[len(self.magic) :])
        return {k: v.replace(value=jnp.asarray(doc[k], jnp.float32)) for k, v in like.items()}

    def write(self, path: str, tree: Any) -> None:
        doc = {k: np.asarray(v.value).tolist() for k, v in tree.items()}
        pathlib.Path(path).write_bytes(self.magic + json.dumps(doc).encode())


class Everything(Toy):
    """Claims every path: it must never shadow pytreemod's own formats."""

    def detect(self, path: str) -> bool:
        return True


@pytest.fixture
def added() -> Iterator[list[str]]:
    """Names of formats a test registers; they are removed afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        if name in [f.name for f in CF.formats()]:
            CF.unregister_format(name)


def _names() -> list[str]:
    return [f.name for f in CF.formats() if f.name in BUILTIN or f.name.startswith("toy")]


def test_a_registered_format_is_detected_and_read_by_load(
    tmp_path: pathlib.Path, added: list[str]
) -> None:
    model = {"w": pm.Param(jnp.zeros(3))}
    path = str(tmp_path / "model.toy")
    toy = Toy("toy")
    CF.register_format(toy)
    added.append("toy")
    toy.write(path, {"w": pm.Param(jnp.arange(3.0))})
    assert CF.find_format(path) is toy
    back = pm.load(path, model)
    assert isinstance(back["w"], pm.Param) and back["w"].value.tolist() == [0.0, 1.0, 2.0]


def test_detection_order_is_fixed(tmp_path: pathlib.Path, added: list[str]) -> None:
    path = tmp_path / "model.toy"
    first, second = Toy("toy-a"), Toy("toy-b")
    CF.register_format(first)
    CF.register_format(second)
    added += ["toy-a", "toy-b"]
    path.write_bytes(b'TOY1{"w": [1.0]}')
    assert _names() == [*BUILTIN, "toy-a", "toy-b"]
    assert CF.find_format(path) is first  # both detect it: the one added first reads it
    replaced = Toy("toy-a", magic=b"NOPE")
    CF.register_format(replaced)  # the same name: replaced where it stands
    assert _names() == [*BUILTIN, "toy-a", "toy-b"] and CF.find_format(path) is second
    # A format that claims every path is tried after pytreemod's own.
    CF.register_format(Everything("toy-all"))
    added.append("toy-all")
    model = {"w": pm.Param(jnp.arange(2.0))}
    pm.save(tmp_path / "m.safetensors", model)
    assert CF.find_format(tmp_path / "m.safetensors").name == "pytreemod-file"
    assert pm.load(tmp_path / "m.safetensors", model)["w"].value.tolist() == [0.0, 1.0]


def test_a_path_in_no_format_is_an_error_naming_it(tmp_path: pathlib.Path) -> None:
    unknown = tmp_path / "notes.txt"
    unknown.write_bytes(b"hello")
    model = {"w": pm.Param(jnp.zeros(1))}
    with pytest.raises(
        pm.CheckpointFormatError,
        match=r"notes\.txt'?: cannot be read as a safetensors checkpoint: .*"
        r"The formats pm\.load reads: pytreemod-dir, orbax, pytreemod-file, safetensors",
    ):
        pm.load(unknown, model)
    with pytest.raises(pm.CheckpointFormatError, match=r"a directory, but not an Orbax"):
        CF.find_format(tmp_path)
    with pytest.raises(pm.CheckpointError, match=r"nope'?: no such checkpoint file"):
        CF.find_format(tmp_path / "nope")


def test_each_file_format_reads_only_its_own_kind(tmp_path: pathlib.Path) -> None:
    model = {"w": pm.Param(jnp.arange(2.0))}
    ours, plain = str(tmp_path / "ours.safetensors"), str(tmp_path / "plain.safetensors")
    pm.save(ours, model)
    safetensors.numpy.save_file({"w": np.arange(2.0, dtype=np.float32)}, plain)
    by_name = {f.name: f for f in CF.formats()}
    assert CF.find_format(plain) is by_name["safetensors"]
    with pytest.raises(pm.CheckpointFormatError, match=r"is not a plain safetensors file"):
        by_name["safetensors"].read(ours, model)
    with pytest.raises(pm.CheckpointFormatError, match=r"is not a pm\.save file: it has no"):
        by_name["pytreemod-file"].read(plain, model)
    with pytest.raises(pm.CheckpointError, match=r"pm\.load reads that format but pytreemod"):
        by_name["safetensors"].write(plain, model)
    by_name["pytreemod-file"].write(ours, {"w": pm.Param(jnp.ones(2))})
    assert pm.load(ours, model)["w"].value.tolist() == [1.0, 1.0]


def test_registering_checks_the_format(added: list[str]) -> None:
    with pytest.raises(pm.CheckpointError, match=r"not a pm\.checkpoint_formats\.Checkpoint"):
        CF.register_format(object())  # type: ignore[arg-type]
    with pytest.raises(pm.CheckpointError, match=r"Toy has no name"):
        CF.register_format(Toy(""))
    with pytest.raises(pm.CheckpointError, match=r"'safetensors' is one of pytreemod's own"):
        CF.register_format(Toy("safetensors"))
    with pytest.raises(pm.CheckpointError, match=r"no added format is called 'toy-x'"):
        CF.unregister_format("toy-x")


def test_flax_msgpack_files_load_once_adapters_registers_them(tmp_path: pathlib.Path) -> None:
    from adapters import serialization
    from adapters.training import checkpoints  # noqa: F401  (registers flax-msgpack)

    model = {"w": pm.Param(jnp.zeros(3)), "b": pm.Param(jnp.zeros(()))}
    path = tmp_path / "checkpoint_7"
    path.write_bytes(serialization.to_bytes({"w": jnp.arange(3.0), "b": jnp.ones(())}))
    flax = CF.find_format(path)
    assert flax.name == "flax-msgpack" and CF.formats().index(flax) > 3
    back = pm.load(path, model)
    assert back["w"].value.tolist() == [0.0, 1.0, 2.0] and float(back["b"].value) == 1.0
    with pytest.raises(pm.CheckpointError, match=r"checkpoint_7'?: a Flax msgpack .* whole"):
        pm.load(path, model, filter="params")
    with pytest.raises(pm.CheckpointMismatchError, match=r"checkpoint_7'? does not fit"):
        pm.load(path, {**model, "c": pm.Param(jnp.zeros(3))})  # no 'c' in the file
    flax.write(str(path), {"w": pm.Param(jnp.ones(3)), "b": pm.Param(jnp.zeros(()))})
    assert pm.load(path, model)["w"].value.tolist() == [1.0, 1.0, 1.0]
    path.write_bytes(path.read_bytes()[:-4])  # cut
    with pytest.raises(pm.CheckpointFormatError, match=r"not a readable Flax msgpack"):
        pm.load(path, model)
    with pytest.raises(pm.CheckpointError, match=r"Cannot save '.*nope/c'"):
        flax.write(str(tmp_path / "nope" / "c"), model)
