"""Run every benchmark and write ``docs/benchmarks.md`` from their Markdown output.

Run: ``make bench`` (or ``python -m benchmarks.run_all``). Each section records the exact
command that produced it; the numbers are from one run, side by side.
"""

import datetime
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

SECTIONS = [
    (
        "adapters.core: memory of remat_scan, trace time against flax.core",
        ["-m", "benchmarks.adapters_core"],
        "Targets: remat_scan lengths (10, 10) well below a plain scan's temp memory "
        "(O(sqrt(n)) activations); trace+lower of a ResNet-18 at most 1.0x of flax.core's.",
    ),
    (
        "adapters.linen: trace time and dispatch against flax.linen",
        ["-m", "benchmarks.linen"],
        "Targets: `init`/`apply` of a ResNet-18 under `jax.eval_shape` at most 0.5x of "
        "flax.linen's; jitted `apply` dispatch within 1.05x of flax.linen's.",
    ),
    (
        "adapters.linen transforms: nn.scan compile time, nn.remat_scan memory, a transformer step",
        ["-m", "benchmarks.linen_transforms"],
        "Targets: an `nn.scan` stack's compile time flat in depth (L=64 vs L=8, like a raw "
        "`lax.scan`) and at most flax.linen's; `nn.remat_scan` temp memory well below "
        "`nn.scan`'s (O(sqrt(n))); a Linen transformer train step 1.00x flax.linen's (same "
        "XLA).",
    ),
    (
        "pytreemod.nn trace time against raw JAX (trace_once)",
        ["-m", "benchmarks.trace"],
        "Targets: grad trace+lower of a 48-block unrolled `pm.nn` model at most 0.6x the "
        "same model in raw JAX; ResNet-18 `eval_shape` at most 1.0x raw JAX; jitted init of a "
        "ResNet-18 (fresh trace + compile + run) at most 1.05x raw JAX; compile time and "
        "optimised HLO of the grad step the same with trace_once on and off.",
    ),
    (
        "Dispatch overhead of a compiled call",
        ["-m", "benchmarks.dispatch"],
        "Targets: `pytreemod.jit` within 1.1x of raw `jax.jit` (the depth-100 adam step "
        "included), the forward at about 1.0x; every documented `pm.jit` train-step form "
        "within 1.1x of raw `jax.jit` pipelined as well as each call awaited; overhead "
        "growing no faster than the leaf count.",
    ),
    (
        "adapters.nnx: nnx.jit dispatch and trace time against flax.nnx and raw JAX",
        ["-m", "benchmarks.nnx_dispatch"],
        "Targets (issue 29): adapters' `nnx.jit` in graph mode at most 1.3x raw `jax.jit` "
        "per call, in tree mode (`graph=False`) at most 1.1x; an adam step with "
        "`nnx.Optimizer.update` inside `nnx.jit` at most 1.3x the raw optax step; trace+lower "
        "of a 48-block unrolled NNX model at most real flax.nnx's.",
    ),
    (
        "Import time",
        ["-m", "benchmarks.imports"],
        "Targets: `import pytreemod` within 1.15x of `import jax`; `import adapters.linen` "
        "at most `import flax.linen`'s.",
    ),
    (
        "Compile time against depth",
        ["-m", "benchmarks.compile_depth"],
        "Target: scan-over-layers compile time at depth 64 within 1.5x of depth 8.",
    ),
    (
        "Checkpoints: save and load of a 100M-parameter model",
        ["-m", "benchmarks.checkpoint"],
        "Target: `pm.save` and `pm.load` within 1.1x of raw `safetensors.numpy` on the same "
        "arrays (the disk is the limit); `flax.serialization` (msgpack) alongside. Then: "
        "`pm.load`'s peak host memory <= 1.1x the model's bytes plus its largest tensor; a "
        "sharded checkpoint directory's save and load <= 1.1x plain Orbax on the same arrays.",
    ),
    (
        "Explicit mesh: FSDP x TP train step against hand-annotated raw JAX",
        ["-m", "benchmarks.explicit_mesh"],
        "Target: the pytreemod step on an Explicit mesh, written with logical names only, "
        "has the collectives of the same model in raw JAX with hand-placed `out_sharding`/"
        "`reshard` (all-gather, reduce-scatter, all-reduce in the optimized HLO) and its "
        "step time (~1.00x); the Auto-mesh pytreemod step alongside.",
    ),
    (
        "Transformer train step",
        ["-m", "benchmarks.transformer"],
        "Target: the pytreemod step within 1.02x of Flax Linen's (the fastest of raw JAX, "
        "Equinox and Linen on this model).",
    ),
]


def main() -> None:
    """Run every section, or only those whose module is named by an argument
    (``python -m benchmarks.run_all dispatch linen``); sections not run keep their old
    text."""
    only = set(sys.argv[1:])
    path = ROOT / "docs" / "benchmarks.md"
    old: dict[str, str] = {}
    if only and path.exists():
        for chunk in path.read_text().split("\n## ")[1:]:
            title, _, body = chunk.partition("\n")
            old[title] = body
    parts = [
        "# Benchmarks",
        "",
        f"Written by `python -m benchmarks.run_all` (last run {datetime.date.today()}). Every "
        "table is one run of the command above it, all contestants measured side by side in "
        "that run (interleaved rounds, best round kept).",
        "",
    ]
    for title, args, target in SECTIONS:
        module = args[-1]
        if only and not any(o in (module, module.rsplit(".", 1)[-1]) for o in only):
            if title in old:
                parts += [f"## {title}{chr(10)}{old[title].rstrip()}", "", ""]
            continue
        cmd = [sys.executable, *args]
        print("running", " ".join(args), flush=True)
        out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
        parts += [f"## {title}", "", f"Command: `python {' '.join(args)}`", "", target, "", out, ""]
    path.write_text("\n".join(parts))
    print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
