"""A checkpoint directory of a model sharded over 8 devices: ``pm.save(directory=True)`` /
``pm.load`` (every shard file hashed and verified) against plain Orbax on the same arrays:
``PyTreeCheckpointHandler(use_ocdbt=False)`` (the layout ``pm.save`` writes: a file per
shard) and ``StandardCheckpointer`` (Orbax's default, OCDBT).

The model: ``--layers`` arrays of 1024x1024 float32 sharded over a 2x4 mesh of simulated
CPU devices (one process). Every save writes a new directory (the previous one deleted,
untimed), followed by ``os.sync()`` (untimed); loads restore into the same shardings
from the page cache. Rounds are interleaved; medians (or with ``--min`` the fastest
rounds) are reported.

Run: ``python -m benchmarks.checkpoint_sharded [--layers L] [--rounds N] [--min]``
(Markdown; ``--min``: each contestant's fastest round, for a shared, noisy machine).
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import argparse
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import pytreemod as pm

PM = "`pm.save(directory=True)` / `pm.load` (checksummed)"
FILES = "Orbax `PyTreeCheckpointHandler(use_ocdbt=False)` (same layout)"
OCDBT = "Orbax `StandardCheckpointer` (OCDBT, its default)"


def make(layers: int) -> tuple[dict[str, Any], dict[str, Any]]:
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    sharding = NamedSharding(mesh, P("data", "model"))
    init = jax.jit(lambda k: jax.random.normal(k, (1024, 1024)), out_shardings=sharding)
    keys = jax.random.split(jax.random.key(0), layers)
    model = {f"layer{i}": pm.Param(init(keys[i])) for i in range(layers)}
    state = {k: v.value for k, v in model.items()}
    return model, state


def contestants(model: Any, state: Any, folder: str) -> dict[str, tuple[Callable, Callable]]:
    import orbax.checkpoint as ocp

    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
    )
    skeleton = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), model
    )
    paths = {name: os.path.join(folder, name) for name in ("pm", "files", "ocdbt")}
    files = ocp.Checkpointer(ocp.PyTreeCheckpointHandler(use_ocdbt=False))
    standard = ocp.StandardCheckpointer()

    def restore_args() -> Any:
        return ocp.checkpoint_utils.construct_restore_args(abstract)

    def ocdbt_save() -> None:
        standard.save(paths["ocdbt"], state)
        standard.wait_until_finished()

    return {
        PM: (
            lambda: pm.save(paths["pm"], model, directory=True),
            lambda: jax.block_until_ready(pm.load(paths["pm"], skeleton)),
        ),
        FILES: (
            lambda: files.save(paths["files"], args=ocp.args.PyTreeSave(state)),
            lambda: jax.block_until_ready(
                files.restore(
                    paths["files"],
                    args=ocp.args.PyTreeRestore(item=abstract, restore_args=restore_args()),
                )
            ),
        ),
        OCDBT: (
            ocdbt_save,
            lambda: jax.block_until_ready(standard.restore(paths["ocdbt"], abstract)),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="Sharded checkpoint directories vs Orbax.")
    parser.add_argument("--layers", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--min", action="store_true", help="report each one's fastest round, not the median"
    )
    args = parser.parse_args()
    stat = min if args.min else statistics.median
    load_at_start = os.getloadavg()[0]
    model, state = make(args.layers)
    size = sum(x.nbytes for x in jax.tree.leaves(state))
    times: dict[str, tuple[list[float], list[float]]] = {}
    cpu: dict[str, tuple[list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        runs = contestants(model, state, folder)
        times = {name: ([], []) for name in runs}
        cpu = {name: ([], []) for name in runs}
        for round_ in range(args.rounds + 1):
            order = list(runs.items())
            if round_ % 2:
                order.reverse()
            for name, (save, load) in order:
                for entry in os.listdir(folder):
                    shutil.rmtree(os.path.join(folder, entry))
                os.sync()
                start, start_cpu = time.perf_counter(), time.process_time()
                save()
                saved, saved_cpu = time.perf_counter(), time.process_time()
                os.sync()
                begin, begin_cpu = time.perf_counter(), time.process_time()
                back = load()
                loaded, loaded_cpu = time.perf_counter(), time.process_time()
                if round_:
                    times[name][0].append(saved - start)
                    times[name][1].append(loaded - begin)
                    cpu[name][0].append(saved_cpu - start_cpu)
                    cpu[name][1].append(loaded_cpu - begin_cpu)
                del back
        # the measured load verifies: a flipped byte in one shard file must raise
        pm.save(os.path.join(folder, "check"), model, directory=True)
        shard = sorted(
            os.path.join(root, f)
            for root, _, names in os.walk(os.path.join(folder, "check"))
            for f in names
            if f[0].isdigit()
        )[0]
        data = bytearray(open(shard, "rb").read())
        data[len(data) // 2] ^= 1
        open(shard, "wb").write(bytes(data))
        try:
            pm.load(os.path.join(folder, "check"), model)
            raise AssertionError("a damaged shard loaded")
        except pm.CheckpointFormatError as e:
            checked = str(e).split(": ", 1)[1].split(": the file")[0]
    base_save = stat(times[FILES][0])
    base_load = stat(times[FILES][1])
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU(s), 8 simulated CPU devices, "
        f"Python {platform.python_version()}, jax {jax.__version__}, load average "
        f"{load_at_start:.1f} at the start and {os.getloadavg()[0]:.1f} at the end (a shared "
        "machine)"
    )
    print()
    print(
        f"### Checkpoint directory of {args.layers} sharded 1024x1024 arrays "
        f"({size / 1e6:.0f} MB float32, 2x4 mesh)"
    )
    print()
    print("| | save (ms) | save / Orbax, same layout | load (ms) | load / Orbax, same layout |")
    print("|---|---:|---:|---:|---:|")
    for name, (saves, loads) in times.items():
        save, load = stat(saves), stat(loads)
        print(
            f"| {name} | {save * 1e3:.0f} | **{save / base_save:.2f}x** | {load * 1e3:.0f} "
            f"| **{load / base_load:.2f}x** |"
        )
    print()
    print(
        "CPU time of the process (all its threads; less disturbed by the other programs "
        "of a shared machine than the elapsed time):"
    )
    print()
    print("| | save CPU (ms) | / Orbax, same layout | load CPU (ms) | / Orbax, same layout |")
    print("|---|---:|---:|---:|---:|")
    base_save_cpu, base_load_cpu = stat(cpu[FILES][0]), stat(cpu[FILES][1])
    for name, (saves, loads) in cpu.items():
        save, load = stat(saves), stat(loads)
        print(
            f"| {name} | {save * 1e3:.0f} | **{save / base_save_cpu:.2f}x** | "
            f"{load * 1e3:.0f} | **{load / base_load_cpu:.2f}x** |"
        )
    print()
    print(
        f"{'Fastest' if args.min else 'Median'} of {args.rounds} interleaved rounds after a "
        "warm-up. `pm.save` hashes every "
        "shard file it wrote (XXH3) and writes the manifest; `pm.load` verifies every file "
        "before TensorStore reads the arrays (checked: a flipped bit in a shard file raised "
        f"`CheckpointFormatError`: {checked})."
    )


if __name__ == "__main__":
    main()
