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

On an accelerator the loaded arrays live in device memory, so the host figure is what
the load stages on the host (target: ``pm.load`` holds at most its largest tensor
there); the device's own peak (``memory_stats()['peak_bytes_in_use']`` over the bytes
in use before the load) is reported beside it. On the CPU backend the device is the
host and only the host figure is printed.

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


def _device_in_use(key: str) -> int | None:
    """Bytes of device memory (``key`` of ``memory_stats``) of the first device, or None
    where the backend keeps no statistics (the CPU)."""
    stats = jax.devices()[0].memory_stats()
    return None if not stats or key not in stats else int(stats[key])


def child(kind: str, folder: str, layers: int) -> None:
    """Load once and print the peak over the memory before the load, in bytes: the host's,
    then the device's ("-" on the CPU backend)."""
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
    device_base = _device_in_use("bytes_in_use")
    if kind == "pm":
        out = pm.load(os.path.join(folder, "pm.safetensors"), skeleton)
    elif kind == "raw":
        out = {k: jnp.asarray(v) for k, v in load_file(os.path.join(folder, "raw")).items()}
    else:
        out = checkpointer.restore(os.path.join(folder, "orbax"), abstract)
    jax.block_until_ready(out)
    host = _status("VmHWM:") - base
    device_peak = _device_in_use("peak_bytes_in_use")
    if device_base is None or device_peak is None:
        print(host, "-")
    else:
        print(host, device_peak - device_base)


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
        device: dict[str, list[int]] = {PM: [], RAW: [], ORBAX: []}
        for _ in range(args.rounds):
            for kind, name in (("pm", PM), ("raw", RAW), ("orbax", ORBAX)):
                command = [sys.executable, "-m", "benchmarks.checkpoint_memory"]
                command += ["--layers", str(args.layers), "--child", kind, folder]
                run = subprocess.run(command, capture_output=True, text=True, check=True)
                host, on_device = run.stdout.split()[-2:]
                peaks[name].append(int(host))
                if on_device != "-":
                    device[name].append(int(on_device))
    backend = jax.default_backend()
    accelerator = backend != "cpu"
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU(s), Python "
        f"{platform.python_version()}, jax {jax.__version__}, {backend} backend"
        + (f" ({jax.devices()[0].device_kind})" if accelerator else "")
    )
    print()
    print(
        f"### Peak host memory of a load: {size / 1e6:.0f} MB of float32 arrays, the largest "
        f"{largest / 1e6:.1f} MB"
    )
    print()
    if device[PM]:
        print(
            "| load | host peak over the process before it (MB) | / largest tensor "
            "| device peak over before (MB) | / model bytes |"
        )
        print("|---|---:|---:|---:|---:|")
        for name, values in peaks.items():
            peak, on_device = statistics.median(values), statistics.median(device[name])
            print(
                f"| {name} | {peak / 1e6:.0f} | **{peak / largest:.2f}x** | "
                f"{on_device / 1e6:.0f} | {on_device / size:.2f}x |"
            )
        target = "host peak <= its largest tensor"
    else:
        print("| load | peak over the process before it (MB) | / model bytes |")
        print("|---|---:|---:|")
        for name, values in peaks.items():
            peak = statistics.median(values)
            print(f"| {name} | {peak / 1e6:.0f} | **{peak / size:.2f}x** |")
        target = (
            f"<= 1.1x the model's bytes plus its largest tensor "
            f"({(1.1 * size + largest) / size:.2f}x here)"
        )
    print()
    print(f"Median of {args.rounds} fresh processes each. Target: `pm.load` {target}.")
    if not accelerator:
        print(
            "On an accelerator the same command reports the host's staging against the "
            "largest tensor (target: at most it) and the device's peak."
        )


if __name__ == "__main__":
    main()
