"""pm.save / pm.load of a checkpoint directory (arrays sharded over devices, written by
Orbax, every file checksummed), on the suite's 8 CPU devices."""

import json
import os
import pathlib
import shutil
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import pytreemod as pm


def make_model(mesh: jax.sharding.Mesh) -> dict[str, Any]:
    sharded = jax.sharding.NamedSharding(mesh, P("data", "model"))
    kernel = jax.device_put(jnp.arange(64.0).reshape(8, 8), sharded)
    embed = pm.Param(jnp.linspace(0, 1, 12).reshape(3, 4))
    return {
        "kernel": pm.Param(pm.Partitioned(kernel, ("data", "model"))),
        "mean": pm.BatchStat(jnp.full(4, 0.5, jnp.bfloat16)),
        "rng": pm.Variable(jax.random.key(3)),
        "empty": pm.Param(jnp.zeros((0, 2))),
        "embed": embed,
        "unembed": embed,
        "count": np.int32(7),
    }


@pytest.fixture
def mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((2, 4), ("data", "model"))


@pytest.fixture
def saved(tmp_path: pathlib.Path, mesh: jax.sharding.Mesh) -> tuple[pathlib.Path, Any]:
    model = make_model(mesh)
    path = tmp_path / "ckpt"
    pm.save(path, model, directory=True)
    return path, model


def _same(a: Any, b: Any) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert np.asarray(x).dtype == np.asarray(y).dtype
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def _version(path: pathlib.Path) -> pathlib.Path:
    return path / json.loads((path / "CHECKPOINT").read_text())["current"]


def test_round_trip_into_the_shardings_of_like(
    saved: tuple[pathlib.Path, Any], mesh: jax.sharding.Mesh
) -> None:
    path, model = saved
    back = pm.load(path, pm.abstract(model, mesh))
    _same(back, model)
    assert back["embed"] is back["unembed"]
    assert back["kernel"].value.names == ("data", "model")
    assert back["kernel"].value.value.sharding.spec == P("data", "model")
    assert int(back["count"]) == 7
    assert isinstance(pm.load(path, model)["count"], np.ndarray)  # as like holds it
    # into another layout: one device, or the kernel split the other way
    other = jax.make_mesh((4, 2), ("data", "model"))
    moved = pm.load(path, pm.abstract(model, other))
    assert moved["kernel"].value.value.sharding.mesh.shape == {"data": 4, "model": 2}
    _same(moved, model)
    _same(pm.load(path, pm.eval_shape(lambda: make_model(mesh))), model)


