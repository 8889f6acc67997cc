r"""A small character-level transformer language model written as Linen code, trained on
8 simulated CPU devices with a 2x4 mesh, sampled with the decoding cache, and then moved
in part across the bridge into pytreemod.

The model definition is plain Linen: the only line that differs from a Flax program is
``from adapters import linen as nn`` (with ``flax`` in place of ``adapters`` it is a Flax
program, and builds the same variable tree). What it shows:

- **Scan over layers.** The pre-LN blocks are one ``nn.scan`` of ``nn.remat(Block)``:
  ``variable_axes={'params': 0, 'cache': 0}`` stacks every block's parameters (and
  decoding caches) on a leading axis, ``split_rngs`` gives each layer its own ``params``
  and ``dropout`` keys, and ``metadata_params={nn.PARTITION_NAME: 'layers'}`` names that
  new axis in every partitioning box. The compiled step holds one block whatever the
  depth, and ``nn.remat`` recomputes a block's activations in the backward pass.
- **Logical partitioning.** Kernels and embeddings are created with
  ``nn.with_logical_partitioning`` (logical names such as ``('embed', 'mlp')``), and
  ``nn.logical_axis_rules`` maps the logical names onto the mesh axes ``('data',
  'model')``: the batch is split over ``data``, the MLP, heads and vocabulary over
  ``model``. ``nn.get_partition_spec`` and ``nn.logical_to_mesh_sharding`` turn the
  abstract variables (parameters and Adam's moments) into ``NamedSharding``\ s; ``init``
  and the train step are jitted with those in/out shardings. Activations are
  constrained with ``nn.with_logical_constraint(..., mesh=self.mesh)``. The mesh is
  passed explicitly rather than set globally (``jax.set_mesh``): under a global mesh,
  Flax's ``DenseGeneral`` unboxes its logically partitioned kernel at the flat 2-D shape
  it draws it at (in ``init``, and in the shape check of every ``apply``), so the
  attention kernels' three names fail to apply.
- **Sampling with the decoding cache.** The same module with ``decode=True`` runs
  ``nn.MultiHeadDotProductAttention``'s cache (collection ``cache``): each step feeds one
  character and returns the updated cache (``mutable=['cache']``). Greedy decoding; the
  whole generation is one jitted ``lax.scan``, checked against a full forward pass.
- **The bridge.** ``adapters.bridge.ToPytreemod(backbone, variables)`` turns the trained
  embedding + blocks into a pytreemod Module; ``pm.jit`` runs it, and its output equals
  the Linen ``apply``.
- **Several processes.** ``--coordinator HOST:PORT --num-processes N --process-id I``
  starts ``jax.distributed`` (with ``gloo`` collectives between CPU processes); the
  same code then runs on the global mesh, each process feeding the shards of its own
  devices (``global_array``). ``--checkpoint DIR`` writes the final parameters and
  optimizer state with Orbax, every process its shards; ``restore_checkpoint`` reads
  them into any mesh. Two processes with 4 CPU devices each give the losses of one
  process with 8 (``docs/scale.md`` has the launch commands).

The corpus is built in (the opening paragraphs of *Alice's Adventures in Wonderland*,
public domain), so nothing is downloaded. Run it with ``python examples/linen_lm.py
[--steps N] [--layers L] [--width W] [--seed S] [--no-bridge] [--no-plot]
[--checkpoint DIR]``. The defaults (800 steps) take about a minute and a half on a
shared 2-core CPU, bring the loss from about 4.7 to about 0.4 nats per character (the
greedy samples then recite the text, e.g. ``'the Rabbit actually took a watch out of its
waistc'``) and write ``linen_lm_loss.png`` next to this file.
"""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    # Eight simulated CPU devices; must be set before JAX starts.
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=8".strip()

import argparse
import dataclasses
import functools
import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm import tqdm

from adapters import linen as nn

PLOT_PATH = pathlib.Path(__file__).with_name("linen_lm_loss.png")

