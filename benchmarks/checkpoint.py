"""Save and load of a ~100M-parameter model: ``pm.save``/``pm.load`` against raw
``safetensors.numpy`` (``save_file``/``load_file`` on the same arrays) and
``flax.serialization`` (``to_bytes``/``from_bytes``, msgpack) — and ``adapters``' copy of
the latter. Like for like: ``pm.save(sync=False)`` against ``save_file`` alone, and
``pm.save()`` (``fsync`` of the file and the folder) against ``save_file`` followed by the
same ``fsync``\\ s.

Every contestant starts from the same model of ``jax.Array``\\ s and ends with ``jax.Array``\\ s
again (raw and msgpack loads are followed by ``jnp.asarray`` of every array, as a program
would do), writing to and reading from the same folder. Rounds are interleaved and the
median of each is reported; loads read files the preceding save left in the page cache
(``os.sync()``, untimed, before every save and load keeps write-back out of the timings).

Then, each in processes of their own, the peak host memory of loads
(``benchmarks.checkpoint_memory``: ``pm.load`` against safetensors and Orbax) and a
checkpoint directory of a sharded model against plain Orbax
(``benchmarks.checkpoint_sharded``); ``--only-speed`` skips both.

Run: ``python -m benchmarks.checkpoint [--rounds N] [--layers L] [--only-speed] [--min]``
(prints Markdown; ``--min`` reports each contestant's fastest round instead of the median,
for a shared, noisy machine).
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from safetensors.numpy import load_file, save_file

import pytreemod as pm
from pytreemod import nn

WIDTH = 1024
PM = "`pm.save()` / `pm.load` (into an `eval_shape` skeleton)"
PM_NOSYNC = "`pm.save(sync=False)` / `pm.load`"
RAW = "raw `safetensors.numpy` `save_file` / `load_file`"
RAW_SYNC = "raw `safetensors.numpy`, then `os.fsync` of the file and the folder"


class Stack(pm.Module):
    """``layers`` Linear(1024, 1024) layers: 1.05M parameters each."""

    layers: list[nn.Linear]

    def __init__(self, layers: int, *, key: jax.Array) -> None:
        self.layers = [nn.Linear(WIDTH, WIDTH, key=k) for k in jax.random.split(key, layers)]


def _flat(model: Stack) -> dict[str, jax.Array]:
    """The model's arrays by path, as a raw safetensors program would name them."""
    out = {}
    for i, layer in enumerate(model.layers):
        out[f"layers.{i}.kernel"] = layer.kernel.value
        if layer.bias is not None:
            out[f"layers.{i}.bias"] = layer.bias.value
    return out


def _nested(model: Stack) -> dict[str, Any]:
    """The same arrays as Flax's variables would hold them: ``{'params': {...}}``."""
    layers: dict[str, Any] = {}
    for i, layer in enumerate(model.layers):
        entry = {"kernel": layer.kernel.value}
        if layer.bias is not None:
            entry["bias"] = layer.bias.value
        layers[str(i)] = entry
    return {"params": layers}


def _block(tree: Any) -> Any:
    return jax.block_until_ready(tree)


def contestants(
    model: Stack, folder: str
) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """name -> (save, load); every load returns jax arrays."""
    import flax.serialization as flax_ser

    from adapters import serialization as ours_ser

    skeleton = pm.eval_shape(Stack, len(model.layers), key=jax.random.key(0))
    flat, nested = _flat(model), _nested(model)
    template = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), nested)
    names = ("pm", "pmnosync", "raw", "rawsync", "flax", "ad")
    paths = {name: os.path.join(folder, name) for name in names}

    def raw_save() -> None:
        save_file({k: np.asarray(v) for k, v in flat.items()}, paths["raw"])

    def raw_load() -> Any:
        return _block({k: jnp.asarray(v) for k, v in load_file(paths["raw"]).items()})

    def raw_save_fsync() -> None:
        save_file({k: np.asarray(v) for k, v in flat.items()}, paths["rawsync"])
        with open(paths["rawsync"], "rb+") as f:
            os.fsync(f.fileno())
        dir_fd = os.open(folder, os.O_RDONLY)  # the new file's entry, as pm.save does
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def raw_load_fsync() -> Any:
        return _block({k: jnp.asarray(v) for k, v in load_file(paths["rawsync"]).items()})

    def msgpack_save(ser: Any, path: str) -> Callable[[], None]:
        def save() -> None:
            with open(path, "wb") as f:
                f.write(ser.to_bytes(nested))

        return save

    def msgpack_load(ser: Any, path: str) -> Callable[[], Any]:
        def load() -> Any:
            with open(path, "rb") as f:
                restored = ser.from_bytes(template, f.read())
            return _block(jax.tree.map(jnp.asarray, restored))

        return load

    return {
        PM: (
            lambda: pm.save(paths["pm"], model),
            lambda: _block(pm.load(paths["pm"], skeleton)),
        ),
        RAW_SYNC: (raw_save_fsync, raw_load_fsync),
        PM_NOSYNC: (
            lambda: pm.save(paths["pmnosync"], model, sync=False),
            lambda: _block(pm.load(paths["pmnosync"], skeleton)),
        ),
        RAW: (raw_save, raw_load),
        "`flax.serialization` `to_bytes` / `from_bytes` (msgpack)": (
            msgpack_save(flax_ser, paths["flax"]),
            msgpack_load(flax_ser, paths["flax"]),
        ),
        "`adapters.serialization` `to_bytes` / `from_bytes`": (
            msgpack_save(ours_ser, paths["ad"]),
            msgpack_load(ours_ser, paths["ad"]),
        ),
    }


