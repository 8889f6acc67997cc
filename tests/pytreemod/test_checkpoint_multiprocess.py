"""Two processes (4 CPU devices each, ``jax.distributed`` on loopback) against one process
with 8 devices: the same sharded training step gives the same loss, and an Orbax
checkpoint the two processes write together restores in one process. Both on a mesh of
Auto axes and on one of Explicit axes (JAX's default), where every array's sharding is in
its type and the restore must give it back.

The same launch loads one checkpoint file into arrays split over the two processes
(each reads only the bytes of its own shards, and both refuse a damaged byte only one
of them reads), and saves a checkpoint directory with ``pm.save_async`` while the main
thread runs collectives (its barriers must not be device collectives), and so does a
``pm.CheckpointManager`` with several steps.

The test starts two copies of this file as workers (``python -m
tests.pytreemod.test_checkpoint_multiprocess <id> <port> <folder>``), bounded in time;
their process groups are killed if they overrun. One launch covers both axis types.
"""

import json
import os
import pathlib
import sys
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from pytreemod.nn import functional as F
from tests.helpers import start_workers, wait_for_processes

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULES = (("batch", "data"), ("embed", None), ("mlp", "model"))


class Dense(pm.Module):
    kernel: pm.Param
    bias: pm.Param


class MLP(pm.Module):
    up: Dense
    down: Dense

    def __call__(self, x: jax.Array) -> jax.Array:
        up, down = pm.unbox(self.up), pm.unbox(self.down)
        # pm.nn's linear derives the output shardings an Explicit mesh asks for (the row-
        # parallel down projection contracts the sharded hidden axis).
        h = jax.nn.relu(F.linear(x, up.kernel.value, up.bias.value))
        return F.linear(h, down.kernel.value, down.bias.value)


def make_mlp(key: jax.Array) -> MLP:
    k1, k2 = jax.random.split(key)
    box = pm.LogicallyPartitioned
    return MLP(
        Dense(
            pm.Param(box(jax.random.normal(k1, (8, 16)) * 0.3, ("embed", "mlp"), rules=RULES)),
            pm.Param(box(jnp.zeros(16), ("mlp",), rules=RULES)),
        ),
        Dense(
            pm.Param(box(jax.random.normal(k2, (16, 8)) * 0.3, ("mlp", "embed"), rules=RULES)),
            pm.Param(box(jnp.zeros(8), ("embed",), rules=RULES)),
        ),
    )


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((16, 8), np.float32), rng.standard_normal((16, 8), np.float32)


KINDS = {"auto": jax.sharding.AxisType.Auto, "explicit": jax.sharding.AxisType.Explicit}


def make_mesh(kind: str) -> jax.sharding.Mesh:
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(KINDS[kind],) * 2)


def place(x: Any, sharding: jax.sharding.Sharding) -> jax.Array:
    """A global array from a value every process holds in full."""
    full = np.asarray(x)
    return jax.make_array_from_callback(full.shape, sharding, lambda index: full[index])


