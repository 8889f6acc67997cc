"""adapters.linen's lifted transforms against flax.linen: compile time of ``nn.scan``,
memory of ``nn.remat_scan``, and a transformer train step.

Run: ``python -m benchmarks.linen_transforms`` (prints Markdown tables).

Every Linen model here is written once, as a function of the Linen namespace ``nn``, and
instantiated twice: with ``adapters.linen`` and with ``flax.linen`` (only the import
differs, as in ``benchmarks/linen.py``).

(a) **Compile time against depth.** The train step (``jax.value_and_grad`` of a mean
squared loss) of a residual MLP whose ``L`` blocks are one ``nn.scan`` (``variable_axes=
{'params': 0}``, ``split_rngs={'params': True}``), at ``L = 8`` and ``L = 64``, against a
raw ``jax.lax.scan`` over stacked dict parameters. Timed: trace + lower, and trace + lower
+ compile, from cleared JAX caches; best of ``--repeats`` rounds, every round interleaving
all contestants and depths. Scan compiles one block whatever ``L``: the time should be
flat in depth.

(b) **Memory of remat_scan.** The train step (value_and_grad + SGD) of a 100-block
residual net stacked by ``nn.scan(length=100)`` (every block's activations kept for the
backward pass) and by ``nn.remat_scan(lengths=(10, 10))`` (only the carries at the two
scan levels' boundaries kept, O(sqrt(n))): XLA's temporary buffer size
(``compiled.memory_analysis().temp_size_in_bytes``). The two libraries differ here:
``adapters.core.lift.remat_scan`` also rematerializes the innermost level's body (each
block), Flax scans that body plain, so adapters keeps less and recomputes more.

(c) **Transformer train step.** A causal character LM (embedding, learned positions,
``nn.scan`` over ``nn.remat`` pre-LN blocks with ``nn.MultiHeadDotProductAttention`` and
a gelu MLP, final LayerNorm, output projection), cross-entropy, gradients and an adam
update in one ``jax.jit``; per-step time, interleaved rounds. Both libraries lower to
the same XLA program, so the expected ratio is 1.00x; the lowered StableHLO texts are
compared exactly and up to the order of operations (the lines that differ: adapters'
layers are nested ``jit`` calls of one trace each (``pm.trace_once``), which XLA inlines,
and adapters converts the float causal mask to bool before ``jnp.where``). Wall time
and process CPU time (steadier on a shared machine) are both reported.
"""

import argparse
import collections
import os
import re
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import optax

from ._timing import machine


def _namespaces() -> dict[str, ModuleType]:
    import flax.linen as flax_nn

    import adapters.linen as adapters_nn

    return {"adapters.linen": adapters_nn, "flax.linen": flax_nn}


# ----------------------------------------------------------------------------- (a) compile

WIDTH, BATCH = 64, 16


def make_scan_mlp(nn: ModuleType) -> Any:
    """A residual MLP of ``layers`` blocks stacked by ``nn.scan`` (Linen namespace ``nn``)."""

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array, _: None) -> tuple[jax.Array, None]:
            return x + nn.relu(nn.Dense(WIDTH)(x)), None

    class ScanMLP(nn.Module):
        layers: int

        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            stack = nn.scan(
                Block,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                length=self.layers,
            )
            return stack(name="blocks")(x, None)[0]

    return ScanMLP


Maker = Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]