CORPUS = """\
Alice was beginning to get very tired of sitting by her sister on the bank, and of \
having nothing to do: once or twice she had peeped into the book her sister was \
reading, but it had no pictures or conversations in it, 'and what is the use of a \
book,' thought Alice 'without pictures or conversations?'
So she was considering in her own mind (as well as she could, for the hot day made her \
feel very sleepy and stupid), whether the pleasure of making a daisy-chain would be \
worth the trouble of getting up and picking the daisies, when suddenly a White Rabbit \
with pink eyes ran close by her.
There was nothing so very remarkable in that; nor did Alice think it so very much out \
of the way to hear the Rabbit say to itself, 'Oh dear! Oh dear! I shall be late!' (when \
she thought it over afterwards, it occurred to her that she ought to have wondered at \
this, but at the time it all seemed quite natural); but when the Rabbit actually took a \
watch out of its waistcoat-pocket, and looked at it, and then hurried on, Alice started \
to her feet, for it flashed across her mind that she had never before seen a rabbit \
with either a waistcoat-pocket, or a watch to take out of it, and burning with \
curiosity, she ran across the field after it, and fortunately was just in time to see \
it pop down a large rabbit-hole under the hedge.
In another moment down went Alice after it, never once considering how in the world \
she was to get out again.
The rabbit-hole went straight on like a tunnel for some way, and then dipped suddenly \
down, so suddenly that Alice had not a moment to think about stopping herself before \
she found herself falling down a very deep well.
"""
"""Training text: the opening of Lewis Carroll's *Alice's Adventures in Wonderland*
(1865, public domain)."""

PROMPTS = ("Alice was ", "the Rabbit")
"""Prompts sampled at the end (two, one per ``data`` shard)."""

RULES = (
    ("batch", "data"),
    ("length", None),
    ("embed", None),
    ("vocab", "model"),
    ("mlp", "model"),
    ("heads", "model"),
    ("kv", None),
    ("layers", None),
)
"""Logical axis names -> mesh axes: data parallel over ``data``, tensor parallel over
``model`` (the stacked-layers axis stays unsharded)."""

MESH_SHAPE = (2, 4)
MESH_AXES = ("data", "model")


@dataclasses.dataclass(frozen=True)
class Config:
    """Model sizes. ``vocab_size`` is padded to a multiple of the ``model`` axis."""

    vocab_size: int
    width: int = 64
    layers: int = 4
    heads: int = 4
    mlp_ratio: int = 4
    max_len: int = 64
    dropout: float = 0.1


def _logical(init: Callable[..., Any], names: tuple[str | None, ...]) -> Any:
    return nn.with_logical_partitioning(init, names)


_DENSE_INIT = nn.initializers.xavier_uniform()


class Block(nn.Module):
    """A pre-LN transformer block, written as a scan body ``(carry, x) -> (carry, y)``.
    Activations are constrained to the logical layout on ``mesh`` (none: unconstrained)."""

    config: Config
    decode: bool = False
    deterministic: bool = True
    mesh: Mesh | None = None

    @nn.compact
    def __call__(self, x: jax.Array, _: None) -> tuple[jax.Array, None]:
        cfg = self.config
        norm = lambda: nn.LayerNorm(
            scale_init=_logical(nn.initializers.ones, ("embed",)),
            bias_init=_logical(nn.initializers.zeros, ("embed",)),
        )
        # In decode mode the attention's cache index masks the future positions.
        mask = None if self.decode else nn.make_causal_mask(jnp.ones(x.shape[:2]))
        h = nn.MultiHeadDotProductAttention(
            num_heads=cfg.heads,
            kernel_init=_logical(_DENSE_INIT, ("embed", "heads", "kv")),
            out_kernel_init=_logical(_DENSE_INIT, ("heads", "kv", "embed")),
            dropout_rate=cfg.dropout,
            deterministic=self.deterministic,
            decode=self.decode,
        )(norm()(x), mask=mask)
        x = x + nn.Dropout(cfg.dropout)(h, deterministic=self.deterministic)
        x = nn.with_logical_constraint(x, ("batch", "length", "embed"), mesh=self.mesh)
        h = nn.Dense(
            cfg.mlp_ratio * cfg.width,
            kernel_init=_logical(_DENSE_INIT, ("embed", "mlp")),
            bias_init=_logical(nn.initializers.zeros, ("mlp",)),
        )(norm()(x))
        h = nn.with_logical_constraint(nn.gelu(h), ("batch", "length", "mlp"), mesh=self.mesh)
        h = nn.Dense(
            cfg.width,
            kernel_init=_logical(_DENSE_INIT, ("mlp", "embed")),
            bias_init=_logical(nn.initializers.zeros, ("embed",)),
        )(h)
        x = x + nn.Dropout(cfg.dropout)(h, deterministic=self.deterministic)
        return nn.with_logical_constraint(x, ("batch", "length", "embed"), mesh=self.mesh), None


