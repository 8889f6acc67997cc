r"""A character language model written once with ``pytreemod.nn`` layers and logical axis
names, trained on one device and as FSDP x tensor parallel on 8 simulated CPU devices of
JAX's default mesh (Explicit axes), with the same loss curve.

What it shows:

- **Logical names only.** Every parameter is created with
  ``pm.with_logical_partitioning(init, names)``: the embedding table as ``('vocab',
  'embed')``, attention kernels as ``('embed', 'heads', 'kv')`` and ``('heads', 'kv',
  'embed')``, the MLP as ``('embed', 'mlp')`` then ``('mlp', 'embed')``, norm scales as
  ``('norm',)``. ``RULES`` maps them onto the ``('data', 'model')`` mesh: the vocabulary,
  the heads and the MLP over ``model`` (tensor parallel), ``embed`` over ``data`` (FSDP:
  each data-parallel group keeps an eighth of every matrix and gathers it for use), the
  norm scales over both. So every parameter, and each of Adam's moments, is split 8 ways.
- **Nothing else.** The model code has no ``out_sharding``, no ``reshard`` and no sharding
  constraint. On an Explicit mesh every array's sharding is part of its type and JAX
  refuses an ambiguous contraction; ``pm.nn``'s ops derive each output's sharding from
  the operands' types (column parallel, row parallel, the FSDP gather, the
  vocabulary-sharded lookup and ``attend``), and the loss is
  ``F.softmax_cross_entropy_with_integer_labels`` (optax's, on vocabulary-sharded
  logits). The train step is a plain ``jax.jit`` with no ``in_shardings``/
  ``out_shardings``: parameters and optimizer state keep their sharding because it is
  their type.
- **The same on one device.** ``--mesh none`` trains the same model unsharded. By default
  the example runs both and checks that the loss curves agree (relative 1e-4), and it
  measures each device's parameter bytes from the arrays' addressable shards: an eighth
  of the total. ``--mesh auto`` runs on a mesh of Auto axes (XLA's propagation decides).
- **Blocks as one stacked module**: ``pm.vmap`` creates them (a leading ``layers`` axis,
  named in every box through ``metadata_params``), ``pm.scan`` applies them.
- **Several processes.** ``--coordinator HOST:PORT --num-processes N --process-id I``
  starts ``jax.distributed`` (``gloo`` collectives between CPU processes); the same code
  then runs on the global mesh, each process holding its devices' shards. Two processes
  with 4 devices each give the losses of one process with 8 (``docs/scale.md``).
- **Resume after a kill.** ``--checkpoint-dir DIR`` saves the run every
  ``--checkpoint-every`` steps with ``pm.CheckpointManager`` (the last ``--keep`` steps;
  with several processes a checksummed checkpoint directory per step, each process
  writing its own shards) and, at start, restores the latest complete step from ``DIR``
  if there is one: the model and Adam's state, sharded as the rules say, and the step,
  from which the batch stream is advanced to where it stood. A run killed at any moment
  (even during a save) and started again with the same arguments continues from its
  last complete checkpoint with the losses of an uninterrupted run
  (``tests/examples/test_sharded_lm.py`` kills two processes in a save).

The corpus is built in (docstrings of a fixed list of standard-library modules), so
nothing is downloaded. Run it with ``python examples/sharded_lm.py [--steps N]
[--mesh explicit|auto|none] [--no-reference] [--checkpoint-dir DIR]`` (sizes:
``--width``, ``--layers``, ``--heads``, ``--context``, ``--batch``). The defaults (150
steps, both runs) take under three minutes on a busy shared 2-core CPU and bring the loss
from about 6.0 to about 2.3 nats per character (a run prints 5.964 -> 2.306), the two
curves within a relative 1e-6 of each other.
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # Eight simulated CPU devices; must be set before JAX starts.
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=8".strip()

import argparse
import collections
import contextlib
import importlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from pytreemod.nn import functional as F
from pytreemod.nn import initializers as init

MESH_SHAPE = (2, 4)  # ('data', 'model')
RULES = (
    ("batch", "data"),
    ("vocab", "model"),
    ("heads", "model"),
    ("mlp", "model"),
    ("embed", "data"),
    ("norm", ("data", "model")),
)
LAYERS = {pm.PARTITION_NAME: "layers"}
CORPUS_MODULES = ("functools", "itertools", "collections", "json", "textwrap", "argparse")


def _logical(fn: Any, *names: str | None) -> Any:
    return pm.with_logical_partitioning(fn, names)


class MLP(pm.Module):
    """Column-parallel up projection, row-parallel down projection (no biases)."""

    up: pm.nn.Linear
    down: pm.nn.Linear

    def __init__(self, width: int, *, key: jax.Array) -> None:
        k1, k2 = jax.random.split(key)
        kernel = init.lecun_normal()
        self.up = pm.nn.Linear(
            width, 4 * width, use_bias=False, kernel_init=_logical(kernel, "embed", "mlp"), key=k1
        )
        self.down = pm.nn.Linear(
            4 * width, width, use_bias=False, kernel_init=_logical(kernel, "mlp", "embed"), key=k2
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(jax.nn.gelu(self.up(x)))


class Block(pm.Module):
    """A pre-norm decoder block: causal attention with its heads over ``model``, an MLP."""

    norm1: pm.nn.RMSNorm
    attn: pm.nn.MultiHeadAttention
    norm2: pm.nn.RMSNorm
    mlp: MLP

    def __init__(self, width: int, heads: int, *, key: jax.Array) -> None:
        k1, k2, k3, k4 = jax.random.split(key, 4)
        scale = _logical(init.ones, "norm")
        self.norm1 = pm.nn.RMSNorm(width, scale_init=scale, key=k3)
        self.attn = pm.nn.MultiHeadAttention(
            heads,
            width,
            kernel_init=_logical(init.lecun_normal(), "embed", "heads", "kv"),
            out_kernel_init=_logical(init.lecun_normal(), "heads", "kv", "embed"),
            use_bias=False,
            key=k1,
        )
        self.norm2 = pm.nn.RMSNorm(width, scale_init=scale, key=k4)
        self.mlp = MLP(width, key=k2)

    def __call__(self, x: jax.Array) -> jax.Array:
        mask = F.make_causal_mask(jnp.ones(x.shape[:2]))
        x = x + self.attn(self.norm1(x), mask=mask, deterministic=True)
        return x + self.mlp(self.norm2(x))


class LM(pm.Module):
    """Vocabulary-sharded embedding, a ``pm.scan`` over stacked blocks, tied logits."""

    embed: pm.nn.Embedding
    blocks: Block
    norm: pm.nn.RMSNorm

    def __init__(self, vocab: int, width: int, layers: int, heads: int, *, key: jax.Array):
        k1, k2, k3 = jax.random.split(key, 3)
        table = _logical(init.normal(1.0), "vocab", "embed")
        self.embed = pm.nn.Embedding(vocab, width, embedding_init=table, key=k1)
        make = pm.vmap(lambda k: Block(width, heads, key=k), metadata_params=LAYERS)
        self.blocks = make(jax.random.split(k2, layers))
        self.norm = pm.nn.RMSNorm(width, scale_init=_logical(init.ones, "norm"), key=k3)

    def __call__(self, ids: jax.Array) -> jax.Array:
        @pm.scan(in_axes=(pm.Carry, 0), out_axes=pm.Carry, metadata_params=LAYERS)
        def body(x: jax.Array, block: Block) -> jax.Array:
            return block(x)

        x = body(self.embed(ids), self.blocks)
        return self.embed.attend(self.norm(x)) / jnp.sqrt(x.shape[-1])


# ----------------------------------------------------------------------------- data


def corpus() -> str:
    parts = [importlib.import_module(name).__doc__ or "" for name in CORPUS_MODULES]
    return "\n".join(parts)


def vocabulary(text: str, multiple: int) -> tuple[list[str], int]:
    """The characters of ``text``, and their count padded to a multiple of ``multiple``
    (the vocabulary is split over the ``model`` axis)."""
    chars = sorted(set(text))
    return chars, -(-len(chars) // multiple) * multiple


def batches(
    data: np.ndarray, batch: int, length: int, seed: int, start: int = 0
) -> Iterator[np.ndarray]:
    """Endless random windows of ``length + 1`` characters, the same in every process;
    from step ``start`` on (the draws of the steps before it are made and dropped)."""
    rng = np.random.default_rng(seed)
    for _ in range(start):
        rng.integers(0, len(data) - length - 1, size=batch)
    while True:
        starts = rng.integers(0, len(data) - length - 1, size=batch)
        yield np.stack([data[s : s + length + 1] for s in starts])


# ----------------------------------------------------------------------------- training


def make_mesh(kind: str) -> Mesh | None:
    """``none``: no mesh; otherwise the 2x4 ``('data', 'model')`` mesh of that axis type.
    With several processes, each process's devices form one row: ``model`` stays within a
    process, ``data`` goes across processes."""
    if kind == "none":
        return None
    axis_type = {"explicit": AxisType.Explicit, "auto": AxisType.Auto}[kind]
    return jax.make_mesh(MESH_SHAPE, ("data", "model"), axis_types=(axis_type,) * 2)


def global_array(value: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A global array from a value every process holds in full."""
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def loss_fn(model: LM, batch: jax.Array) -> jax.Array:
    logits = model(batch[:, :-1])
    # optax's integer-label loss, computed without gathering the vocabulary-sharded logits
    # (optax's own is a take_along_axis that JAX cannot shard on an Explicit mesh).
    return F.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()


