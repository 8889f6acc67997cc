"""Peak host memory of loading a ~100M-parameter model (403 MB float32): ``pm.load``
against raw ``safetensors.numpy.load_file`` and Orbax's ``StandardCheckpointer`` restore
of the same arrays.

Every load runs in a fresh process (``python -m benchmarks.checkpoint_memory --child
...``) that imports everything, builds its target (an ``eval_shape`` skeleton, or Orbax's
abstract tree), resets the kernel's peak-memory mark (``/proc/self/clear_refs``), loads
into ``jax.Array``\\ s and reports ``VmHWM - VmRSS-before``: the peak of the load over the
process's memory before it. (``ru_maxrss`` would not do: Linux carries it over from the
parent process through ``exec``.) Loads read from the page cache (the files were just
written). Linux only.

Run: ``python -m benchmarks.checkpoint_memory [--layers L] [--rounds N]`` (prints Markdown).
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

import pytreemod as pm
from benchmarks.checkpoint import Stack, _flat

PM = "`pm.load` (into an `eval_shape` skeleton)"
RAW = "raw `safetensors.numpy.load_file`, then `jnp.asarray` of every array"
ORBAX = "Orbax `StandardCheckpointer().restore` (into `ShapeDtypeStruct`s)"


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))


def child(kind: str, folder: str, layers: int) -> None:
    """Load once and print the peak over the memory before the load, in bytes."""
    import orbax.checkpoint as ocp
    from safetensors.numpy import load_file

    skeleton = pm.eval_shape(Stack, layers, key=jax.random.key(0))
    flat = _flat(skeleton)
    abstract = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in flat.items()}
    checkpointer = ocp.StandardCheckpointer()
    jax.block_until_ready(jax.device_put(jnp.ones(3)))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS
    base = _status("VmRSS:")
    if kind == "pm":
        out = pm.load(os.path.join(folder, "pm.safetensors"), skeleton)
    elif kind == "raw":
        out = {k: jnp.asarray(v) for k, v in load_file(os.path.join(folder, "raw")).items()}
    else:
        out = checkpointer.restore(os.path.join(folder, "orbax"), abstract)
    jax.block_until_ready(out)
    print(_status("VmHWM:") - base)


def _write(model: Stack, folder: str) -> int:
    import orbax.checkpoint as ocp
    from safetensors.numpy import save_file

    flat = _flat(model)
    pm.save(os.path.join(folder, "pm.safetensors"), model, sync=False)
    save_file({k: np.asarray(v) for k, v in flat.items()}, os.path.join(folder, "raw"))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(folder, "orbax"), flat)
    checkpointer.wait_until_finished()
    return sum(v.nbytes for v in flat.values())


def main() -> None:
    parser = argparse.ArgumentParser(description="Peak host memory of checkpoint loads.")
    parser.add_argument("--layers", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "FOLDER"))
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.layers)
        return
    model = pm.jit(Stack)(args.layers, key=jax.random.key(0))
    largest = max(x.nbytes for x in jax.tree.leaves(model))
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        size = _write(model, folder)
        del model
        peaks: dict[str, list[int]] = {PM: [], RAW: [], ORBAX: []}
        for _ in range(args.rounds):
            for kind, name in (("pm", PM), ("raw", RAW), ("orbax", ORBAX)):
                command = [sys.executable, "-m", "benchmarks.checkpoint_memory"]
                command += ["--layers", str(args.layers), "--child", kind, folder]
                run = subprocess.run(command, capture_output=True, text=True, check=True)
                peaks[name].append(int(run.stdout.split()[-1]))
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU(s), Python "
        f"{platform.python_version()}, jax {jax.__version__}, CPU backend"
    )
    print()
    print(
        f"### Peak host memory of a load: {size / 1e6:.0f} MB of float32 arrays, the largest "
        f"{largest / 1e6:.1f} MB"
    )
    print()
    print("| load | peak over the process before it (MB) | / model bytes |")
    print("|---|---:|---:|")
    for name, values in peaks.items():
        peak = statistics.median(values)
        print(f"| {name} | {peak / 1e6:.0f} | **{peak / size:.2f}x** |")
    print()
    print(
        f"Median of {args.rounds} fresh processes each. Target: `pm.load` <= 1.1x the model's "
        f"bytes plus its largest tensor ({(1.1 * size + largest) / size:.2f}x here)."
    )


if __name__ == "__main__":
    main()