class Backbone(nn.Module):
    """Token and position embeddings, the scanned blocks, a final LayerNorm: characters
    ``(batch, length)`` to hidden states ``(batch, length, width)``."""

    config: Config
    decode: bool = False
    deterministic: bool = True
    mesh: Mesh | None = None

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        cfg = self.config
        length = tokens.shape[1]
        x = nn.Embed(
            cfg.vocab_size,
            cfg.width,
            embedding_init=_logical(nn.initializers.normal(1.0), ("vocab", "embed")),
        )(tokens)
        positions = self.param(
            "positions",
            _logical(nn.initializers.normal(0.02), ("length", "embed")),
            (cfg.max_len, cfg.width),
        )
        if self.decode:  # the next position to write lives in the cache
            index = self.variable("cache", "index", lambda: jnp.zeros((), jnp.int32))
            start = index.value
            if not self.is_initializing():
                index.value = start + length
        else:
            start = jnp.zeros((), jnp.int32)
        x = x + jax.lax.dynamic_slice_in_dim(positions, start, length)[None]
        x = nn.with_logical_constraint(x, ("batch", "length", "embed"), mesh=self.mesh)
        stack = nn.scan(
            nn.remat(Block, prevent_cse=False),
            variable_axes={"params": 0, "cache": 0},
            split_rngs={"params": True, "dropout": True},
            length=cfg.layers,
            metadata_params={nn.PARTITION_NAME: "layers"},
        )
        x, _ = stack(cfg, self.decode, self.deterministic, self.mesh, name="blocks")(x, None)
        return nn.LayerNorm(
            scale_init=_logical(nn.initializers.ones, ("embed",)),
            bias_init=_logical(nn.initializers.zeros, ("embed",)),
        )(x)


class LM(nn.Module):
    """The backbone and an output projection to next-character logits."""

    config: Config
    decode: bool = False
    deterministic: bool = True
    mesh: Mesh | None = None

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        h = Backbone(self.config, self.decode, self.deterministic, self.mesh, name="backbone")(
            tokens
        )
        logits = nn.Dense(
            self.config.vocab_size,
            use_bias=False,
            kernel_init=_logical(_DENSE_INIT, ("embed", "vocab")),
            name="head",
        )(h)
        return nn.with_logical_constraint(logits, ("batch", "length", "vocab"), mesh=self.mesh)


# ----------------------------------------------------------------------------- data