def make_step(optimizer: optax.GradientTransformation) -> Any:
    @jax.jit
    def step(model: LM, opt_state: Any, batch: jax.Array) -> tuple[LM, Any, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(model, batch)
        with jax.numpy_dtype_promotion("standard"):  # optax mixes Python scalars and arrays
            updates, opt_state = optimizer.update(grads, opt_state, model)
        return pm.apply_updates(model, updates), opt_state, loss

    return step


def parameter_bytes(model: LM) -> dict[int, int]:
    """Bytes of the parameters on each of this process's devices, from the shards."""
    per_device: dict[int, int] = collections.Counter()
    for leaf in jax.tree.leaves(model):
        for shard in leaf.addressable_shards:
            per_device[shard.device.id] += shard.data.nbytes
    return dict(per_device)


def open_checkpoints(
    args: argparse.Namespace, model: LM, opt_state: Any
) -> tuple[pm.CheckpointManager, int, LM, Any]:
    """The run's checkpoints in ``--checkpoint-dir``; the step to start from and the
    state there: the latest complete checkpoint's, restored into the shardings of
    ``model`` and ``opt_state`` (step 0 and these if there is none)."""
    run = pm.CheckpointManager(args.checkpoint_dir, keep=args.keep)
    start = run.latest_step()
    if start is None:
        return run, 0, model, opt_state
    state = run.restore({"model": model, "opt_state": opt_state})
    print(f"resuming from the checkpoint of step {start} in {run.directory}")
    return run, start, state["model"], state["opt_state"]


def train(args: argparse.Namespace, kind: str, data: np.ndarray, vocab: int) -> dict[str, Any]:
    """Train from the same initial parameters and batches on ``kind``'s mesh; with
    ``--checkpoint-dir`` (the run on ``--mesh`` only), from its latest checkpoint."""
    mesh = make_mesh(kind)
    optimizer = optax.adam(args.lr)
    step = make_step(optimizer)
    # The same initial values everywhere: built on one device (the first of this process),
    # then placed on the mesh with the shardings the names and rules give.
    with jax.default_device(jax.local_devices()[0]):
        model = LM(vocab, args.width, args.layers, args.heads, key=jax.random.key(args.seed))
    total = sum(x.nbytes for x in jax.tree.leaves(model))
    losses: list[float] = []
    result: dict[str, Any] = {"total_bytes": total}
    with contextlib.ExitStack() as stack:
        stack.enter_context(pm.logical_axis_rules(RULES))
        batch_sharding = None
        if mesh is not None:
            stack.enter_context(jax.set_mesh(mesh))
            model = pm.shard(model, mesh)
            batch_sharding = NamedSharding(mesh, P("data"))
        opt_state = optimizer.init(model)
        run, first = None, 0
        if args.checkpoint_dir and kind == args.mesh:
            run, first, model, opt_state = open_checkpoints(args, model, opt_state)
            stack.enter_context(run)  # closed (its saves finished) on the way out
        stream = batches(data, args.batch, args.context, args.seed, start=first)
        start = time.perf_counter()
        for i in range(first, args.steps):
            window = next(stream)
            batch = window if batch_sharding is None else global_array(window, batch_sharding)
            model, opt_state, loss = step(model, opt_state, jnp.asarray(batch))
            losses.append(float(loss))
            if run is not None and (i + 1) % args.checkpoint_every == 0:
                # checkpoint "i + 1": the state after i + 1 steps, where a resumed run starts
                run.save(i + 1, {"model": model, "opt_state": opt_state})
        result["seconds"] = time.perf_counter() - start
    result.update(losses=losses, model=model, opt_state=opt_state, first_step=first)
    result["per_device_bytes"] = parameter_bytes(model)
    return result


# ----------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A sharded character LM.")
    parser.add_argument("--mesh", choices=["explicit", "auto", "none"], default="explicit")
    parser.add_argument(
        "--no-reference", action="store_true", help="skip the single-device comparison run"
    )
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    group = parser.add_argument_group("checkpoints (pm.CheckpointManager)")
    group.add_argument(
        "--checkpoint-dir", help="save the run here, and resume from its latest checkpoint"
    )
    group.add_argument("--checkpoint-every", type=int, default=25, help="steps between saves")
    group.add_argument("--keep", type=int, default=3, help="how many checkpoints to keep")
    group = parser.add_argument_group("several processes (jax.distributed)")
    group.add_argument("--coordinator", help="host:port of process 0 (starts jax.distributed)")
    group.add_argument("--num-processes", type=int, default=1)
    group.add_argument("--process-id", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Train, compare with one device, print; returns the runs' results."""
    args = parse_args(argv)
    if args.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            args.coordinator, num_processes=args.num_processes, process_id=args.process_id
        )
    text = corpus()
    chars, vocab = vocabulary(text, MESH_SHAPE[1])
    index = {c: i for i, c in enumerate(chars)}
    data = np.asarray([index[c] for c in text], np.int32)
    print(f"{len(text)} characters, vocabulary {len(chars)} (padded to {vocab})")
    print(f"{jax.process_count()} process(es), {jax.device_count()} devices in all")
    runs = {args.mesh: train(args, args.mesh, data, vocab)}
    if args.mesh != "none" and not args.no_reference:
        runs["none"] = train(args, "none", data, vocab)
    for kind, run in runs.items():
        losses = run["losses"]
        if not losses:  # resumed from a checkpoint of the last step
            print(f"{kind:>8} mesh: no step left after step {run['first_step']}")
            continue
        resumed = f" from step {run['first_step']}" if run["first_step"] else ""
        print(
            f"{kind:>8} mesh: loss {losses[0]:.3f} -> {losses[-1]:.3f} "
            f"({run['seconds']:.1f} s for {len(losses)} steps{resumed})"
        )
    sharded = runs[args.mesh]
    total, per_device = sharded["total_bytes"], sharded["per_device_bytes"]
    print(f"parameter bytes: {total} in all; on each of this process's devices:")
    for device, nbytes in sorted(per_device.items()):
        print(f"  device {device}: {nbytes} ({total / nbytes:.2f}x less)")
    if "none" in runs and args.mesh != "none" and sharded["losses"]:
        ours = np.asarray(sharded["losses"])
        reference = np.asarray(runs["none"]["losses"][sharded["first_step"] :])
        gap = float(np.max(np.abs(ours - reference) / np.abs(reference)))
        print(f"largest relative difference from the one-device losses: {gap:.1e}")
        np.testing.assert_allclose(ours, reference, rtol=1e-4)
    return runs


if __name__ == "__main__":
    main()