def check_verification(model: Stack) -> str:
    """Make sure the measured ``pm.load`` verifies checksums: one flipped byte in the last
    tensor's data of a ``pm.save`` file must raise. Returns the line to print."""
    skeleton = pm.eval_shape(Stack, len(model.layers), key=jax.random.key(0))
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        path = os.path.join(folder, "check.safetensors")
        pm.save(path, model, sync=False)
        with open(path, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            byte = f.read(1)[0]
            f.seek(-1, os.SEEK_END)
            f.write(bytes([byte ^ 1]))
        try:
            pm.load(path, skeleton)
        except pm.CheckpointFormatError as e:
            what = str(e).split(": ", 1)[1].split(": the file")[0]  # without the temporary path
            return f"a flipped bit in the file's last byte raised `CheckpointFormatError`: {what}"
    raise AssertionError("pm.load returned a damaged file's values: nothing is verified")


def measure(model: Stack, rounds: int) -> dict[str, tuple[list[float], list[float]]]:
    """Seconds of every save and load, ``rounds`` interleaved rounds (plus a warm-up)."""
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        runs = contestants(model, folder)
        times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in runs}
        for round_ in range(rounds + 1):
            order = list(runs.items())
            if round_ % 2:  # alternate the order: no contestant always goes first
                order.reverse()
            for name, (save, load) in order:
                for file in os.listdir(folder):  # every save writes a new file (untimed)
                    os.unlink(os.path.join(folder, file))
                os.sync()  # untimed: no earlier write is still going to the disk
                start = time.perf_counter()
                save()
                saved = time.perf_counter()
                os.sync()  # untimed: the load does not compete with this save's writeback
                begin = time.perf_counter()
                load()
                loaded = time.perf_counter()
                if round_:  # the first round warms up (imports, compiled helpers)
                    times[name][0].append(saved - start)
                    times[name][1].append(loaded - begin)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description="Save/load speed of a 100M-parameter model.")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--layers", type=int, default=96, help="Linear(1024, 1024) layers")
    parser.add_argument(
        "--only-speed", action="store_true", help="skip the memory and sharded measures"
    )
    parser.add_argument(
        "--min", action="store_true", help="report each one's fastest round, not the median"
    )
    args = parser.parse_args()
    stat = min if args.min else statistics.median
    model = pm.jit(Stack)(args.layers, key=jax.random.key(0))
    n = sum(x.size for x in jax.tree.leaves(model))
    size = sum(x.nbytes for x in jax.tree.leaves(model))
    checked = check_verification(model)
    load_before = os.getloadavg()[0]
    times = measure(model, args.rounds)
    raw_save = stat(times[RAW][0])
    raw_load = stat(times[RAW][1])
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU(s), Python "
        f"{platform.python_version()}, jax {jax.__version__}, load average "
        f"{load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the end (a shared "
        "machine)"
    )
    print()
    print(f"### Save and load of a {n / 1e6:.1f}M-parameter model ({size / 1e6:.0f} MB float32)")
    print()
    print("| | save (ms) | save / raw | load (ms) | load / raw |")
    print("|---|---:|---:|---:|---:|")
    for name, (saves, loads) in times.items():
        save, load = stat(saves), stat(loads)
        print(
            f"| {name} | {save * 1e3:.0f} | **{save / raw_save:.2f}x** | {load * 1e3:.0f} "
            f"| **{load / raw_load:.2f}x** |"
        )
    med = {name: stat(saves) for name, (saves, _) in times.items()}
    print()
    print("Like for like, `pm.save` against the raw write doing the same disk work:")
    print()
    print("| write | `pm.save` (ms) | raw `safetensors` (ms) | `pm.save` / raw |")
    print("|---|---:|---:|---:|")
    for label, ours, raw in (
        ("`sync=False`: no `fsync` (raw: `save_file` alone)", PM_NOSYNC, RAW),
        ("`sync=True` (default): `fsync` of file and folder (raw: the same)", PM, RAW_SYNC),
    ):
        print(
            f"| {label} | {med[ours] * 1e3:.0f} | {med[raw] * 1e3:.0f} "
            f"| **{med[ours] / med[raw]:.2f}x** |"
        )
    print()
    print(
        f"{args.layers} arrays of {WIDTH}x{WIDTH} and {args.layers} of {WIDTH}; "
        f"{'fastest' if args.min else 'median'} of "
        f"{args.rounds} interleaved rounds (after one warm-up round), each a save then a "
        "load of the same file, into a folder emptied before each save; `os.sync()` (untimed) "
        "before each save and each load, so no write-back of another file competes. Loads end "
        "with `jax.Array`s (raw and msgpack: `jnp.asarray` "
        "of every array). `pm.save` writes a temporary file and renames it into place (atomic "
        "against a crash of the process); by default (`sync=True`) it `fsync`s the file "
        "before the rename and the folder after it (durable against a power loss), the "
        "same disk work as the raw write followed by `os.fsync` of the file and the folder; "
        "`sync=False` skips the `fsync`s, like `save_file` alone. Loads read the file from "
        "the page cache. `pm.save` computes an XXH3 checksum of every tensor and of the "
        "header while it writes; `pm.load` verifies every one before it returns (checked "
        f"before the run: {checked})."
    )


def other_measures() -> None:
    """The peak memory of loads and the sharded checkpoint directory, each measured in
    processes of its own (``benchmarks.checkpoint_memory``, ``.checkpoint_sharded``)."""
    for module in ("benchmarks.checkpoint_memory", "benchmarks.checkpoint_sharded"):
        extra = ["--min"] if module.endswith("sharded") and "--min" in sys.argv else []
        run = subprocess.run(
            [sys.executable, "-m", module, *extra], capture_output=True, text=True, check=True
        )
        print()
        print(run.stdout.strip())


if __name__ == "__main__":
    main()
    if "--only-speed" not in sys.argv:
        other_measures()