class Vocabulary:
    """Characters of the corpus <-> integer ids (id 0 unused padding)."""

    def __init__(self, text: str, multiple: int) -> None:
        self.chars = ["\0", *sorted(set(text))]
        self.size = -(-len(self.chars) // multiple) * multiple
        self.ids = {c: i for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> np.ndarray:
        return np.asarray([self.ids[c] for c in text], np.int32)

    def decode(self, ids: Any) -> str:
        return "".join(self.chars[i] if i < len(self.chars) else "?" for i in np.asarray(ids))


def batches(data: np.ndarray, batch: int, length: int, seed: int) -> Any:
    """Endless random windows of ``length + 1`` characters (inputs and targets)."""
    rng = np.random.default_rng(seed)
    while True:
        starts = rng.integers(0, len(data) - length - 1, size=batch)
        yield np.stack([data[s : s + length + 1] for s in starts])


# ----------------------------------------------------------------------------- training


def make_mesh() -> Mesh:
    """The 2x4 ``('data', 'model')`` mesh over the first eight devices.

    With several processes, ``jax.devices()`` lists every process's devices in process
    order, so each row (a ``data`` shard) is one process's four devices: tensor
    parallelism stays inside a process, data parallelism goes across processes.
    """
    devices = np.asarray(jax.devices()[: MESH_SHAPE[0] * MESH_SHAPE[1]]).reshape(MESH_SHAPE)
    return Mesh(devices, MESH_AXES)


def global_array(value: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A global array from a value every process computes in full (the batches here:
    same seed, same windows). Each process builds only the shards of its own devices,
    so this works with one process or many."""
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


@dataclasses.dataclass(frozen=True)
class Trainer:
    """What a training run needs, built from the config and the mesh by ``make_trainer``:
    ``init(key) -> (params, opt_state)`` and ``step(params, opt_state, batch, key) ->
    (params, opt_state, loss)``, both jitted with the logical shardings, and those
    shardings (for Orbax: ``abstract_state`` is the restore target)."""

    model: LM
    init: Callable[[jax.Array], Any]
    step: Callable[..., Any]
    state_shardings: Any
    abstract_state: Any
    batch_sharding: NamedSharding
    replicated: NamedSharding


def make_trainer(
    cfg: Config, mesh: Mesh, *, batch: int, context: int, steps: int, learning_rate: float
) -> Trainer:
    """The LM with AdamW on ``mesh``; call under ``nn.logical_axis_rules(RULES)``."""
    model = LM(cfg, deterministic=False, mesh=mesh)
    example = jnp.zeros((batch, context), jnp.int32)
    warmup = max(1, min(20, steps // 5))
    schedule = optax.warmup_cosine_decay_schedule(0.0, learning_rate, warmup, steps + 1)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=1e-4))

    def init(key: jax.Array) -> Any:
        params = model.init(key, example)["params"]
        return params, tx.init(params)  # Adam's moments keep the parameters' boxes

    # The logical names in the boxes (nn.get_partition_spec), mapped onto the mesh by
    # the current rules, give every parameter's and moment's NamedSharding; the abstract
    # init computes nothing.
    abstract = jax.eval_shape(init, jax.random.key(0))
    shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh)
    abstract_state = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        nn.unbox(abstract),
        shardings,
    )
    batch_sharding = nn.logical_to_mesh_sharding(PartitionSpec("batch", "length"), mesh)
    replicated = NamedSharding(mesh, PartitionSpec())

    def loss_fn(params: Any, batch: jax.Array, key: jax.Array) -> jax.Array:
        logits = model.apply({"params": params}, batch[:, :-1], rngs={"dropout": key})
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

    @functools.partial(
        jax.jit,
        in_shardings=(*shardings, batch_sharding, replicated),
        out_shardings=(*shardings, replicated),
        donate_argnums=(0, 1),
    )
    def step(params: Any, opt_state: Any, batch: jax.Array, key: jax.Array) -> Any:
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, key)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return Trainer(
        model,
        jax.jit(lambda key: nn.unbox(init(key)), out_shardings=shardings),
        step,
        shardings,
        abstract_state,
        batch_sharding,
        replicated,
    )


def train(
    cfg: Config, data: np.ndarray, mesh: Mesh, args: argparse.Namespace
) -> tuple[Any, Any, list[float]]:
    """Train the LM with AdamW; return the trained (unboxed) parameters, the optimizer
    state and the losses. Every process runs this same loop on its part of the arrays."""
    trainer = make_trainer(
        cfg,
        mesh,
        batch=args.batch,
        context=args.context,
        steps=args.steps,
        learning_rate=args.learning_rate,
    )
    params, opt_state = trainer.init(jax.random.key(args.seed))
    n_params = sum(leaf.size for leaf in jax.tree.leaves(params))
    kernel = params["backbone"]["blocks"]["Dense_0"]["kernel"]
    print(f"LM: {n_params:,} parameters; an MLP kernel {kernel.shape} is laid out as")
    print(f"  {kernel.sharding.spec} over the mesh {dict(mesh.shape)}")
    losses: list[jax.Array] = []
    data_iter = batches(data, args.batch, args.context, args.seed)
    keys = jax.random.split(jax.random.key(args.seed + 1), args.steps)
    progress = tqdm(range(args.steps), desc="training", unit="step")
    for i in progress:
        batch = global_array(next(data_iter), trainer.batch_sharding)
        params, opt_state, loss = trainer.step(params, opt_state, batch, keys[i])
        losses.append(loss)  # replicated: every process can read it
        if i % 10 == 0 or i == args.steps - 1:
            progress.set_postfix(loss=f"{float(loss):.3f}")
    return params, opt_state, [float(x) for x in losses]


def save_checkpoint(path: str, params: Any, opt_state: Any) -> None:
    """Write the sharded training state with Orbax (every process writes its shards;
    call it in all of them). An existing checkpoint at ``path`` is replaced."""
    import orbax.checkpoint as ocp

    checkpointer = ocp.StandardCheckpointer()
    state = {"params": params, "opt_state": opt_state}
    checkpointer.save(os.path.abspath(path), state, force=True)
    checkpointer.wait_until_finished()


def restore_checkpoint(path: str, trainer: Trainer) -> tuple[Any, Any]:
    """Read a checkpoint of ``save_checkpoint`` straight into ``trainer``'s shardings,
    whatever the number of processes that wrote it."""
    import orbax.checkpoint as ocp

    params, opt_state = trainer.abstract_state
    target = {"params": params, "opt_state": opt_state}
    state = ocp.StandardCheckpointer().restore(os.path.abspath(path), target)
    return state["params"], state["opt_state"]


# ----------------------------------------------------------------------------- sampling


def sample(
    cfg: Config, params: Any, vocab: Vocabulary, length: int, mesh: Mesh
) -> tuple[list[str], float]:
    """Greedy continuation of ``PROMPTS`` (equal lengths), one character per step with
    the decoding cache; returns the texts and the largest difference between the cached
    logits and a full forward pass over the same characters."""
    decoder = LM(cfg, decode=True, mesh=mesh)
    prompt = np.stack([vocab.encode(p) for p in PROMPTS])  # numpy: the same in every process
    batch, n_prompt = prompt.shape
    total = min(n_prompt + length, cfg.max_len)
    # init with a full-length input shapes the caches; eval_shape computes nothing.
    shapes = jax.eval_shape(
        decoder.init, jax.random.key(0), jnp.zeros((batch, cfg.max_len), jnp.int32)
    )

    # Replicated outputs: every process can read them.
    @functools.partial(jax.jit, out_shardings=NamedSharding(mesh, PartitionSpec()))
    def generate(params: Any, prompt: jax.Array) -> tuple[jax.Array, jax.Array]:
        cache = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), nn.unbox(shapes["cache"]))
        seq = jnp.zeros((batch, total), jnp.int32).at[:, :n_prompt].set(prompt)

        def step(carry: tuple[Any, jax.Array], i: jax.Array) -> Any:
            cache, seq = carry
            logits, updates = decoder.apply(
                {"params": params, "cache": cache}, seq[:, i, None], mutable=["cache"]
            )
            logits = logits[:, 0]
            guess = jnp.argmax(logits[:, : len(vocab.chars)], axis=-1).astype(jnp.int32)
            # Inside the prompt the next character is given; after it, the guess.
            chosen = jnp.where(i + 1 < n_prompt, seq[:, i + 1], guess)
            return (updates["cache"], seq.at[:, i + 1].set(chosen)), logits

        (_, seq), step_logits = jax.lax.scan(step, (cache, seq), jnp.arange(total - 1))
        full = LM(cfg, mesh=mesh).apply({"params": params}, seq[:, :-1])
        return seq, jnp.max(jnp.abs(full - jnp.swapaxes(step_logits, 0, 1)))

    seq, gap = generate(params, prompt)
    return [vocab.decode(row) for row in np.asarray(seq)], float(gap)


# ----------------------------------------------------------------------------- bridge


def bridge_check(cfg: Config, params: Any, tokens: jax.Array, mesh: Mesh) -> float:
    """Run the trained backbone as a pytreemod Module under ``pm.jit``; return its
    largest difference from the Linen ``apply`` of the same variables."""
    import pytreemod as pm
    from adapters import bridge

    backbone = Backbone(cfg, mesh=mesh)
    variables = {"params": params["backbone"]}
    pm_backbone = bridge.ToPytreemod(backbone, variables)
    n_vars = len(jax.tree.leaves(pm_backbone, is_leaf=lambda x: isinstance(x, pm.Param)))
    ours = pm.jit(lambda m, t: m(t))(pm_backbone, tokens)
    theirs = jax.jit(backbone.apply)(variables, tokens)
    gap = float(jnp.max(jnp.abs(ours - theirs)))
    print(f"bridge: the backbone as a pytreemod Module ({n_vars} pm.Param leaves)")
    print(f"  pm.jit(backbone)(tokens) vs Linen apply: max |difference| = {gap:.2e}")
    return gap


def save_plot(losses: Sequence[float], path: Any) -> None:
    """Write the training loss curve to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(np.arange(len(losses)), losses)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.set_title("Linen LM (nn.scan + nn.remat) on a 2x4 mesh of CPU devices")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=800, help="training steps")
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks")
    parser.add_argument("--width", type=int, default=64, help="model width")
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    parser.add_argument("--seed", type=int, default=0, help="seed of init, batches, dropout")
    parser.add_argument("--batch", type=int, default=16, help="windows per step")
    parser.add_argument("--context", type=int, default=48, help="characters per window")
    parser.add_argument("--learning-rate", type=float, default=3e-3, help="peak step size")
    parser.add_argument("--sample-len", type=int, default=40, help="characters to generate")
    parser.add_argument("--no-bridge", action="store_true", help="skip the bridge part")
    parser.add_argument("--no-plot", action="store_true", help="do not write the loss PNG")
    parser.add_argument("--checkpoint", help="folder: save the final state there (Orbax)")
    group = parser.add_argument_group("several processes (jax.distributed)")
    group.add_argument("--coordinator", help="host:port of process 0 (starts jax.distributed)")
    group.add_argument("--num-processes", type=int, default=1, help="processes in the run")
    group.add_argument("--process-id", type=int, default=0, help="this process's index")
    return parser.parse_args(argv)


def start_distributed(args: argparse.Namespace) -> None:
    """Join the run of ``args.num_processes`` processes (before any other JAX call).
    CPU devices talk to the other processes through ``gloo`` collectives."""
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        args.coordinator, num_processes=args.num_processes, process_id=args.process_id
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Train, sample and cross the bridge; return the parameters, losses, samples and
    the gaps."""
    args = parse_args(argv)
    start = time.perf_counter()
    if args.coordinator:
        start_distributed(args)
    mesh = make_mesh()
    vocab = Vocabulary(CORPUS, MESH_SHAPE[1])
    data = vocab.encode(CORPUS)
    cfg = Config(vocab.size, args.width, args.layers, args.heads, max_len=args.context + 16)
    print(f"{len(CORPUS)} characters, vocabulary {len(vocab.chars)} (padded to {vocab.size})")
    with nn.logical_axis_rules(RULES):
        params, opt_state, losses = train(cfg, data, mesh, args)
        print(f"loss: {np.mean(losses[:5]):.3f} (first 5 steps) -> {np.mean(losses[-5:]):.3f}")
        if args.checkpoint:
            save_checkpoint(args.checkpoint, params, opt_state)
            print(f"checkpoint: {args.checkpoint}")
        texts: list[str] = []
        decode_gap = None
        if args.sample_len > 0:
            texts, decode_gap = sample(cfg, params, vocab, args.sample_len, mesh)
            for text in texts:
                print(f"sample: {text!r}")
            print(f"cached decoding vs full forward: max |logit difference| = {decode_gap:.2e}")
        bridge_gap = None
        if not args.no_bridge and jax.process_count() == 1:  # the bridge needs local arrays
            tokens = jnp.asarray(next(batches(data, 4, args.context, args.seed + 2)))[:, :-1]
            bridge_gap = bridge_check(cfg, params, tokens, mesh)
    print(f"done in {time.perf_counter() - start:.1f}s")
    devices = [jax.device_count(), jax.local_device_count(), jax.process_count()]
    # (jax.distributed shuts down when the process exits.)
    if not args.no_plot and jax.process_index() == 0:
        save_plot(losses, PLOT_PATH)
        print(f"loss plot: {PLOT_PATH}")
    return {
        "params": params,
        "opt_state": opt_state,
        "losses": losses,
        "samples": texts,
        "decode_gap": decode_gap,
        "bridge_gap": bridge_gap,
        "config": cfg,
        "devices": devices,
    }


if __name__ == "__main__":
    main()