def train(mesh: jax.sharding.Mesh, steps: int = 3) -> tuple[list[float], pm.Structure, Any]:
    """SGD steps of the MLP sharded over ``mesh`` (data over 'data', hidden over 'model')."""
    structure, state = pm.partition(make_mlp(jax.random.key(0)))
    shardings = pm.get_sharding(state, mesh)
    state = jax.tree.map(
        lambda s, x: x.replace_boxed(place(x.value, s)),
        shardings,
        state,
        is_leaf=lambda x: isinstance(x, jax.sharding.Sharding),
    )
    batch = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    x, y = (place(a, batch) for a in data())
    optimizer = optax.sgd(0.1)
    opt_state = optimizer.init(state)

    @jax.jit
    def step(state: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        def loss_fn(state: Any) -> jax.Array:
            return jnp.mean((pm.combine(structure, state)(x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state)
        updates, opt_state = optimizer.update(grads, opt_state)
        return optax.apply_updates(state, updates), opt_state, loss

    losses = []
    for _ in range(steps):
        state, opt_state, loss = step(state, opt_state, x, y)
        losses.append(float(loss))
    return losses, structure, state


def file_model() -> dict[str, Any]:
    """A model for one file: 8 MiB of rows (eight chunks), 256 KiB of columns, a bias."""
    rows = np.arange(2048 * 1024, dtype=np.float32).reshape(2048, 1024)
    cols = np.arange(64 * 1024, dtype=np.float32).reshape(64, 1024)
    return {
        "bias": pm.Param(np.ones(8, np.float32)),
        "cols": pm.Param(cols),
        "rows": pm.Param(rows),
    }


def write_files(folder: pathlib.Path) -> None:
    """The file the workers load, and a copy with one byte changed where only process 1
    reads (the second half of the rows: it holds them)."""
    from pytreemod import _checkpoint_read

    path = folder / "file.safetensors"
    pm.save(path, file_model())
    with _checkpoint_read.Reader(str(path)) as f:
        begin, stop = f._spans["rows"]
        at = f.data_start + (begin + stop) * 3 // 4
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x04
    (folder / "damaged.safetensors").write_bytes(bytes(raw))


def _bytes_read() -> int:
    """The bytes this process has read with read(2) and its kin, in all its threads."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def load_file(folder: str) -> dict[str, Any]:
    """Load the file into rows split over the processes (P('data', 'model')), columns
    split over them (P(None, 'data')) and a replicated bias."""
    mesh = make_mesh("auto")
    specs = {"bias": P(), "cols": P(None, "data"), "rows": P("data", "model")}
    model = file_model()
    like = {
        k: pm.Param(
            jax.ShapeDtypeStruct(
                v.value.shape, v.value.dtype, sharding=NamedSharding(mesh, specs[k])
            )
        )
        for k, v in model.items()
    }
    before = _bytes_read()
    back: dict[str, Any] = pm.load(os.path.join(folder, "file.safetensors"), like)
    read = _bytes_read() - before
    same = all(
        np.array_equal(np.asarray(shard.data), model[k].value[shard.index])
        for k in model
        for shard in back[k].value.addressable_shards
    )
    try:
        pm.load(os.path.join(folder, "damaged.safetensors"), like)
        damaged = "loaded"
    except pm.CheckpointFormatError as e:
        damaged = str(e)
    return {"read": read, "same": same, "damaged": damaged}


def save_async_while_computing(folder: str, state: Any) -> bool:
    """``pm.save_async`` of a directory while the main thread runs collectives; then
    the checkpoint loads as ``state``."""
    mesh = make_mesh("auto")
    x = place(np.ones((8, 8), np.float32), NamedSharding(mesh, P("data", "model")))
    total = jax.jit(lambda a: jnp.sum(a * 2.0))
    path = os.path.join(folder, "async-dir")
    pending = pm.save_async(path, state)
    sums = [float(total(x)) for _ in range(30)]  # as many in every process
    pending.wait()
    back = pm.load(path, state)
    same = jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), back, state)
    return sums == [128.0] * 30 and all(jax.tree.leaves(same))


def manager_while_computing(folder: str, state: Any) -> dict[str, Any]:
    """``pm.CheckpointManager`` (keep=2) saves steps 1-3 of a model split over the
    processes. Process 1 holds each step's hashing back until its main thread has run
    collectives after ``save`` returned (process 0's thread meanwhile waits for it at
    the coordination service's barrier): ``save`` returned before the step was complete,
    and the collectives ran beside the waiting thread. Then the latest step restores as
    saved."""
    from pytreemod import _checkpoint_dir

    mesh = make_mesh("auto")
    x = place(np.ones((8, 8), np.float32), NamedSharding(mesh, P("data", "model")))
    total = jax.jit(lambda a: jnp.sum(a * 2.0))
    bump = jax.jit(lambda s, k: jax.tree.map(lambda a: a + k, s))
    equal = jax.jit(
        lambda a, b: jax.tree.reduce(jnp.logical_and, jax.tree.map(jnp.array_equal, a, b))
    )
    gates = [threading.Event() for _ in range(3)]
    in_main: list[bool] = []  # whether each step's hashing ran in the main thread
    hash_mine = _checkpoint_dir._hash_mine

    def held_back(version: str, owners: Any) -> Any:
        in_main.append(threading.current_thread() is threading.main_thread())
        if jax.process_index() == 1:
            gates[len(in_main) - 1].wait(timeout=20)
        return hash_mine(version, owners)

    _checkpoint_dir._hash_mine = held_back
    run_dir = os.path.join(folder, "run")
    listed, sums = [], []
    try:
        with pm.CheckpointManager(run_dir, keep=2) as run:
            for step in (1, 2, 3):
                model = bump(state, float(step))
                assert run.save(step, model)
                listed.append(step in run.all_steps() or run.latest_step() == step)
                sums += [float(total(x)) for _ in range(10)]  # as many in every process
                gates[step - 1].set()
            run.wait()
            steps = run.all_steps()
            back = run.restore(state)
    finally:
        _checkpoint_dir._hash_mine = hash_mine
    return {
        "listed_at_once": listed,
        "hashed_in_main": in_main,
        "sums": sums == [128.0] * 30,
        "steps": steps,
        "folders": sorted(os.listdir(run_dir)),
        "restored": bool(equal(back, model)) and bool(not equal(back, state)),
    }


def worker(process_id: int, port: int, folder: str) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    assert (jax.process_count(), jax.device_count(), jax.local_device_count()) == (2, 8, 4)
    import orbax.checkpoint as ocp

    results = {}
    for kind in KINDS:
        losses, _, state = train(make_mesh(kind))
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(os.path.join(folder, f"ckpt-{kind}"), state)
        checkpointer.wait_until_finished()
        try:  # one file cannot hold arrays split over processes
            pm.save(os.path.join(folder, f"single{process_id}.safetensors"), state, directory=False)
            single = "saved"
        except pm.CheckpointError as e:
            single = str(e)
        # by default, a checkpoint directory: each process writes and hashes its shards
        pm.save(os.path.join(folder, f"dir-{kind}"), state)
        back = pm.load(os.path.join(folder, f"dir-{kind}"), state)
        same = jax.jit(
            lambda a, b: jax.tree.reduce(jnp.logical_and, jax.tree.map(jnp.array_equal, a, b))
        )
        reloaded = bool(same(back, state)) and jax.tree.map(jax.typeof, back) == jax.tree.map(
            jax.typeof, state
        )
        results[kind] = {"losses": losses, "single": single, "reloaded": reloaded}
        if kind == "auto":
            results["async"] = save_async_while_computing(folder, state)
            results["manager"] = manager_while_computing(folder, state)
    results["file"] = load_file(folder)
    with open(os.path.join(folder, f"worker{process_id}.json"), "w") as f:
        json.dump(results, f)
    jax.distributed.shutdown()


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, list[Any]]:
    """The folder the two workers wrote (a checkpoint per axis type) and their results."""
    tmp_path = tmp_path_factory.mktemp("multiprocess")
    write_files(tmp_path)
    procs = start_workers("tests.pytreemod.test_checkpoint_multiprocess", tmp_path)
    wait_for_processes(procs, timeout=180)
    return tmp_path, [json.loads((tmp_path / f"worker{i}.json").read_text()) for i in range(2)]


def test_each_process_reads_only_its_own_shards_of_a_file(
    workers: tuple[pathlib.Path, list[Any]],
) -> None:
    """Rows split over the two processes are half the file each; both processes refuse
    the copy whose damaged byte only process 1 reads, naming the tensor."""
    tmp_path, results = workers
    size = (tmp_path / "file.safetensors").stat().st_size
    for r in results:
        assert r["file"]["same"]
        assert r["file"]["read"] < 0.6 * size, (r["file"]["read"], size)
        assert (
            "the stored bytes of .rows (tensor 'rows') do not match their checksum"
            in (r["file"]["damaged"])
        )
        assert "damaged.safetensors" in r["file"]["damaged"]


def test_save_async_of_a_directory_on_two_processes(
    workers: tuple[pathlib.Path, list[Any]],
) -> None:
    _, results = workers
    assert [r["async"] for r in results] == [True, True]


def test_a_manager_saves_directory_steps_in_the_background_on_two_processes(
    workers: tuple[pathlib.Path, list[Any]],
) -> None:
    _, results = workers
    for r in (result["manager"] for result in results):
        assert r["listed_at_once"] == [False] * 3  # save returned before the step was done
        assert r["hashed_in_main"] == [False] * 3
        assert r["sums"]  # the collectives ran while the steps were being written
        assert r["steps"] == [2, 3] and r["folders"] == ["2", "3"]  # keep=2, no leftovers
        assert r["restored"]  # the latest step (3) is the model saved


@pytest.mark.parametrize("kind", list(KINDS))
def test_two_processes_match_one_and_share_a_checkpoint(
    workers: tuple[pathlib.Path, list[Any]], kind: str
) -> None:
    tmp_path, results = workers
    mesh = make_mesh(kind)
    losses, structure, state = train(mesh)
    for r in (result[kind] for result in results):
        np.testing.assert_allclose(r["losses"], losses, rtol=1e-5, atol=1e-6)
        assert "split over several processes and no process holds all of it" in r["single"]
        assert r["reloaded"]  # the two processes read back what they wrote

    import orbax.checkpoint as ocp

    skeleton = pm.eval_shape(make_mlp, jax.random.key(0))
    target = pm.abstract(pm.state(skeleton), mesh)
    restored = ocp.StandardCheckpointer().restore(tmp_path / f"ckpt-{kind}", target)
    model = pm.combine(structure, restored)
    kernel = model.up.kernel.value.value
    assert kernel.sharding.spec == jax.sharding.PartitionSpec(None, "model")
    assert kernel.sharding.mesh.axis_types == (KINDS[kind],) * 2
    for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(state)):
        assert jax.typeof(got) == jax.typeof(want)  # Explicit: the sharding type too
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_directory_two_processes_wrote_loads_in_one_and_is_checksummed(
    workers: tuple[pathlib.Path, list[Any]], kind: str
) -> None:
    """pm.save's directory, written by two processes, into one process's 8 devices; then
    one flipped byte in one shard file is an error naming the checkpoint and the path."""
    tmp_path, _ = workers
    mesh = make_mesh(kind)
    _, _, state = train(mesh)
    skeleton = pm.eval_shape(make_mlp, jax.random.key(0))
    target = pm.abstract(pm.state(skeleton), mesh)
    folder = tmp_path / f"dir-{kind}"
    restored = pm.load(folder, target)
    for got, want in zip(jax.tree.leaves(restored), jax.tree.leaves(state)):
        assert jax.typeof(got) == jax.typeof(want)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
    version = json.loads((folder / "CHECKPOINT").read_text())["current"]
    manifest = json.loads((folder / version / "pytreemod.json").read_text())["manifest"]
    array = manifest["arrays"]["up.kernel"]
    shard = sorted((folder / version / array).glob("[0-9]*"))[-1]
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    shard.write_bytes(bytes(raw))
    with pytest.raises(
        pm.CheckpointFormatError,
        match=rf"dir-{kind}'?: the stored bytes of \.up\.kernel \(its shard file "
        rf"'{array}/{shard.name}'\) do not match their checksum",
    ):
        pm.load(folder, target)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        pytest.exit("usage: python -m tests.pytreemod.test_checkpoint_multiprocess ID PORT DIR")
    worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
