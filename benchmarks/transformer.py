"""The jitted train step of a pre-LN transformer encoder, built four ways.

The model: 4 blocks of ``x + attn(ln1(x))``, ``x + mlp(ln2(x))`` (4 heads, d_model 256,
MLP 256 -> 1024 -> 256 with gelu, biases everywhere, LayerNorm epsilon 1e-6, no mask, no
dropout), a final LayerNorm; input ``(16, 128, 256)``, loss the mean squared error against
a fixed target; one step is loss + gradients + an adam update, returning the new
parameters (or model), the optimizer state and the loss. The same math in:

- **pytreemod**: ``pm.nn.LayerNorm``, ``pm.nn.MultiHeadAttention``, ``pm.nn.Linear``,
  ``pm.jit`` + ``pm.value_and_grad(argnums=pm.DiffState(0, "params"))``;
- **raw JAX**: dict parameters, the straightforward math (two-pass LayerNorm
  ``(x - mean) * rsqrt(var + eps) * scale + bias``), ``jax.jit``;
- **Equinox**: ``eqx.nn.LayerNorm``/``MultiheadAttention`` (biases on)/``Linear`` vmapped
  over the batch, ``eqx.filter_jit``;
- **Flax Linen**: ``nn.LayerNorm``, ``nn.MultiHeadDotProductAttention``, ``nn.Dense``,
  ``jax.jit``.

Also timed: the pytreemod model applied with ``pm.scan`` over stacked blocks (what the
char-transformer example does), for reference.

Run: ``python -m benchmarks.transformer [--rounds N] [--calls N] [--cpu-rounds N]``
(prints a Markdown table, then checks: the pytreemod and Linen encoders agree given the
same parameters, and their compiled steps are compared instruction by instruction).
Two measures per contestant, both as the minimum over interleaved rounds: wall-clock
time (``_timing.per_call_us``) and the process's CPU time, which other jobs on a shared
machine disturb much less.

``--diagnose`` adds raw JAX with Linen's one-pass LayerNorm statistics, traced in two
orders: ``mean(x)`` before ``x**2`` and after. Only the order differs, yet XLA fuses the
backward pass differently (about 40% more HLO instructions, ~15% more time per step
when ``mean(x)`` comes first). ``pytreemod.nn`` and Linen both square first; that, not
the one-pass formula itself, is why they beat the straightforward raw-JAX step.
"""

import argparse
import collections
import functools
import re
import time
from collections.abc import Callable
from typing import Any, cast

import equinox as eqx
import flax.linen as fnn
import jax
import jax.numpy as jnp
import optax

import pytreemod as pm

from ._timing import machine, per_call_us

LAYERS, D_MODEL, HEADS, MLP_RATIO, SEQ, BATCH = 4, 256, 4, 4, 128, 16
EPS = 1e-6
HEAD_DIM = D_MODEL // HEADS
HIDDEN = MLP_RATIO * D_MODEL
LR = 1e-3

# ----------------------------------------------------------------------------- pytreemod


class PmBlock(pm.Module):
    ln1: pm.nn.LayerNorm
    attn: pm.nn.MultiHeadAttention
    ln2: pm.nn.LayerNorm
    up: pm.nn.Linear
    down: pm.nn.Linear

    def __init__(self, *, key: jax.Array):
        ka, ku, kd = jax.random.split(key, 3)
        self.ln1 = pm.nn.LayerNorm(D_MODEL, epsilon=EPS)
        self.attn = pm.nn.MultiHeadAttention(HEADS, D_MODEL, key=ka)
        self.ln2 = pm.nn.LayerNorm(D_MODEL, epsilon=EPS)
        self.up = pm.nn.Linear(D_MODEL, HIDDEN, key=ku)
        self.down = pm.nn.Linear(HIDDEN, D_MODEL, key=kd)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.ln1(x))
        return x + self.down(jax.nn.gelu(self.up(self.ln2(x))))