def compile_variants(depth: int) -> dict[str, Maker]:
    """``name -> make()``; ``make`` returns the step function and abstract arguments."""
    x = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32)
    makers: dict[str, Maker] = {}
    for name, nn in _namespaces().items():

        def make(nn: ModuleType = nn) -> tuple[Callable[..., Any], tuple[Any, ...]]:
            model = make_scan_mlp(nn)(depth)
            params = jax.eval_shape(model.init, jax.random.key(0), x)["params"]
            loss = lambda p, x: jnp.mean(model.apply({"params": p}, x) ** 2)
            return jax.value_and_grad(loss), (params, x)

        makers[name] = make

    def raw() -> tuple[Callable[..., Any], tuple[Any, ...]]:
        params = {
            "kernel": jax.ShapeDtypeStruct((depth, WIDTH, WIDTH), jnp.float32),
            "bias": jax.ShapeDtypeStruct((depth, WIDTH), jnp.float32),
        }

        def forward(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
            body = lambda x, p: (x + jax.nn.relu(x @ p["kernel"] + p["bias"]), None)
            return jax.lax.scan(body, x, p)[0]

        return jax.value_and_grad(lambda p, x: jnp.mean(forward(p, x) ** 2)), (params, x)

    makers["raw lax.scan"] = raw
    return makers


def _lower_compile_seconds(make: Maker) -> tuple[float, float]:
    jax.clear_caches()
    fn, args = make()
    start = time.perf_counter()
    lowered = jax.jit(fn).lower(*args)
    lowered_at = time.perf_counter()
    lowered.compile()
    return lowered_at - start, time.perf_counter() - start


def compile_table(depths: tuple[int, int], repeats: int) -> str:
    makers = {depth: compile_variants(depth) for depth in depths}
    best: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeats):
        for depth in depths:
            for name, make in makers[depth].items():
                lower, total = _lower_compile_seconds(make)
                old = best.setdefault((name, depth), [float("inf"), float("inf")])
                best[(name, depth)] = [min(old[0], lower), min(old[1], total)]
    lo, hi = depths
    names = list(makers[lo])
    rows = [
        f"| nn.scan stack (train step) | L={lo}: lower (s) | L={lo}: lower+compile (s) | "
        f"L={hi}: lower (s) | L={hi}: lower+compile (s) | L={hi} / L={lo} (lower+compile) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        a, b = best[(name, lo)], best[(name, hi)]
        rows.append(
            f"| {name} | {a[0]:.3f} | {a[1]:.3f} | {b[0]:.3f} | {b[1]:.3f} | "
            f"**{b[1] / a[1]:.2f}x** |"
        )
    ours = [best[("adapters.linen", d)][1] for d in depths]
    theirs = [best[("flax.linen", d)][1] for d in depths]
    rows += [
        "",
        f"adapters.linen / flax.linen lower+compile: {ours[0] / theirs[0]:.2f}x at L={lo}, "
        f"{ours[1] / theirs[1]:.2f}x at L={hi}. Width {WIDTH}, batch {BATCH}; best of "
        f"{repeats} interleaved rounds, JAX caches cleared before each measurement.",
    ]
    return "\n".join(rows)


# ----------------------------------------------------------------------------- (b) memory

MEM_WIDTH, MEM_BATCH, MEM_DEPTH, MEM_LENGTHS = 256, 256, 100, (10, 10)


def make_deep_nets(nn: ModuleType) -> tuple[Any, Any]:
    """The 100-block residual net stacked by ``nn.scan`` and by ``nn.remat_scan``."""

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return x + jnp.tanh(nn.Dense(MEM_WIDTH)(x))

    class ScanBody(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array, _: None) -> tuple[jax.Array, None]:
            return Block(name="block")(x), None

    class Scanned(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            stack = nn.scan(
                ScanBody,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                length=MEM_DEPTH,
            )
            return stack(name="blocks")(x, None)[0]

    class RematScanned(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return nn.remat_scan(Block, lengths=MEM_LENGTHS)(name="blocks")(x)

    return Scanned, RematScanned


def train_step_temp_bytes(model: Any) -> int:
    x = jnp.ones((MEM_BATCH, MEM_WIDTH))
    params = jax.eval_shape(model.init, jax.random.key(0), x)["params"]

    def step(params: Any, x: jax.Array) -> tuple[Any, jax.Array]:
        loss = lambda p: jnp.mean(model.apply({"params": p}, x) ** 2)
        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value

    analysis = jax.jit(step).lower(params, x).compile().memory_analysis()
    assert analysis is not None, "this backend reports no memory analysis"
    return int(analysis.temp_size_in_bytes)


def memory_table() -> str:
    activation = MEM_BATCH * MEM_WIDTH * 4
    rows = [
        f"| {MEM_DEPTH}-block residual net, train step | `nn.scan` temp (MiB) | "
        f"`nn.remat_scan{MEM_LENGTHS}` temp (MiB) | remat_scan / scan |",
        "|---|---:|---:|---:|",
    ]
    for name, nn in _namespaces().items():
        scanned, remat_scanned = make_deep_nets(nn)
        plain, remat = train_step_temp_bytes(scanned()), train_step_temp_bytes(remat_scanned())
        rows.append(
            f"| {name} | {plain / 2**20:.2f} | {remat / 2**20:.2f} | **{remat / plain:.3f}x** |"
        )
    rows += [
        "",
        f"One block's activation is {activation / 2**20:.2f} MiB (batch {MEM_BATCH}, width "
        f"{MEM_WIDTH}); the train step is value_and_grad + an SGD update.",
    ]
    return "\n".join(rows)


# ----------------------------------------------------------------------------- (c) step

LM_LAYERS, LM_WIDTH, LM_HEADS, LM_SEQ, LM_BATCH, LM_VOCAB = 4, 128, 4, 64, 16, 128


def make_lm(nn: ModuleType) -> Any:
    """A causal transformer LM over the Linen namespace ``nn``: scan over remat blocks."""

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array, _: None) -> tuple[jax.Array, None]:
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
            h = nn.MultiHeadDotProductAttention(num_heads=LM_HEADS)(nn.LayerNorm()(x), mask=mask)
            x = x + h
            h = nn.Dense(4 * LM_WIDTH)(nn.LayerNorm()(x))
            return x + nn.Dense(LM_WIDTH)(nn.gelu(h)), None

    class LM(nn.Module):
        @nn.compact
        def __call__(self, tokens: jax.Array) -> jax.Array:
            x = nn.Embed(LM_VOCAB, LM_WIDTH)(tokens)
            positions = self.param("positions", nn.initializers.normal(0.02), (LM_SEQ, LM_WIDTH))
            x = x + positions[None, : tokens.shape[1]]
            stack = nn.scan(
                nn.remat(Block, prevent_cse=False),
                variable_axes={"params": 0},
                split_rngs={"params": True},
                length=LM_LAYERS,
            )
            x = stack(name="blocks")(x, None)[0]
            return nn.Dense(LM_VOCAB, use_bias=False)(nn.LayerNorm()(x))

    return LM


def _normalized_ops(text: str) -> collections.Counter[str]:
    """The lowered program's operations with SSA names removed: equal counters mean the
    same operations, up to their order."""
    ops: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        line = re.sub(r"%[\w#.]+", "%", line.strip())
        if line:
            ops[line] += 1
    return ops


def ms_per_call(
    fns: dict[str, Callable[[], object]], *, calls: int, rounds: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Wall time and process CPU time (all threads) per call, in ms: min over interleaved
    rounds, the order of the contestants alternating from round to round. Being
    descheduled by other jobs costs wall time, not CPU time: CPU time is the steadier
    measure on a shared machine."""
    for fn in fns.values():  # compiled already; warm up
        fn()
    wall = {name: float("inf") for name in fns}
    cpu = dict(wall)
    for r in range(rounds):
        for name in list(fns)[:: 1 if r % 2 == 0 else -1]:
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(calls):
                fns[name]()
            wall[name] = min(wall[name], (time.perf_counter() - start) / calls * 1e3)
            cpu[name] = min(cpu[name], (time.process_time() - start_cpu) / calls * 1e3)
    return wall, cpu


def step_table(rounds: int, calls: int) -> str:
    tokens = jax.random.randint(jax.random.key(1), (LM_BATCH, LM_SEQ + 1), 0, LM_VOCAB)
    tx = optax.adam(1e-3)
    fns: dict[str, Callable[[], object]] = {}
    texts: list[str] = []
    losses: list[float] = []
    for name, nn in _namespaces().items():
        model = make_lm(nn)()
        params = jax.jit(model.init)(jax.random.key(0), tokens[:, :-1])["params"]

        def step(params: Any, opt_state: Any, tokens: jax.Array, model: Any = model) -> Any:
            def loss_fn(p: Any) -> jax.Array:
                logits = model.apply({"params": p}, tokens[:, :-1])
                ce = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])
                return ce.mean()

            loss, grads = jax.value_and_grad(loss_fn)(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        jitted = jax.jit(step)
        opt_state = tx.init(params)
        texts.append(jitted.lower(params, opt_state, tokens).as_text(debug_info=False))
        losses.append(float(jitted(params, opt_state, tokens)[2]))
        # Wait for the step's results: the time of the computation, not of its dispatch.
        fns[name] = lambda f=jitted, p=params, o=opt_state: jax.block_until_ready(f(p, o, tokens))
    wall, cpu = ms_per_call(fns, calls=calls, rounds=rounds)
    ours, theirs = wall["adapters.linen"], wall["flax.linen"]
    cpu_ours, cpu_theirs = cpu["adapters.linen"], cpu["flax.linen"]
    ops = [_normalized_ops(text) for text in texts]
    n_ops, n_diff = sum(ops[0].values()), sum((ops[0] - ops[1]).values())
    rows = [
        f"| Linen LM train step ({LM_LAYERS} layers, width {LM_WIDTH}, batch {LM_BATCH}x"
        f"{LM_SEQ}) | wall ms per step | CPU ms per step |",
        "|---|---:|---:|",
        f"| adapters.linen | {ours:.2f} | {cpu_ours:.2f} |",
        f"| flax.linen | {theirs:.2f} | {cpu_theirs:.2f} |",
        f"| **ratio adapters / flax** | **{ours / theirs:.2f}x** | "
        f"**{cpu_ours / cpu_theirs:.2f}x** |",
        "",
        f"{calls} steps per round, best of {rounds} interleaved rounds, order alternating "
        "(wall time, then CPU time of all threads). Lowered StableHLO "
        f"identical: {texts[0] == texts[1]}; up to the order of operations, {n_diff} of "
        f"{n_ops} lines differ (adapters' layers are nested calls XLA inlines). First-step loss "
        f"{losses[0]:.4f} (adapters) vs {losses[1]:.4f} (flax), each on its own init.",
    ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--depths", type=int, nargs=2, default=[8, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    print(f"Machine: {machine()}")
    load, cores = os.getloadavg()[0], os.cpu_count()
    print()
    print(
        f"Load average {load:.1f} on {cores} cores when this started (the machine is shared "
        "with other jobs: absolute times are noisy; the ratios come from interleaved rounds)."
    )
    print()
    print("### Compile time of an nn.scan stack against depth")
    print()
    print(compile_table(tuple(args.depths), args.repeats))
    print()
    print("### nn.remat_scan temporary memory against nn.scan")
    print()
    print(memory_table())
    print()
    print("### Transformer train step (same Linen source, same XLA)")
    print()
    print(step_table(args.rounds, args.calls))


if __name__ == "__main__":
    main()