def test_a_flipped_byte_in_any_file_names_the_checkpoint(saved: tuple[pathlib.Path, Any]) -> None:
    path, model = saved
    version = _version(path)
    manifest = json.loads((version / "pytreemod.json").read_text())["manifest"]
    kernel = manifest["arrays"]["kernel"]
    for rel, named in ((f"{kernel}/1.3", r"\.kernel \(its shard file"), ("_METADATA", "file")):
        file = version / rel
        good = file.read_bytes()
        raw = bytearray(good)
        raw[len(raw) // 3] ^= 0x01
        file.write_bytes(bytes(raw))
        with pytest.raises(
            pm.CheckpointFormatError,
            match=rf"ckpt'?: the stored bytes of .*{named}.*do not match their checksum",
        ):
            pm.load(path, model)
        file.write_bytes(good)
    manifest_file = version / "pytreemod.json"
    manifest_file.write_text(manifest_file.read_text().replace('"params"', '"paramz"', 1))
    with pytest.raises(pm.CheckpointFormatError, match=r"pytreemod\.json do not match"):
        pm.load(path, model)


def test_a_missing_shard_file(saved: tuple[pathlib.Path, Any]) -> None:
    path, model = saved
    version = _version(path)
    kernel = json.loads((version / "pytreemod.json").read_text())["manifest"]["arrays"]["kernel"]
    (version / kernel / "0.0").unlink()
    with pytest.raises(pm.CheckpointFormatError, match=r"\.kernel \(its shard file"):
        pm.load(path, model)


def test_a_file_changed_after_its_verification_fails_the_read_and_leaves_nothing_behind(
    saved: tuple[pathlib.Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorStore reads the arrays once the files are verified; a file cut short in
    between (the verification skipped here) is a damaged-checkpoint error, and the
    failed read leaves no thread running."""
    import threading

    from pytreemod._checkpoint_dir import Manifest

    path, model = saved
    version = _version(path)
    kernel = json.loads((version / "pytreemod.json").read_text())["manifest"]["arrays"]["kernel"]
    shard = version / kernel / "1.2"
    shard.write_bytes(shard.read_bytes()[:5])
    monkeypatch.setattr(Manifest, "verify", lambda self, targets: None)
    threads = threading.active_count()
    with pytest.raises(pm.CheckpointFormatError, match=r"ckpt'?: the Orbax checkpoint is damaged"):
        pm.load(path, model)
    assert threading.active_count() == threads


def test_without_orbax(saved: tuple[pathlib.Path, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Orbax writes a directory, and TensorStore (which comes with it) reads it."""
    import sys

    path, model = saved
    monkeypatch.setitem(sys.modules, "orbax.checkpoint", None)
    monkeypatch.setitem(sys.modules, "tensorstore", None)
    for call in (lambda: pm.load(path, model), lambda: pm.save(path, model, directory=True)):
        with pytest.raises(pm.CheckpointError, match=r"written and read with Orbax: install"):
            call()


def test_mismatch_and_filter(saved: tuple[pathlib.Path, Any], mesh: jax.sharding.Mesh) -> None:
    path, model = saved
    wrong = dict(model, mean=pm.BatchStat(jnp.zeros(5, jnp.bfloat16)))
    with pytest.raises(
        pm.CheckpointMismatchError,
        match=r"ckpt'? does not fit the model: \.mean: the file has bfloat16\[4\], the model "
        r"has bfloat16\[5\]",
    ):
        pm.load(path, wrong)
    fresh = dict(make_model(mesh), mean=pm.BatchStat(jnp.zeros(4, jnp.bfloat16)))
    partly = pm.load(path, fresh, filter="params")
    assert partly["mean"].value is fresh["mean"].value
    _same(partly["kernel"], model["kernel"])


def test_saving_again_replaces_the_version_and_removes_dead_writers_versions(
    saved: tuple[pathlib.Path, Any], mesh: jax.sharding.Mesh
) -> None:
    path, model = saved
    first = _version(path)
    # a version a killed writer left (a process id beyond Linux's pid_max: not running)
    stray = path / first.name.replace(f"-{os.getpid()}-", "-999999999-")
    shutil.copytree(first, stray)
    changed = dict(model, count=np.int32(8))
    pm.save(path, changed)  # a checkpoint directory already: another directory
    second = _version(path)
    assert second != first
    assert sorted(p.name for p in path.iterdir()) == sorted(["CHECKPOINT", second.name])
    assert int(pm.load(path, model)["count"]) == 8


def test_what_is_in_the_way(tmp_path: pathlib.Path, mesh: jax.sharding.Mesh) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(pm.CheckpointError, match=r"taken'?: a folder of that name is in the way"):
        pm.save(tmp_path / "taken", make_model(mesh), directory=True)
    assert os.listdir(tmp_path / "taken") == ["notes.txt"]
    pm.save(tmp_path / "file", {"w": jnp.ones(2)})
    with pytest.raises(pm.CheckpointError, match=r"file'?: a file of that name is in the way"):
        pm.save(tmp_path / "file", {"w": jnp.ones(2)}, directory=True)


def test_a_pointer_to_nothing(saved: tuple[pathlib.Path, Any]) -> None:
    path, model = saved
    shutil.rmtree(_version(path))
    with pytest.raises(pm.CheckpointFormatError, match=r"ckpt'?: the version .* is missing"):
        pm.load(path, model)
    (path / "CHECKPOINT").write_text('{"current": "../elsewhere"}')
    with pytest.raises(pm.CheckpointFormatError, match=r"CHECKPOINT does not name a version"):
        pm.load(path, model)


def test_save_async_of_a_directory_and_of_a_file(
    tmp_path: pathlib.Path, mesh: jax.sharding.Mesh
) -> None:
    model = make_model(mesh)
    kernel = model["kernel"].value.value
    with pm.save_async(tmp_path / "ckpt", model, directory=True) as pending:
        # the arrays were copied off the devices: training may donate them meanwhile
        jax.jit(lambda x: x + 1, donate_argnums=0)(kernel)
    assert pending.done() and "done" in repr(pending)
    _same(pm.load(tmp_path / "ckpt", pm.abstract(make_model(mesh), mesh)), make_model(mesh))
    file = tmp_path / "model.safetensors"
    first = pm.save_async(file, {"w": pm.Param(jnp.ones(3))})
    second = pm.save_async(file, {"w": pm.Param(jnp.full(3, 2.0))})  # after the first
    assert pm.load(file, {"w": pm.Param(jnp.zeros(3))})["w"].value.tolist() == [2.0] * 3
    first.wait()
    second.wait()


def test_a_failed_background_save_raises_in_wait(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytreemod import _checkpoint_file

    def full(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_checkpoint_file, "write", full)
    pending = pm.save_async(tmp_path / "m.safetensors", {"w": jnp.ones(2)})
    with pytest.raises(pm.CheckpointError, match=r"m\.safetensors'?: the disk .* is full"):
        pending.wait()
    assert os.listdir(tmp_path) == []


def test_manager_keeps_the_last_steps_and_resumes_from_the_latest_complete(
    tmp_path: pathlib.Path, mesh: jax.sharding.Mesh
) -> None:
    model = {"w": pm.Param(jnp.zeros(3)), "n": pm.BatchStat(jnp.zeros((), jnp.int32))}
    with pm.CheckpointManager(tmp_path / "run", keep=2) as run:
        for step in range(4):
            model = {"w": pm.Param(model["w"].value + 1), "n": pm.BatchStat(jnp.int32(step))}
            assert run.save(step, model)
        run.wait()
        assert run.all_steps() == [2, 3] and run.latest_step() == 3
        assert int(run.restore(model, step=2)["n"].value) == 2
        with pytest.raises(pm.CheckpointError, match=r"run'?: no complete checkpoint of step 1"):
            run.restore(model, step=1)
    # a save of step 4 killed mid-write: Orbax's temporary step folder, never renamed
    (tmp_path / "run" / "4.orbax-checkpoint-tmp-1").mkdir()
    with pm.CheckpointManager(tmp_path / "run", keep=2) as resumed:
        assert resumed.latest_step() == 3
        back = resumed.restore(model)
        assert back["w"].value.tolist() == [4.0] * 3 and int(back["n"].value) == 3
        # a sharded model as a checkpoint directory in a step, checksummed
        sharded = make_model(mesh)
        assert resumed.save(5, sharded, directory=True)
        _same(resumed.restore(pm.abstract(sharded, mesh)), sharded)
    version = _version(tmp_path / "run" / "5" / "model" / "checkpoint")
    shard = sorted(version.glob("t*/[0-9]*"))[0]
    shard.write_bytes(bytes(b ^ 0xFF for b in shard.read_bytes()))
    with pm.CheckpointManager(tmp_path / "run") as again:
        with pytest.raises(pm.CheckpointFormatError, match=r"do not match their checksum"):
            again.restore(sharded)
    with pm.CheckpointManager(tmp_path / "empty") as empty:
        with pytest.raises(pm.CheckpointError, match=r"empty'?: no complete checkpoint to"):
            empty.restore(model)


def test_a_load_verifies_the_files_it_reads(saved: tuple[pathlib.Path, Any]) -> None:
    """Only the shard files a process reads are hashed: an array filter= leaves out is
    not read, and a process reads the files that overlap its own shards."""
    path, model = saved
    version = _version(path)
    mean = json.loads((version / "pytreemod.json").read_text())["manifest"]["arrays"]["mean"]
    (version / mean / "0").write_bytes(b"damaged")
    back = pm.load(path, model, filter="params")  # the statistics are not read
    _same(back["kernel"], model["kernel"])
    with pytest.raises(pm.CheckpointFormatError, match=r"\.mean \(its shard file"):
        pm.load(path, model)

    from pytreemod._checkpoint_dir import _overlaps

    class Rows:  # this process holds rows 4:8 of an 8x8 array saved in 4x2 chunks
        def addressable_devices_indices_map(self, shape: Any) -> dict[str, Any]:
            return {"device": (slice(4, 8), slice(None))}

    class Target:
        shape = (8, 8)
        sharding = Rows()

    target: Any = Target()
    assert [_overlaps(f"{i}.0", [4, 2], target) for i in range(2)] == [False, True]
    assert _overlaps(".zarray", [4, 2], target) and _overlaps("0", None, target)


def test_the_default_for_a_model_sharded_over_devices(
    tmp_path: pathlib.Path, mesh: jax.sharding.Mesh
) -> None:
    """A directory, unless the path names a file (.safetensors); replicated or one-device
    arrays: a file."""
    model = make_model(mesh)
    pm.save(tmp_path / "ckpt", model)
    pm.save(tmp_path / "ckpt.safetensors", model)
    pm.save(tmp_path / "small", {"w": jnp.ones(3)})
    assert (tmp_path / "ckpt" / "CHECKPOINT").is_file()
    assert (tmp_path / "ckpt.safetensors").is_file() and (tmp_path / "small").is_file()
    for name in ("ckpt", "ckpt.safetensors"):
        _same(pm.load(tmp_path / name, pm.abstract(model, mesh)), model)


def test_reads_in_flight_stay_within_the_read_ahead(
    saved: tuple[pathlib.Path, Any], mesh: jax.sharding.Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most ``_read_ahead`` bytes of arrays are read ahead of their placement: 64 MiB
    on the CPU, the largest array on an accelerator (where the host only stages)."""
    from pytreemod import _checkpoint_dir as cdir

    path, model = saved
    like = pm.abstract(model, mesh)
    targets = {"a": jax.ShapeDtypeStruct((4, 8), np.float32)}
    assert cdir._read_ahead(targets) == cdir._READ_AHEAD  # every target on the CPU
    largest: list[int] = []
    in_flight: list[int] = []
    read, place = cdir._read, cdir._place
    now = [0]

    def reading(store: Any, target: Any) -> Any:
        now[0] += cdir._nbytes(target)
        in_flight.append(now[0])
        return read(store, target)

    def placing(target: Any, reads: Any) -> Any:
        now[0] -= cdir._nbytes(target)
        return place(target, reads)

    monkeypatch.setattr(cdir, "_read", reading)
    monkeypatch.setattr(cdir, "_place", placing)

    def as_on_an_accelerator(targets: Any) -> int:
        largest.append(max(cdir._nbytes(t) for t in targets.values()))
        return largest[0]

    monkeypatch.setattr(cdir, "_read_ahead", as_on_an_accelerator)
    _same(pm.load(path, like), model)
    assert len(in_flight) > 2 and max(in_flight) <= largest[0]