class PmEncoder(pm.Module):
    blocks: tuple[PmBlock, ...]
    ln_f: pm.nn.LayerNorm

    def __init__(self, *, key: jax.Array):
        self.blocks = tuple(PmBlock(key=k) for k in jax.random.split(key, LAYERS))
        self.ln_f = pm.nn.LayerNorm(D_MODEL, epsilon=EPS)

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)


class PmScanEncoder(pm.Module):
    blocks: PmBlock  # stacked on a leading axis
    ln_f: pm.nn.LayerNorm

    def __init__(self, *, key: jax.Array):
        self.blocks = pm.vmap(lambda k: PmBlock(key=k))(jax.random.split(key, LAYERS))
        self.ln_f = pm.nn.LayerNorm(D_MODEL, epsilon=EPS)

    def __call__(self, x: jax.Array) -> jax.Array:
        run = pm.scan(lambda h, block: block(h), in_axes=(pm.Carry, 0), out_axes=pm.Carry)
        return self.ln_f(run(x, self.blocks))


def pm_step_fn(opt: optax.GradientTransformation) -> Callable[..., Any]:
    @pm.jit
    def step(model: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        def loss_fn(model: Any) -> jax.Array:
            return jnp.mean((model(x) - y) ** 2)

        loss, grads = pm.value_and_grad(loss_fn, argnums=pm.DiffState(0, "params"))(model)
        structure, params, rest = pm.partition(model, "params")
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return pm.combine(structure, cast(pm.State, params), rest), opt_state, loss

    return step


# ----------------------------------------------------------------------------- raw JAX


def raw_init(key: jax.Array) -> dict[str, Any]:
    init = jax.nn.initializers.lecun_normal()

    def dense(k: jax.Array, n_in: int, n_out: int) -> dict[str, jax.Array]:
        return {"w": init(k, (n_in, n_out)), "b": jnp.zeros(n_out)}

    def ln() -> dict[str, jax.Array]:
        return {"scale": jnp.ones(D_MODEL), "bias": jnp.zeros(D_MODEL)}

    blocks = []
    for k in jax.random.split(key, LAYERS):
        kq, kk, kv, ko, ku, kd = jax.random.split(k, 6)
        blocks.append(
            {
                "ln1": ln(),
                "q": dense(kq, D_MODEL, D_MODEL),
                "k": dense(kk, D_MODEL, D_MODEL),
                "v": dense(kv, D_MODEL, D_MODEL),
                "o": dense(ko, D_MODEL, D_MODEL),
                "ln2": ln(),
                "up": dense(ku, D_MODEL, HIDDEN),
                "down": dense(kd, HIDDEN, D_MODEL),
            }
        )
    return {"blocks": blocks, "ln_f": ln()}


def raw_layer_norm(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + EPS) * p["scale"] + p["bias"]


def one_pass_layer_norm(p: dict[str, jax.Array], x: jax.Array, *, square_first: bool) -> jax.Array:
    """LayerNorm with one-pass statistics ``var = E[x^2] - E[x]^2`` (as Linen and
    ``pytreemod.nn`` compute them). ``square_first`` traces ``x**2`` before ``mean(x)``:
    the same math, but XLA fuses the backward pass differently (``--diagnose``)."""
    if square_first:
        sq = jax.lax.square(x)
        mean = jnp.mean(x, axis=-1)
    else:
        mean = jnp.mean(x, axis=-1)
        sq = jax.lax.square(x)
    var = jnp.maximum(0.0, jnp.mean(sq, axis=-1) - jax.lax.square(mean))
    mul = jax.lax.rsqrt(var[..., None] + EPS) * p["scale"]
    return (x - mean[..., None]) * mul + p["bias"]


def raw_dense(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return x @ p["w"] + p["b"]


def raw_attention(p: dict[str, Any], x: jax.Array) -> jax.Array:
    b, t, _ = x.shape
    q, k, v = (raw_dense(p[n], x).reshape(b, t, HEADS, HEAD_DIM) for n in ("q", "k", "v"))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(HEAD_DIM).astype(x.dtype)
    weights = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, t, D_MODEL)
    return raw_dense(p["o"], out)


LayerNormFn = Callable[[dict[str, jax.Array], jax.Array], jax.Array]


def raw_forward(
    params: dict[str, Any], x: jax.Array, layer_norm: LayerNormFn = raw_layer_norm
) -> jax.Array:
    for p in params["blocks"]:
        x = x + raw_attention(p, layer_norm(p["ln1"], x))
        h = jax.nn.gelu(raw_dense(p["up"], layer_norm(p["ln2"], x)))
        x = x + raw_dense(p["down"], h)
    return layer_norm(params["ln_f"], x)


def raw_step_fn(
    opt: optax.GradientTransformation, layer_norm: LayerNormFn = raw_layer_norm
) -> Callable[..., Any]:
    @jax.jit
    def step(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        def loss_fn(p: Any) -> jax.Array:
            return jnp.mean((raw_forward(p, x, layer_norm) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


# ----------------------------------------------------------------------------- Equinox


class EqxBlock(eqx.Module):
    ln1: eqx.nn.LayerNorm
    attn: eqx.nn.MultiheadAttention
    ln2: eqx.nn.LayerNorm
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, *, key: jax.Array):
        ka, ku, kd = jax.random.split(key, 3)
        self.ln1 = eqx.nn.LayerNorm(D_MODEL, eps=EPS)
        self.attn = eqx.nn.MultiheadAttention(
            HEADS,
            D_MODEL,
            use_query_bias=True,
            use_key_bias=True,
            use_value_bias=True,
            use_output_bias=True,
            key=ka,
        )
        self.ln2 = eqx.nn.LayerNorm(D_MODEL, eps=EPS)
        self.up = eqx.nn.Linear(D_MODEL, HIDDEN, key=ku)
        self.down = eqx.nn.Linear(HIDDEN, D_MODEL, key=kd)

    def __call__(self, x: jax.Array) -> jax.Array:  # one sequence (SEQ, D_MODEL)
        h = jax.vmap(self.ln1)(x)
        x = x + self.attn(h, h, h)
        h = jax.vmap(self.ln2)(x)
        return x + jax.vmap(self.down)(jax.nn.gelu(jax.vmap(self.up)(h)))


class EqxEncoder(eqx.Module):
    blocks: tuple[EqxBlock, ...]
    ln_f: eqx.nn.LayerNorm

    def __init__(self, *, key: jax.Array):
        self.blocks = tuple(EqxBlock(key=k) for k in jax.random.split(key, LAYERS))
        self.ln_f = eqx.nn.LayerNorm(D_MODEL, eps=EPS)

    def __call__(self, x: jax.Array) -> jax.Array:  # one sequence
        for block in self.blocks:
            x = block(x)
        return jax.vmap(self.ln_f)(x)


def eqx_step_fn(opt: optax.GradientTransformation) -> Callable[..., Any]:
    @eqx.filter_jit
    def step(model: EqxEncoder, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        def loss_fn(model: EqxEncoder) -> jax.Array:
            return jnp.mean((jax.vmap(model)(x) - y) ** 2)

        loss, grads = eqx.filter_value_and_grad(loss_fn)(model)
        updates, opt_state = opt.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    return step


# ----------------------------------------------------------------------------- Flax Linen


class LinenBlock(fnn.Module):
    @fnn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = fnn.LayerNorm(epsilon=EPS)(x)
        x = x + fnn.MultiHeadDotProductAttention(num_heads=HEADS)(h, h)
        h = fnn.LayerNorm(epsilon=EPS)(x)
        h = fnn.gelu(fnn.Dense(HIDDEN)(h))  # Dense_0
        return x + fnn.Dense(D_MODEL)(h)  # Dense_1


class LinenEncoder(fnn.Module):
    @fnn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for _ in range(LAYERS):
            x = LinenBlock()(x)
        return fnn.LayerNorm(epsilon=EPS)(x)


def linen_step_fn(opt: optax.GradientTransformation) -> Callable[..., Any]:
    model = LinenEncoder()

    @jax.jit
    def step(params: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        def loss_fn(params: Any) -> jax.Array:
            out = cast(jax.Array, model.apply({"params": params}, x))
            return jnp.mean((out - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


# ----------------------------------------------------------------------------- harness


def setup(
    diagnose: bool = False,
) -> tuple[dict[str, tuple[Callable[..., Any], Any, Any]], jax.Array, jax.Array]:
    """For each contestant: (jitted step, initial params or model, initial opt state).

    ``diagnose`` adds raw JAX with a one-pass LayerNorm in both trace orders."""
    key = jax.random.key(0)
    kx, ky, kinit = jax.random.split(key, 3)
    x = jax.random.normal(kx, (BATCH, SEQ, D_MODEL))
    y = jax.random.normal(ky, (BATCH, SEQ, D_MODEL))
    opt = optax.adam(LR)

    pm_model = pm.jit(PmEncoder)(key=kinit)
    pm_scan = pm.jit(PmScanEncoder)(key=kinit)
    raw_params = jax.jit(raw_init)(kinit)
    eqx_model = eqx.filter_jit(EqxEncoder)(key=kinit)
    linen_params = jax.jit(LinenEncoder().init)(kinit, x)["params"]

    pm_step = pm_step_fn(opt)
    contestants = {
        "pytreemod": (pm_step, pm_model, opt.init(pm.state(pm_model, "params"))),
        "raw JAX": (raw_step_fn(opt), raw_params, opt.init(raw_params)),
        "Equinox": (
            eqx_step_fn(opt),
            eqx_model,
            opt.init(eqx.filter(eqx_model, eqx.is_array)),
        ),
        "Flax Linen": (linen_step_fn(opt), linen_params, opt.init(linen_params)),
        "pytreemod, scan over layers": (
            pm_step,
            pm_scan,
            opt.init(pm.state(pm_scan, "params")),
        ),
    }
    if diagnose:
        for name, square_first in (("mean(x) first", False), ("x**2 first", True)):
            ln = functools.partial(one_pass_layer_norm, square_first=square_first)
            contestants[f"raw JAX, one-pass LayerNorm, {name}"] = (
                raw_step_fn(opt, ln),
                raw_params,
                opt.init(raw_params),
            )
    return contestants, x, y


def runner(step: Callable[..., Any], model: Any, opt_state: Any, x: Any, y: Any) -> Any:
    state = [model, opt_state]

    def run() -> None:
        state[0], state[1], loss = step(state[0], state[1], x, y)
        loss.block_until_ready()

    return run


def _instructions(step: Callable[..., Any], *args: Any) -> collections.Counter[str]:
    """The optimised HLO of a jitted step as a multiset of ``shape opcode`` strings: equal
    for two programs that differ only in the order of their parameters and names."""
    text = cast(Any, step).lower(*args).compile().as_text()
    return collections.Counter(re.findall(r"= (\w+\[[\d,]*\](?:\{[\d,]*\})? [a-z\-]+)\(", text))


def _linen_to_pm(params: Any, model: PmEncoder) -> PmEncoder:
    """The pytreemod encoder holding Linen's parameters (the layers' names and shapes are
    Flax's, so only the module paths differ)."""

    def block(p: Any) -> dict[str, Any]:
        attn = p["MultiHeadDotProductAttention_0"]
        return {
            "ln1": p["LayerNorm_0"],
            "attn": {n: attn[n] for n in ("query", "key", "value", "out")},
            "ln2": p["LayerNorm_1"],
            "up": p["Dense_0"],
            "down": p["Dense_1"],
        }

    state = {
        "blocks": {i: block(params[f"LinenBlock_{i}"]) for i in range(LAYERS)},
        "ln_f": params["LayerNorm_0"],
    }
    structure, _, rest = pm.partition(model, "params")
    return pm.combine(structure, state, rest)


def check(contestants: dict[str, tuple[Callable[..., Any], Any, Any]], x: Any, y: Any) -> str:
    """Same outputs for the same parameters, and the compiled programs compared."""
    linen_params = contestants["Flax Linen"][1]
    pm_model = _linen_to_pm(linen_params, contestants["pytreemod"][1])
    out_pm = pm.jit(lambda m, x: m(x))(pm_model, x)
    out_linen = cast(jax.Array, jax.jit(LinenEncoder().apply)({"params": linen_params}, x))
    err = float(jnp.max(jnp.abs(out_pm - out_linen)))
    ops = {
        name: _instructions(step, m, s, x, y)
        for name, (step, m, s) in contestants.items()
        if name in ("pytreemod", "Flax Linen", "raw JAX")
    }
    same = ops["pytreemod"] == ops["Flax Linen"]
    return (
        f"Checks: given Linen's parameters, the pytreemod encoder's output differs from "
        f"Linen's by at most {err:.1e}. Optimised HLO of the step: pytreemod "
        f"{sum(ops['pytreemod'].values())} instructions, Flax Linen "
        f"{sum(ops['Flax Linen'].values())}, raw JAX {sum(ops['raw JAX'].values())}; "
        + (
            "pytreemod's and Linen's are the same instructions (shapes and opcodes), in a "
            "different parameter order."
            if same
            else "pytreemod's and Linen's differ: "
            + str((ops["pytreemod"] - ops["Flax Linen"]) + (ops["Flax Linen"] - ops["pytreemod"]))
        )
    )


def cpu_ms_per_step(fns: dict[str, Callable[[], object]], *, rounds: int) -> dict[str, float]:
    """Process CPU time (all threads) of one call of each function, in milliseconds: min
    over ``rounds`` interleaved rounds. On a machine shared with other jobs this is the
    steadier measure: being descheduled costs wall time, not CPU time."""
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.process_time()
            fn()
            best[name] = min(best[name], (time.process_time() - start) * 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15, help="wall-clock rounds")
    parser.add_argument("--calls", type=int, default=2, help="steps per wall-clock round")
    parser.add_argument("--cpu-rounds", type=int, default=15, help="CPU-time rounds")
    parser.add_argument(
        "--diagnose",
        action="store_true",
        help="also time raw JAX with a one-pass LayerNorm traced in both orders",
    )
    args = parser.parse_args()

    contestants, x, y = setup(args.diagnose)
    note = check(contestants, x, y)
    fns = {name: runner(step, m, s, x, y) for name, (step, m, s) in contestants.items()}
    wall = {
        name: us / 1e3
        for name, us in per_call_us(fns, calls=args.calls, rounds=args.rounds).items()
    }
    cpu = cpu_ms_per_step(fns, rounds=args.cpu_rounds)
    print(f"Machine: {machine()}\n")
    print(
        f"Train step (forward + backward + adam) of a {LAYERS}-layer pre-LN encoder, "
        f"d_model {D_MODEL}, {HEADS} heads, MLP {MLP_RATIO}x gelu, seq {SEQ}, batch {BATCH}. "
        f"Wall clock: best of {args.rounds} interleaved rounds of {args.calls} steps; CPU "
        f"time (process, all threads): best of {args.cpu_rounds} interleaved single steps.\n"
    )
    print(
        "| implementation | wall ms / step | vs Flax Linen | vs raw JAX "
        "| CPU ms / step | vs Flax Linen | vs raw JAX |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in fns:
        cells = [
            f"{t[name]:.0f} | {t[name] / t['Flax Linen']:.2f}x | {t[name] / t['raw JAX']:.2f}x"
            for t in (wall, cpu)
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\n{note}")
    if args.diagnose:
        for name, (step, m, s) in contestants.items():
            if "one-pass" in name:
                count = sum(_instructions(step, m, s, x, y).values())
                print(f"\n{name}: {count} HLO instructions.")


if __name__ == "__main__":
    main()
